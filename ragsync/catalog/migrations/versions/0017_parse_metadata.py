"""What a parser said of a document besides its elements.

* ``parsed_docs.doc_metadata``: the parser's metadata (title, author, front
  matter; JSON object). A stored parse is read again instead of parsing the
  bytes (a re-run after a crash, a re-chunk, a copy): without its metadata the
  document's identity line (``ragsync.ingest.context``), which is part of
  every chunk's id, came out different from a fresh parse's, and a re-run
  wrote other chunk ids than one uninterrupted run. Existing rows get ``{}``
  (parser p8 parses every document again anyway).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0017", "0016"


def upgrade() -> None:
    with op.batch_alter_table("parsed_docs") as batch:
        batch.add_column(sa.Column("doc_metadata", sa.Text(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("parsed_docs") as batch:
        batch.drop_column("doc_metadata")
