"""Tenants, API keys, sources and backfills (a source's sync state and its
sync runs are in :mod:`ragsync.catalog.syncs`).

Rows: :class:`TenantRow`, :class:`SourceRow`, :class:`BackfillRow`.
Tables: ``tenants``, ``api_keys``, ``sources``, ``backfills``.

Tenant scoping: every method that reads or changes a tenant's row takes the
tenant id and treats another tenant's row exactly like a missing one (returns
``None``/``False``), so the API can answer 404 without telling the two apart.
Where ``tenant_id`` is optional (``get_source``, ``get_backfill``), None means
"no tenant check" (pipeline steps and the re-embedding worker have no tenant).

API keys are stored as a keyed hash only (``control_plane.keys`` makes and
checks them); ``key_id`` is the key's public prefix and the primary key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from ragsync.catalog import schema
from ragsync.catalog.base import ConflictError, Repository, _batches, _now, new_id, row_to
from ragsync.errors import AmbiguousSourceError
from ragsync.source_types import SOURCE_TYPES, SYNC_KINDS

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

#: Tenant ids and names, source ids, index names: safe in URLs, logs and filters.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)


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
class ApiKeyRow:
    """One row of ``api_keys`` (the hash only; the key is never stored).

    Attributes:
        key_id: the key's public prefix.
        tenant_id: owner.
        key_hash: keyed hash of the whole key (``control_plane.keys.hash_api_key``).
        revoked_at: epoch seconds of revocation, None while active.
    """

    key_id: str
    tenant_id: str
    key_hash: str
    revoked_at: float | None


@dataclass(frozen=True)
class SourceRow:
    """One row of ``sources``, without the credentials reference (never read back).

    Attributes:
        source_id: id, unique across tenants.
        tenant_id: owner.
        type: connector type.
        sync: ``webhook`` or ``poll`` (None for sources registered outside the API).
        poll_interval_s: seconds between polls (``poll`` only).
        credentials_ref_set: whether a credentials reference is stored.
        created_at: epoch seconds.
        uri: root of the source ('' when registered through the API).
    """

    source_id: str
    tenant_id: str
    type: str
    sync: str | None
    poll_interval_s: int | None
    credentials_ref_set: bool
    created_at: float
    uri: str = ""


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


def _backfill_from_row(row: Any) -> BackfillRow:
    return row_to(BackfillRow, row)


def _source_from_row(row: Any) -> SourceRow:
    return row_to(SourceRow, row, credentials_ref_set=bool(row["credentials_ref"]), uri=row["uri"] or "")


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


# --------------------------------------------------------------------- repository


class SourcesRepository(Repository):
    """Tenants, API keys, sources and backfills."""

    # -- tenants and API keys ---------------------------------------------------

    def create_tenant(self, name: str, *, tenant_id: str, key_id: str, key_hash: str) -> TenantRow:
        """Create a tenant and its first API key (stored as its hash), in one transaction.

        Args:
            name: unique name (``ID_PATTERN``).
            tenant_id: id (``ID_PATTERN``).
            key_id: the first key's public prefix.
            key_hash: the first key's keyed hash.

        Returns:
            The tenant, with one active key.

        Raises:
            ValueError: name or id does not match ``ID_PATTERN``.
            ConflictError: the name or id is taken (nothing is written).
        """
        for label, value in (("name", name), ("tenant_id", tenant_id)):
            if not _ID_RE.match(value):
                raise ValueError(f"{label} {value!r} must match {ID_PATTERN}")
        now = _now()
        try:
            with self._engine.begin() as conn:
                conn.execute(schema.tenants.insert().values(tenant_id=tenant_id, name=name, created_at=now))
                conn.execute(
                    schema.api_keys.insert().values(
                        key_id=key_id, tenant_id=tenant_id, key_hash=key_hash, created_at=now
                    )
                )
        except IntegrityError as exc:
            raise ConflictError(f"a tenant named {name!r} or with id {tenant_id!r} exists") from exc
        return TenantRow(tenant_id=tenant_id, name=name, created_at=now, active_keys=1)

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

    def add_api_key(self, tenant_id: str, key_id: str, key_hash: str) -> None:
        """Store another key (its hash) for a tenant, for rotation.

        Raises:
            LookupError: the tenant does not exist (nothing is written).
        """
        with self._engine.begin() as conn:
            exists = conn.execute(
                select(schema.tenants.c.tenant_id).where(schema.tenants.c.tenant_id == tenant_id)
            ).first()
            if exists is None:
                raise LookupError(f"no tenant {tenant_id!r}")
            conn.execute(
                schema.api_keys.insert().values(
                    key_id=key_id, tenant_id=tenant_id, key_hash=key_hash, created_at=_now()
                )
            )

    def get_api_key(self, key_id: str) -> ApiKeyRow | None:
        """The stored key with this public prefix (revoked ones included), or None."""
        k = schema.api_keys
        with self._read_engine.connect() as conn:
            row = conn.execute(
                select(k.c.key_id, k.c.tenant_id, k.c.key_hash, k.c.revoked_at).where(k.c.key_id == key_id)
            ).first()
        return None if row is None else ApiKeyRow(str(row[0]), str(row[1]), str(row[2]), row[3])

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key by its public prefix. Returns True if an active key was revoked."""
        k = schema.api_keys
        with self._engine.begin() as conn:
            stmt = update(k).where(k.c.key_id == key_id, k.c.revoked_at.is_(None)).values(revoked_at=_now())
            return conn.execute(stmt).rowcount == 1

    # -- sources ---------------------------------------------------------------

    def ensure_source(self, source_id: str, tenant_id: str, type: str, uri: str = "") -> None:
        """Register a tenant's source, or update its type and location
        (operator tools: ``ragsync sources add``, a backfill's folder).

        Args:
            source_id: id of the source (unique within the tenant).
            tenant_id: owner tenant.
            type: connector type (``drive``, ``wiki``, ``object_store``, ...).
            uri: the source's location ('' keeps the stored one).
        """
        t = schema.sources
        with self._engine.begin() as conn:
            row = {
                "source_id": source_id,
                "tenant_id": tenant_id,
                "type": type,
                "uri": uri,
                "created_at": _now(),
            }
            self._upsert(conn, t, [row], ["tenant_id", "source_id"], ["type"])
            if uri:
                conn.execute(
                    update(t).where(t.c.tenant_id == tenant_id, t.c.source_id == source_id).values(uri=uri)
                )

    def create_source(
        self,
        tenant_id: str,
        *,
        source_id: str,
        type: str,
        credentials_ref: str | None,
        sync: str,
        poll_interval_s: int | None,
        uri: str = "",
    ) -> SourceRow:
        """Register a source for a tenant.

        Args:
            tenant_id: owner.
            source_id: id, unique within the tenant (``ID_PATTERN``).
            type: one of :data:`SOURCE_TYPES`.
            credentials_ref: a reference to the secret (``secretmanager://...``),
                stored as given and never returned; None for a public source.
            sync: one of :data:`SYNC_KINDS`.
            poll_interval_s: seconds between polls when ``sync == "poll"``.
            uri: the source's location, already checked by the caller
                (``connectors.location.source_location``).

        Returns:
            The new source.

        Raises:
            ValueError: an argument is out of its domain.
            ConflictError: the tenant already has a source with this id
                (another tenant's ids are neither seen nor in the way).
        """
        if type not in SOURCE_TYPES or sync not in SYNC_KINDS or not _ID_RE.match(source_id):
            raise ValueError(f"invalid source definition: {source_id!r} {type!r} {sync!r}")
        now = _now()
        row = {
            "source_id": source_id,
            "tenant_id": tenant_id,
            "type": type,
            "uri": uri,
            "credentials_ref": credentials_ref,
            "credentials_by": "tenant",
            "created_at": now,
            "sync": sync,
            "poll_interval_s": poll_interval_s,
        }
        self._insert_new(schema.sources, row, f"source_id {source_id!r} is already taken")
        return _source_from_row(row)

    def get_source(self, source_id: str, *, tenant_id: str | None = None) -> SourceRow | None:
        """A registered source.

        Args:
            source_id: the source.
            tenant_id: its tenant; None (operator tools) accepts any tenant
                when only one has a source of that id.

        Returns:
            The row, or None when unknown (or another tenant's).

        Raises:
            AmbiguousSourceError: no tenant given and several tenants have
                a source of that id.
        """
        t = schema.sources
        query = select(t).where(t.c.source_id == source_id)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            rows = conn.execute(query.limit(2)).mappings().all()
        if len(rows) > 1:
            raise AmbiguousSourceError(source_id)
        return _source_from_row(rows[0]) if rows else None

    def count_sources(self, tenant_id: str) -> int:
        """How many sources the tenant has."""
        t = schema.sources
        with self._read_engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(t.c.tenant_id == tenant_id)).scalar() or 0)

    def source_ids(self) -> list[str]:
        """Every registered source id, sorted (ids are unique per tenant only)."""
        t = schema.sources
        with self._read_engine.connect() as conn:
            return sorted(set(conn.execute(select(t.c.source_id)).scalars()))

    def owned_source_ids(self, tenant_id: str, source_ids: Iterable[str]) -> set[str]:
        """The subset of ``source_ids`` that are the tenant's sources."""
        wanted = sorted(set(source_ids))
        if not wanted:
            return set()
        t = schema.sources
        found: set[str] = set()
        with self._read_engine.connect() as conn:
            for batch in _batches(wanted):
                query = select(t.c.source_id).where(t.c.tenant_id == tenant_id, t.c.source_id.in_(batch))
                found.update(conn.execute(query).scalars())
        return found

    def tenant_ids(self) -> list[str]:
        """Every tenant that owns a source or a document."""
        with self._read_engine.connect() as conn:
            a = {r for (r,) in conn.execute(select(schema.sources.c.tenant_id).distinct()).all()}
            b = {r for (r,) in conn.execute(select(schema.documents.c.tenant_id).distinct()).all()}
        return sorted(x for x in a | b if x)

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
