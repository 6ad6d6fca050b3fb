"""Tenants and their API keys.

Rows: :class:`TenantRow`, :class:`ApiKeyRow`. Tables: ``tenants``, ``api_keys``.

API keys are stored as a keyed hash only (``control_plane.keys`` makes and
checks them); ``key_id`` is the key's public prefix and the primary key.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from ragsync.catalog import schema
from ragsync.catalog.base import ID_PATTERN, ID_RE, ConflictError, Repository, _now

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


# --------------------------------------------------------------------- repository


class TenantsRepository(Repository):
    """Tenants and API keys."""

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
            if not ID_RE.match(value):
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
