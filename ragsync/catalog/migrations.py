"""Ordered schema migrations for the catalog.

Each step is a function taking an open :class:`sqlalchemy.engine.Connection`
inside a transaction. :func:`migrate` applies the steps that are missing, each
in its own transaction together with its row in ``schema_migrations``, so a
step is either fully applied and recorded or not at all (PostgreSQL and SQLite
both have transactional DDL; for SQLite this needs the engine from
:func:`ragsync.catalog.catalog.create_catalog_engine`, which emits ``BEGIN``
itself instead of relying on the ``sqlite3`` driver's legacy mode).

Several workers may open the catalog at once. On PostgreSQL each step takes a
transaction-scoped advisory lock and re-checks ``schema_migrations`` under it;
on SQLite the catalog engine begins write transactions with
``BEGIN IMMEDIATE``, which serialises them the same way.

Rules for new steps: append, never edit or reorder an applied step; give it the
next integer version; update :mod:`ragsync.catalog.schema` to the resulting
schema in the same change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Double, Engine, MetaData, String, Table, Text, select, text
from sqlalchemy.engine import Connection

from ragsync.catalog import schema

# Arbitrary constant naming the catalog's migration lock in pg_advisory_xact_lock.
_PG_LOCK_KEY = 0x7261_6773_796E_63  # "ragsync"


@dataclass(frozen=True)
class Migration:
    """One schema step.

    Attributes:
        version: position in the history, 1-based, strictly increasing.
        description: one line saying what the step does.
        apply: runs the step's DDL/DML on a connection inside a transaction;
            must not commit or roll back itself.
    """

    version: int
    description: str
    apply: Callable[[Connection], None]


# Version-1 shapes of tables that later steps altered. Migration 1 must keep
# creating exactly what it created when it was written, or a later
# ``ADD COLUMN`` step would fail on a fresh database. When a new step alters a
# version-1 table, copy that table's version-1 definition here.
_V1_FROZEN = MetaData()
_V1_ID = 255
_V1_FROZEN_TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table(
            "sources",
            _V1_FROZEN,
            Column("source_id", String(_V1_ID), primary_key=True),
            Column("tenant_id", String(_V1_ID), nullable=False),
            Column("type", String(64), nullable=False),
            Column("uri", Text, nullable=False, default=""),
            Column("credentials_ref", Text, nullable=True),
            Column("cursor", Text, nullable=True),
            Column("created_at", Double, nullable=False),
            Column("last_reconciled_at", Double, nullable=True),
        ),
        Table(
            "backfills",
            _V1_FROZEN,
            Column("backfill_id", String(_V1_ID), primary_key=True),
            Column("tenant_id", String(_V1_ID), nullable=True),
            Column("reason", String(64), nullable=False),
            Column("target_index", String(_V1_ID), nullable=False),
            Column("cursor", Text, nullable=True),
            Column("total", BigInteger, nullable=False, default=0),
            Column("done", BigInteger, nullable=False, default=0),
            Column("failed", BigInteger, nullable=False, default=0),
            Column("state", String(32), nullable=False),
            Column("created_at", Double, nullable=False),
        ),
    )
}


def _m001_initial(conn: Connection) -> None:
    """Create every table of the design (sources ... tombstones), in their version-1 shape."""
    for table in schema.V1_TABLES:
        _V1_FROZEN_TABLES.get(table.name, table).create(conn, checkfirst=False)


def _m002_acl_groups(conn: Connection) -> None:
    """Add the (tenant, group) -> acl_id lookup and fill it from existing ACLs."""
    schema.acl_groups.create(conn, checkfirst=False)
    rows = conn.execute(
        select(schema.acls.c.acl_id, schema.acls.c.tenant_id, schema.acls.c.allow_groups)
    ).all()
    values = [
        {"tenant_id": tenant_id, "group_name": group, "acl_id": acl_id}
        for acl_id, tenant_id, groups_json in rows
        for group in sorted(set(json.loads(groups_json or "[]")))
    ]
    if values:
        conn.execute(schema.acl_groups.insert(), values)


def _add_column(conn: Connection, table: Table, name: str) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for a nullable column of the current schema."""
    column = table.c[name]
    if not column.nullable:
        raise ValueError(f"{table.name}.{name}: only nullable columns can be added to existing rows")
    prep = conn.dialect.identifier_preparer
    col_type = column.type.compile(dialect=conn.dialect)
    conn.execute(
        text(f"ALTER TABLE {prep.format_table(table)} ADD COLUMN {prep.format_column(column)} {col_type}")
    )


