"""Stages 1-3 of the streaming pipeline: read events, gate them by version,
route them by operation.

The local event bus is the catalog's ``events`` table read by an unbounded
source. An event is leased when read and acknowledged (``ack_events``) only
by the step that finishes it - after its writes - so a crash redelivers it
when the lease ends (at-least-once); the version gate and content-keyed ids
make the redelivery harmless.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.unbounded_source import CheckpointMark, UnboundedReader, UnboundedSource
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from connectors.events import check_content_uri
from ragsync import ids
from ragsync.catalog.queue import LANES, EventKey
from ragsync.config import Settings, open_catalog
from ragsync.decisions import DocVersions, GateAction, gate_event, version_key
from ragsync.errors import InvalidEventError
from ragsync.model import DeadLetter, Event, QueuedEvent, SourceFile
from transforms.common import CatalogDoFn, CatalogStep, StageMetrics, counter

STALE = "stale"
DUPLICATE = "duplicate"
UPSERT = "upsert"
DELETE = "delete"
ACL = "acl"


# -- the local queue as an unbounded source ------------------------------------


class _NoCheckpoint(CheckpointMark):
    """Acknowledgement happens after the writes, not at checkpoint time."""

    def finalize_checkpoint(self) -> None:
        return None


class _LeaseHeartbeat:
    """Keeps the leases of events in flight alive while their work runs.

    A slow-lane parse may take longer than a lease (OCR of a long scan): every
    ``lease_s / 3`` seconds this thread pushes the lease of every event it was
    given ``lease_s`` ahead, until the event is acknowledged. If the process
    dies, the heartbeat dies with it and the events are delivered again when
    their leases end.
    """

    def __init__(self, settings: Settings, lease_s: float) -> None:
        self.settings = settings
        self.lease_s = lease_s
        self._keys: set[EventKey] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragsync-lease-heartbeat", daemon=True)
        self._thread.start()

    def add(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._keys.update((r["tenant_id"], r["event_id"]) for r in rows)

    def _run(self) -> None:
        catalog = open_catalog(self.settings)
        try:
            while not self._stop.wait(max(0.5, self.lease_s / 3)):
                with self._lock:
                    keys = list(self._keys)
                if not keys:
                    continue
                try:
                    alive = catalog.extend_leases(keys, self.lease_s)
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease has slack
                    continue
                with self._lock:
                    self._keys -= set(keys) - alive
        finally:
            catalog.close()

    def stop(self) -> None:
        self._stop.set()


class _EventQueueReader(UnboundedReader):
    def __init__(self, source: EventQueueSource) -> None:
        self.source = source
        self._catalog: Any = None
        self._heartbeat: _LeaseHeartbeat | None = None
        self._buffer: collections.deque[dict[str, Any]] = collections.deque()
        self._current: dict[str, Any] | None = None
        self._done = False

    def start(self) -> bool:
        self._catalog = open_catalog(self.source.settings)
        self._heartbeat = _LeaseHeartbeat(self.source.settings, self.source.lease_s)
        return self.advance()

    def _claim(self) -> list[dict[str, Any]]:
        src = self.source
        claimed, looped = self._catalog.claim_events(
            limit=src.batch, lease_s=src.lease_s, lanes=src.lanes, max_deliveries=src.max_deliveries
        )
        for row in looped:
            # Leased again and again and never finished: the worker died on
            # it each time (a parser crash that took the process, an OOM
            # kill). Set aside instead of taking the stream down forever.
            self._catalog.record_dead_letter(
                crash_loop_dead_letter(row, src.max_deliveries), row["source_id"]
            )
        if claimed and self._heartbeat is not None:
            self._heartbeat.add(claimed)
        return list(claimed)

    def advance(self) -> bool:
        if not self._buffer:
            # Hold the bundle open briefly so a burst of events travels
            # together (the embedder batches what one bundle holds).
            deadline = time.monotonic() + self.source.hold_s
            while True:
                rows = self._claim()
                self._buffer.extend(rows)
                if rows or time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
        if self._buffer:
            self._current = self._buffer.popleft()
            return True
        if self.source.until_idle and self._catalog.unfinished_events(self.source.idle_lanes) == 0:
            self._done = True
        return False

    def get_current(self) -> dict[str, Any]:
        assert self._current is not None
        return self._current

    def get_current_timestamp(self) -> Timestamp:
        return Timestamp.of(time.time())

    def get_watermark(self) -> Timestamp:
        return MAX_TIMESTAMP if self._done else Timestamp.of(time.time() - 1)

    def get_checkpoint_mark(self) -> CheckpointMark:
        return _NoCheckpoint()

    def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None


def crash_loop_dead_letter(row: dict[str, Any], max_deliveries: int) -> DeadLetter:
    """The dead letter of an event whose worker died every time it ran."""
    return DeadLetter(
        stage="queue",
        doc_id="",
        uri="",
        error_class="crash",
        message=(
            f"delivered {row.get('deliveries')} times and never finished (the worker died each time, "
            f"limit {max_deliveries}): set aside; re-drive it with `ragsync dead-letters retry` after a fix"
        ),
        attempts=int(row.get("deliveries") or 0),
        payload=str(row.get("payload") or ""),
        tenant_id=str(row.get("tenant_id") or ""),
        source_version=str(row.get("source_version") or ""),
        event_id=str(row.get("event_id") or ""),
    )


class EventQueueSource(UnboundedSource):
    """The catalog's ``events`` table as an unbounded source of event rows.

    Args:
        settings: where the catalog is.
        until_idle: finish once no event of ``lanes`` is pending or in flight.
        lease_s: how long a read event is hidden from other readers; an event
            not acknowledged by then is delivered again (a heartbeat extends
            the leases of events still in flight).
        batch: events leased per poll.
        hold_s: how long a poll waits for events before yielding.
        lanes: the queue lanes this source serves (``priority``, ``fast``,
            ``slow``), served in that order, tenants taking turns.
        max_deliveries: an event leased this many times without finishing
            is dead-lettered (``crash``) instead of leased again.
        idle_lanes: with ``until_idle``, the lanes that must be drained before
            the source finishes (default ``lanes``; the slow lane's source
            waits for every lane, since the others may still hand it work).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        until_idle: bool = False,
        lease_s: float = 300.0,
        batch: int = 64,
        hold_s: float = 0.2,
        lanes: tuple[str, ...] = LANES,
        max_deliveries: int = 5,
        idle_lanes: tuple[str, ...] = (),
    ) -> None:
        unknown = set(lanes) - set(LANES)
        if unknown or not lanes:
            raise ValueError(f"lanes must be a non-empty subset of {LANES}, got {lanes}")
        self.settings = settings
        self.until_idle = until_idle
        self.lease_s = lease_s
        self.batch = batch
        self.hold_s = hold_s
        self.lanes = tuple(lanes)
        self.max_deliveries = max_deliveries
        self.idle_lanes = tuple(idle_lanes) or self.lanes

    def split(self, desired_num_splits: int, options: Any = None) -> list[UnboundedSource]:
        return [self]

    def create_reader(self, options: Any, checkpoint_mark: Any) -> UnboundedReader:
        return _EventQueueReader(self)

    def get_checkpoint_mark_coder(self) -> coders.Coder:
        return coders.PickleCoder()

    def default_output_coder(self) -> coders.Coder:
        return coders.PickleCoder()


