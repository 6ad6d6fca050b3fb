"""An index on ``documents.canonical_doc_id``.

Every query hit looks up the exact copies its chunks serve
(``Catalog.duplicates_of``: ``canonical_doc_id = ?``); without this index that
was a scan of the documents table per hit (about 32 ms a hit at 10k
documents, ten times that at 100k, measured with ``bench_query_api.py``).
"""

from alembic import op

revision, down_revision = "0014", "0013"


def upgrade() -> None:
    op.create_index("ix_documents_canonical", "documents", ["canonical_doc_id"])


def downgrade() -> None:
    op.drop_index("ix_documents_canonical", table_name="documents")
