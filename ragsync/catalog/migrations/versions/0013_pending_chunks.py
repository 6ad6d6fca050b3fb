"""Chunks of a version not yet live.

* ``chunks.pending``: true from the write of a new version's chunk until the
  flip that makes the version live (the same transaction as the flip clears
  it for the new version's chunks and sets it on the replaced version's, which
  are deleted next). Queries show no pending chunk, so a reader never sees two
  versions of a document nor the chunks of a write that crashed before its
  flip.
* Existing rows are live (false): a home upgraded from 0012 answers as before.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0013", "0012"


def upgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("pending", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("pending")
