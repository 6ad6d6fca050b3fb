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

from typing import Any

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0003", "0002"


# The new columns, all nullable, by table.
_NEW_COLUMNS: dict[str, dict[str, sa.types.TypeEngine[Any]]] = {
    "sources": {
        "options": sa.Text(),
        "paused_at": sa.Double(),
        "pause_reason": sa.Text(),
        "failures": sa.Integer(),
        "retry_at": sa.Double(),
        "last_sync_at": sa.Double(),
        "last_success_at": sa.Double(),
        "last_full_at": sa.Double(),
        "last_listed": sa.BigInteger(),
    },
    "sync_requests": {
        "started_at": sa.Double(),
        "finished_at": sa.Double(),
        "counts": sa.Text(),
        "error": sa.Text(),
        "origin": sa.String(length=16),
    },
}


def upgrade() -> None:
    for table, columns in _NEW_COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for name, type_ in columns.items():
                batch.add_column(sa.Column(name, type_, nullable=True))
    op.execute("UPDATE sync_requests SET state = 'queued' WHERE state = 'requested'")
    op.execute("UPDATE sync_requests SET state = 'succeeded' WHERE state = 'done'")


def downgrade() -> None:
    op.execute("UPDATE sync_requests SET state = 'requested' WHERE state = 'queued'")
    op.execute("UPDATE sync_requests SET state = 'done' WHERE state = 'succeeded'")
    for table, columns in reversed(_NEW_COLUMNS.items()):
        with op.batch_alter_table(table) as batch:
            for name in reversed(columns):
                batch.drop_column(name)
