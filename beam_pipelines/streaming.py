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
Pub/Sub or Kafka. Every event is admitted the same way, whatever brought it
(``connectors.events.EventAdmission``). Where it is read depends on the
runner (``runners.stream_route``): on Dataflow the runner reads Pub/Sub, and
Flink or Dataflow read Kafka (``event_source``); the local runners cannot
run Beam's Pub/Sub read, so there ``connectors.pubsub.PubSubRelay`` relays
the subscription into the queue from this process and the stream serves the
queue; Kafka needs a runner of Java transforms and is refused locally.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_pipelines.runners import refuse_single_process_stores, run_pipelines, stream_route
from beam_pipelines.runstats import record_run
from ragsync.catalog.queue import EventScope
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import ModelSpec
from ragsync.errors import ConfigurationError
from ragsync.index.operations import ApplyAclEvents, DeleteDocuments
from ragsync.model import DeadLetter
from ragsync.ops import lifecycle
from transforms.ack import AckEvents, outcome_of
from transforms.chain import IndexDocuments
from transforms.dead_letters import ToDeadLetters, WriteDeadLetters
from transforms.events import (
    ACL,
    DELETE,
    DUPLICATE,
    REFUSED,
    STALE,
    UPSERT,
    EventQueueSource,
    GateEvents,
    UpsertsToWork,
    _ResolveFn,
)
from transforms.fetch import UNCHANGED
from transforms.index import UpdateIndex
from transforms.metrics import counters_of
from transforms.steps import CatalogDoFn

if TYPE_CHECKING:
    from connectors.pubsub import PubSubRelay


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
    #: ``ragsync.ops.cost.cost_report`` of the run (per 1,000 applied events).
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
    acl = gated[ACL] | "ApplyAclEvents" >> UpdateIndex(settings, spec.dim, ApplyAclEvents())
    deleted = gated[DELETE] | "DeleteDocuments" >> UpdateIndex(settings, spec.dim, DeleteDocuments())
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


class _AdmitBusFn(CatalogDoFn):
    """Bus message -> a queue-shaped row of the admitted event
    (``connectors.events.admit_bus_message``: the one admission, with the
    source's default groups); a message that is not a valid event, or that
    the admission refuses, goes to the ``dead`` output with its raw bytes
    (never an exception: a raised error fails the bundle, which a streaming
    runner retries forever)."""

    def __init__(self, settings: Settings, bus: str, where: str) -> None:
        super().__init__(settings)
        self.bus = bus
        self.where = where

    def setup(self) -> None:
        from connectors.events import EventAdmission

        super().setup()
        self._admission = EventAdmission(self._catalog)

    def process(self, raw: Any) -> Iterator[Any]:
        from connectors.events import admit_bus_message, queue_row

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
        outcome = admit_bus_message(raw, self._admission, bus=self.bus, where=where)
        if isinstance(outcome, DeadLetter):
            yield beam.pvalue.TaggedOutput("dead", outcome)
        else:
            yield queue_row(outcome.event)


class GuardBusMessages(beam.PTransform):
    """Input: Pub/Sub messages (``PubsubMessage``, read with attributes) or
    message bodies (bytes: Kafka record values). Output: rows of admitted
    events for the resolve step; a message that is not a valid event, or for
    a source that is not registered or an address outside it, is written as
    an ``invalid_event`` dead letter (stage ``admit``) with its raw bytes,
    and counted."""

    def __init__(self, settings: Settings, bus: str, where: str) -> None:
        super().__init__()
        self.settings = settings
        self.bus = bus
        self.where = where

    def expand(self, messages: beam.PCollection) -> beam.PCollection:
        fn = _AdmitBusFn(self.settings, self.bus, self.where)
        out = messages | "Admit" >> beam.ParDo(fn).with_outputs("dead", main="rows")
        out.dead | "WriteBusDeadLetters" >> WriteDeadLetters(self.settings)
        return out.rows


