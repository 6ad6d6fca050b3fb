"""The ``ragsync`` command line.

Every command accepts ``--home`` (default ``$RAGSYNC_HOME`` or
``./ragsync-data``) and ``--json`` (one JSON document on stdout, for scripts).
Human output goes to stdout, progress to stderr. Exit codes: 0 success,
1 a check failed (reconcile), 2 usage or configuration error (and, for
``parse``, a dead-lettered file).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from cli.common import (
    RagsyncArgumentParser,
    add_run_flags,
    emit,
    existing_settings,
    settings_from_args,
    shared_parser,
    split_list,
)
from ragsync import __version__
from ragsync.errors import ConfigurationError, WorkerLostError
from ragsync.ops.console import fail, quiet_environment
from ragsync.ops.display import safe_text, shorten

# Modules that add their own subcommands (see ``build_parser``).
PLUGIN_MODULES: list[str] = [
    "cli.files",
    "cli.sources",
    "cli.stream",
    "cli.reembed",
    "cli.control_plane",
]


def split_beam_args(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """``CMD ARGS -- BEAM_ARGS`` -> (CMD ARGS, BEAM_ARGS); None when there is no ``--``.

    argparse alone cannot take options both before and after ``--`` next to
    a positional argument, so the Beam part is cut off first."""
    argv = list(argv)
    if "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def _takes_beam_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Whether the (sub)command named in ``argv`` runs a pipeline (has ``beam_args``)."""
    current = parser
    for token in argv:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            break
        if token in sub.choices:
            current = sub.choices[token]
    return any(a.dest == "beam_args" for a in current._actions)


def parse_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse a command line; for commands that run a pipeline, what follows
    ``--`` is split into ragsync's pipeline options (``args.pipeline_values``)
    and Beam's own (``args.beam_args``: runner, project, s3_endpoint_url...).
    Other commands keep ``--`` as argparse's end of options."""
    from ragsync.options import parse_pipeline_args

    head, tail = split_beam_args(argv)
    if tail is None or not _takes_beam_args(parser, head):
        head, tail = list(argv), None
    args = parser.parse_args(head)
    if hasattr(args, "beam_args"):
        values, rest = parse_pipeline_args(list(args.beam_args or []) + list(tail or []))
        args.pipeline_values, args.beam_args = values, rest
    return args


def cmd_backfill(args: argparse.Namespace) -> int:
    from beam_pipelines.backfill import run_backfill
    from ragsync.errors import SyncError
    from ragsync.ingest.change_plan import ChangePlan
    from ragsync.options import option_values

    settings = settings_from_args(args)
    groups = split_list(args.acl_groups)
    reread = bool(args.reread or option_values(getattr(args, "pipeline_values", None)).get("reread"))
    try:
        # The dry run's plan, the no-pipeline summary of an unchanged folder or the pipeline's.
        result = run_backfill(
            args.source,
            settings,
            tenant_id=args.tenant,
            source_id=args.source_id or "",
            acl_groups=groups,
            reread=reread,
            dry_run=args.dry_run,
            beam_args=args.beam_args or (),
            show_progress=not args.quiet,
            max_delete_share=args.max_delete_share,
        )
    except SyncError as exc:
        return fail(exc, 1)
    if isinstance(result, ChangePlan):
        from cli.common import emit_plan

        return emit_plan(args, result)
    return _backfill_summary(args, settings, groups, result)


