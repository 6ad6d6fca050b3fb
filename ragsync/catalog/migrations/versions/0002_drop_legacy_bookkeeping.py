"""Drop ``schema_migrations``, the hand-written migrations' bookkeeping table.

Only catalogs adopted from the hand-written migrations (stamped at the
baseline) have it; on any other catalog this does nothing. Alembic's
``alembic_version`` has replaced it.
"""

from __future__ import annotations

from alembic import op

revision, down_revision = "0002", "0001"


def upgrade() -> None:
    op.execute("DROP TABLE IF EXISTS schema_migrations")


def downgrade() -> None:
    """Nothing to restore: the table held only the hand-written history."""