def kafka_event_rows(records: beam.PCollection, settings: Settings, topic: str) -> beam.PCollection:
    """Kafka records ``(key, value)``, as ``ReadFromKafka`` gives them ->
    event rows: the value is the event, admitted like every other
    (``GuardBusMessages``); a tombstone (no value) is a dead letter."""
    return (
        records
        | "KafkaValue" >> beam.Map(lambda kv: kv[1])
        | "KafkaToRow" >> GuardBusMessages(settings, "kafka", topic)
    )


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
    (``payload`` holds the event JSON, ``attempts`` the failed deliveries),
    for a runner that reads the bus itself (``runners.stream_route``
    ``bus``: Pub/Sub on Dataflow, Kafka on Flink or Dataflow; elsewhere
    Pub/Sub is relayed into the queue).

    Every message goes through the one admission of events
    (``GuardBusMessages``): one that is not a valid event (not UTF-8, not
    JSON, not an event, empty), names an unknown source or an address
    outside it becomes a dead letter with its raw bytes (it never fails the
    bundle); an upsert without groups takes its source's defaults. Acknowledgement: the
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

        try:
            read = ReadFromPubSub(subscription=subscription, with_attributes=True)
        except ValueError as exc:  # Beam checks the path's parts (a project of 6-30 characters...)
            raise ConfigurationError(f"--pubsub-subscription {subscription!r}: {exc}") from None
        return p | "ReadPubSub" >> read | "PubSubToRow" >> GuardBusMessages(settings, "pubsub", subscription)
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
        records = p | "ReadKafka" >> ReadFromKafka(
            consumer_config=consumer, topics=[topic], commit_offset_in_finalize=True
        )
        return kafka_event_rows(records, settings, topic)
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
    row through the one admission of events (an unknown source or an
    address outside it: an ``invalid_event`` dead letter of stage
    ``admit``), then ``build_streaming_pipeline``.

    Input: event rows as ``event_source`` gives them (dicts with
    ``payload``, ``event_id``, ``attempts``; a queue row also its
    ``tenant_id``). Returns ``build_streaming_pipeline``'s outputs. A
    retryable failure of an event from any bus becomes a queue row
    (``WriteDeadLetters``), a permanent one a dead letter.
    """
    resolved = rows | "Resolve" >> beam.ParDo(_ResolveFn(settings)).with_outputs(
        REFUSED, main="good"
    ).with_exception_handling(main_tag="good")
    resolved[REFUSED] | "WriteRefusedEvents" >> WriteDeadLetters(settings)
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
        ConfigurationError: an unknown lane group, an event source setting,
            or a runner that cannot read the source (``runners.stream_route``).
        KeyboardInterrupt: Ctrl-C or SIGTERM stopped the run (a remote job is
            cancelled first); ``ragsync status`` shows what was applied.
    """
    from ragsync.index.versions import prepare_stores

    start = time.monotonic()
    started_at = time.time()
    lifecycle.install_child_watch()  # parse children never outlive this process
    args = list(beam_args) or ["--runner=FnApiRunner"]
    if "--streaming" not in args:
        args.append("--streaming")
    route = _route(source, args, until_idle, source_args)
    relay = _pubsub_relay(settings, source_args, show_progress) if route == "relay" else None
    served = source if route == "bus" else "queue"
    groups = _lane_groups(served, lanes)
    if until_idle and _drained(settings, groups, scope):
        # Nothing to apply: no store is opened and no pipeline built or run
        # (~4 s of a small run's 6 s); the run is recorded with zero counts.
        return _summary(settings, [], start=start, started_at=started_at)
    if spec is None:
        from ragsync.index.versions import live_spec

        spec = live_spec(settings)
    prepare_stores(settings, spec)
    pipelines = [
        _lane_pipeline(
            settings,
            spec,
            args,
            source=served,
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
        _announce(served, groups, relay, until_idle)
    return _summary(settings, _run_all(pipelines, relay), start=start, started_at=started_at)


def _announce(
    served: str, groups: Sequence[tuple[str, ...]], relay: PubSubRelay | None, until_idle: bool
) -> None:
    """The stream's first progress line: what it reads, and until when."""
    mode = "until the queue is drained" if until_idle else "until interrupted (Ctrl-C)"
    fed = f" fed by Pub/Sub {relay.subscription}" if relay is not None else ""
    lanes_served = " + ".join("/".join(g) for g in groups)
    print(f"[stream] reading {served} events{fed} ({lanes_served}) {mode}", file=sys.stderr, flush=True)


def _route(source: str, args: list[str], until_idle: bool, source_args: dict[str, str]) -> str:
    """How the stream reads ``source`` on the runner ``args`` name
    (``runners.stream_route``), the source's own settings checked first.

    Raises:
        ConfigurationError: a bus setting missing, ``until_idle`` with a bus,
            or a runner that cannot read the source.
    """
    if source == "pubsub" and not source_args.get("subscription"):
        raise ConfigurationError("--pubsub-subscription projects/P/subscriptions/S is required")
    if source == "kafka" and not (source_args.get("topic") and source_args.get("bootstrap")):
        raise ConfigurationError("--kafka-topic and --kafka-bootstrap are required")
    route = stream_route(source, PipelineOptions(args))
    if until_idle and source != "queue":
        raise ConfigurationError(
            f"--until-idle applies to --source queue: {source} has no end (stop with Ctrl-C)"
        )
    return route


def _lane_groups(source: str, lanes: str) -> list[tuple[str, ...]]:
    """The lane groups served, one pipeline each (``LANE_GROUPS``); a bus
    the runner reads is one pipeline, its lanes as branches.

    Raises:
        ConfigurationError: an unknown ``lanes`` value.
    """
    if lanes != "all" and lanes not in LANE_GROUPS:
        raise ConfigurationError(f"--lanes must be all or one of {', '.join(LANE_GROUPS)}, got {lanes!r}")
    if source != "queue":
        return [("priority", "fast", "slow")]
    return list(LANE_GROUPS.values()) if lanes == "all" else [LANE_GROUPS[lanes]]


def _pubsub_relay(settings: Settings, source_args: dict[str, str], show_progress: bool) -> PubSubRelay:
    """The relay of ``--pubsub-subscription`` into the queue, its
    subscription checked before anything else is opened.

    Raises:
        ConfigurationError: a malformed subscription path, or one that
            cannot be read (missing, refused, no credentials).
    """
    from connectors.pubsub import PubSubRelay

    relay = PubSubRelay(settings, source_args["subscription"], show_progress=show_progress)
    relay.check()
    return relay


def _drained(settings: Settings, groups: Sequence[tuple[str, ...]], scope: EventScope | None) -> bool:
    """Whether the local queue holds no pending event (leased or not, due or
    not) of the ``groups``' lanes (of ``scope`` only, when given)."""
    catalog = open_catalog(settings)
    try:
        lanes = [lane for group in groups for lane in group]
        return catalog.queue.unfinished_events(lanes, scope=scope) == 0
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


def _run_all(pipelines: list[beam.Pipeline], relay: PubSubRelay | None = None) -> list[Any]:
    """Run the pipelines at once and wait for all (``run_pipelines``: this
    thread stays free for Ctrl-C and SIGTERM, which cancel what a remote
    runner started and are raised; the command ends the process), with the
    Pub/Sub ``relay`` feeding the queue meanwhile. An error in one, or of
    the relay, stops the wait and is raised."""
    watch = [relay.raise_if_failed] if relay is not None else []
    if relay is not None:
        relay.start()
    try:
        return run_pipelines(pipelines, cancel_on_interrupt=True, watch=watch)
    except KeyboardInterrupt:
        # Leased events that were not acknowledged are delivered again when
        # their lease ends.
        print("[stream] interrupted", file=sys.stderr, flush=True)
        raise
    finally:
        if relay is not None:
            relay.stop()