def _backfill_summary(args: argparse.Namespace, settings: Any, groups: list[str], summary: Any) -> int:
    """Print a backfill's summary (``--json``: its dict); exit code 0."""
    from ragsync.ops.cost import format_cost

    d = summary.to_dict()
    lines = [f"backfill of {args.source} into {settings.home} finished in {d['seconds']:.1f}s"]
    lines += [f"  {k:24s} {v}" for k, v in d.items() if k not in ("seconds", "cost")]
    lines += format_cost(d["cost"])
    if d["dead_lettered"]:
        lines.append("  see why with: ragsync status --home " + settings.home)
    lines.append(
        f"try: ragsync query 'your question' --groups {','.join(groups)} --tenant {args.tenant} "
        f"--home {settings.home}"
    )
    emit(args, d, "\n".join(lines))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from ragsync.query.search import hybrid_query

    groups = split_list(args.groups) if args.groups is not None else None
    results = hybrid_query(
        existing_settings(args), args.text, groups=groups, user=args.user, tenant_id=args.tenant, k=args.k
    )
    if args.json:
        print(json.dumps([r.to_dict() for r in results], ensure_ascii=False))
        return 0
    if not results:
        print(
            "no results (check --groups/--user and --tenant: results are limited to what the reader may read)"
        )
    for i, r in enumerate(results, 1):
        where = " > ".join(r.heading_path) or "(no heading)"
        page = (f" p.{r.page}" + (f"-{r.page_end}" if r.page_end > r.page else "")) if r.page else ""
        text = safe_text(r.text[:200].replace(chr(10), " "))
        # Character spans and line boxes are for programs: --json has them.
        print(f"{i:2d}. {r.score:.4f}  {safe_text(r.uri)}{page}\n    {safe_text(where)}\n    {text}")
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from ragsync.index.reconcile import reconcile
    from ragsync.index.service import IndexService
    from ragsync.index.versions import live_spec

    settings = existing_settings(args)
    dim = live_spec(settings).dim
    if args.repair:
        with IndexService.open(settings, dim) as service:
            fixed = service.repair()
        lines = [f"{a.action} {a.store} tenant={a.tenant_id}: {a.chunks} chunks" for a in fixed.actions]
        lines = lines or ["nothing to repair"]
        lines.append(
            f"vectors computed by the model: {fixed.chunks_embedded} (the rest from the embedding cache)"
        )
        after = fixed.after
        lines.append(
            "after repair: vector index, keyword index and chunks table agree"
            if after.ok
            else f"after repair: {len(after.mismatches)} documents still disagree"
        )
        emit(args, fixed.to_dict(), "\n".join(lines))
        return 0 if after.ok else 1
    report = reconcile(settings, dim)
    human = [f"{report.documents} documents, {report.chunks} chunks in the catalog"]
    if report.ok:
        human.append("vector index, keyword index and chunks table agree")
    else:
        human.append(f"{len(report.mismatches)} documents disagree (doc_id vector keyword catalog):")
        human += [f"  {m.doc_id} {m.vector} {m.keyword} {m.catalog}" for m in report.mismatches]
    emit(args, report.to_dict(), "\n".join(human))
    return 0 if report.ok else 1


def _status_data(args: argparse.Namespace) -> tuple[dict[str, Any], Any, list[Any]]:
    """What ``ragsync status`` reports (its ``--json`` document), the
    sources' sync states and the oldest open dead letters."""
    from ragsync.config import open_catalog
    from ragsync.ops.cost import Prices, run_cost
    from ragsync.ops.coverage import coverage_by_source

    settings = existing_settings(args)
    prices = Prices(vcpu_hour_usd=settings.vcpu_hour_usd, gpu_hour_usd=settings.gpu_hour_usd)
    catalog = open_catalog(settings)
    try:
        coverage = coverage_by_source(catalog.runs.document_outcomes())
        last_runs = {kind: catalog.runs.list_runs(kind=kind, limit=1) for kind in ("listing", "stream")}
        docs = catalog.documents.document_counts_by_status()
        dead = catalog.dead_letters.dead_letter_counts()
        recent = catalog.dead_letters.list_dead_letters(limit=args.limit)
        queue = catalog.queue_views.queue_stats()
        fresh = catalog.freshness.freshness_stats()
        review = catalog.parsed.pages_for_review()
        sources = catalog.syncs.source_states()
        stale = catalog.queue_views.stale_events(limit=args.limit)
    finally:
        catalog.close()
    data: dict[str, Any] = {
        "sources": [
            {
                "source_id": x.source_id,
                "type": x.type,
                "paused": x.paused,
                "pause_reason": x.pause_reason,
                "failures": x.failures,
                "last_sync_at": x.last_sync_at,
                "last_full_at": x.last_full_at,
                "version_domain": x.version_domain,
            }
            for x in sources
        ],
        "stale_events": stale,
        "documents": docs,
        "dead_letters": dead,
        "queue": queue,
        "freshness": fresh,
        "pages_for_review": review,
        "coverage": coverage,
        "cost": {kind: run_cost(runs[0], prices) for kind, runs in last_runs.items() if runs},
        "recent_dead_letters": [
            {
                "doc_id": r.doc_id,
                "uri": r.uri,
                "stage": r.stage,
                "error_class": r.error_class,
                "message": r.message,
            }
            for r in recent
        ],
    }
    return data, sources, recent


