"""Child documents: e-mail attachments and archive members.

* ``documents.parent_doc_id``: the document a child was cut out of (an
  e-mail's attachment, an archive's member; NULL for a top-level document),
  indexed so a parent's delete, permission change or edit finds its children.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0007", "0006"


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("parent_doc_id", sa.String(255), nullable=True))
        batch.create_index("ix_documents_parent", ["parent_doc_id"])


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_index("ix_documents_parent")
        batch.drop_column("parent_doc_id")