# -- decode and resolve --------------------------------------------------------


class _ResolveFn(CatalogDoFn):
    """Event row -> (doc_id, QueuedEvent); an unknown source, or an upsert whose
    content_uri lies outside the source's location, is an ``invalid_event``
    dead letter."""

    def setup(self) -> None:
        super().setup()
        self._sources: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._stage = StageMetrics("resolve")

    def process(self, row: dict[str, Any]) -> Iterator[Any]:
        yield from self._stage.run(self._resolve, row)

    def _resolve(self, row: dict[str, Any]) -> Iterator[Any]:
        event = Event.from_json(row["payload"])
        # The tenant: the queue row's (set when it was queued), else the
        # message's own, else the source's only owner.
        claimed = str(row.get("tenant_id") or event.tenant_id or "")
        key = (claimed, event.source_id)
        if key not in self._sources:
            source = self._catalog.get_source(event.source_id, tenant_id=claimed or None)
            self._sources[key] = (source.tenant_id, source.uri) if source else None
        found = self._sources[key]
        if found is None:
            raise InvalidEventError(
                f"unknown source {event.source_id!r}: register it with `ragsync sources add` first"
            )
        tenant, location = found
        check_content_uri(event, location)  # an outside address never reaches fetch
        event = dataclasses.replace(event, tenant_id=tenant)
        doc_id = ids.doc_id(tenant, event.source_id, event.doc_id)
        yield (doc_id, QueuedEvent(event, tenant, doc_id, int(row.get("attempts") or 0)))


# -- the version gate ------------------------------------------------------------


def known_versions(catalog: Any, doc_id: str) -> DocVersions:
    """What the catalog holds for a document (the gate's authority)."""
    doc = catalog.get_document(doc_id)
    tomb = catalog.get_tombstone(doc_id)
    acl = catalog.get_acl_version(doc_id)
    indexed = doc.indexed_version if doc is not None and doc.status == "indexed" else None
    complete = True
    if indexed is not None:
        complete = len(catalog.chunk_ids_for_doc(doc_id)) == (doc.chunk_count or 0)
    return DocVersions(
        indexed=indexed,
        accepted=doc.source_version if doc is not None and doc.status != "deleted" else None,
        deleted=tomb["source_version"] if tomb is not None else None,
        acl=acl["acl_version"] if acl is not None else None,
        complete=complete,
        delete_complete=tomb is None or tomb["completed_at"] is not None,
    )