def _status_lines(data: dict[str, Any], sources: list[Any], recent: list[Any]) -> list[str]:
    """``ragsync status``'s human lines for ``_status_data``'s answer."""
    from ragsync.ops.cost import format_cost

    coverage, docs, dead = data["coverage"], data["documents"], data["dead_letters"]
    queue, stale, fresh, review = (
        data["queue"],
        data["stale_events"],
        data["freshness"],
        data["pages_for_review"],
    )
    paused = [x for x in sources if x.paused]
    human = [f"sources: {len(sources)}, {len(paused)} paused"]
    human += [f"  PAUSED {x.source_id}: {x.pause_reason}" for x in paused]
    if coverage:
        human.append(
            f"coverage per source (indexed / (seen - excluded by rule); target {coverage[0]['target']:.1%}):"
        )
        for c in coverage:
            rest = ", ".join(f"{k} {v}" for k, v in c["not_indexed"].items())
            excluded = ", ".join(f"{k} {v}" for k, v in c["excluded"].items())
            human.append(
                f"  {c['source_id']:16s} {c['coverage']:.2%} {'ok' if c['meets_target'] else 'BELOW TARGET'} "
                f"({c['indexed']} of {c['seen']} seen"
                + (f"; excluded by rule: {excluded}" if excluded else "")
                + (f"; not indexed: {rest}" if rest else "")
                + ")"
            )
    human += ["documents by state:"] + [f"  {k:14s} {v}" for k, v in sorted(docs.items())]
    human += ["dead letters by error class:"] + [f"  {k:14s} {v}" for k, v in sorted(dead.items())]
    human.append(
        f"event queue: {queue['depth']} pending, oldest {queue['oldest_pending_age_s']:.0f}s; "
        + ", ".join(f"{k} {v}" for k, v in sorted(queue["by_state"].items()))
    )
    if stale["count"]:
        human.append(f"stale events dropped by the version gate: {stale['count']}")
        human += [f"  {r['event_id']} {r['doc_id']}: {r['note']}" for r in stale["recent"]]
    if fresh:
        human.append("freshness (indexed_at - event_time):")
        human += [
            f"  {f['source_id']:16s} {f['lane']:5s} {f['kind']:11s} n={f['events']:<6d} "
            f"p50 {f['p50_s']:.1f}s  p95 {f['p95_s']:.1f}s"
            for f in fresh
        ]
    for kind, cost in data["cost"].items():
        human.append(f"cost of the last {kind} run ({cost['documents']} documents):")
        human += format_cost(cost, indent="  ")
    human.append(
        f"pages awaiting review (OCR below the bar): {review['pages']} in {review['documents']} documents"
    )
    human += [f"  {x['uri']}: pages {', '.join(map(str, x['pages']))}" for x in review["items"]]
    if recent:
        human.append("oldest open dead letters:")
        human += [f"  [{r.error_class}] {r.uri or r.doc_id}: {shorten(r.message, 120)}" for r in recent]
    return human


