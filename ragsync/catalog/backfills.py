"""Backfill requests: re-parse, re-chunk or re-embed a tenant's documents,
and their progress.

Row: :class:`BackfillRow`. Table: ``backfills``. Where ``tenant_id`` is
optional (``get_backfill``), None means "no tenant check" (the re-embedding
worker has no tenant); another tenant's row reads like a missing one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import ID_PATTERN, ID_RE, Repository, _now, new_id, row_to
from ragsync.catalog.documents import LIVE_STATUSES

BACKFILL_REASONS = ("embedding_model", "parser", "chunker")
#: ``requested`` .. ``cancelled`` are the API's; a re-embedding ends ``built``
#: (complete, not flipped), ``flipped`` or ``refused`` (``ragsync reembed``).
BACKFILL_STATES = (
    "requested",
    "running",
    "paused",
    "done",
    "failed",
    "cancelled",
    "built",
    "flipped",
    "refused",
)

# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class BackfillRow:
    """One row of ``backfills``.

    Attributes:
        backfill_id: id.
        tenant_id: owner (None for operator backfills of every tenant).
        reason: ``embedding_model``, ``parser`` or ``chunker``.
        target_index: the new index version to write.
        state: one of :data:`BACKFILL_STATES`.
        total: documents to process (0 while unknown).
        done: documents processed.
        failed: documents that failed.
        cursor: the worker's resume position.
        max_docs_per_s: requested rate limit.
        created_at: epoch seconds of the request.
        started_at: when the worker first reported, else None.
        updated_at: when the worker last reported, else None.
        error: why it failed, or why ``failed`` documents were left behind;
            None while nothing went wrong.
    """

    backfill_id: str
    tenant_id: str | None
    reason: str
    target_index: str
    state: str
    total: int
    done: int
    failed: int
    cursor: str | None
    max_docs_per_s: float | None
    created_at: float
    started_at: float | None
    updated_at: float | None
    error: str | None = None

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left at the rate so far.

        ``(done + failed) / (now - started_at)`` documents per second; 0 when
        the backfill is ``done`` or nothing is left; None when it cannot be
        estimated (not started, nothing processed yet, total unknown) or the
        backfill ended without finishing (``failed``, ``cancelled``).
        """
        if self.state == "done":
            return 0.0
        if self.state in ("failed", "cancelled") or self.started_at is None or self.total <= 0:
            return None
        processed = self.done + self.failed
        remaining = max(self.total - processed, 0)
        if remaining == 0:
            return 0.0
        elapsed = (_now() if now is None else now) - self.started_at
        if processed <= 0 or elapsed <= 0:
            return None
        return round(remaining / (processed / elapsed), 1)


def _backfill_from_row(row: Any) -> BackfillRow:
    return row_to(BackfillRow, row)


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


# --------------------------------------------------------------------- repository


