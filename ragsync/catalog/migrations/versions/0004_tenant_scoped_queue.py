"""Tenant-scoped ids and queue lanes.

* ``sources``: the primary key becomes ``(tenant_id, source_id)``: two
  tenants may each have a source called ``wiki``, and creating one says
  nothing about the other's.
* ``events``: gains ``tenant_id`` (filled from the event's source) and the
  primary key becomes ``(tenant_id, event_id)``, so one tenant's event ids and
  idempotency keys never collide with, or reveal, another's; gains ``lane``
  (``priority`` for deletes and permission changes, ``fast`` or ``slow`` for
  content) and ``deliveries`` (times leased, for crash-loop protection);
  ``doc_id`` widens to the event schema's object-id limit.
* ``freshness``: the primary key becomes ``(tenant_id, event_id)``.
"""

from __future__ import annotations

import warnings

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0004", "0003"

_ID = 255
_DOC_ID = 1024


def _primary_key(table: str, columns: list[str]) -> None:
    """Replace ``table``'s primary key (a batch rebuild on SQLite)."""
    inspector = sa.inspect(op.get_bind())
    name = inspector.get_pk_constraint(table).get("name") or f"{table}_pkey"
    with warnings.catch_warnings():
        # SQLite's batch rebuild reflects the old key before it is replaced.
        warnings.filterwarnings("ignore", category=sa.exc.SAWarning, message=".*primary_key=True.*")
        with op.batch_alter_table(table, recreate="always") as batch:
            if op.get_bind().dialect.name != "sqlite":
                batch.drop_constraint(name, type_="primary")
            batch.create_primary_key(f"pk_{table}", columns)


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("tenant_id", sa.String(_ID), nullable=False, server_default=""))
        batch.add_column(sa.Column("lane", sa.String(16), nullable=False, server_default="fast"))
        batch.add_column(sa.Column("deliveries", sa.Integer(), nullable=False, server_default="0"))
        batch.alter_column("doc_id", type_=sa.String(_DOC_ID), existing_nullable=False)
    op.execute(
        "UPDATE events SET tenant_id = COALESCE("
        "(SELECT s.tenant_id FROM sources s WHERE s.source_id = events.source_id), '')"
    )
    op.execute("UPDATE events SET lane = 'priority' WHERE op IN ('delete', 'acl')")
    _primary_key("events", ["tenant_id", "event_id"])
    op.create_index("ix_events_lane_state", "events", ["lane", "state", "available_at"])
    _primary_key("sources", ["tenant_id", "source_id"])
    _primary_key("freshness", ["tenant_id", "event_id"])


def downgrade() -> None:
    _primary_key("freshness", ["event_id"])
    _primary_key("sources", ["source_id"])
    op.drop_index("ix_events_lane_state", table_name="events")
    _primary_key("events", ["event_id"])
    with op.batch_alter_table("events") as batch:
        batch.alter_column("doc_id", type_=sa.String(_ID), existing_nullable=False)
        batch.drop_column("deliveries")
        batch.drop_column("lane")
        batch.drop_column("tenant_id")
