"""Catalog databases in the states the migration tests start from."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from sqlalchemy import Column, Double, Engine, Integer, MetaData, Table, text

from ragsync.catalog.migrations import SCRIPT_LOCATION


def make_legacy_catalog(engine: Engine, version: int = 6) -> None:
    """A catalog as the hand-written migrations left it at ``version``: the
    tables of the Alembic baseline (their version 6) and ``schema_migrations``
    recording versions 1..``version``, no ``alembic_version``."""
    from alembic import command

    from ragsync.catalog.migrations import BASELINE, VERSION_TABLE, alembic_config

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, BASELINE)
        conn.execute(text(f"DROP TABLE {VERSION_TABLE}"))
    legacy = MetaData()
    bookkeeping = Table(
        "schema_migrations",
        legacy,
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("applied_at", Double, nullable=False),
    )
    with engine.begin() as conn:
        bookkeeping.create(conn)
        conn.execute(
            bookkeeping.insert(), [{"version": v, "applied_at": time.time()} for v in range(1, version + 1)]
        )


def migrations_copy(tmp: Path, *revisions: str) -> str:
    """A copy of the package's migrations directory with extra revision files
    (``revisions`` are the files' Python sources); returns its path."""
    target = tmp / "migrations"
    shutil.copytree(SCRIPT_LOCATION, target, ignore=shutil.ignore_patterns("__pycache__"))
    for i, source in enumerate(revisions):
        (target / "versions" / f"9{i:03d}_extra.py").write_text(source, encoding="utf-8")
    return str(target)


def revision_source(revision: str, down_revision: str, upgrade_body: str) -> str:
    """The text of a revision file whose ``upgrade()`` runs ``upgrade_body``."""
    body = "\n".join("    " + line for line in upgrade_body.strip().splitlines())
    return (
        "import sqlalchemy as sa\n"
        "from alembic import op\n\n"
        f"revision = {revision!r}\n"
        f"down_revision = {down_revision!r}\n"
        "branch_labels = None\n"
        "depends_on = None\n\n\n"
        "def upgrade() -> None:\n"
        f"{body}\n\n\n"
        "def downgrade() -> None:\n"
        "    pass\n"
    )
