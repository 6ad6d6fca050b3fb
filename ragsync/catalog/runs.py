"""Pipeline runs (``pipeline_runs``): one row per backfill, sync or stream
run with its counters, for the cost figures of ``ragsync status`` and the
stage series of ``/metrics``; and the per-source document outcomes that
coverage is computed from (:mod:`ragsync.ops.coverage`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _now, new_id

#: Run kinds stored in ``pipeline_runs.kind``.
RUN_KINDS = ("listing", "stream")


class RunsRepository(Repository):
    """Pipeline runs and the aggregates operators read."""

    def record_run(
        self,
        kind: str,
        *,
        started_at: float,
        documents: int,
        counters: Mapping[str, Any],
        tenant_id: str = "",
        source_id: str = "",
        finished_at: float | None = None,
    ) -> str:
        """Store one finished run (not idempotent: each call is a new run).

        Args:
            kind: ``listing`` (a backfill or full sync) or ``stream``.
            started_at: epoch seconds.
            documents: documents the run handled (the cost denominator).
            counters: JSON-serialisable counters (``ragsync.ops.cost`` reads
                ``stages``, ``embedding_cache_hits`` and ``embedding_cache_misses``).
            tenant_id, source_id: the source synced ('' for a stream).
            finished_at: default now.

        Returns:
            The run id.

        Raises:
            ValueError: an unknown kind.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"unknown run kind {kind!r}")
        run_id = new_id("run")
        row = {
            "run_id": run_id,
            "kind": kind,
            "tenant_id": tenant_id,
            "source_id": source_id,
            "started_at": started_at,
            "finished_at": _now() if finished_at is None else finished_at,
            "documents": int(documents),
            "counters": json.dumps(dict(counters), sort_keys=True, default=str),
        }
        with self._engine.begin() as conn:
            conn.execute(schema.pipeline_runs.insert().values(**row))
        return run_id

    def list_runs(self, *, kind: str | None = None, limit: int | None = 100) -> list[dict[str, Any]]:
        """The latest runs first (all of them with ``limit=None``), as dicts with ``counters`` decoded."""
        t = schema.pipeline_runs
        query = select(t).order_by(t.c.finished_at.desc(), t.c.run_id)
        if limit is not None:
            query = query.limit(limit)
        if kind is not None:
            query = query.where(t.c.kind == kind)
        with self._read_engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(query).mappings()]
        for r in rows:
            r["counters"] = json.loads(r["counters"] or "{}")
        return rows

    def document_outcomes(
        self, *, tenant_id: str | None = None, source_id: str | None = None
    ) -> list[tuple[str, str, str, str, int]]:
        """Documents counted by ``(tenant_id, source_id, status, error_class)``
        (error class '' when none), for coverage per source.

        Read from ``document_tallies`` (kept exact by triggers on
        ``documents``): a few rows per source whatever the catalog's size.
        Groups with no document are left out.
        """
        t = schema.document_tallies
        query = select(t.c.tenant_id, t.c.source_id, t.c.status, t.c.error_class, t.c.n).where(t.c.n > 0)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        if source_id is not None:
            query = query.where(t.c.source_id == source_id)
        with self._read_engine.connect() as conn:
            rows = conn.execute(query).all()
        return [(str(t), str(s), str(st), str(ec), int(n)) for t, s, st, ec, n in rows]

    def ocr_confidences(self) -> list[float]:
        """Mean OCR confidence of every parse that ran OCR (0-100), for the report."""
        p = schema.parsed_docs
        query = select(p.c.ocr_confidence).where(p.c.ocr_confidence.is_not(None))
        with self._read_engine.connect() as conn:
            return [float(v) for (v,) in conn.execute(query).all()]
