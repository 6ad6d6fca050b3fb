"""Connectors: source options and sync bookkeeping; sync run outcomes.

``sources`` gains the connector options (JSON), the pause (time and
reason), the count of syncs failed in a row, the time a rate limit asked to
wait until, and when the source was last synced, synced successfully and
fully listed (with the listing's size). ``sync_requests`` gains when a worker
started and finished a run, its counters (JSON), its error and its origin;
its states become ``queued | running | succeeded | failed`` (``requested``
rows become ``queued``, ``done`` rows ``succeeded``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0003", "0002"


def _source_columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("options", sa.Text(), nullable=True),
        sa.Column("paused_at", sa.Double(), nullable=True),
        sa.Column("pause_reason", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=True),
        sa.Column("retry_at", sa.Double(), nullable=True),
        sa.Column("last_sync_at", sa.Double(), nullable=True),
        sa.Column("last_success_at", sa.Double(), nullable=True),
        sa.Column("last_full_at", sa.Double(), nullable=True),
        sa.Column("last_listed", sa.BigInteger(), nullable=True),
    )


def _run_columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("counts", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=True),
    )


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        for column in _source_columns():
            batch.add_column(column)
    with op.batch_alter_table("sync_requests") as batch:
        for column in _run_columns():
            batch.add_column(column)
    op.execute("UPDATE sync_requests SET state = 'queued' WHERE state = 'requested'")
    op.execute("UPDATE sync_requests SET state = 'succeeded' WHERE state = 'done'")


def downgrade() -> None:
    op.execute("UPDATE sync_requests SET state = 'requested' WHERE state = 'queued'")
    op.execute("UPDATE sync_requests SET state = 'done' WHERE state = 'succeeded'")
    with op.batch_alter_table("sync_requests") as batch:
        for column in reversed(_run_columns()):
            batch.drop_column(column.name)
    with op.batch_alter_table("sources") as batch:
        for column in reversed(_source_columns()):
            batch.drop_column(column.name)