def cmd_status(args: argparse.Namespace) -> int:
    data, sources, recent = _status_data(args)
    emit(args, data, "\n".join(_status_lines(data, sources, recent)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ragsync.config import open_catalog
    from ragsync.ops.report import write_report

    catalog = open_catalog(existing_settings(args))
    try:
        path = write_report(catalog, args.out)
    finally:
        catalog.close()
    emit(args, {"path": path}, f"wrote {path} (self-contained: open it in any browser, offline)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = shared_parser()
    parser = RagsyncArgumentParser(prog="ragsync", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"ragsync {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=RagsyncArgumentParser)

    b = sub.add_parser("backfill", parents=[common], help="index a folder or object-store prefix")
    b.add_argument("source", help="local folder, gs://bucket/prefix or s3://bucket/prefix")
    b.add_argument("--tenant", default="default", help="tenant id (default: default)")
    b.add_argument("--source-id", help="source id (default derived from SOURCE)")
    b.add_argument(
        "--acl-groups",
        default="everyone",
        help="comma-separated groups allowed to read the documents (default: everyone); "
        "a .ragsync-acl.json in SOURCE can set groups per path",
    )
    b.add_argument(
        "--max-delete-share",
        type=float,
        help="largest share of the source's documents this listing may delete (files gone from SOURCE; "
        "default 0.5: more pauses the source and deletes nothing)",
    )
    b.add_argument(
        "--reread",
        action="store_true",
        help="read every file, even those whose size and modification time match the catalog (default: "
        "those are skipped unread, and an unchanged folder runs no pipeline) [env RAGSYNC_REREAD=1]",
    )
    b.add_argument(
        "--dry-run",
        action="store_true",
        help="list the adds, updates, permission changes and deletes the backfill would make "
        "(reads and hashes every file; writes nothing anywhere)",
    )
    add_run_flags(
        b,
        beam_help="after --: pipeline options, e.g. -- --runner=DataflowRunner --s3_endpoint_url=URL "
        "(ragsync's own settings too: --es_api_key=KEY)",
    )
    b.set_defaults(func=cmd_backfill)

    q = sub.add_parser("query", parents=[common], help="hybrid, permission-filtered search (operator check)")
    q.add_argument("text")
    reader = q.add_mutually_exclusive_group(required=True)
    reader.add_argument("--groups", help="comma-separated groups of the user asking")
    reader.add_argument("--user", help="a user synced from the tenant's sources (`ragsync identities sync`)")
    q.add_argument("--tenant", default="default")
    q.add_argument("-k", type=int, default=10, help="results (default 10)")
    q.set_defaults(func=cmd_query)

    r = sub.add_parser("reconcile", parents=[common], help="compare chunk counts across the three stores")
    r.add_argument(
        "--repair",
        action="store_true",
        help="fix what it finds: write chunks a store lacks again from the catalog, delete orphans and "
        "chunks of deleted documents; reports each action (run it while no pipeline writes)",
    )
    r.set_defaults(func=cmd_reconcile)

    s = sub.add_parser("status", parents=[common], help="documents by state, dead letters by class")
    s.add_argument("--limit", type=int, default=10, help="recent dead letters to show")
    s.set_defaults(func=cmd_status)

    rp = sub.add_parser(
        "report", parents=[common], help="write an HTML page with plots (freshness, queue, coverage, ...)"
    )
    rp.add_argument("--out", required=True, help="directory for index.html (created if missing)")
    rp.set_defaults(func=cmd_report)

    # Command groups that live beside the code they drive. Each module has
    # ``add_commands(subparsers, common)``; its handlers return an exit code.
    for name in PLUGIN_MODULES:
        importlib.import_module(name).add_commands(sub, common)
    return parser


def plugins_named(argv: Sequence[str]) -> str:
    """The ``plugins`` setting as a command line gives it, read before the
    parser is built (the plug-ins' source types are ``sources add --type``
    choices): ``--plugins``, then ``--plugins=`` after ``--``, then
    ``RAGSYNC_PLUGINS`` (the precedence of every setting, ``ragsync.options``)."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    early.add_argument("--plugins")
    cmd, beam = split_beam_args(argv)
    for part in (cmd, beam or []):
        try:
            named = early.parse_known_args(part)[0].plugins
        except argparse.ArgumentError:
            continue  # `--plugins` without a value: the command's own parser says so
        if named is not None:
            return str(named)
    return os.environ.get("RAGSYNC_PLUGINS", "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Ctrl-C (SIGINT) and SIGTERM stop it within seconds with
    exit code 130 / 143; helper processes never outlive it (``ragsync.ops.lifecycle``).

    The plug-ins the command names (setting ``plugins``) are imported first.
    """
    from ragsync.ops import lifecycle

    quiet_environment()
    words = sys.argv[1:] if argv is None else list(argv)
    plugins = plugins_named(words)
    if plugins:
        from ragsync.plugins import load_plugins

        try:
            load_plugins(plugins)
        except ConfigurationError as exc:
            return fail(f"configuration error: {exc}", 2)
    args = parse_command(build_parser(), words)
    lifecycle.install_child_watch()
    try:
        with lifecycle.graceful_signals():
            code = int(args.func(args))
        if argv is None:
            # A real process that is about to exit: its stores are closed and
            # its output written. The interpreter's last garbage collection
            # would walk the whole heap (Beam, the model runtime, the parsers:
            # ~0.6 s of a backfill); frozen objects are left to the exit.
            gc.freeze()
        return code
    except ConfigurationError as exc:
        code, why = fail(f"configuration error: {exc}", 2), "configuration error"
    except FileNotFoundError as exc:
        code, why = fail(exc, 2), "file not found"
    except WorkerLostError as exc:
        code, why = fail(exc, 1), "a worker process died"
    except BaseException as exc:
        # A stop asked for by SIGINT/SIGTERM, even when a Beam step wrapped
        # the interrupt in its own error.
        if not isinstance(exc, KeyboardInterrupt) and lifecycle.stop_signal() is None:
            raise
        stopped = isinstance(exc, lifecycle.Stopped) or lifecycle.stop_signal() == signal.SIGTERM
        if getattr(args, "json", False):
            print(json.dumps({"interrupted": True, "signal": "SIGTERM" if stopped else "SIGINT"}))
        print(
            f"ragsync: {'stopped (SIGTERM)' if stopped else 'interrupted'}; nothing is left half-written: "
            "run the same command again to resume",
            file=sys.stderr,
        )
        if argv is None:  # a real process, not a call from a test or a script
            lifecycle.exit_after_interrupt(143 if stopped else 130)
        return 143 if stopped else 130
    if argv is None and lifecycle.runs_left():
        # A pipeline that will not return (a dead worker's, one whose event
        # relay failed) would hold the process: end it with its helpers.
        lifecycle.exit_abandoning_run(code, why)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
