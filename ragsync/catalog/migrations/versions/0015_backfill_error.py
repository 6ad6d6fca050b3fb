"""Why a backfill failed.

* ``backfills.error``: the reason a backfill request failed or left
  documents behind (``failed`` counts them), in words the requester reads
  (``GET /v1/backfills/{id}``); null while none. A failed request used to read
  back ``failed`` with no reason.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0015", "0014"


def upgrade() -> None:
    with op.batch_alter_table("backfills") as batch:
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("backfills") as batch:
        batch.drop_column("error")
