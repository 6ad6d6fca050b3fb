"""Drop ``schema_migrations``, the hand-written migrations' bookkeeping table.

Only catalogs adopted from the hand-written migrations (stamped at the
baseline) have it; on any other catalog this does nothing. Alembic's
``alembic_version`` has replaced it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP TABLE IF EXISTS schema_migrations")


def downgrade() -> None:
    """Nothing to restore: the table held only the hand-written history."""
