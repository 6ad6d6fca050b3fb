"""Version domains, observation times, permission evidence and denials.

* ``sources.version_domain``: how the source's versions compare
  (``revision``, ``timestamp``, ``etag``; NULL: undeclared, numbers
  numerically then text, the old rule).
* ``documents``, ``tombstones`` and ``acl_versions`` gain the domain of the
  version they hold and when it was observed at the source (an event's
  ``event_time``, a listing's time, a sidecar's modification time), so the
  gate orders versions of two domains by time instead of comparing their text.
* ``events.note``: why an event was dropped (a stale event names both versions).
* ``acls.deny_groups`` (JSON list) and the lookup table ``acl_denies``:
  groups an ACL explicitly denies (NTFS/SharePoint-style).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0006", "0005"

_ID = 255


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("version_domain", sa.String(16), nullable=True))
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("version_domain", sa.String(16), nullable=True))
        batch.add_column(sa.Column("version_observed_at", sa.Double(), nullable=True))
    for table in ("tombstones", "acl_versions"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("version_domain", sa.String(16), nullable=True))
            batch.add_column(sa.Column("observed_at", sa.Double(), nullable=True))
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
    with op.batch_alter_table("acls") as batch:
        batch.add_column(sa.Column("deny_groups", sa.Text(), nullable=False, server_default="[]"))
    op.create_table(
        "acl_denies",
        sa.Column("tenant_id", sa.String(_ID), nullable=False),
        sa.Column("group_name", sa.String(512), nullable=False),
        sa.Column("acl_id", sa.String(_ID), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "group_name", "acl_id", name="pk_acl_denies"),
    )


def downgrade() -> None:
    op.drop_table("acl_denies")
    with op.batch_alter_table("acls") as batch:
        batch.drop_column("deny_groups")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("note")
    for table in ("acl_versions", "tombstones"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("observed_at")
            batch.drop_column("version_domain")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("version_observed_at")
        batch.drop_column("version_domain")
    with op.batch_alter_table("sources") as batch:
        batch.drop_column("version_domain")
