"""Operations: when a queued event finished, and one row per pipeline run.

* ``events`` gains ``finished_at`` (set when an event is acknowledged as
  ``done``, ``stale``, ``duplicate`` or ``dead``), so the queue's depth at
  any past instant can be counted (``ragsync report``).
* ``pipeline_runs``: one row per backfill, sync or stream run with its
  counters (JSON: documents, embedding-cache hits and misses, and per stage
  the elements, errors, CPU milliseconds and latency), the source of the
  cost figures in ``ragsync status`` and the ``/metrics`` stage series.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0005", "0004"

_ID = 255


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("finished_at", sa.Double(), nullable=True))
    op.create_table(
        "pipeline_runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("tenant_id", sa.String(_ID), nullable=False),
        sa.Column("source_id", sa.String(_ID), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("finished_at", sa.Double(), nullable=False),
        sa.Column("documents", sa.BigInteger(), nullable=False),
        sa.Column("counters", sa.Text(), nullable=False),
    )
    op.create_index("ix_pipeline_runs_finished", "pipeline_runs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_pipeline_runs_finished", table_name="pipeline_runs")
    op.drop_table("pipeline_runs")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("finished_at")
