"""What operators read about the event queue: depth and oldest age per lane
(``ragsync status``, ``/metrics``), the queue's intervals for the report,
events stuck behind a stale version, and the latest event of an object."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, or_, select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _now


class QueueViewsRepository(Repository):
    """Read-only views of the ``events`` table."""

    def queue_stats(self, *, now: float | None = None) -> dict[str, Any]:
        """Queue depth by state and lane, and the age of the oldest pending
        event (overall and per lane in ``oldest_pending_age_s_by_lane``)."""
        t = schema.events
        ts = _now() if now is None else now
        by_state = self._count_by(t.c.state)
        by_lane = self._count_by(t.c.lane, t.c.state == "pending")
        query = select(t.c.lane, func.min(t.c.enqueued_at)).where(t.c.state == "pending").group_by(t.c.lane)
        with self._read_engine.connect() as conn:
            oldest_by_lane = {str(lane): float(at) for lane, at in conn.execute(query).all()}
        oldest = min(oldest_by_lane.values()) if oldest_by_lane else None
        return {
            "by_state": by_state,
            "by_lane": by_lane,
            "depth": by_state.get("pending", 0),
            "oldest_pending_age_s": round(ts - oldest, 3) if oldest is not None else 0.0,
            "oldest_pending_age_s_by_lane": {
                lane: round(ts - at, 3) for lane, at in sorted(oldest_by_lane.items())
            },
        }

    def queue_intervals(self, *, since: float = 0.0) -> list[tuple[str, float, float | None]]:
        """``(lane, enqueued_at, finished_at)`` of every event still pending or
        finished at or after ``since`` (``finished_at`` None: still pending;
        events finished before revision 0005 have none and are left out
        unless pending): the queue's depth at an instant ``t`` is the number
        of intervals with ``enqueued_at <= t < finished_at``."""
        t = schema.events
        query = select(t.c.lane, t.c.enqueued_at, t.c.finished_at).where(
            or_(t.c.state == "pending", t.c.finished_at >= since)
        )
        with self._read_engine.connect() as conn:
            return [
                (str(lane), float(enq), None if fin is None else float(fin))
                for lane, enq, fin in conn.execute(query).all()
            ]

    def latest_event(self, tenant_id: str, source_id: str, source_object_id: str) -> dict[str, Any] | None:
        """The most recently queued event of one object of a tenant's source
        (row as a dict), or None."""
        t = schema.events
        query = (
            select(t)
            .where(t.c.tenant_id == tenant_id, t.c.source_id == source_id, t.c.doc_id == source_object_id)
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

    def stale_events(self, *, tenant_id: str | None = None, limit: int = 10) -> dict[str, Any]:
        """Events the version gate dropped as stale: how many, and the newest
        ``limit`` with the reason naming the event's and the held version."""
        t = schema.events
        where = t.c.state == "stale"
        if tenant_id is not None:
            where = and_(where, t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            count = int(conn.execute(select(func.count()).select_from(t).where(where)).scalar() or 0)
            rows = conn.execute(
                select(
                    t.c.tenant_id,
                    t.c.event_id,
                    t.c.source_id,
                    t.c.doc_id,
                    t.c.op,
                    t.c.source_version,
                    t.c.note,
                )
                .where(where)
                .order_by(t.c.enqueued_at.desc(), t.c.event_id)
                .limit(limit)
            ).mappings()
            recent = [{k: ("" if v is None else v) for k, v in r.items()} for r in rows]
        return {"count": count, "recent": recent}
