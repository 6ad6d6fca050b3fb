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
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.unbounded_source import CheckpointMark, UnboundedReader, UnboundedSource
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from connectors.events import EventAdmission, refused_event_dead_letter
from ragsync import ids
from ragsync.catalog.queue import LANES, EventKey, EventScope
from ragsync.config import Settings, open_catalog
from ragsync.decisions import (
    DocVersions,
    GateAction,
    Order,
    PermissionEvidence,
    Stamp,
    compare_versions,
    document_stamp,
    event_stamp,
    evidence_predates_delete,
    gate_verdict,
    row_stamp,
)
from ragsync.errors import InvalidEventError
from ragsync.model import DeadLetter, Event, QueuedEvent, SourceFile
from ragsync.ops import lifecycle
from transforms.steps import CatalogDoFn, CatalogStep

_log = logging.getLogger("ragsync.gate")

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
        # What each event looked like when leased: a requeue after a failure
        # (attempts+1) or a hand-off to the slow lane ends this worker's claim.
        self._claims: dict[EventKey, tuple[int, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragsync-lease-heartbeat", daemon=True)
        self._thread.start()

    def add(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            for r in rows:
                key = (r["tenant_id"], r["event_id"])
                self._claims[key] = (int(r.get("attempts") or 0), str(r.get("lane") or "fast"))

    def _run(self) -> None:
        catalog = open_catalog(self.settings)
        try:
            while not self._stop.wait(max(0.5, self.lease_s / 3)):
                with self._lock:
                    claims = dict(self._claims)
                if not claims:
                    continue
                try:
                    alive = catalog.queue.extend_leases(list(claims), self.lease_s, claimed=claims)
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease has slack
                    continue
                with self._lock:
                    for key in set(claims) - alive:
                        if self._claims.get(key) == claims[key]:
                            del self._claims[key]
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
        # Events a killed stream still holds are taken now, not when their
        # lease runs out; their next delivery is not counted (claim_events).
        self._catalog.queue.release_orphaned_leases(self._holder_gone)
        self._heartbeat = _LeaseHeartbeat(self.source.settings, self.source.lease_s)
        return self.advance()

    def _holder_gone(self, holder: str) -> bool:
        return lifecycle.holder_gone(holder, self.source.holder)

    def _claim(self) -> list[dict[str, Any]]:
        src = self.source
        claimed, looped = self._catalog.queue.claim_events(
            limit=src.batch,
            lease_s=src.lease_s,
            lanes=src.lanes,
            max_deliveries=src.max_deliveries,
            scope=src.scope,
            holder=src.holder,
            holder_gone=self._holder_gone,
        )
        for row in looped:
            # Leased again and again and never finished: the worker died on
            # it each time (a parser crash that took the process, an OOM
            # kill). Set aside instead of taking the stream down forever.
            self._catalog.dead_letters.record_dead_letter(
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
        src = self.source
        if src.until_idle and self._catalog.queue.unfinished_events(src.idle_lanes, scope=src.scope) == 0:
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
    """The dead letter of an event whose worker died every time it ran.

    It names the event's document (when the row names its tenant and source),
    so the document is marked ``dead_letter`` (``stale`` when a version is
    live) instead of staying ``fetched`` from the attempt that died.
    """
    tenant = str(row.get("tenant_id") or "")
    source_id, object_id = str(row.get("source_id") or ""), str(row.get("doc_id") or "")
    return DeadLetter(
        stage="queue",
        doc_id=ids.doc_id(tenant, source_id, object_id) if tenant and source_id and object_id else "",
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
        scope: serve only this tenant's (and source's) events, leaving every
            other event queued (a sync applies its own events); None serves
            the whole queue.
        holder: who holds the leases it takes (default: this process,
            ``ragsync.ops.lifecycle.run_identity``, taken where the source is
            built: the ``ragsync stream`` process, also when a worker process
            reads). At start, the reader ends the leases of holders whose
            process is gone, and a delivery lost with its whole process is not
            counted towards ``max_deliveries``: only a worker that died while
            its run went on makes a crash loop.
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
        scope: EventScope | None = None,
        holder: str = "",
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
        self.scope = scope
        self.holder = holder or lifecycle.run_identity()

    def split(self, desired_num_splits: int, options: Any = None) -> list[UnboundedSource]:
        return [self]

    def create_reader(self, options: Any, checkpoint_mark: Any) -> UnboundedReader:
        return _EventQueueReader(self)

    def get_checkpoint_mark_coder(self) -> coders.Coder:
        return coders.PickleCoder()

    def default_output_coder(self) -> coders.Coder:
        return coders.PickleCoder()


# -- decode and resolve --------------------------------------------------------


REFUSED = "refused"
"""``_ResolveFn``'s output of events the admission refused (``DeadLetter``)."""


class _ResolveFn(CatalogDoFn):
    """Event row -> (doc_id, QueuedEvent), through the one admission of events
    (``connectors.events.EventAdmission``: the tenant, a registered source,
    an upsert's address under its location, the source's default groups).
    An event it refuses goes to the ``refused`` output as an
    ``invalid_event`` dead letter of stage ``admit`` (the same as a bus
    message refused at the door); any other failure is raised (the caller's
    exception handling makes it a ``resolve`` dead letter, retried when
    transient)."""

    metrics_stage = "resolve"

    def setup(self) -> None:
        super().setup()
        self._admission = EventAdmission(self._catalog)

    def process(self, row: dict[str, Any]) -> Iterator[Any]:
        yield from self._stage.run(self._resolve, row)

    def _resolve(self, row: dict[str, Any]) -> Iterator[Any]:
        event = Event.from_json(row["payload"])
        try:
            # The tenant: the queue row's (set when it was queued), else the
            # message's own, else the source's only owner.
            admitted = self._admission.admit(event, str(row.get("tenant_id") or ""))
        except InvalidEventError as exc:
            tenant = str(row.get("tenant_id") or event.tenant_id or "")
            doc = ids.doc_id(tenant, event.source_id, event.doc_id) if tenant else ""
            yield beam.pvalue.TaggedOutput(REFUSED, refused_event_dead_letter(row, exc, doc))
            return
        event = admitted.event
        doc_id = ids.doc_id(event.tenant_id, event.source_id, event.doc_id)
        attempts = int(row.get("attempts") or 0)
        yield (doc_id, QueuedEvent(event, event.tenant_id, doc_id, attempts, admitted.version_domain))


# -- the version gate ------------------------------------------------------------


def known_versions(catalog: Any, doc_id: str) -> DocVersions:
    """What the catalog holds for a document (the gate's authority)."""
    doc = catalog.documents.get_document(doc_id)
    tomb = catalog.gate_state.get_tombstone(doc_id)
    acl = catalog.gate_state.get_acl_version(doc_id)
    indexed = doc.indexed_version if doc is not None and doc.status == "indexed" else None
    complete = True
    if indexed is not None:
        complete = len(catalog.chunks.chunk_ids_for_doc(doc_id)) == (doc.chunk_count or 0)
    accepted = doc.source_version if doc is not None and doc.status != "deleted" else None
    return DocVersions(
        indexed=document_stamp(doc, indexed),
        accepted=document_stamp(doc, accepted),
        deleted=row_stamp(tomb, "source_version"),
        acl=row_stamp(acl, "acl_version"),
        complete=complete,
        delete_complete=tomb is None or tomb["completed_at"] is not None,
    )


def _state_stamp(text: str | None) -> Stamp | None:
    if not text:
        return None
    try:
        value, domain, observed = json.loads(text)
        return Stamp(str(value), str(domain), float(observed))
    except (ValueError, TypeError):
        return Stamp(text)


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

    metrics_stage = "gate"

    CONTENT = ReadModifyWriteStateSpec("content_version", coders.StrUtf8Coder())
    PERMS = ReadModifyWriteStateSpec("acl_version", coders.StrUtf8Coder())

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
        stamp = event_stamp(qe)
        state = acl_state if ev.op == ACL else content_state
        seen = _state_stamp(state.read())
        if seen is not None and compare_versions(stamp, seen) == Order.OLDER:
            self._drop_stale(qe, f"{ev.op} {ev.source_version!r} is stale: this run passed {seen.value!r}")
            yield beam.pvalue.TaggedOutput(STALE, qe)
            return
        known = known_versions(self._catalog, doc_id) if self._catalog is not None else DocVersions()
        verdict = gate_verdict(ev.op, stamp, known)
        if verdict.action == GateAction.STALE:
            self._drop_stale(qe, verdict.reason)
            yield beam.pvalue.TaggedOutput(STALE, qe)
            return
        if verdict.action == GateAction.DUPLICATE:
            self.count("events_duplicate")
            yield beam.pvalue.TaggedOutput(DUPLICATE, qe)
            return
        if seen is None or compare_versions(stamp, seen) == Order.NEWER:
            state.write(json.dumps([stamp.value, stamp.domain, stamp.observed_at]))
        yield beam.pvalue.TaggedOutput(ev.op, qe)

    def _drop_stale(self, qe: QueuedEvent, reason: str) -> None:
        """Count, log (both versions) and keep the reason on the event row."""
        self.count("events_stale")
        _log.warning("event %s of %s: %s", qe.event.event_id, qe.doc_id, reason)
        if self._catalog is not None:
            self._catalog.queue.note_event((qe.tenant_id, qe.event.event_id), reason)


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


def upsert_to_source_file(qe: QueuedEvent) -> SourceFile:
    """The work item the shared fetch stage takes, for an upsert event (the
    fetch stage weighs its permissions against the evidence the catalog holds)."""
    ev = qe.event
    return SourceFile(
        tenant_id=qe.tenant_id,
        source_id=ev.source_id,
        source_object_id=ev.doc_id,
        uri=ev.content_uri,
        size=-1,
        acl_groups=ev.acl_groups,
        source_version=ev.source_version,
        event_id=ev.event_id,
        event_time=ev.event_time,
        attempts=qe.attempts,
        version_domain=qe.version_domain,
        observed_at=ev.event_time,
        acl_observed_at=ev.event_time,
        deny_groups=ev.deny_groups,
    )


class _UpsertToWorkFn(CatalogDoFn):
    """QueuedEvent (upsert) -> SourceFile."""

    def process(self, qe: QueuedEvent) -> Iterator[SourceFile]:
        yield upsert_to_source_file(qe)


def held_permissions(catalog: Any, doc_id: str) -> PermissionEvidence | None:
    """The permission evidence the catalog applied last with a known time
    (an acl event, a timed listing), or None. Evidence from before the
    document's last delete is about the deleted document: None
    (``ragsync.decisions.evidence_predates_delete``)."""
    row = catalog.gate_state.get_acl_version(doc_id)
    if row is None:
        return None
    tomb = catalog.gate_state.get_tombstone(doc_id)
    if tomb is not None and evidence_predates_delete(
        float(row.get("observed_at") or 0.0), tomb.get("observed_at")
    ):
        return None
    groups = catalog.acls.get_acl_groups(row["acl_id"])
    if groups is None:
        return None
    observed = float(row.get("observed_at") or 0.0)
    return PermissionEvidence(
        tuple(groups),
        observed,
        tuple(catalog.acls.get_acl_deny(row["acl_id"])),
        Stamp(str(row["acl_version"]), str(row.get("version_domain") or ""), observed),
    )


def item_permissions(item: SourceFile) -> PermissionEvidence:
    """The permission evidence an item carries: an event's with its version
    (ordered against a tie by version), a listing's with its time only."""
    version = Stamp(item.source_version, item.version_domain, item.acl_observed_at) if item.event_id else None
    return PermissionEvidence(item.acl_groups, item.acl_observed_at, item.deny_groups, version)


class UpsertsToWork(CatalogStep):
    """Input: upsert ``QueuedEvent``. Output: ``SourceFile`` for FetchDocuments."""

    fn = _UpsertToWorkFn
    label_ = "UpsertToWork"
