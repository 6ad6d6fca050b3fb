"""Sources: what a tenant registered (type, location, how it syncs, the
credentials reference). A source's sync state is read and written, and its
sync runs kept, by :mod:`ragsync.catalog.syncs`; tenants and API keys in
:mod:`ragsync.catalog.tenants`; backfills in :mod:`ragsync.catalog.backfills`.

Row: :class:`SourceState` (the one row type of a source, definition and
sync bookkeeping; ``SourceState.spec()`` gives the connector's
``ragsync.source_types.SourceSpec``). Table: ``sources``.

Tenant scoping: every method that reads or changes a tenant's row takes the
tenant id and treats another tenant's row exactly like a missing one (returns
``None``/``False``), so the API can answer 404 without telling the two apart.
Where ``tenant_id`` is optional (``get_source``), None means "no tenant
check" (pipeline steps have no tenant).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import Engine, func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import ID_RE, Repository, _batches, _json_object, _now
from ragsync.errors import AmbiguousSourceError
from ragsync.source_types import SYNC_KINDS, SourceSpec, source_types

# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class SourceState:
    """One ``sources`` row: what was registered and its sync bookkeeping. The
    one row type of a source: ``get_source`` and ``source_states`` return
    it; :meth:`spec` is the connector's view of it and
    :meth:`public` the view the API and the CLI show.

    Attributes:
        source_id: id.
        tenant_id: owner.
        type: connector type.
        uri: the source's location ('' when none was declared).
        credentials_ref: reference to a secret ('' for public sources; never
            shown by the API: see :attr:`credentials_ref_set`).
        credentials_by: who stored the reference (``operator`` or ``tenant``;
            ``connectors.credentials``).
        options: connector options.
        sync: ``poll``, ``webhook`` or None (syncs only on request).
        poll_interval_s: seconds between polls.
        cursor: where the next incremental sync starts (None before the first).
        paused: True while paused (syncs refused until resumed).
        pause_reason: why it was paused.
        failures: syncs failed in a row.
        retry_at: no sync before this time (a rate limit), or None.
        last_sync_at: when the last sync started.
        last_success_at: when a sync last succeeded.
        last_full_at: when a full listing last succeeded.
        last_listed: objects in that listing.
        version_domain: how its versions compare (``revision``, ``timestamp``,
            ``etag``; '' when undeclared).
        created_at: when it was registered (epoch seconds; 0.0 for a state
            not read from the catalog).
    """

    source_id: str
    tenant_id: str
    type: str
    uri: str = ""
    credentials_ref: str = ""
    credentials_by: str = "tenant"
    options: dict[str, Any] = field(default_factory=dict)
    sync: str | None = None
    poll_interval_s: int | None = None
    cursor: str | None = None
    paused: bool = False
    pause_reason: str = ""
    failures: int = 0
    retry_at: float | None = None
    last_sync_at: float | None = None
    last_success_at: float | None = None
    last_full_at: float | None = None
    last_listed: int | None = None
    version_domain: str = ""
    created_at: float = 0.0

    @property
    def credentials_ref_set(self) -> bool:
        """Whether a credentials reference is stored (what the API shows of it)."""
        return bool(self.credentials_ref)

    def public(self) -> dict[str, Any]:
        """Every field but the credentials reference, plus ``credentials_ref_set``."""
        out = {k: v for k, v in self.__dict__.items() if k != "credentials_ref"}
        out["credentials_ref_set"] = self.credentials_ref_set
        return out

    def spec(self) -> SourceSpec:
        """The source as its connector needs it (no bookkeeping).

        A reference whose owner is not recorded counts as a tenant's (fail
        closed: ``connectors.credentials``).
        """
        shared = {f.name: getattr(self, f.name) for f in fields(SourceSpec)}
        return SourceSpec(**{**shared, "credentials_by": self.credentials_by or "tenant"})


def _state_from_row(row: Mapping[Any, Any]) -> SourceState:
    return SourceState(
        source_id=row["source_id"],
        tenant_id=row["tenant_id"],
        type=row["type"],
        uri=row["uri"] or "",
        credentials_ref=row["credentials_ref"] or "",
        credentials_by=row["credentials_by"] or "tenant",
        options=_json_object(row["options"]),
        sync=row["sync"],
        poll_interval_s=row["poll_interval_s"],
        cursor=row["cursor"],
        paused=row["paused_at"] is not None,
        pause_reason=row["pause_reason"] or "",
        failures=int(row["failures"] or 0),
        retry_at=row["retry_at"],
        last_sync_at=row["last_sync_at"],
        last_success_at=row["last_success_at"],
        last_full_at=row["last_full_at"],
        last_listed=row["last_listed"],
        version_domain=row.get("version_domain") or "",
        created_at=float(row["created_at"]),
    )


def read_source(engine: Engine, source_id: str, tenant_id: str | None) -> SourceState | None:
    """The one read of a source by id (``get_source``; ``configure_source``
    checks with it that the source exists).

    Args:
        engine: the catalog's (read) engine.
        source_id: the source.
        tenant_id: its tenant; None accepts any tenant when only one has a
            source of that id.

    Returns:
        The source, or None when unknown (or another tenant's).

    Raises:
        AmbiguousSourceError: no tenant given and several tenants have a
            source of that id.
    """
    t = schema.sources
    query = select(t).where(t.c.source_id == source_id)
    if tenant_id is not None:
        query = query.where(t.c.tenant_id == tenant_id)
    with engine.connect() as conn:
        rows = conn.execute(query.limit(2)).mappings().all()
    if len(rows) > 1:
        raise AmbiguousSourceError(source_id)
    return _state_from_row(rows[0]) if rows else None


def check_source_definition(
    source_id: str, type: str, sync: str | None = None, poll_interval_s: int | None = None
) -> None:
    """The one validation of a source's definition, whoever registers it.

    Raises:
        ValueError: the id is not ``ID_PATTERN``, the type not one of
            ``ragsync.source_types.source_types()`` (read now: plug-ins'
            types included), ``sync`` not one of :data:`SYNC_KINDS` (None
            allowed), or the poll interval is not positive.
    """
    if not ID_RE.match(source_id):
        raise ValueError(f"source id {source_id!r} must match {ID_RE.pattern}")
    known = source_types()
    if type not in known:
        raise ValueError(f"source type {type!r} must be one of {', '.join(known)}")
    check_sync_settings(sync, poll_interval_s)


def check_sync_settings(sync: str | None, poll_interval_s: int | None) -> None:
    """How a source syncs: ``sync`` one of :data:`SYNC_KINDS` (None: unset),
    a positive poll interval (None: unset).

    Raises:
        ValueError: naming the value out of its domain.
    """
    if sync is not None and sync not in SYNC_KINDS:
        raise ValueError(f"sync must be one of {', '.join(SYNC_KINDS)}, got {sync!r}")
    if poll_interval_s is not None and poll_interval_s < 1:
        raise ValueError("poll_interval_s must be positive")


# --------------------------------------------------------------------- repository


class SourcesRepository(Repository):
    """Sources."""

    def create_source(
        self,
        tenant_id: str,
        *,
        source_id: str,
        type: str,
        credentials_ref: str | None = None,
        sync: str | None = None,
        poll_interval_s: int | None = None,
        uri: str = "",
        if_exists: str = "fail",
    ) -> None:
        """Register a source for a tenant: the one registration path (the
        API's ``POST /v1/sources``, the CLI's ``sources add`` and a backfill's
        folder), with one validation (:func:`check_source_definition`).
        Connector settings (options, an operator's credentials, version
        domain) are set afterwards with ``configure_source``.

        Args:
            tenant_id: owner.
            source_id: id, unique within the tenant (``ID_PATTERN``).
            type: one of ``ragsync.source_types.source_types()``.
            credentials_ref: a tenant's reference to its secret
                (``secretmanager://...``), stored as given and never
                returned; None for a public source.
            sync: one of :data:`SYNC_KINDS`, or None (not served by ``ragsync serve``).
            poll_interval_s: seconds between polls when ``sync == "poll"``.
            uri: the source's location, already checked by the caller
                (``connectors.location.source_location``).
            if_exists: ``fail`` (the API: the id is taken) or ``update``
                (operator tools: an existing source gets the new type, and
                the new location when ``uri`` is given; nothing else changes).

        Raises:
            ValueError: an argument is out of its domain.
            ConflictError: ``if_exists="fail"`` and the tenant already has a
                source with this id (another tenant's ids are neither seen nor
                in the way).
        """
        check_source_definition(source_id, type, sync, poll_interval_s)
        if if_exists not in ("fail", "update"):
            raise ValueError("if_exists must be 'fail' or 'update'")
        row: dict[str, Any] = {
            "source_id": source_id,
            "tenant_id": tenant_id,
            "type": type,
            "uri": uri,
            "created_at": _now(),
        }
        # Only the columns given are written, so a catalog of any revision takes the row.
        extra = {"credentials_ref": credentials_ref, "sync": sync, "poll_interval_s": poll_interval_s}
        row.update({k: v for k, v in extra.items() if v is not None})
        if credentials_ref is not None:
            row["credentials_by"] = "tenant"
        if if_exists == "fail":
            self._insert_new(schema.sources, row, f"source_id {source_id!r} is already taken")
            return
        t = schema.sources
        with self._engine.begin() as conn:
            self._upsert(conn, t, [row], ["tenant_id", "source_id"], ["type"])
            if uri:
                where = (t.c.tenant_id == tenant_id) & (t.c.source_id == source_id)
                conn.execute(update(t).where(where).values(uri=uri))

    def get_source(self, source_id: str, *, tenant_id: str | None = None) -> SourceState | None:
        """A registered source.

        Args:
            source_id: the source.
            tenant_id: its tenant; None (operator tools) accepts any tenant
                when only one has a source of that id.

        Returns:
            The source (``SourceState``: definition and sync bookkeeping),
            or None when unknown (or another tenant's).

        Raises:
            AmbiguousSourceError: no tenant given and several tenants have
                a source of that id.
        """
        return read_source(self._read_engine, source_id, tenant_id)

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
