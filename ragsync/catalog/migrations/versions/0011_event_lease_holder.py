"""Who holds an event's lease.

* ``events.lease_holder``: the stream run that leased a pending event (host,
  process id and process start time of the ``ragsync stream`` process,
  ``ragsync.ops.lifecycle.run_identity``), cleared when the event is acknowledged,
  retried later or handed to another lane. When a lease ends unacknowledged,
  the next claim asks whether that process still runs: a holder that is gone
  (the whole stream process was killed: SIGKILL, OOM, a reboot) does not make
  the delivery count towards the crash-loop limit, while one that still runs
  (a worker died holding the event and the run went on) does
  (``ragsync.decisions.next_delivery``).
* Existing rows get none: their next claim counts as before.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0011", "0010"


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("lease_holder", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("lease_holder")
