"""Sources: what a tenant registered (type, location, how it syncs, the
credentials reference). A source's sync state and its sync runs are in
:mod:`ragsync.catalog.syncs`; tenants and API keys in
:mod:`ragsync.catalog.tenants`; backfills in :mod:`ragsync.catalog.backfills`.

Row: :class:`SourceRow`. Table: ``sources``.

Tenant scoping: every method that reads or changes a tenant's row takes the
tenant id and treats another tenant's row exactly like a missing one (returns
``None``/``False``), so the API can answer 404 without telling the two apart.
Where ``tenant_id`` is optional (``get_source``), None means "no tenant
check" (pipeline steps have no tenant).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import ID_RE, Repository, _batches, _now, row_to
from ragsync.errors import AmbiguousSourceError
from ragsync.source_types import SOURCE_TYPES, SYNC_KINDS

# --------------------------------------------------------------------------- rows


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


def _source_from_row(row: Any) -> SourceRow:
    return row_to(SourceRow, row, credentials_ref_set=bool(row["credentials_ref"]), uri=row["uri"] or "")


# --------------------------------------------------------------------- repository


class SourcesRepository(Repository):
    """Sources."""

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
        if type not in SOURCE_TYPES or sync not in SYNC_KINDS or not ID_RE.match(source_id):
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
