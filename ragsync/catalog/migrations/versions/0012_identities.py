"""Identities synced from the sources: users, groups, memberships.

* ``identity_users`` / ``identity_groups``: per (tenant, source), the
  source-local ids the last identity sync saw.
* ``identity_memberships``: user -> group (``member_kind`` ``user``) and
  group -> group (``group``, nested), indexed by member for the lookup a
  query by ``user`` makes.
* New tables only: downgrade drops them.
"""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0012", "0011"

_ID = 255


def upgrade() -> None:
    op.create_table(
        "identity_users",
        sa.Column("tenant_id", sa.String(_ID), nullable=False),
        sa.Column("source_id", sa.String(_ID), nullable=False),
        sa.Column("user_id", sa.String(512), nullable=False),
        sa.Column("synced_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "source_id", "user_id", name="pk_identity_users"),
    )
    op.create_index("ix_identity_users_user", "identity_users", ["tenant_id", "user_id"])
    op.create_table(
        "identity_groups",
        sa.Column("tenant_id", sa.String(_ID), nullable=False),
        sa.Column("source_id", sa.String(_ID), nullable=False),
        sa.Column("group_id", sa.String(512), nullable=False),
        sa.Column("synced_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "source_id", "group_id", name="pk_identity_groups"),
    )
    op.create_table(
        "identity_memberships",
        sa.Column("tenant_id", sa.String(_ID), nullable=False),
        sa.Column("source_id", sa.String(_ID), nullable=False),
        sa.Column("member_kind", sa.String(8), nullable=False),
        sa.Column("member_id", sa.String(512), nullable=False),
        sa.Column("group_id", sa.String(512), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "source_id", "member_kind", "member_id", "group_id", name="pk_identity_memberships"
        ),
    )
    op.create_index(
        "ix_identity_memberships_member", "identity_memberships", ["tenant_id", "member_kind", "member_id"]
    )


def downgrade() -> None:
    op.drop_table("identity_memberships")
    op.drop_table("identity_groups")
    op.drop_table("identity_users")
