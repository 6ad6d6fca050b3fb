"""Schema migrations of the catalog, with Alembic.

The revisions live in ``versions/`` inside the package (an installed ragsync
can migrate its catalog); :func:`migrate` applies the missing ones and
``Catalog.open`` calls it, so opening a catalog upgrades it.

* **Baseline**: revision ``0001`` creates the whole schema as it stood when
  the catalog moved to Alembic (the last of the hand-written migrations,
  version 6).
* **Catalogs made by the hand-written migrations** (a ``schema_migrations``
  table and no ``alembic_version``) are detected and stamped at the baseline
  when they reached version 6 (every catalog the hand-written code left
  behind did: versions 1-5 existed only during its first day of
  development); revision ``0002`` then drops the old bookkeeping table. An
  earlier version is refused with :class:`LegacyCatalogError` and nothing
  is changed.
* **Transactions and concurrency**: one call runs in one transaction (both
  PostgreSQL and SQLite have transactional DDL; for SQLite this needs the
  engine from :func:`ragsync.catalog.create_catalog_engine`, which emits
  ``BEGIN IMMEDIATE`` itself), so a failing revision leaves the catalog as
  it was. Several workers may open the catalog at once: on PostgreSQL the
  transaction first takes an advisory lock, on SQLite ``BEGIN IMMEDIATE``
  serialises writers; either way the second migrator finds the work done.

Writing a revision: change :mod:`ragsync.catalog.schema`, then
``alembic -c ragsync/catalog/migrations/alembic.ini -x url=sqlite:///tmp/c.db
revision --autogenerate -m "..."`` against a database at head, and review the
generated operations (SQLite needs batch operations for most ALTERs; they are
rendered). ``tests/test_catalog.py`` fails while the schema module and the
revisions disagree.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import Connection

from ragsync.catalog.base import read_only

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)
#: The revision equal to the schema of the hand-written migrations' last version.
BASELINE = "0001"
#: The last version the hand-written migrations recorded in ``schema_migrations``.
LEGACY_LAST_VERSION = 6
LEGACY_TABLE = "schema_migrations"
VERSION_TABLE = "alembic_version"

# Arbitrary constant naming the catalog's migration lock in pg_advisory_xact_lock.
_PG_LOCK_KEY = 0x7261_6773_796E_63  # "ragsync"


class LegacyCatalogError(RuntimeError):
    """A catalog of the hand-written migrations older than their last version (6)."""


def alembic_config(script_location: str = SCRIPT_LOCATION) -> Config:
    """The Alembic configuration of the catalog's migrations (no ini file needed).

    Args:
        script_location: directory with ``env.py`` and ``versions/``; tests
            pass a copy with extra revisions.
    """
    cfg = Config()
    cfg.set_main_option("script_location", script_location)
    return cfg


@lru_cache(maxsize=8)
def head_revision(script_location: str = SCRIPT_LOCATION) -> str:
    """The newest revision id (the catalog's schema when up to date)."""
    head = ScriptDirectory.from_config(alembic_config(script_location)).get_current_head()
    if head is None:  # pragma: no cover - the package always has revisions
        raise RuntimeError(f"no migration revisions under {script_location}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision a catalog database is at; None for an empty (or legacy) database."""
    with read_only(engine).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def migrate(engine: Engine, *, script_location: str = SCRIPT_LOCATION) -> list[str]:
    """Bring the catalog to the newest revision, in one transaction.

    Args:
        engine: the catalog engine (see the module docstring for SQLite).
        script_location: the migrations directory (tests pass a copy).

    Returns:
        The revisions applied by this call, oldest first; ``[]`` when the
        database was already up to date (or another process migrated it
        first). A legacy catalog that is only stamped counts the baseline as
        not applied.

    Raises:
        LegacyCatalogError: a catalog of the hand-written migrations before
            their version 6 (nothing is changed).
        sqlalchemy.exc.SQLAlchemyError: a revision failed; the whole call is
            rolled back.
    """
    head = head_revision(script_location)
    if current_revision(engine) == head:
        return []
    applied: list[str] = []

    def on_apply(*, step: Any, **_: Any) -> None:
        if step.is_upgrade and not step.is_stamp:
            applied.append(step.up_revision_id)

    cfg = alembic_config(script_location)
    cfg.attributes["on_version_apply"] = on_apply
    with engine.begin() as conn:
        _lock(conn)
        cfg.attributes["connection"] = conn
        _stamp_legacy(conn, cfg)
        command.upgrade(cfg, "head")
    return applied


def _lock(conn: Connection) -> None:
    """Serialise migrators on PostgreSQL (released at commit/rollback)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


def _stamp_legacy(conn: Connection, cfg: Config) -> bool:
    """Stamp a catalog of the hand-written migrations at the baseline.

    Returns:
        True when the catalog was a legacy one and is now stamped.

    Raises:
        LegacyCatalogError: its last recorded version is not 6.
    """
    tables = set(inspect(conn).get_table_names())
    if VERSION_TABLE in tables or LEGACY_TABLE not in tables:
        return False
    versions = conn.execute(text(f"SELECT version FROM {LEGACY_TABLE}")).scalars().all()
    last = max((int(v) for v in versions), default=0)
    if last != LEGACY_LAST_VERSION:
        raise LegacyCatalogError(
            f"this catalog was made by ragsync's hand-written migrations and is at their version "
            f"{last}; only version {LEGACY_LAST_VERSION} can be adopted: open it once with "
            "ragsync 7cc6618 (which brings it to version 6), or re-run the backfill into a new catalog"
        )
    command.stamp(cfg, BASELINE)
    return True
