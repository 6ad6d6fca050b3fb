"""The unbounded streaming pipeline: change events in, both indexes kept in
step.

Graph (the shared chain is the backfill's ``IndexDocuments``)::

    events -> resolve -> gate (keyed by doc_id, stateful) -+- upsert -> IndexDocuments -+
                                                           +- acl    -> ApplyAcl -------+-> ack
                                                           +- delete -> Delete ---------+
                                                           +- stale/duplicate ----------+
    every stage's failures -> dead letters (retryable ones back to the queue;
    an event read from Pub/Sub or Kafka gets a queue row there)

Event sources: the catalog's ``events`` table (local default, no server),
Pub/Sub or Kafka (production; see ``event_source``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_pipelines.runners import refuse_single_process_stores, run_pipelines
from beam_pipelines.runstats import record_run
from ragsync import lifecycle
from ragsync.catalog.queue import EventScope
from ragsync.config import Settings, open_catalog
from ragsync.embedding import ModelSpec
from ragsync.errors import ConfigurationError
from transforms.ack import AckEvents, outcome_of
from transforms.acl import ApplyAclChanges
from transforms.chain import IndexDocuments
from transforms.dead_letters import ToDeadLetters
from transforms.delete import DeleteDocuments
from transforms.events import (
    ACL,
    DELETE,
    DUPLICATE,
    STALE,
    UPSERT,
    EventQueueSource,
    GateEvents,
    UpsertsToWork,
    _ResolveFn,
)
from transforms.fetch import UNCHANGED
from transforms.metrics import counters_of
from transforms.write import WriteDeadLetters


@dataclass(frozen=True)
class StreamSummary:
    """What a streaming run did. Field names are the ``--json`` keys."""

    events_applied: int
    events_stale: int
    events_duplicate: int
    events_retried: int
    documents_indexed: int
    documents_unchanged: int
    documents_deleted: int
    documents_acl_updated: int
    chunks_embedded: int
    embedding_cache_hits: int
    chunks_written: int
    chunks_deleted: int
    dead_lettered: int
    seconds: float
    #: ``ragsync.cost.cost_report`` of the run (per 1,000 applied events).
    cost: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_streaming_pipeline(
    events: beam.PCollection,
    settings: Settings,
    spec: ModelSpec,
    *,
    show_progress: bool = False,
    slow_handoff: bool = False,
) -> dict[str, list[beam.PCollection]]:
    """Wire gate, routing, the shared chain, acks and dead letters onto
    ``events``, a PCollection of ``(doc_id, QueuedEvent)``. With
    ``slow_handoff`` documents that need the slow lane are handed to the
    queue's slow lane instead of being parsed (see ``transforms.lanes``).

    Returns the PCollections tests assert on: ``acked`` and ``dead`` (lists
    of PCollections of event ids and DeadLetters).
    """
    gated = events | "GateEvents" >> GateEvents(settings)
    # Priority paths: permission changes and deletes touch metadata only and
    # never wait behind parsing or embedding.
    acl = gated[ACL] | "ApplyAclEvents" >> ApplyAclChanges(settings, spec.dim, events=True)
    deleted = gated[DELETE] | "DeleteDocuments" >> DeleteDocuments(settings, spec.dim)
    work = gated[UPSERT] | "UpsertsToWork" >> UpsertsToWork(settings)
    chain = work | "IndexDocuments" >> IndexDocuments(
        settings, spec, group_duplicates=False, show_progress=show_progress, slow_handoff=slow_handoff
    )
    finished = [
        *chain["written"],
        *chain[UNCHANGED],
        *chain["duplicates"],
        *chain["acl_updated"],
        acl["updated"],
        deleted["deleted"],
    ]
    # One acknowledgement step per branch: no Flatten (FnApiRunner's
    # streaming mode stalls on it; see transforms/chain.py).
    acked = []
    for i, pcoll in enumerate(finished):
        acked.append(pcoll | f"Outcome{i}" >> beam.Map(outcome_of) | f"Ack{i}" >> AckEvents(settings))
    stale_branches = [(STALE, gated[STALE]), (DUPLICATE, gated[DUPLICATE])]
    stale_branches += [(STALE, pcoll) for pcoll in chain["superseded"]]
    for i, (state, pcoll) in enumerate(stale_branches):
        outcomes = pcoll | f"Outcome_{state}{i}" >> beam.Map(outcome_of, state)
        acked.append(outcomes | f"Ack_{state}{i}" >> AckEvents(settings))
    dead = [*chain["dead"], acl["dead"], deleted["dead"]]
    for i, pcoll in enumerate(dead):
        pcoll | f"WriteDeadLetters{i}" >> WriteDeadLetters(settings)
    return {"acked": acked, "dead": dead}


class _GuardWireFn(beam.DoFn):
    """Bus message bytes -> queue-shaped rows; anything that is not a valid
    event goes to the ``dead`` output with its raw bytes (never an exception:
    a raised error fails the bundle, which a streaming runner retries forever)."""

    def __init__(self, bus: str, where: str) -> None:
        self.bus = bus
        self.where = where

    def process(self, raw: Any) -> Iterator[Any]:
        from connectors.events import wire_dead_letter, wire_message_to_row
        from ragsync.errors import InvalidEventError

        where = self.where
        if hasattr(raw, "attributes") and hasattr(raw, "data"):
            # A Pub/Sub message read with its attributes: the event is the
            # body; the message id names the dead letter's origin.
            message_id = getattr(raw, "message_id", None)
            where = f"{self.where}#{message_id}" if message_id else self.where
            raw = raw.data
        if raw is not None and not isinstance(raw, bytes):
            raw = (
                bytes(raw) if isinstance(raw, bytearray | memoryview) else str(raw).encode("utf-8", "replace")
            )
        try:
            yield wire_message_to_row(raw, bus=self.bus)
        except InvalidEventError as exc:
            yield beam.pvalue.TaggedOutput("dead", wire_dead_letter(raw, exc, bus=self.bus, where=where))


class GuardBusMessages(beam.PTransform):
    """Input: Pub/Sub messages (``PubsubMessage``, read with attributes) or
    message bodies (bytes: Kafka record values). Output: rows for
    the resolve step; invalid messages are written as ``invalid_event`` dead
    letters (stage ``decode``) with their raw bytes, and counted."""

    def __init__(self, settings: Settings, bus: str, where: str) -> None:
        super().__init__()
        self.settings = settings
        self.bus = bus
        self.where = where

    def expand(self, messages: beam.PCollection) -> beam.PCollection:
        out = messages | "Decode" >> beam.ParDo(_GuardWireFn(self.bus, self.where)).with_outputs(
            "dead", main="rows"
        )
        out.dead | "WriteBusDeadLetters" >> WriteDeadLetters(self.settings)
        return out.rows


def event_source(
    p: beam.Pipeline,
    settings: Settings,
    *,
    source: str,
    until_idle: bool,
    subscription: str = "",
    topic: str = "",
    bootstrap: str = "",
    kafka_group: str = "ragsync-stream",
) -> beam.PCollection:
    """Event rows from the configured bus, as dicts shaped like catalog rows
    (``payload`` holds the event JSON, ``attempts`` the failed deliveries).

    A bus message that is not a valid event (not UTF-8, not JSON, not an
    event, empty) becomes a dead letter with its raw bytes
    (``GuardBusMessages``); it never fails the bundle. Acknowledgement: the
    local queue acknowledges each event after its writes (``AckEvents``);
    Kafka offsets are committed when the runner finalizes a checkpoint
    (``commit_offset_in_finalize``, consumer group ``kafka_group``); Pub/Sub
    messages are acknowledged by the runner once the read's output is
    durably checkpointed (Dataflow), from where it is processed again after
    a crash.

    Args:
        source: ``queue`` (the catalog's events table), ``pubsub`` or ``kafka``.
        until_idle: ``queue`` only: finish once the queue is drained.
        subscription: Pub/Sub subscription path.
        topic: Kafka topic.
        bootstrap: Kafka bootstrap servers.
        kafka_group: Kafka consumer group whose offsets are committed.

    Raises:
        ConfigurationError: an unknown source or missing setting.
    """
    if source == "queue":
        queue = EventQueueSource(settings, until_idle=until_idle, lease_s=settings.event_lease_s)
        return p | "ReadEventQueue" >> beam.io.Read(queue)
    if source == "pubsub":
        if not subscription:
            raise ConfigurationError("--pubsub-subscription projects/P/subscriptions/S is required")
        from apache_beam.io.gcp.pubsub import ReadFromPubSub

        return (
            p
            | "ReadPubSub" >> ReadFromPubSub(subscription=subscription, with_attributes=True)
            | "PubSubToRow" >> GuardBusMessages(settings, "pubsub", subscription)
        )
    if source == "kafka":
        if not (topic and bootstrap):
            raise ConfigurationError("--kafka-topic and --kafka-bootstrap are required")
        from apache_beam.io.kafka import ReadFromKafka

        consumer = {
            "bootstrap.servers": bootstrap,
            "group.id": kafka_group,
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
        }
        return (
            p
            | "ReadKafka"
            >> ReadFromKafka(consumer_config=consumer, topics=[topic], commit_offset_in_finalize=True)
            | "KafkaValue" >> beam.Map(lambda kv: kv[1])
            | "KafkaToRow" >> GuardBusMessages(settings, "kafka", topic)
        )
    raise ConfigurationError(f"unknown event source {source!r}: use queue, pubsub or kafka")


#: How the local queue's lanes are served: ``all`` runs the two groups below
#: as two pipelines at once in this process (a slow OCR bundle never holds
#: back a permission change or a wiki edit); one group name serves just that
#: group (e.g. separate processes against a Milvus server).
LANE_GROUPS: dict[str, tuple[str, ...]] = {"priority,fast": ("priority", "fast"), "slow": ("slow",)}


def _lane_pipeline(
    settings: Settings,
    spec: ModelSpec,
    args: list[str],
    *,
    source: str,
    until_idle: bool,
    lanes: tuple[str, ...],
    combined: bool,
    show_progress: bool,
    source_args: dict[str, str],
    scope: EventScope | None = None,
) -> beam.Pipeline:
    """One streaming pipeline: its event source, resolve, and the shared graph.

    For the local queue it serves ``lanes``; the fast group always hands slow
    documents over to the queue's slow lane (served by the slow group, in this
    process with ``lanes="all"`` or by another ``ragsync stream --lanes slow``),
    and a combined slow group waits for every lane to drain before it
    finishes."""
    options = PipelineOptions(args)
    refuse_single_process_stores(settings, options)
    runner = options.view_as(StandardOptions).runner or "FnApiRunner"
    p = beam.Pipeline(runner=runner, options=options)
    if source == "queue":
        from ragsync.catalog.queue import LANES

        idle = LANES if (combined and lanes == ("slow",)) else lanes
        queue = EventQueueSource(
            settings,
            until_idle=until_idle,
            lease_s=settings.event_lease_s,
            lanes=lanes,
            idle_lanes=idle,
            scope=scope,
        )
        rows = p | "ReadEventQueue" >> beam.io.Read(queue)
    else:
        rows = event_source(p, settings, source=source, until_idle=until_idle, **source_args)
    handoff = source == "queue" and "slow" not in lanes
    apply_event_rows(rows, settings, spec, show_progress=show_progress, slow_handoff=handoff)
    return p


def apply_event_rows(
    rows: beam.PCollection,
    settings: Settings,
    spec: ModelSpec,
    *,
    show_progress: bool = False,
    slow_handoff: bool = False,
) -> dict[str, list[beam.PCollection]]:
    """The graph after an event source, the same for every bus: resolve each
    row (an unknown source or an address outside it: a dead letter), then
    ``build_streaming_pipeline``.

    Input: event rows as ``event_source`` gives them (dicts with
    ``payload``, ``event_id``, ``attempts``; a queue row also its
    ``tenant_id``). Returns ``build_streaming_pipeline``'s outputs. A
    retryable failure of an event from any bus becomes a queue row
    (``WriteDeadLetters``), a permanent one a dead letter.
    """
    resolved = rows | "Resolve" >> beam.ParDo(_ResolveFn(settings)).with_exception_handling()
    (
        resolved["bad"]
        | "ResolveDeadLetters" >> ToDeadLetters("resolve")
        | "WriteResolveDeadLetters" >> WriteDeadLetters(settings)
    )
    return build_streaming_pipeline(
        resolved["good"], settings, spec, show_progress=show_progress, slow_handoff=slow_handoff
    )


def run_stream(
    settings: Settings,
    *,
    until_idle: bool = False,
    source: str = "queue",
    beam_args: Sequence[str] = (),
    show_progress: bool = True,
    spec: ModelSpec | None = None,
    lanes: str = "all",
    scope: EventScope | None = None,
    **source_args: str,
) -> StreamSummary:
    """Run the streaming pipeline (FnApiRunner with ``--streaming`` unless
    ``beam_args`` names another runner) until interrupted, or with
    ``until_idle`` until the queue is drained and everything is written.
    With ``until_idle`` and no event of the served lanes pending in the local
    queue, it returns an all-zero summary at once: no store is opened and no
    pipeline built.

    Args:
        lanes: local queue only: ``all`` (default: the priority+fast group and
            the slow group as two pipelines at once), ``priority,fast`` or
            ``slow`` (one group, for one process per group).
        scope: local queue only: serve only this tenant's (and source's)
            events and finish when they are drained (a sync's apply step);
            every other event stays queued. None serves the whole queue.

    Returns:
        The summary (counters summed over the lane pipelines: with
        ``scope``, only the scope's events).

    Raises:
        ConfigurationError: an unknown lane group or event source setting.
        KeyboardInterrupt: Ctrl-C or SIGTERM stopped the run (a remote job is
            cancelled first); ``ragsync status`` shows what was applied.
    """
    from ragsync.index_versions import prepare_stores

    start = time.monotonic()
    started_at = time.time()
    lifecycle.install_child_watch()  # parse children never outlive this process
    if lanes != "all" and lanes not in LANE_GROUPS:
        raise ConfigurationError(f"--lanes must be all or one of {', '.join(LANE_GROUPS)}, got {lanes!r}")
    if source != "queue":
        groups: list[tuple[str, ...]] = [
            ("priority", "fast", "slow")
        ]  # a bus of its own: one pipeline, lanes as branches
    elif lanes == "all":
        groups = list(LANE_GROUPS.values())
    else:
        groups = [LANE_GROUPS[lanes]]
    if until_idle and source == "queue" and _drained(settings, groups, scope):
        # Nothing to apply: no store is opened and no pipeline built or run
        # (~4 s of a small run's 6 s); the run is recorded with zero counts.
        return _summary(settings, [], start=start, started_at=started_at)
    if spec is None:
        from ragsync.index_versions import live_spec

        spec = live_spec(settings)
    prepare_stores(settings, spec)
    args = list(beam_args) or ["--runner=FnApiRunner"]
    if "--streaming" not in args:
        args.append("--streaming")
    pipelines = [
        _lane_pipeline(
            settings,
            spec,
            args,
            source=source,
            until_idle=until_idle,
            lanes=group,
            combined=len(groups) > 1,
            show_progress=show_progress,
            source_args=source_args,
            scope=scope,
        )
        for group in groups
    ]
    if show_progress:
        mode = "until the queue is drained" if until_idle else "until interrupted (Ctrl-C)"
        served = " + ".join("/".join(g) for g in groups)
        print(f"[stream] reading {source} events ({served}) {mode}", file=sys.stderr, flush=True)
    return _summary(settings, _run_all(pipelines), start=start, started_at=started_at)


def _drained(settings: Settings, groups: Sequence[tuple[str, ...]], scope: EventScope | None) -> bool:
    """Whether the local queue holds no pending event (leased or not, due or
    not) of the ``groups``' lanes (of ``scope`` only, when given)."""
    catalog = open_catalog(settings)
    try:
        lanes = [lane for group in groups for lane in group]
        return catalog.unfinished_events(lanes, scope=scope) == 0
    finally:
        catalog.close()


def _summary(settings: Settings, results: Sequence[Any], *, start: float, started_at: float) -> StreamSummary:
    """The run's summary: counters summed over the lane pipelines'
    ``results`` (none: all zero), recorded as a ``stream`` run."""
    totals: dict[str, Any] = {f.name: 0 for f in fields(StreamSummary) if f.name not in ("seconds", "cost")}
    for result in results:
        for name, value in counters_of(result, StreamSummary, seconds=0.0, cost=0).items():
            totals[name] = totals.get(name, 0) + value
    totals["seconds"] = round(time.monotonic() - start, 3)
    totals["cost"] = record_run(
        "stream",
        results,
        settings,
        started_at=started_at,
        documents=totals["events_applied"],
        counters={k: v for k, v in totals.items() if k != "cost"},
    )
    return StreamSummary(**totals)


def _run_all(pipelines: list[beam.Pipeline]) -> list[Any]:
    """Run the pipelines at once and wait for all (``run_pipelines``: this
    thread stays free for Ctrl-C and SIGTERM, which cancel what a remote
    runner started and are raised; the command ends the process). An error
    in one stops the wait and is raised."""
    try:
        return run_pipelines(pipelines, cancel_on_interrupt=True)
    except KeyboardInterrupt:
        # Leased events that were not acknowledged are delivered again when
        # their lease ends.
        print("[stream] interrupted", file=sys.stderr, flush=True)
        raise
