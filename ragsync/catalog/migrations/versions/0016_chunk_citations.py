"""What a hit needs to be cited, and the paragraphs a source repeats.

* ``chunks.page_end``, ``char_start``, ``char_end``: the chunk's page range
  (``page`` .. ``page_end``) and its character span in the document's text
  (``ragsync.model.document_text``).
* ``chunks.boxes``: the line boxes of a chunk of a PDF or a scan (JSON list of
  ``[page, x0, y0, x1, y1]``, fractions of the page).
* ``chunks.context``: the document's identity embedded and indexed with the
  chunk (``ragsync.ingest.context``).
* ``paragraphs``: which of a source's documents hold each paragraph (its
  ``paragraph_hash``), for boilerplate found by its share of the source.

Existing rows get 0, ``[]`` and ``""``: a home upgraded from 0015 answers as
before (its chunks carry the first page only) until its documents are chunked
again by chunker c2 (the next sync or backfill does that once: the chunker's
config id changed).
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0016", "0015"


def upgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("page_end", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("char_start", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("char_end", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("boxes", sa.Text(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("context", sa.Text(), nullable=False, server_default=""))
    op.create_table(
        "paragraphs",
        sa.Column("tenant_id", sa.String(255), nullable=False),
        sa.Column("source_id", sa.String(255), nullable=False),
        sa.Column("para_hash", sa.String(32), nullable=False),
        sa.Column("doc_id", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "source_id", "para_hash", "doc_id"),
    )
    op.create_index("ix_paragraphs_doc", "paragraphs", ["doc_id"])


def downgrade() -> None:
    op.drop_index("ix_paragraphs_doc", table_name="paragraphs")
    op.drop_table("paragraphs")
    with op.batch_alter_table("chunks") as batch:
        for name in ("context", "boxes", "char_end", "char_start", "page_end"):
            batch.drop_column(name)
