"""Near-duplicate signatures by datasketch, with their algorithm recorded.

* ``doc_signatures.algorithm``: ``ragsync.ingest.near_dup.ALGORITHM`` of the stored
  signature; only signatures of one algorithm are compared.
* Every stored signature (the hand-written numpy MinHash until now) is
  re-signed from the document's stored chunks and the near-duplicate groups
  are recomputed in the original signing order
  (``ragsync.catalog.copies.resign_near_dups``; streamed in batches).
* Downgrade drops the column and every signature (an older ragsync cannot
  read these; documents are signed again when next written).
"""

import sqlalchemy as sa
from alembic import op

from ragsync.catalog.copies import resign_near_dups

revision, down_revision = "0008", "0007"


def upgrade() -> None:
    with op.batch_alter_table("doc_signatures") as batch:
        batch.add_column(sa.Column("algorithm", sa.String(64), nullable=True))
    resign_near_dups(op.get_bind())
    with op.batch_alter_table("doc_signatures") as batch:
        batch.alter_column("algorithm", existing_type=sa.String(64), nullable=False)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM doc_bands"))
    op.execute(sa.text("DELETE FROM doc_signatures"))
    with op.batch_alter_table("doc_signatures") as batch:
        batch.drop_column("algorithm")