class BackfillsRepository(Repository):
    """Backfill requests and their progress."""

    def create_backfill(
        self,
        *,
        reason: str,
        target_index: str,
        max_docs_per_s: float | None = None,
        tenant_id: str | None = None,
        backfill_id: str | None = None,
        total: int = 0,
    ) -> BackfillRow:
        """Record a requested backfill (state ``requested``).

        Args:
            reason: one of :data:`BACKFILL_REASONS`.
            target_index: index version to write (``ID_PATTERN``).
            max_docs_per_s: rate limit for the worker (positive, finite), or None.
            tenant_id: owner; None for an operator backfill of every tenant.
            backfill_id: id; default a new random ``bf_...``.
            total: documents to process, when already known.

        Returns:
            The new row.

        Raises:
            ValueError: an argument is out of its domain.
            ConflictError: ``backfill_id`` exists.
        """
        if reason not in BACKFILL_REASONS:
            raise ValueError(f"reason must be one of {BACKFILL_REASONS}, got {reason!r}")
        if not ID_RE.match(target_index):
            raise ValueError(f"target_index {target_index!r} must match {ID_PATTERN}")
        if max_docs_per_s is not None and not (math.isfinite(max_docs_per_s) and max_docs_per_s > 0):
            raise ValueError(f"max_docs_per_s must be positive and finite, got {max_docs_per_s!r}")
        _check_count("total", total)
        row = {
            "backfill_id": backfill_id or new_id("bf"),
            "tenant_id": tenant_id,
            "reason": reason,
            "target_index": target_index,
            "cursor": None,
            "total": total,
            "done": 0,
            "failed": 0,
            "state": "requested",
            "created_at": _now(),
            "max_docs_per_s": max_docs_per_s,
            "started_at": None,
            "updated_at": None,
            "error": None,
        }
        self._insert_new(schema.backfills, row, f"backfill {row['backfill_id']!r} exists")
        return _backfill_from_row(row)

    def get_backfill(self, backfill_id: str, *, tenant_id: str | None = None) -> BackfillRow | None:
        """A backfill row.

        Args:
            backfill_id: id.
            tenant_id: when given, only that tenant's backfill is returned;
                None (workers) means no tenant check.

        Returns:
            The row, or None when unknown (or another tenant's).
        """
        row = self._find(schema.backfills, tenant_id=tenant_id, backfill_id=backfill_id)
        return None if row is None else _backfill_from_row(row)

    def list_backfills(self, *, state: str | None = None, tenant_id: str | None = None) -> list[BackfillRow]:
        """Backfills, oldest first, optionally of one state and/or tenant (workers poll ``requested``)."""
        t = schema.backfills
        query = select(t).order_by(t.c.created_at, t.c.backfill_id)
        if state is not None:
            query = query.where(t.c.state == state)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return [_backfill_from_row(r) for r in conn.execute(query).mappings()]

    def claim_backfill(self) -> BackfillRow | None:
        """Take the oldest ``requested`` backfill (state ``running``), or None.
        One conditional update: two workers never take the same request."""
        t = schema.backfills
        found = self._claim_oldest(t, "backfill_id", "requested", t.c.created_at, t.c.backfill_id)
        return None if found is None else self.get_backfill(found)

    def update_backfill_progress(
        self,
        backfill_id: str,
        *,
        total: int | None = None,
        done: int | None = None,
        failed: int | None = None,
        state: str | None = None,
        cursor: str | None = None,
        error: str | None = None,
        now: float | None = None,
    ) -> BackfillRow | None:
        """Record a worker's progress (absolute counts, not increments).

        Only the given fields change; ``updated_at`` becomes ``now``, and
        ``started_at`` is set the first time the state becomes ``running`` or
        a count is reported. Repeating a call gives the same row.

        Args:
            backfill_id: id.
            total: documents to process.
            done: documents processed so far.
            failed: documents failed so far.
            state: one of :data:`BACKFILL_STATES`.
            cursor: the worker's resume position.
            error: why it failed or left documents behind ('' clears it).
            now: epoch seconds of the report (default: the clock).

        Returns:
            The updated row, or None when the backfill does not exist.

        Raises:
            ValueError: a negative or non-integer count, or an unknown state.
        """
        for name, value in (("total", total), ("done", done), ("failed", failed)):
            _check_count(name, value)
        if state is not None and state not in BACKFILL_STATES:
            raise ValueError(f"state must be one of {BACKFILL_STATES}, got {state!r}")
        ts = _now() if now is None else now
        values: dict[str, Any] = {"updated_at": ts}
        given: dict[str, Any] = {
            "total": total,
            "done": done,
            "failed": failed,
            "state": state,
            "cursor": cursor,
            "error": error,
        }
        values.update({k: v for k, v in given.items() if v is not None})
        if error == "":
            values["error"] = None
        t = schema.backfills
        with self._engine.begin() as conn:
            if state == "running" or done is not None or failed is not None:
                conn.execute(
                    update(t)
                    .where(t.c.backfill_id == backfill_id, t.c.started_at.is_(None))
                    .values(started_at=ts)
                )
            if conn.execute(update(t).where(t.c.backfill_id == backfill_id).values(**values)).rowcount != 1:
                return None
            row = conn.execute(select(t).where(t.c.backfill_id == backfill_id)).mappings().one()
        return _backfill_from_row(row)

    def start_backfill(
        self,
        backfill_id: str,
        *,
        reason: str,
        target_index: str,
        cursor: str | None,
        total: int,
        done: int,
        max_docs_per_s: float | None,
    ) -> BackfillRow:
        """Create a worker's own backfill row, or restart it (a resumed run): state
        ``running``, counts reset to ``total``/``done``/0 failed.

        Args:
            backfill_id: the worker's stable id (e.g. ``reembed-v2``).
            reason: one of :data:`BACKFILL_REASONS`.
            target_index: what it writes.
            cursor: the worker's resume position.
            total: items to process.
            done: items already present (a resumed run).
            max_docs_per_s: the rate limit, or None.

        Returns:
            The row.

        Raises:
            ValueError: an unknown reason or a negative count.
        """
        if reason not in BACKFILL_REASONS:
            raise ValueError(f"reason must be one of {BACKFILL_REASONS}, got {reason!r}")
        for name, value in (("total", total), ("done", done)):
            _check_count(name, value)
        t = schema.backfills
        now = _now()
        values: dict[str, Any] = {
            "total": total,
            "done": done,
            "failed": 0,
            "state": "running",
            "max_docs_per_s": max_docs_per_s,
            "updated_at": now,
            "error": None,
        }
        with self._engine.begin() as conn:
            exists = conn.execute(select(t.c.backfill_id).where(t.c.backfill_id == backfill_id)).first()
            if exists is None:
                conn.execute(
                    t.insert().values(
                        backfill_id=backfill_id,
                        tenant_id=None,
                        reason=reason,
                        target_index=target_index,
                        cursor=cursor,
                        created_at=now,
                        started_at=now,
                        **values,
                    )
                )
            else:
                conn.execute(update(t).where(t.c.backfill_id == backfill_id).values(**values))
            row = conn.execute(select(t).where(t.c.backfill_id == backfill_id)).mappings().one()
        return _backfill_from_row(row)

    def add_backfill_progress(self, backfill_id: str, *, done: int = 0, failed: int = 0) -> None:
        """Add to a backfill's counts (increments, so parallel workers can report
        without reading first). An unknown id changes nothing."""
        for name, value in (("done", done), ("failed", failed)):
            _check_count(name, value)
        t = schema.backfills
        with self._engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.backfill_id == backfill_id)
                .values(done=t.c.done + done, failed=t.c.failed + failed, updated_at=_now())
            )

    def reindex_candidates(self, tenant_id: str | None) -> list[tuple[str, str, str | None, str | None]]:
        """What a parser or chunker backfill covers: every document of
        ``tenant_id`` (None: of every tenant) with a live version (``indexed``,
        or ``stale``: a later version failed, or an earlier backfill could not
        redo it), not deleted, top-level (a child document is parsed again
        with its parent) and holding its own chunks (an exact copy follows its
        holder), sorted by doc id.

        Returns:
            ``(doc_id, tenant_id, parser_version, chunker_id)`` per document,
            the versions of its live parse and chunks.
        """
        d = schema.documents
        query = (
            select(d.c.doc_id, d.c.tenant_id, d.c.parser_version, d.c.chunker_id)
            .where(
                d.c.status.in_(LIVE_STATUSES),
                d.c.indexed_version.is_not(None),
                d.c.deleted_at.is_(None),
                d.c.parent_doc_id.is_(None),
                or_(d.c.canonical_doc_id.is_(None), d.c.canonical_doc_id == d.c.doc_id),
            )
            .order_by(d.c.doc_id)
        )
        if tenant_id is not None:
            query = query.where(d.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return [(str(a), str(b), c, e) for a, b, c, e in conn.execute(query)]
