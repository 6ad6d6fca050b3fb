"""The local event queue and the streaming bookkeeping around it.

Tables: ``events`` (the durable queue of the local default; Pub/Sub or Kafka
in production), ``tombstones`` (deletes), ``acl_versions`` (the last applied
permission change per document) and ``freshness`` (one row per applied
event). Event, tombstone and ACL-version rows are returned as dicts of their
columns: an event row is also what the Pub/Sub and Kafka readers build, so the
streaming graph takes one shape from every bus.

Event states: ``pending`` -> ``done`` (or ``stale``, ``duplicate``), or
``pending`` -> ``dead`` after the last attempt. ``available_at`` delays a
retry (backoff) and implements leases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now


class QueueRepository(Repository):
    """Events, leases, tombstones, permission versions and freshness."""

    # -- the local event queue ----------------------------------------------

    def enqueue_events(self, events: Sequence[Any], *, now: float | None = None) -> tuple[int, int]:
        """Add events (``connectors.events.Event``) to the queue.

        Idempotent on ``event_id``: a redelivered event is not queued twice.

        Returns:
            (newly queued, duplicates ignored).
        """
        t = schema.events
        ts = _now() if now is None else now
        rows = [
            {
                "event_id": e.event_id,
                "source_id": e.source_id,
                "doc_id": e.doc_id,
                "op": e.op,
                "source_version": e.source_version,
                "payload": e.to_json(),
                "event_time": e.event_time,
                "enqueued_at": ts,
                "attempts": 0,
                "state": "pending",
                "available_at": ts,
            }
            for e in events
        ]
        if not rows:
            return 0, 0
        ids = [r["event_id"] for r in rows]
        with self._engine.begin() as conn:
            existing = {r for (r,) in conn.execute(select(t.c.event_id).where(t.c.event_id.in_(ids))).all()}
            fresh = [r for r in rows if r["event_id"] not in existing]
            unique: dict[str, dict[str, Any]] = {}
            for r in fresh:
                unique.setdefault(r["event_id"], r)
            if unique:
                self._upsert(conn, t, list(unique.values()), ["event_id"], None)
        return len(unique), len(rows) - len(unique)

    def pending_events(self, *, limit: int = 500, now: float | None = None) -> list[dict[str, Any]]:
        """Pending events that are due, oldest first (rows as dicts)."""
        t = schema.events
        ts = _now() if now is None else now
        query = (
            select(t)
            .where(t.c.state == "pending")
            .where(t.c.available_at <= ts)
            .order_by(t.c.enqueued_at, t.c.event_id)
            .limit(limit)
        )
        with self._read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """The queued event (row as a dict), or None."""
        return self._find(schema.events, event_id=event_id)

    def ack_events(self, event_ids: Sequence[str], state: str = "done") -> int:
        """Mark events finished (``done``, ``stale``, ``duplicate`` or ``dead``)."""
        t = schema.events
        n = 0
        with self._engine.begin() as conn:
            for batch in _batches(list(event_ids)):
                n += conn.execute(update(t).where(t.c.event_id.in_(batch)).values(state=state)).rowcount
        return n

    def retry_event_later(self, event_id: str, delay_s: float, *, max_attempts: int = 5) -> str:
        """Count a failed attempt; requeue after ``delay_s`` or mark ``dead``.

        Returns:
            The event's new state: ``pending`` or ``dead``.
        """
        t = schema.events
        with self._engine.begin() as conn:
            row = conn.execute(select(t.c.attempts).where(t.c.event_id == event_id)).first()
            if row is None:
                return "missing"
            attempts = int(row[0]) + 1
            state = "dead" if attempts >= max_attempts else "pending"
            conn.execute(
                update(t)
                .where(t.c.event_id == event_id)
                .values(attempts=attempts, state=state, available_at=_now() + delay_s)
            )
        return state

    def requeue_event(self, event_id: str) -> bool:
        """Put a finished or dead event back in the queue (dead-letter retry)."""
        t = schema.events
        with self._engine.begin() as conn:
            return (
                conn.execute(
                    update(t)
                    .where(t.c.event_id == event_id)
                    .values(state="pending", attempts=0, available_at=_now())
                ).rowcount
                == 1
            )

    def queue_stats(self, *, now: float | None = None) -> dict[str, Any]:
        """Queue depth by state and the age of the oldest pending event."""
        t = schema.events
        ts = _now() if now is None else now
        by_state = self._count_by(t.c.state)
        with self._read_engine.connect() as conn:
            oldest = conn.execute(select(func.min(t.c.enqueued_at)).where(t.c.state == "pending")).scalar()
        return {
            "by_state": by_state,
            "depth": by_state.get("pending", 0),
            "oldest_pending_age_s": round(ts - float(oldest), 3) if oldest is not None else 0.0,
        }

    def latest_event(self, source_id: str, source_object_id: str) -> dict[str, Any] | None:
        """The most recently queued event of one object of a source (row as a dict), or None."""
        t = schema.events
        query = (
            select(t)
            .where(t.c.source_id == source_id, t.c.doc_id == source_object_id)
            .order_by(t.c.enqueued_at.desc(), t.c.event_id.desc())
            .limit(1)
        )
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else dict(row)

    def event_counts(self) -> dict[tuple[str, str], int]:
        """Queue rows counted by ``(op, state)``."""
        t = schema.events
        query = select(t.c.op, t.c.state, func.count()).group_by(t.c.op, t.c.state)
        with self._read_engine.connect() as conn:
            return {(str(op), str(state)): int(n) for op, state, n in conn.execute(query).all()}

    def claim_events(
        self, *, limit: int = 100, lease_s: float = 300.0, now: float | None = None
    ) -> list[dict[str, Any]]:
        """Lease up to ``limit`` due pending events, oldest first.

        A leased event stays ``pending`` with ``available_at`` moved ``lease_s``
        ahead: if the worker dies before acknowledging it, it is delivered
        again when the lease ends (at-least-once). Rows come back as dicts.
        """
        t = schema.events
        ts = _now() if now is None else now
        with self._engine.begin() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    select(t)
                    .where(t.c.state == "pending")
                    .where(t.c.available_at <= ts)
                    .order_by(t.c.enqueued_at, t.c.event_id)
                    .limit(limit)
                ).mappings()
            ]
            ids = [r["event_id"] for r in rows]
            for batch in _batches(ids):
                conn.execute(
                    update(t)
                    .where(t.c.event_id.in_(batch))
                    .where(t.c.state == "pending")
                    .values(available_at=ts + lease_s)
                )
        return rows

    def unfinished_events(self) -> int:
        """Pending events, leased or not (the queue is drained at 0)."""
        t = schema.events
        with self._read_engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(t.c.state == "pending")).scalar() or 0)

    def event_sources(self, event_ids: Iterable[str]) -> dict[str, str]:
        """``{event_id: source_id}`` for the ids already in the event queue."""
        wanted = sorted(set(event_ids))
        t = schema.events
        out: dict[str, str] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(wanted):
                out.update(
                    {
                        eid: sid
                        for eid, sid in conn.execute(
                            select(t.c.event_id, t.c.source_id).where(t.c.event_id.in_(batch))
                        ).all()
                    }
                )
        return out

    def tenant_event(self, tenant_id: str, event_id: str) -> dict[str, Any] | None:
        """A queued event of one of the tenant's sources (row as a dict), else None."""
        e, s = schema.events, schema.sources
        query = (
            select(e)
            .join(s, s.c.source_id == e.c.source_id)
            .where(e.c.event_id == event_id, s.c.tenant_id == tenant_id)
        )
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else dict(row)

    # -- tombstones and permission versions --------------------------------

    def get_tombstone(self, doc_id: str) -> dict[str, Any] | None:
        """The document's tombstone (row as a dict), or None."""
        return self._find(schema.tombstones, doc_id=doc_id)

    def put_tombstone(self, doc_id: str, tenant_id: str, source_version: str) -> None:
        """Record a delete (the tombstone blocks older upserts) and mark the
        document deleted; completion is recorded by ``complete_tombstone``."""
        ts = _now()
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "source_version": source_version,
            "deleted_at": ts,
            "completed_at": None,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn, schema.tombstones, [row], ["doc_id"], ["source_version", "deleted_at", "completed_at"]
            )
            d = schema.documents
            conn.execute(
                update(d)
                .where(d.c.doc_id == doc_id)
                .values(status="deleted", deleted_at=ts, chunk_count=0, updated_at=ts)
            )

    def list_tombstones(self) -> list[dict[str, Any]]:
        """Every tombstone row (as dicts), by doc_id."""
        t = schema.tombstones
        with self._read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).order_by(t.c.doc_id)).mappings()]

    def complete_tombstone(self, doc_id: str) -> None:
        t = schema.tombstones
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.c.doc_id == doc_id).values(completed_at=_now()))

    def get_acl_version(self, doc_id: str) -> dict[str, Any] | None:
        """The document's last applied permission change (row as a dict), or None."""
        return self._find(schema.acl_versions, doc_id=doc_id)

    def set_acl_version(self, doc_id: str, tenant_id: str, acl_version: str, acl_id: str) -> None:
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "acl_version": acl_version,
            "acl_id": acl_id,
            "updated_at": _now(),
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn, schema.acl_versions, [row], ["doc_id"], ["acl_version", "acl_id", "updated_at"]
            )

    # -- freshness ----------------------------------------------------------------

    def record_freshness(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store (event_id, source_id, tenant_id, op, lane, event_time,
        applied_at) rows; a replayed event keeps its first measurement."""
        if not rows:
            return
        with self._engine.begin() as conn:
            self._upsert(conn, schema.freshness, [dict(r) for r in rows], ["event_id"], None)

    def freshness_rows(self, *, since: float = 0.0) -> list[tuple[str, str, float, float]]:
        """``(event_id, op, event_time, applied_at)`` of the events applied at or after ``since``."""
        t = schema.freshness
        query = select(t.c.event_id, t.c.op, t.c.event_time, t.c.applied_at).where(t.c.applied_at >= since)
        with self._read_engine.connect() as conn:
            return [(str(e), str(o), float(et), float(at)) for e, o, et, at in conn.execute(query).all()]

    def freshness_stats(self, *, since: float | None = None) -> list[dict[str, Any]]:
        """p50/p95 of applied_at - event_time per source, lane and kind
        (``content`` for upserts, ``permissions`` for acl and delete)."""
        t = schema.freshness
        query = select(t.c.source_id, t.c.lane, t.c.op, t.c.event_time, t.c.applied_at)
        if since is not None:
            query = query.where(t.c.applied_at >= since)
        groups: dict[tuple[str, str, str], list[float]] = {}
        with self._read_engine.connect() as conn:
            for source_id, lane, op, event_time, applied_at in conn.execute(query).all():
                kind = "content" if op == "upsert" else "permissions"
                groups.setdefault((source_id, lane, kind), []).append(max(0.0, applied_at - event_time))
        out = []
        for (source_id, lane, kind), values in sorted(groups.items()):
            values.sort()
            out.append(
                {
                    "source_id": source_id,
                    "lane": lane,
                    "kind": kind,
                    "events": len(values),
                    "p50_s": round(_percentile(values, 0.50), 3),
                    "p95_s": round(_percentile(values, 0.95), 3),
                }
            )
        return out


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, int(-(-q * len(sorted_values) // 1)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])
