"""Sources' sync bookkeeping (cursor, pause, failures) and the sync runs a worker executes.

Rows: :class:`SyncRun` (a ``sync_requests`` row: ``queued -> running ->
succeeded | failed`` with its counts and error); a source's own row,
``SourceState`` (location, options, cursor, pause and failure bookkeeping),
is defined with the sources in :mod:`ragsync.catalog.sources`.

The cursor is written by :meth:`SyncsRepository.save_cursor` only after the
events read up to it are durably queued (``connectors.feed``), so a crash
re-reads changes instead of losing them.

Claiming a run (:meth:`SyncsRepository.claim_sync_run`) is one conditional
``UPDATE ... WHERE state = 'queued'``: two workers never run the same
request. At most one run per source is queued or running; asking again while
one is pending returns the pending run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import LimitReachedError, Repository, _batches, _json_object, new_id
from ragsync.catalog.documents import LIVE_STATUSES
from ragsync.catalog.sources import SourceState, _state_from_row, check_sync_settings, read_source
from ragsync.decisions.sync import next_tenant

SYNC_STATES = ("queued", "running", "succeeded", "failed")
SYNC_MODES = ("incremental", "full")
_PENDING = ("queued", "running")


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class SyncRun:
    """One requested sync of a source.

    Attributes:
        sync_id: id.
        tenant_id: owner.
        source_id: the source.
        mode: ``incremental`` or ``full``.
        state: ``queued``, ``running``, ``succeeded`` or ``failed``.
        requested_at: epoch seconds.
        started_at: when a worker took it.
        finished_at: when it ended.
        counts: the sync's counters (events queued, documents indexed...).
        error: why it failed ('' otherwise).
        origin: ``api``, ``schedule``, ``webhook`` or ``cli``.
    """

    sync_id: str
    tenant_id: str
    source_id: str
    mode: str
    state: str
    requested_at: float
    started_at: float | None = None
    finished_at: float | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    origin: str = ""


def _run_from_row(row: Mapping[Any, Any]) -> SyncRun:
    return SyncRun(
        sync_id=row["sync_id"],
        tenant_id=row["tenant_id"],
        source_id=row["source_id"],
        mode=row["mode"],
        state=row["state"],
        requested_at=float(row["requested_at"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        counts=_json_object(row["counts"]),
        error=row["error"] or "",
        origin=row["origin"] or "",
    )


def _source_where(t: Any, source_id: str, tenant_id: str | None) -> Any:
    """The source's row: by (tenant, id), or by id alone for operator tools
    (which then act on every tenant's source of that id: callers that know
    the tenant pass it)."""
    cond = t.c.source_id == source_id
    return cond if tenant_id is None else and_(cond, t.c.tenant_id == tenant_id)


class SyncsRepository(Repository):
    """Source sync state and sync runs."""

    # -- sources --------------------------------------------------------------------

    def sources_with_id(self, source_id: str, *, limit: int = 16) -> list[SourceState]:
        """Every tenant's source of this id (at most ``limit``), for callers
        that prove which one they mean another way (a webhook's secret)."""
        t = schema.sources
        query = select(t).where(t.c.source_id == source_id).order_by(t.c.tenant_id).limit(limit)
        with self._read_engine.connect() as conn:
            return [_state_from_row(r) for r in conn.execute(query).mappings()]

    def source_states(self, tenant_id: str | None = None) -> list[SourceState]:
        """Every source (of one tenant, or all), ordered by id."""
        t = schema.sources
        query = select(t).order_by(t.c.source_id)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return [_state_from_row(r) for r in conn.execute(query).mappings()]

    def configure_source(
        self,
        source_id: str,
        *,
        tenant_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        credentials_ref: str | None = None,
        sync: str | None = None,
        poll_interval_s: int | None = None,
        version_domain: str | None = None,
    ) -> bool:
        """Set the given connector settings of a source (None leaves one as it is).

        Returns:
            False when there is no such source.

        Raises:
            ValueError: an unknown ``version_domain``.
        """
        values: dict[str, Any] = {}
        if version_domain is not None:
            from ragsync.decisions import VERSION_DOMAINS

            if version_domain not in VERSION_DOMAINS:
                raise ValueError(f"version_domain must be one of {', '.join(VERSION_DOMAINS)}")
            values["version_domain"] = version_domain
        if options is not None:
            values["options"] = json.dumps(dict(options), sort_keys=True)
        if credentials_ref is not None:
            # Only the operator's tools set a reference here (the API stores a
            # tenant's in create_source): it may name any secret of the server.
            values["credentials_ref"] = credentials_ref or None
            values["credentials_by"] = "operator"
        check_sync_settings(sync, poll_interval_s)
        if sync is not None:
            values["sync"] = sync
        if poll_interval_s is not None:
            values["poll_interval_s"] = poll_interval_s
        if not values:
            return read_source(self._read_engine, source_id, tenant_id) is not None
        t = schema.sources
        with self._engine.begin() as conn:
            where = _source_where(t, source_id, tenant_id)
            return bool(conn.execute(update(t).where(where).values(**values)).rowcount)

    def save_cursor(self, source_id: str, cursor: str, *, tenant_id: str | None = None) -> None:
        """Persist where the next incremental sync starts (call only after the
        events read up to ``cursor`` are durably queued)."""
        t = schema.sources
        with self._engine.begin() as conn:
            conn.execute(update(t).where(_source_where(t, source_id, tenant_id)).values(cursor=cursor))

    def sync_started(self, source_id: str, *, at: float | None = None, tenant_id: str | None = None) -> None:
        t = schema.sources
        with self._engine.begin() as conn:
            where = _source_where(t, source_id, tenant_id)
            conn.execute(update(t).where(where).values(last_sync_at=at or _now()))

    def sync_succeeded(
        self, source_id: str, *, full: bool, listed: int | None = None, tenant_id: str | None = None
    ) -> None:
        """A sync ended well: the failure count and any rate-limit wait reset;
        a full listing records its time and size."""
        now = _now()
        values: dict[str, Any] = {"failures": 0, "retry_at": None, "last_success_at": now}
        if full:
            values.update(last_full_at=now, last_listed=listed)
        t = schema.sources
        with self._engine.begin() as conn:
            conn.execute(update(t).where(_source_where(t, source_id, tenant_id)).values(**values))

    def sync_failed(
        self,
        source_id: str,
        *,
        failures: int,
        pause_reason: str = "",
        retry_at: float | None = None,
        tenant_id: str | None = None,
    ) -> None:
        """A sync failed: record the count, a rate-limit wait, and pause the
        source when ``pause_reason`` is given."""
        values: dict[str, Any] = {"failures": failures, "retry_at": retry_at}
        if pause_reason:
            values.update(paused_at=_now(), pause_reason=pause_reason[:4000])
        t = schema.sources
        with self._engine.begin() as conn:
            conn.execute(update(t).where(_source_where(t, source_id, tenant_id)).values(**values))

    def pause_source(self, source_id: str, reason: str, *, tenant_id: str | None = None) -> bool:
        """Pause a source by hand. Returns False when there is no such source."""
        t = schema.sources
        with self._engine.begin() as conn:
            result = conn.execute(
                update(t)
                .where(_source_where(t, source_id, tenant_id))
                .values(paused_at=_now(), pause_reason=reason[:4000])
            )
        return bool(result.rowcount)

    def resume_source(self, source_id: str, tenant_id: str | None = None) -> bool:
        """Clear a pause, the failure count and any rate-limit wait.

        Returns:
            False when there is no such source (of that tenant).
        """
        t = schema.sources
        cond = _source_where(t, source_id, tenant_id)
        with self._engine.begin() as conn:
            result = conn.execute(
                update(t).where(cond).values(paused_at=None, pause_reason=None, failures=0, retry_at=None)
            )
        return bool(result.rowcount)

    # -- sync runs --------------------------------------------------------------------

    def request_sync(
        self,
        tenant_id: str,
        source_id: str,
        mode: str,
        *,
        origin: str = "api",
        max_pending: int | None = None,
    ) -> SyncRun | None:
        """Queue a sync of one of the tenant's sources; when one is already
        queued or running, that one is returned instead of a second.

        Returns:
            The run, or None when the source is not the tenant's.

        Raises:
            ValueError: ``mode`` is not incremental or full.
            LimitReachedError: a new run would exceed ``max_pending`` queued
                or running syncs of this tenant.
        """
        if mode not in SYNC_MODES:
            raise ValueError(f"mode must be one of {SYNC_MODES}, got {mode!r}")
        s, r = schema.sources, schema.sync_requests
        now = _now()
        with self._engine.begin() as conn:
            owned = conn.execute(
                select(s.c.source_id).where(s.c.source_id == source_id, s.c.tenant_id == tenant_id)
            ).first()
            if owned is None:
                return None
            pending = (
                conn.execute(
                    select(r)
                    .where(r.c.tenant_id == tenant_id, r.c.source_id == source_id, r.c.state.in_(_PENDING))
                    .order_by(r.c.requested_at)
                    .limit(1)
                )
                .mappings()
                .first()
            )
            if pending is not None:
                return _run_from_row(pending)
            if max_pending is not None:
                count = select(func.count()).where(r.c.tenant_id == tenant_id, r.c.state.in_(_PENDING))
                if int(conn.execute(count).scalar() or 0) >= max_pending:
                    raise LimitReachedError(
                        f"the tenant has {max_pending} syncs queued or running (its limit); "
                        "request again when one has finished"
                    )
            sync_id = new_id("sync")
            conn.execute(
                r.insert().values(
                    sync_id=sync_id,
                    tenant_id=tenant_id,
                    source_id=source_id,
                    mode=mode,
                    state="queued",
                    requested_at=now,
                    updated_at=now,
                    origin=origin,
                )
            )
        return SyncRun(sync_id, tenant_id, source_id, mode, "queued", now, origin=origin)

    def get_sync_run(self, sync_id: str, tenant_id: str | None = None) -> SyncRun | None:
        r = schema.sync_requests
        query = select(r).where(r.c.sync_id == sync_id)
        if tenant_id is not None:
            query = query.where(r.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _run_from_row(row) if row is not None else None

    def claim_sync_run(self, after_tenant: str | None = None, *, max_running: int = 1) -> SyncRun | None:
        """Take the next queued run (state ``running``), or None: round-robin
        by tenant (``ragsync.decisions.next_tenant``: the first tenant after
        ``after_tenant`` with a queued run and fewer than ``max_running``
        running), that tenant's oldest. One conditional update: two workers
        never take the same run."""
        r = schema.sync_requests
        while True:
            with self._read_engine.connect() as conn:
                counts = conn.execute(
                    select(r.c.tenant_id, r.c.state, func.count())
                    .where(r.c.state.in_(_PENDING))
                    .group_by(r.c.tenant_id, r.c.state)
                ).all()
            waiting = [t for t, state, _ in counts if state == "queued"]
            running = {t: int(n) for t, state, n in counts if state == "running"}
            tenant = next_tenant(waiting, running, after_tenant, max_running=max_running)
            if tenant is None:
                return None
            where = r.c.tenant_id == tenant
            found = self._claim_oldest(r, "sync_id", "queued", r.c.requested_at, where=where)
            if found is not None:
                return self.get_sync_run(found)

    def finish_sync_run(
        self, sync_id: str, *, succeeded: bool, counts: Mapping[str, Any] | None = None, error: str = ""
    ) -> None:
        """Record how a run ended."""
        r = schema.sync_requests
        now = _now()
        with self._engine.begin() as conn:
            conn.execute(
                update(r)
                .where(r.c.sync_id == sync_id)
                .values(
                    state="succeeded" if succeeded else "failed",
                    finished_at=now,
                    updated_at=now,
                    counts=json.dumps(dict(counts or {}), sort_keys=True, default=str),
                    error=error[:4000] or None,
                )
            )

    def fail_interrupted_sync_runs(self) -> int:
        """Runs left ``running`` by a worker that died: ``failed`` (a worker
        calls this when it starts, before claiming). Returns how many."""
        r = schema.sync_requests
        now = _now()
        with self._engine.begin() as conn:
            return int(
                conn.execute(
                    update(r)
                    .where(r.c.state == "running")
                    .values(
                        state="failed",
                        finished_at=now,
                        updated_at=now,
                        error="the worker stopped during the sync",
                    )
                ).rowcount
            )

    def pending_sync_sources(self) -> set[tuple[str, str]]:
        """``(tenant_id, source_id)`` of the sources with a run queued or running."""
        r = schema.sync_requests
        query = select(r.c.tenant_id, r.c.source_id).where(r.c.state.in_(_PENDING))
        with self._read_engine.connect() as conn:
            return {(str(t), str(s)) for t, s in conn.execute(query).all()}

    # -- listings compared without reading bytes --------------------------------

    def unread_states(self, doc_ids: Sequence[str]) -> dict[str, Any]:
        """``{doc_id: decisions.KnownObject}`` of the live rows among
        ``doc_ids`` (deleted and unknown ones are absent): what
        ``decisions.skip_unread`` compares a listing with. One query per
        batch of ids (chunk rows, a copy's holder and open dead letters
        joined in), never one per document.
        """
        from ragsync.decisions import KnownObject

        t, c, dl = schema.documents, schema.chunks, schema.dead_letters
        holder = t.alias("holder")
        rows_q = select(func.count()).where(c.c.doc_id == t.c.doc_id).scalar_subquery()
        open_q = (
            select(func.count())
            .where(dl.c.doc_id == t.c.doc_id, dl.c.resolved_at.is_(None))
            .scalar_subquery()
        )
        holder_live = and_(
            holder.c.deleted_at.is_(None),
            holder.c.status.in_(LIVE_STATUSES),
            holder.c.content_hash == t.c.content_hash,
        )
        cols: list[Any] = [
            t.c[n] for n in ("doc_id", "size", "source_version", "acl_id", "status", "error_class")
        ]
        cols += [
            t.c.parser_version,
            t.c.chunker_id,
            t.c.version_observed_at,
            t.c.chunk_count,
            t.c.indexed_version,
        ]
        cols += [rows_q.label("rows"), open_q.label("open"), case((holder_live, 1), else_=0).label("held")]
        out: dict[str, Any] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(sorted(set(doc_ids))):
                query = (
                    select(*cols)
                    .select_from(t.outerjoin(holder, holder.c.doc_id == t.c.canonical_doc_id))
                    .where(t.c.doc_id.in_(batch), t.c.deleted_at.is_(None))
                )
                for r in conn.execute(query).mappings():
                    out[str(r["doc_id"])] = KnownObject(
                        size=int(r["size"]),
                        source_version=r["source_version"],
                        acl_id=r["acl_id"],
                        status=str(r["status"]),
                        error_class=r["error_class"],
                        parser_version=r["parser_version"],
                        chunker_id=r["chunker_id"],
                        observed_at=r["version_observed_at"],
                        chunk_count=int(r["chunk_count"] or 0),
                        chunk_rows=int(r["rows"] or 0),
                        holder_live=bool(r["held"]),
                        open_dead_letter=bool(r["open"]),
                        indexed_version=r["indexed_version"],
                    )
        return out

    def note_same_bytes(
        self, doc_id: str, content_hash: str, source_version: str, *, size: int, observed_at: float | None
    ) -> bool:
        """A listing showed a new version (a touched file) of bytes the
        catalog already holds: record the version, size and listing time, so
        the next listing skips the object unread. Only a row still holding
        ``content_hash`` changes; a live ``indexed_version`` that was the old
        version becomes the new one (the same bytes are live); ``updated_at``
        is left alone (it orders the row against listings, and nothing was
        written). Returns True when the row changed."""
        t = schema.documents
        live = case((t.c.indexed_version == t.c.source_version, source_version), else_=t.c.indexed_version)
        stmt = (
            update(t)
            .where(t.c.doc_id == doc_id, t.c.content_hash == content_hash)
            .values(
                source_version=source_version,
                size=size,
                version_observed_at=observed_at,
                indexed_version=live,
            )
        )
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1
