"""Who stored a source's credentials reference.

* ``sources.credentials_by``: ``operator`` (``ragsync sources add``: any
  secret of the server: ``env://``, ``file://``, ``secretmanager://``) or
  ``tenant`` (``POST /v1/sources``: only a secret the operator granted the
  tenant; ``connectors.credentials``).
* Existing rows become ``tenant``: the catalog cannot tell who stored them, so
  they fail closed. An operator's reference to ``env://`` or a file outside
  the tenant grants is refused at the next sync until the operator sets it
  again with ``ragsync sources add ID ... --credentials-ref REF``.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0009", "0008"


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("credentials_by", sa.String(16), nullable=False, server_default="tenant"))


def downgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.drop_column("credentials_by")