def _m003_control_plane(conn: Connection) -> None:
    """Control plane: tenants, API keys, sync and retry requests; source sync
    settings and backfill rate/progress columns."""
    for table in schema.V3_TABLES:
        table.create(conn, checkfirst=False)
    for table_name, columns in schema.V3_ADDED_COLUMNS.items():
        for name in columns:
            _add_column(conn, schema.metadata.tables[table_name], name)


def _m004_index_versions(conn: Connection) -> None:
    """Index version registry (blue/green re-embedding, ``ragsync.index_versions``)."""
    for table in schema.V4_TABLES:
        table.create(conn, checkfirst=False)


def _m005_streaming(conn: Connection) -> None:
    """Streaming sync: permission-change versions and per-event freshness."""
    for table in schema.V5_TABLES:
        table.create(conn, checkfirst=False)


def _m006_near_duplicates(conn: Connection) -> None:
    """Near-duplicate detection: MinHash signatures and LSH band keys."""
    for table in schema.V6_TABLES:
        table.create(conn, checkfirst=False)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial catalog tables", _m001_initial),
    Migration(2, "acl_groups lookup table", _m002_acl_groups),
    Migration(3, "control plane: tenants, api keys, sync requests", _m003_control_plane),
    Migration(4, "index_versions registry", _m004_index_versions),
    Migration(5, "streaming: acl_versions, freshness", _m005_streaming),
    Migration(6, "near duplicates: doc_signatures, doc_bands", _m006_near_duplicates),
)


def _lock(conn: Connection) -> None:
    """Serialise migrators on PostgreSQL (released at commit/rollback)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


def applied_versions(engine: Engine) -> list[int]:
    """Versions recorded in ``schema_migrations``, ascending.

    Args:
        engine: the catalog engine.

    Returns:
        The applied versions; ``[]`` when the table does not exist yet.
    """
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, schema.schema_migrations.name):
            return []
        result = conn.execute(
            select(schema.schema_migrations.c.version).order_by(schema.schema_migrations.c.version)
        )
        return [int(v) for v in result.scalars()]


def migrate(engine: Engine, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply the missing migrations, each in its own transaction.

    Args:
        engine: the catalog engine (see the module docstring for SQLite).
        migrations: the history to apply; tests may pass a longer one.

    Returns:
        The versions applied by this call, ascending; ``[]`` when the database
        was already up to date (or another process applied them first).

    Raises:
        ValueError: if ``migrations`` is not strictly increasing from 1.
        sqlalchemy.exc.SQLAlchemyError: if a step fails; that step is rolled
            back and unrecorded, earlier steps stay applied.
    """
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(migrations) + 1)):
        raise ValueError(f"migration versions must be 1..n in order, got {versions}")

    with engine.begin() as conn:
        _lock(conn)
        schema.schema_migrations.create(conn, checkfirst=True)

    done = set(applied_versions(engine))
    applied: list[int] = []
    for migration in migrations:
        if migration.version in done:
            continue
        with engine.begin() as conn:
            _lock(conn)
            # Re-check under the lock: another worker may have applied it meanwhile.
            already = conn.execute(
                select(schema.schema_migrations.c.version).where(
                    schema.schema_migrations.c.version == migration.version
                )
            ).first()
            if already is not None:
                continue
            migration.apply(conn)
            conn.execute(
                schema.schema_migrations.insert().values(version=migration.version, applied_at=time.time())
            )
        applied.append(migration.version)
    return applied
