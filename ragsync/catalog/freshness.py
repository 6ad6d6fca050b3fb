"""Freshness: one row per applied event (table ``freshness``), its lag from
the change at the source to searchable, and the percentiles per source and
lane that ``ragsync status`` and ``/metrics`` show."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, int(-(-q * len(sorted_values) // 1)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


class FreshnessRepository(Repository):
    """Lag rows per applied event and their percentiles."""

    def record_freshness(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store (event_id, source_id, tenant_id, op, lane, event_time,
        applied_at) rows; a replayed event keeps its first measurement."""
        if not rows:
            return
        with self._engine.begin() as conn:
            self._upsert(conn, schema.freshness, [dict(r) for r in rows], ["tenant_id", "event_id"], None)

    def freshness_series(self, *, since: float = 0.0) -> list[tuple[str, str, float, float]]:
        """``(lane, source_id, applied_at, applied_at - event_time)`` of the
        events applied at or after ``since``, oldest first (for plots)."""
        t = schema.freshness
        query = (
            select(t.c.lane, t.c.source_id, t.c.applied_at, t.c.event_time)
            .where(t.c.applied_at >= since)
            .order_by(t.c.applied_at)
        )
        with self._read_engine.connect() as conn:
            return [
                (str(lane), str(sid), float(at), max(0.0, float(at) - float(et)))
                for lane, sid, at, et in conn.execute(query).all()
            ]

    def freshness_rows(self, *, since: float = 0.0) -> list[tuple[str, str, float, float]]:
        """``(event_id, op, event_time, applied_at)`` of the events applied at or after ``since``."""
        t = schema.freshness
        query = select(t.c.event_id, t.c.op, t.c.event_time, t.c.applied_at).where(t.c.applied_at >= since)
        with self._read_engine.connect() as conn:
            return [(str(e), str(o), float(et), float(at)) for e, o, et, at in conn.execute(query).all()]

    def freshness_stats(self, *, since: float | None = None) -> list[dict[str, Any]]:
        """p50/p95 of applied_at - event_time per tenant, source, lane and kind
        (``content`` for upserts, ``permissions`` for acl and delete); two
        tenants' sources with the same id are separate rows."""
        t = schema.freshness
        query = select(t.c.tenant_id, t.c.source_id, t.c.lane, t.c.op, t.c.event_time, t.c.applied_at)
        if since is not None:
            query = query.where(t.c.applied_at >= since)
        groups: dict[tuple[str, str, str, str], list[float]] = {}
        with self._read_engine.connect() as conn:
            for tenant_id, source_id, lane, op, event_time, applied_at in conn.execute(query).all():
                kind = "content" if op == "upsert" else "permissions"
                groups.setdefault((tenant_id, source_id, lane, kind), []).append(
                    max(0.0, applied_at - event_time)
                )
        out = []
        for (tenant_id, source_id, lane, kind), values in sorted(groups.items()):
            values.sort()
            out.append(
                {
                    "tenant_id": tenant_id,
                    "source_id": source_id,
                    "lane": lane,
                    "kind": kind,
                    "events": len(values),
                    "p50_s": round(_percentile(values, 0.50), 3),
                    "p95_s": round(_percentile(values, 0.95), 3),
                }
            )
        return out
