"""Commands of the streaming side: events, stream, dead letters (sources and
sync are in ``cli.sources``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from cli.common import add_run_flags, emit, existing_settings, settings_from_args
from ragsync.ops.display import shorten


def cmd_events_push(args: argparse.Namespace) -> int:
    """Queue the events of a JSONL file, each line on its own: a line that is
    not UTF-8, not JSON, nested too deeply, too long or not a valid event, or
    that the admission refuses (``connectors.events.EventAdmission``: a
    content_uri outside the source's location, another tenant), is reported
    with its line number; every other line is queued (with its source's
    default groups when it names none). An event of a source that is not
    registered is queued too, and listed: the stream applies it if the
    source is registered by then, else makes it an ``invalid_event`` dead
    letter (as for a Pub/Sub or Kafka message), which ``dead-letters retry``
    queues again once the source exists. Memory stays bounded (lines are
    read and queued in batches)."""
    from connectors.events import EventAdmission, parse_event_line, read_event_lines
    from ragsync.config import open_catalog
    from ragsync.errors import InvalidEventError, UnknownSourceError
    from ragsync.model import EVENT_LIMITS

    rejected: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    queued = duplicates = 0
    catalog = open_catalog(settings_from_args(args))
    admission = EventAdmission(catalog)
    try:
        with open(args.file, "rb") as fh:
            batch = []
            for number, raw in read_event_lines(fh):
                try:
                    if raw is None:
                        raise InvalidEventError(f"the line is longer than {EVENT_LIMITS.event_bytes} bytes")
                    event = parse_event_line(raw)
                    try:
                        event = admission.admit(event, args.tenant or "").event
                    except UnknownSourceError:
                        unknown.append({"line": number, "source_id": event.source_id})
                        event = dataclasses.replace(event, tenant_id=args.tenant or event.tenant_id)
                except InvalidEventError as exc:
                    rejected.append({"line": number, "error": str(exc)})
                    continue
                batch.append(event)
                if len(batch) >= 1000:
                    added, dup = catalog.queue.enqueue_events(batch)
                    queued, duplicates, batch = queued + added, duplicates + dup, []
            added, dup = catalog.queue.enqueue_events(batch)
            queued, duplicates = queued + added, duplicates + dup
    finally:
        catalog.close()
    data = {"queued": queued, "duplicates": duplicates, "rejected": rejected, "unknown_sources": unknown}
    human = [f"queued {queued} events ({duplicates} already queued), rejected {len(rejected)}"]
    human += [f"  line {r['line']}: {r['error']}" for r in rejected]
    human += [
        f"  line {u['line']}: source {u['source_id']!r} is not registered (`ragsync sources add`): queued; "
        "the stream makes it an invalid_event dead letter unless the source is registered by then"
        for u in unknown
    ]
    emit(args, data, "\n".join(human))
    return 1 if rejected else 0


def _lanes(args: argparse.Namespace) -> str:
    """``--lanes``, else the ``lanes`` pipeline option or ``$RAGSYNC_LANES``, else ``all``."""
    if args.lanes is not None:
        return str(args.lanes)
    from ragsync.options import option_values

    return str(option_values(getattr(args, "pipeline_values", None)).get("lanes") or "all")


def _until_idle(args: argparse.Namespace) -> bool:
    """``--until-idle``, else the pipeline option ``--until_idle`` (a flag, or
    1/0) or ``$RAGSYNC_UNTIL_IDLE``."""
    from ragsync.options import option_values

    return bool(args.until_idle or option_values(getattr(args, "pipeline_values", None)).get("until_idle"))


def cmd_stream(args: argparse.Namespace) -> int:
    from beam_pipelines.streaming import run_stream

    settings = settings_from_args(args)
    if args.lease_s is not None:
        settings = dataclasses.replace(settings, event_lease_s=args.lease_s)
    server, catalog = None, None
    if args.metrics_port is not None:
        from ragsync.config import open_catalog
        from ragsync.ops.metrics import serve_metrics

        catalog = open_catalog(settings)
        server = serve_metrics(catalog, args.metrics_port, args.metrics_host)
        print(
            f"[stream] metrics on http://{args.metrics_host}:{server.server_port}/metrics",
            file=sys.stderr,
            flush=True,
        )
    try:
        summary = run_stream(
            settings,
            until_idle=_until_idle(args),
            source=args.source,
            beam_args=args.beam_args,
            show_progress=not args.quiet,
            subscription=args.pubsub_subscription or "",
            topic=args.kafka_topic or "",
            bootstrap=args.kafka_bootstrap or "",
            lanes=_lanes(args),
        )
    finally:
        if server is not None:
            server.shutdown()
        if catalog is not None:
            catalog.close()
    from ragsync.ops.cost import format_cost

    d = summary.to_dict()
    human = ["stream finished"] + [f"  {k:22s} {v}" for k, v in d.items() if k != "cost"]
    human += format_cost(d["cost"])
    emit(args, d, "\n".join(human))
    return 0


def cmd_dead_letters_list(args: argparse.Namespace) -> int:
    from ragsync.config import open_catalog

    catalog = open_catalog(existing_settings(args))
    try:
        rows = catalog.dead_letters.list_dead_letters(source_id=args.source_id, limit=args.limit)
    finally:
        catalog.close()
    data: list[dict[str, Any]] = [
        {
            "id": r.id,
            "doc_id": r.doc_id,
            "uri": r.uri,
            "stage": r.stage,
            "error_class": r.error_class,
            "message": r.message,
            "attempts": r.attempts,
            "event_id": r.key,
            "tenant_id": r.tenant_id,
        }
        for r in rows
    ]
    human = [
        f"{d['event_id']:34s} [{d['error_class']}] {d['stage']:7s} "
        f"{d['uri'] or d['doc_id']}: {shorten(d['message'], 100)}"
        for d in data
    ]
    emit(args, data, "\n".join(human) or "no dead letters")
    return 0


def cmd_dead_letters_retry(args: argparse.Namespace) -> int:
    """Re-drive dead letters by their identity (the event id, or the row id of
    work no event is behind), or all: ``Catalog.redrive_dead_letter``, the
    same function the API's retry calls. Exit 2 when an id names nothing to
    re-drive."""
    from connectors.events import event_or_none
    from ragsync.config import open_catalog

    if not args.all and args.id is None:
        print("ragsync: give a dead letter's event id (or row id) or --all", file=sys.stderr)
        return 2
    catalog = open_catalog(existing_settings(args))
    done: list[Any] = []
    missed: list[str] = []
    try:
        if args.all:
            rows = catalog.dead_letters.list_dead_letters(tenant_id=args.tenant, limit=1_000_000)
            keys = sorted({(r.tenant_id, r.key) for r in rows})
        else:
            keys = [(args.tenant, str(args.id))]
        for tenant, key in keys:
            found = catalog.dead_letters.redrive_dead_letter(key, parse=event_or_none, tenant_id=tenant)
            done.extend(found)
            if not found:
                missed.append(key)
    finally:
        catalog.close()
    data = {
        "resolved": sum(r.resolved for r in done),
        "requeued_events": sum(1 for r in done if r.kind == "event"),
        "file_retries": sum(1 for r in done if r.kind == "file"),
        "retries": [dataclasses.asdict(r) for r in done],
        "not_redriven": missed,
    }
    human = [
        f"resolved {data['resolved']} dead letters; {data['requeued_events']} events back in the queue; "
        f"{data['file_retries']} files for the next backfill"
    ]
    human += [
        f"  {key}: nothing to re-drive (unknown id, or a stream message that is not an event)"
        for key in missed
    ]
    emit(args, data, "\n".join(human))
    return 2 if missed and not args.all else 0


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``events``, ``stream`` and ``dead-letters``."""
    ev = sub.add_parser("events", help="the local event queue")
    ev_sub = ev.add_subparsers(dest="events_command", required=True)
    push = ev_sub.add_parser("push", parents=[common], help="enqueue events from a JSONL file")
    push.add_argument("file", help="one JSON event a line (see connectors/events.py for the fields)")
    push.add_argument(
        "--tenant", help="the events' tenant (needed when several tenants have a source of the same id)"
    )
    push.set_defaults(func=cmd_events_push)

    st = sub.add_parser("stream", parents=[common], help="run the streaming pipeline")
    st.add_argument(
        "--until-idle",
        "--until_idle",
        dest="until_idle",
        action="store_true",
        help="exit once the queue is drained and written (--source queue; default: pipeline option "
        "--until_idle, $RAGSYNC_UNTIL_IDLE)",
    )
    st.add_argument("--source", default="queue", choices=("queue", "pubsub", "kafka"), help="event bus")
    st.add_argument("--pubsub-subscription", help="projects/P/subscriptions/S (with --source pubsub)")
    st.add_argument("--kafka-topic", help="topic (with --source kafka)")
    st.add_argument("--kafka-bootstrap", help="bootstrap servers (with --source kafka)")
    st.add_argument(
        "--lanes",
        default=None,
        choices=("all", "priority,fast", "slow"),
        help="queue lanes to serve: all (two pipelines at once: deletes/permissions/content, and the "
        "slow OCR lane), or one group for one process per group (default: pipeline option --lanes, "
        "$RAGSYNC_LANES, else all)",
    )
    st.add_argument(
        "--lease-s", type=float, help="seconds before an unacknowledged event is redelivered (default 300)"
    )
    st.add_argument(
        "--metrics-port",
        type=int,
        help="serve the operator's Prometheus series (the same as `ragsync serve`'s /metrics) on this "
        "port while the stream runs (0: any free port)",
    )
    st.add_argument(
        "--metrics-host", default="127.0.0.1", help="address of the metrics port (default 127.0.0.1)"
    )
    add_run_flags(st)
    st.set_defaults(func=cmd_stream)

    dl = sub.add_parser("dead-letters", help="inspect and re-drive dead letters")
    dl_sub = dl.add_subparsers(dest="dl_command", required=True)
    ls = dl_sub.add_parser("list", parents=[common], help="open dead letters")
    ls.add_argument("--source-id")
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(func=cmd_dead_letters_list)
    rt = dl_sub.add_parser("retry", parents=[common], help="re-drive one dead letter or all")
    rt.add_argument("id", nargs="?", help="the dead letter's event id (or row id, for work without an event)")
    rt.add_argument("--all", action="store_true", help="every open dead letter")
    rt.add_argument("--tenant", help="only this tenant's dead letters")
    rt.set_defaults(func=cmd_dead_letters_retry)