class _GateFn(CatalogDoFn):
    """(doc_id, QueuedEvent) -> the event to apply, tagged by op, or tagged
    ``stale`` / ``duplicate``.

    Timeline for one document (state = highest content and permission
    versions passed so far; the catalog is read for every event that the
    state does not already reject, because runner state is lost on restarts):
      v5 upsert arrives  -> state (5, -)  -> catalog: nothing newer -> apply
      v7 delete arrives  -> state (7, -)  -> apply (tombstone 7)
      v6 upsert arrives  -> 6 < 7 in state -> stale, dropped, counted
      v7 delete again    -> catalog: tombstone 7 exists -> duplicate
      v8 upsert arrives  -> 8 > tombstone 7 -> apply (recreation)
    """

    CONTENT = ReadModifyWriteStateSpec("content_version", coders.StrUtf8Coder())
    PERMS = ReadModifyWriteStateSpec("acl_version", coders.StrUtf8Coder())

    def setup(self) -> None:
        super().setup()
        self._stale = counter("events_stale")
        self._duplicate = counter("events_duplicate")
        self._stage = StageMetrics("gate")

    def process(
        self,
        keyed: tuple[str, QueuedEvent],
        content_state: Any = beam.DoFn.StateParam(CONTENT),
        acl_state: Any = beam.DoFn.StateParam(PERMS),
    ) -> Iterator[Any]:
        yield from self._stage.run(self._gate, keyed, content_state, acl_state)

    def _gate(self, keyed: tuple[str, QueuedEvent], content_state: Any, acl_state: Any) -> Iterator[Any]:
        doc_id, qe = keyed
        ev = qe.event
        state = acl_state if ev.op == ACL else content_state
        seen = state.read()
        if seen and version_key(ev.source_version) < version_key(seen):
            self._stale.inc()
            yield beam.pvalue.TaggedOutput(STALE, qe)
            return
        known = known_versions(self._catalog, doc_id) if self._catalog is not None else DocVersions()
        action = gate_event(ev.op, ev.source_version, known)
        if action == GateAction.STALE:
            self._stale.inc()
            yield beam.pvalue.TaggedOutput(STALE, qe)
            return
        if action == GateAction.DUPLICATE:
            self._duplicate.inc()
            yield beam.pvalue.TaggedOutput(DUPLICATE, qe)
            return
        if not seen or version_key(ev.source_version) > version_key(seen):
            state.write(ev.source_version)
        yield beam.pvalue.TaggedOutput(ev.op, qe)


class GateEvents(beam.PTransform):
    """Keyed by doc_id, pass only events newer than what is applied.

    Input: ``(doc_id, QueuedEvent)``. Outputs: ``upsert``, ``delete``, ``acl``
    (``QueuedEvent`` to apply), ``stale`` and ``duplicate`` (dropped).
    """

    def __init__(self, settings: Settings | None) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, events: beam.PCollection) -> Any:
        return events | "Gate" >> beam.ParDo(_GateFn(self.settings)).with_input_types(
            tuple[str, QueuedEvent]
        ).with_outputs(UPSERT, DELETE, ACL, STALE, DUPLICATE)


def upsert_to_source_file(qe: QueuedEvent, acl_groups: tuple[str, ...] | None = None) -> SourceFile:
    """The work item the shared fetch stage takes, for an upsert event."""
    ev = qe.event
    return SourceFile(
        tenant_id=qe.tenant_id,
        source_id=ev.source_id,
        source_object_id=ev.doc_id,
        uri=ev.content_uri,
        size=-1,
        acl_groups=ev.acl_groups if acl_groups is None else acl_groups,
        source_version=ev.source_version,
        event_id=ev.event_id,
        event_time=ev.event_time,
        attempts=qe.attempts,
    )


class _UpsertToWorkFn(CatalogDoFn):
    """QueuedEvent (upsert) -> SourceFile. Permissions: a newer permission
    change already applied wins over the groups this older upsert carries."""

    def process(self, qe: QueuedEvent) -> Iterator[SourceFile]:
        acl = self._catalog.get_acl_version(qe.doc_id)
        groups: tuple[str, ...] | None = None
        if acl is not None and version_key(acl["acl_version"]) > version_key(qe.event.source_version):
            groups = tuple(self._catalog.get_acl_groups(acl["acl_id"]) or ())
        yield upsert_to_source_file(qe, groups)


class UpsertsToWork(CatalogStep):
    """Input: upsert ``QueuedEvent``. Output: ``SourceFile`` for FetchDocuments."""

    fn = _UpsertToWorkFn
    label_ = "UpsertToWork"
