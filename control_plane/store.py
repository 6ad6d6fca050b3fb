"""The control plane's rows in the catalog database, without the web app.

:class:`ControlStore` wraps the catalog engine (SQLite or PostgreSQL) and owns
the tables of migration 3 (``tenants``, ``api_keys``, ``sync_requests``,
``dead_letter_retries``) plus the control-plane columns of ``sources`` and
``backfills``. Every method runs in one short transaction.

Tenant scoping: every method that reads or changes a tenant's row takes the
tenant id and treats another tenant's row exactly like a missing one (returns
``None``/``False``), so the API can answer 404 without telling the two apart.
The backfill helpers are also called by the re-embedding worker, which has no
tenant; there ``tenant_id=None`` means "no tenant check".

API keys: ``rsk_<key_id>_<secret>`` where ``key_id`` is 16 random hex digits
(the public prefix, the primary key of ``api_keys``) and ``secret`` is
``secrets.token_urlsafe(32)``. Only ``HMAC-SHA256(pepper, key)`` is stored;
the pepper is per deployment (``$RAGSYNC_API_KEY_PEPPER``, else a built-in
constant) and must be the same for ``ragsync tenants create`` and
``ragsync serve``. Hashes are compared with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError

from ragsync import ids
from ragsync.catalog import schema
from ragsync.catalog.catalog import _SQLITE_BEGIN_OPTION, create_catalog_engine, normalize_url
from ragsync.catalog.migrations import migrate

SOURCE_TYPES = ("drive", "wiki", "tickets", "object_store")
SYNC_KINDS = ("webhook", "poll")
SYNC_MODES = ("incremental", "full")
BACKFILL_REASONS = ("embedding_model", "parser", "chunker")
BACKFILL_STATES = ("requested", "running", "paused", "done", "failed", "cancelled")

#: Tenant ids and names, source ids, index names: safe in URLs, logs and filters.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)
_KEY_RE = re.compile(r"^rsk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_DEFAULT_PEPPER = "ragsync-control-plane-pepper-v1"
# Characters the events table's payload JSON keeps verbatim, so a LIKE on the raw
# id pre-filters dead letters whose payload names it.
_LIKE_SAFE = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")


class ConflictError(ValueError):
    """The id is already taken (by this or another tenant; the message does not say which)."""


def _now() -> float:
    return time.time()


def default_pepper() -> str:
    """The API-key pepper: ``$RAGSYNC_API_KEY_PEPPER`` or the built-in constant."""
    return os.environ.get("RAGSYNC_API_KEY_PEPPER") or _DEFAULT_PEPPER


def hash_api_key(key: str, pepper: str) -> str:
    """Keyed hash of an API key (hex HMAC-SHA256 with the deployment's pepper)."""
    return hmac.new(pepper.encode("utf-8"), key.encode("utf-8"), hashlib.sha256).hexdigest()


def new_api_key() -> tuple[str, str]:
    """A fresh random API key.

    Returns:
        ``(key_id, key)``: the public prefix and the full key (shown once).
    """
    key_id = secrets.token_hex(8)
    return key_id, f"rsk_{key_id}_{secrets.token_urlsafe(32)}"


def api_key_id(key: str) -> str | None:
    """The public prefix of a well-formed key, or None for anything else."""
    match = _KEY_RE.match(key)
    return match.group(1) if match else None


def new_id(prefix: str) -> str:
    """A random id with a readable prefix, e.g. ``bf_1f0c...``."""
    return f"{prefix}_{secrets.token_hex(8)}"


def event_id_of_payload(payload: str) -> str | None:
    """The ``event_id`` a dead letter's payload names, when the payload is an event."""
    try:
        data = json.loads(payload) if payload else None
    except ValueError:
        return None
    value = data.get("event_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class TenantRow:
    """A tenant.

    Attributes:
        tenant_id: id used in every tenant-scoped row.
        name: unique display name.
        created_at: epoch seconds.
        active_keys: API keys not revoked.
    """

    tenant_id: str
    name: str
    created_at: float
    active_keys: int = 0


@dataclass(frozen=True)
class SourceRow:
    """A registered source, as the API may show it (never the credentials reference).

    Attributes:
        source_id: id, unique across tenants.
        tenant_id: owner.
        type: connector type.
        sync: ``webhook`` or ``poll`` (None for sources registered outside the API).
        poll_interval_s: seconds between polls (``poll`` only).
        credentials_ref_set: whether a credentials reference is stored.
        created_at: epoch seconds.
    """

    source_id: str
    tenant_id: str
    type: str
    sync: str | None
    poll_interval_s: int | None
    credentials_ref_set: bool
    created_at: float


@dataclass(frozen=True)
class SyncRequestRow:
    """A requested sync of one source.

    Attributes:
        sync_id: id.
        tenant_id: owner.
        source_id: the source to sync.
        mode: ``incremental`` or ``full``.
        state: ``requested`` until a scheduler takes it.
        requested_at: epoch seconds.
    """

    sync_id: str
    tenant_id: str
    source_id: str
    mode: str
    state: str
    requested_at: float


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


@dataclass(frozen=True)
class DeadLetterView:
    """A dead letter as the API lists it.

    Attributes:
        event_id: the event's id when the dead letter's payload is an event,
            else the dead letter's row id as text (backfill files).
        dead_letter_id: row id in ``dead_letters``.
        doc_id: affected document.
        source_id: source ('' when unknown).
        stage: failing stage.
        error: human-readable message.
        error_class: one of ``ragsync.errors.ERROR_CLASSES``.
        attempts: attempts made.
        created_at: epoch seconds.
    """

    event_id: str
    dead_letter_id: int
    doc_id: str
    source_id: str
    stage: str
    error: str
    error_class: str
    attempts: int
    created_at: float


@dataclass(frozen=True)
class DocStatus:
    """Where a document stands.

    Attributes:
        doc_id: internal (tenant-namespaced) document id.
        source_id: its source.
        source_object_id: the source's own id of the object.
        stage: ``documents.status`` (``fetched``, ``indexed``, ``dead_letter``,
            ...), or the queued event's state (``queued``) before the pipeline
            has written a row.
        source_version: latest source version seen.
        indexed_version: live ``content_hash@source_version``, else None.
        chunks: live chunk count.
        indexed_at: epoch seconds of the last index flip, else None.
        error_class: error class of the last failure, else None.
        error_message: the latest dead letter's message for the document, else None.
    """

    doc_id: str
    source_id: str
    source_object_id: str
    stage: str
    source_version: str | None
    indexed_version: str | None
    chunks: int
    indexed_at: float | None
    error_class: str | None
    error_message: str | None


def _backfill_from_row(row: Any) -> BackfillRow:
    return BackfillRow(
        backfill_id=row["backfill_id"],
        tenant_id=row["tenant_id"],
        reason=row["reason"],
        target_index=row["target_index"],
        state=row["state"],
        total=int(row["total"]),
        done=int(row["done"]),
        failed=int(row["failed"]),
        cursor=row["cursor"],
        max_docs_per_s=row["max_docs_per_s"],
        created_at=float(row["created_at"]),
        started_at=row["started_at"],
        updated_at=row["updated_at"],
    )


def _source_from_row(row: Any) -> SourceRow:
    return SourceRow(
        source_id=row["source_id"],
        tenant_id=row["tenant_id"],
        type=row["type"],
        sync=row["sync"],
        poll_interval_s=row["poll_interval_s"],
        credentials_ref_set=bool(row["credentials_ref"]),
        created_at=float(row["created_at"]),
    )


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


# -------------------------------------------------------------------------- store


class ControlStore:
    """Typed access to the control plane's rows.

    Build from an engine whose schema is migrated (``ControlStore(catalog.engine)``)
    or with :meth:`open`. Methods raise ``sqlalchemy.exc.SQLAlchemyError`` when the
    database fails; a failed write has changed nothing.
    """

    def __init__(self, engine: Engine, *, pepper: str | None = None) -> None:
        """Wrap a migrated catalog engine.

        Args:
            engine: from :func:`ragsync.catalog.create_catalog_engine` (or ``Catalog.engine``).
            pepper: API-key pepper; default :func:`default_pepper`.
        """
        self._engine = engine
        self._pepper = default_pepper() if pepper is None else pepper
        # SQLite: reads begin DEFERRED so they never queue behind a writer.
        self._read_engine = engine.execution_options(**{_SQLITE_BEGIN_OPTION: "DEFERRED"})
        self._dummy_hash = hash_api_key("rsk_" + "0" * 16 + "_" + "0" * 43, self._pepper)

    @classmethod
    def open(cls, url: str, *, pepper: str | None = None) -> ControlStore:
        """Connect to a catalog database, apply missing migrations and wrap it.

        Args:
            url: catalog URL or SQLite path.
            pepper: API-key pepper; default :func:`default_pepper`.

        Returns:
            The store; call :meth:`close` when done.
        """
        engine = create_catalog_engine(normalize_url(url))
        try:
            migrate(engine)
        except Exception:
            engine.dispose()
            raise
        return cls(engine, pepper=pepper)

    def close(self) -> None:
        """Dispose of the engine's pooled connections (only for stores made by :meth:`open`)."""
        self._engine.dispose()

    # -- tenants and API keys ---------------------------------------------------

    def create_tenant(self, name: str, *, tenant_id: str | None = None) -> tuple[TenantRow, str]:
        """Create a tenant and its first API key.

        Args:
            name: unique name (``ID_PATTERN``).
            tenant_id: id (``ID_PATTERN``); default ``name``, so the tenant owns
                what ``ragsync backfill --tenant NAME`` indexed.

        Returns:
            ``(tenant, api_key)``; the key is not stored and cannot be shown again.

        Raises:
            ValueError: name or id does not match ``ID_PATTERN``.
            ConflictError: the name or id is taken.
        """
        tenant_id = name if tenant_id is None else tenant_id
        for label, value in (("name", name), ("tenant_id", tenant_id)):
            if not _ID_RE.match(value):
                raise ValueError(f"{label} {value!r} must match {ID_PATTERN}")
        now = _now()
        key_id, key = new_api_key()
        try:
            with self._engine.begin() as conn:
                conn.execute(schema.tenants.insert().values(tenant_id=tenant_id, name=name, created_at=now))
                conn.execute(
                    schema.api_keys.insert().values(
                        key_id=key_id,
                        tenant_id=tenant_id,
                        key_hash=hash_api_key(key, self._pepper),
                        created_at=now,
                    )
                )
        except IntegrityError as exc:
            raise ConflictError(f"a tenant named {name!r} or with id {tenant_id!r} exists") from exc
        return TenantRow(tenant_id=tenant_id, name=name, created_at=now, active_keys=1), key

    def list_tenants(self) -> list[TenantRow]:
        """Every tenant with its number of active keys, by name."""
        t, k = schema.tenants, schema.api_keys
        active = (
            select(k.c.tenant_id, func.count().label("n"))
            .where(k.c.revoked_at.is_(None))
            .group_by(k.c.tenant_id)
            .subquery()
        )
        query = (
            select(t.c.tenant_id, t.c.name, t.c.created_at, active.c.n)
            .outerjoin(active, active.c.tenant_id == t.c.tenant_id)
            .order_by(t.c.name)
        )
        with self._read_engine.connect() as conn:
            return [
                TenantRow(tenant_id=tid, name=name, created_at=float(created), active_keys=int(n or 0))
                for tid, name, created, n in conn.execute(query).all()
            ]

    def create_api_key(self, tenant_id: str) -> tuple[str, str]:
        """Issue another key for a tenant (for rotation).

        Returns:
            ``(key_id, key)``.

        Raises:
            LookupError: the tenant does not exist.
        """
        key_id, key = new_api_key()
        with self._engine.begin() as conn:
            exists = conn.execute(
                select(schema.tenants.c.tenant_id).where(schema.tenants.c.tenant_id == tenant_id)
            ).first()
            if exists is None:
                raise LookupError(f"no tenant {tenant_id!r}")
            conn.execute(
                schema.api_keys.insert().values(
                    key_id=key_id,
                    tenant_id=tenant_id,
                    key_hash=hash_api_key(key, self._pepper),
                    created_at=_now(),
                )
            )
        return key_id, key

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key by its public prefix. Returns True if an active key was revoked."""
        k = schema.api_keys
        with self._engine.begin() as conn:
            stmt = update(k).where(k.c.key_id == key_id, k.c.revoked_at.is_(None)).values(revoked_at=_now())
            return conn.execute(stmt).rowcount == 1

    def authenticate(self, key: str) -> str | None:
        """The tenant an API key belongs to.

        Args:
            key: the presented key.

        Returns:
            The tenant id, or None for a malformed, unknown or revoked key. The
            hash comparison is constant-time; an unknown prefix still costs one
            hash and one comparison.
        """
        key_id = api_key_id(key)
        if key_id is None:
            return None
        k = schema.api_keys
        with self._read_engine.connect() as conn:
            row = conn.execute(
                select(k.c.tenant_id, k.c.key_hash, k.c.revoked_at).where(k.c.key_id == key_id)
            ).first()
        presented = hash_api_key(key, self._pepper)
        if row is None:
            hmac.compare_digest(presented, self._dummy_hash)
            return None
        tenant_id, stored, revoked_at = row
        if not hmac.compare_digest(presented, str(stored)) or revoked_at is not None:
            return None
        return str(tenant_id)

    # -- sources ---------------------------------------------------------------

    def create_source(
        self,
        tenant_id: str,
        *,
        source_id: str,
        type: str,
        credentials_ref: str,
        sync: str,
        poll_interval_s: int | None,
    ) -> SourceRow:
        """Register a source for a tenant.

        Args:
            tenant_id: owner.
            source_id: id, unique across tenants (``ID_PATTERN``).
            type: one of :data:`SOURCE_TYPES`.
            credentials_ref: a reference to the secret (``secretmanager://...``),
                stored as given and never returned.
            sync: one of :data:`SYNC_KINDS`.
            poll_interval_s: seconds between polls when ``sync == "poll"``.

        Returns:
            The new source.

        Raises:
            ValueError: an argument is out of its domain.
            ConflictError: the id is taken (by any tenant).
        """
        if type not in SOURCE_TYPES or sync not in SYNC_KINDS or not _ID_RE.match(source_id):
            raise ValueError(f"invalid source definition: {source_id!r} {type!r} {sync!r}")
        now = _now()
        row = {
            "source_id": source_id,
            "tenant_id": tenant_id,
            "type": type,
            "uri": "",
            "credentials_ref": credentials_ref,
            "created_at": now,
            "sync": sync,
            "poll_interval_s": poll_interval_s,
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(schema.sources.insert().values(**row))
        except IntegrityError as exc:
            raise ConflictError(f"source_id {source_id!r} is already taken") from exc
        return _source_from_row(row)

    def get_source(self, tenant_id: str, source_id: str) -> SourceRow | None:
        """The tenant's source, or None when unknown or another tenant's."""
        t = schema.sources
        with self._read_engine.connect() as conn:
            row = (
                conn.execute(select(t).where(t.c.source_id == source_id, t.c.tenant_id == tenant_id))
                .mappings()
                .first()
            )
        return None if row is None else _source_from_row(row)

    def owned_source_ids(self, tenant_id: str, source_ids: Iterable[str]) -> set[str]:
        """The subset of ``source_ids`` that are the tenant's sources."""
        wanted = sorted(set(source_ids))
        if not wanted:
            return set()
        t = schema.sources
        found: set[str] = set()
        with self._read_engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
                query = select(t.c.source_id).where(t.c.tenant_id == tenant_id, t.c.source_id.in_(batch))
                found.update(conn.execute(query).scalars())
        return found

    # -- sync requests ---------------------------------------------------------

    def create_sync_request(self, tenant_id: str, source_id: str, mode: str) -> SyncRequestRow | None:
        """Record a request to sync a source.

        Returns:
            The request (state ``requested``), or None when the source is not the tenant's.

        Raises:
            ValueError: ``mode`` is not one of :data:`SYNC_MODES`.
        """
        if mode not in SYNC_MODES:
            raise ValueError(f"mode must be one of {SYNC_MODES}, got {mode!r}")
        s = schema.sources
        now = _now()
        req = SyncRequestRow(
            sync_id=new_id("sync"),
            tenant_id=tenant_id,
            source_id=source_id,
            mode=mode,
            state="requested",
            requested_at=now,
        )
        with self._engine.begin() as conn:
            owned = conn.execute(
                select(s.c.source_id).where(s.c.source_id == source_id, s.c.tenant_id == tenant_id)
            ).first()
            if owned is None:
                return None
            conn.execute(
                schema.sync_requests.insert().values(
                    sync_id=req.sync_id,
                    tenant_id=tenant_id,
                    source_id=source_id,
                    mode=mode,
                    state=req.state,
                    requested_at=now,
                    updated_at=now,
                )
            )
        return req

    def pending_sync_requests(self, *, limit: int = 100) -> list[SyncRequestRow]:
        """Sync requests still ``requested``, oldest first (for a scheduler)."""
        t = schema.sync_requests
        query = select(t).where(t.c.state == "requested").order_by(t.c.requested_at).limit(limit)
        with self._read_engine.connect() as conn:
            return [
                SyncRequestRow(
                    sync_id=r["sync_id"],
                    tenant_id=r["tenant_id"],
                    source_id=r["source_id"],
                    mode=r["mode"],
                    state=r["state"],
                    requested_at=float(r["requested_at"]),
                )
                for r in conn.execute(query).mappings()
            ]

    # -- backfills -------------------------------------------------------------

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
        if not _ID_RE.match(target_index):
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
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(schema.backfills.insert().values(**row))
        except IntegrityError as exc:
            raise ConflictError(f"backfill {row['backfill_id']!r} exists") from exc
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
        t = schema.backfills
        query = select(t).where(t.c.backfill_id == backfill_id)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
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

    def update_backfill_progress(
        self,
        backfill_id: str,
        *,
        total: int | None = None,
        done: int | None = None,
        failed: int | None = None,
        state: str | None = None,
        cursor: str | None = None,
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
        }
        values.update({k: v for k, v in given.items() if v is not None})
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

    # -- documents ---------------------------------------------------------------

    def document_status(
        self, tenant_id: str, doc_id: str, *, source_id: str | None = None
    ) -> DocStatus | None:
        """Where one of the tenant's documents stands.

        Args:
            tenant_id: caller's tenant.
            doc_id: with ``source_id``, the source's object id; without, the
                internal document id.
            source_id: the tenant's source, or None.

        Returns:
            The status; None when the source or document is unknown or
            another tenant's. A document not yet written by the pipeline but
            with a queued event gets stage ``queued`` (or the event's state).
        """
        d, e, dl = schema.documents, schema.events, schema.dead_letters
        with self._read_engine.connect() as conn:
            if source_id is not None:
                owned = conn.execute(
                    select(schema.sources.c.source_id).where(
                        schema.sources.c.source_id == source_id, schema.sources.c.tenant_id == tenant_id
                    )
                ).first()
                if owned is None:
                    return None
                internal = ids.doc_id(tenant_id, source_id, doc_id)
            else:
                internal = doc_id
            row = (
                conn.execute(select(d).where(d.c.doc_id == internal, d.c.tenant_id == tenant_id))
                .mappings()
                .first()
            )
            if row is None:
                if source_id is None:
                    return None
                event = (
                    conn.execute(
                        select(e.c.state, e.c.source_version)
                        .where(e.c.source_id == source_id, e.c.doc_id == doc_id)
                        .order_by(e.c.enqueued_at.desc(), e.c.event_id.desc())
                        .limit(1)
                    )
                    .mappings()
                    .first()
                )
                if event is None:
                    return None
                return DocStatus(
                    doc_id=internal,
                    source_id=source_id,
                    source_object_id=doc_id,
                    stage="queued" if event["state"] == "pending" else str(event["state"]),
                    source_version=event["source_version"],
                    indexed_version=None,
                    chunks=0,
                    indexed_at=None,
                    error_class=None,
                    error_message=None,
                )
            message = None
            if row["error_class"]:
                message = conn.execute(
                    select(dl.c.message)
                    .where(dl.c.doc_id == internal, dl.c.tenant_id == tenant_id)
                    .order_by(dl.c.id.desc())
                    .limit(1)
                ).scalar()
        return DocStatus(
            doc_id=internal,
            source_id=row["source_id"],
            source_object_id=row["source_object_id"],
            stage=row["status"],
            source_version=row["source_version"],
            indexed_version=row["indexed_version"],
            chunks=int(row["chunk_count"]),
            indexed_at=row["indexed_at"],
            error_class=row["error_class"],
            error_message=message,
        )

    # -- events ------------------------------------------------------------------

    def event_sources(self, event_ids: Iterable[str]) -> dict[str, str]:
        """``{event_id: source_id}`` for the ids already in the event queue."""
        wanted = sorted(set(event_ids))
        t = schema.events
        out: dict[str, str] = {}
        with self._read_engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
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

    # -- dead letters ------------------------------------------------------------

    def list_dead_letters(
        self, tenant_id: str, *, source_id: str | None = None, limit: int = 100
    ) -> list[DeadLetterView]:
        """The tenant's open dead letters, oldest first.

        Args:
            tenant_id: caller's tenant (``dead_letters.tenant_id``).
            source_id: only this source's, when given.
            limit: maximum number of rows.

        Returns:
            The dead letters; ``event_id`` is the payload's event id for
            event-backed ones, else the row id as text.
        """
        t = schema.dead_letters
        query = (
            select(t)
            .where(t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None))
            .order_by(t.c.id)
            .limit(limit)
        )
        if source_id is not None:
            query = query.where(t.c.source_id == source_id)
        with self._read_engine.connect() as conn:
            rows = list(conn.execute(query).mappings())
        return [
            DeadLetterView(
                event_id=event_id_of_payload(r["payload"]) or str(r["id"]),
                dead_letter_id=int(r["id"]),
                doc_id=r["doc_id"],
                source_id=r["source_id"],
                stage=r["stage"],
                error=r["message"],
                error_class=r["error_class"],
                attempts=int(r["attempts"]),
                created_at=float(r["created_at"]),
            )
            for r in rows
        ]

    def open_dead_letters_for_event(self, tenant_id: str, event_id: str) -> list[tuple[int, str]]:
        """The tenant's open dead letters whose payload is the event ``event_id``.

        Returns:
            ``[(dead letter id, payload)]``, oldest first.
        """
        t = schema.dead_letters
        query = select(t.c.id, t.c.payload).where(t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None))
        if _LIKE_SAFE.match(event_id):
            query = query.where(t.c.payload.contains(event_id, autoescape=True))
        out: list[tuple[int, str]] = []
        with self._read_engine.connect() as conn:
            for dl_id, payload in conn.execute(query.order_by(t.c.id)).all():
                if event_id_of_payload(payload) == event_id:
                    out.append((int(dl_id), payload))
        return out

    def open_file_dead_letter(self, tenant_id: str, dead_letter_id: int) -> bool:
        """Whether an open dead letter with this row id is the tenant's and not event-backed."""
        t = schema.dead_letters
        with self._read_engine.connect() as conn:
            payload = conn.execute(
                select(t.c.payload).where(
                    t.c.id == dead_letter_id, t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None)
                )
            ).first()
        return payload is not None and event_id_of_payload(payload[0]) is None

    def resolve_dead_letters(self, tenant_id: str, dead_letter_ids: Iterable[int]) -> int:
        """Mark the tenant's open dead letters resolved. Returns how many changed."""
        wanted = sorted(set(dead_letter_ids))
        if not wanted:
            return 0
        t = schema.dead_letters
        with self._engine.begin() as conn:
            return int(
                conn.execute(
                    update(t)
                    .where(t.c.id.in_(wanted), t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None))
                    .values(resolved_at=_now())
                ).rowcount
            )

    def record_retry(
        self, tenant_id: str, *, kind: str, state: str, event_id: str | None, dead_letter_id: int | None
    ) -> str:
        """Record a dead-letter retry request.

        Args:
            tenant_id: caller's tenant.
            kind: ``event`` (requeued in the event queue) or ``file`` (a backfill
                file; a backfill run picks ``requested`` rows up).
            state: ``requeued`` or ``requested``.
            event_id: the event id, for ``event``.
            dead_letter_id: the dead letter row, when there is one.

        Returns:
            The retry id.
        """
        retry_id = new_id("retry")
        with self._engine.begin() as conn:
            conn.execute(
                schema.dead_letter_retries.insert().values(
                    retry_id=retry_id,
                    tenant_id=tenant_id,
                    dead_letter_id=dead_letter_id,
                    event_id=event_id,
                    kind=kind,
                    state=state,
                    requested_at=_now(),
                )
            )
        return retry_id
