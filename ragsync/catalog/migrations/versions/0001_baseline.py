"""Baseline: the catalog schema as the hand-written migrations left it (their version 6).

Generated from ``ragsync.catalog.schema`` when the catalog moved to Alembic
and frozen here: it must never change (a catalog stamped at this revision
already has exactly these tables). Change the schema with a new revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0001", None


def upgrade() -> None:
    op.create_table(
        "acl_groups",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("group_name", sa.String(length=512), nullable=False),
        sa.Column("acl_id", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "group_name", "acl_id", name="pk_acl_groups"),
    )
    op.create_index("ix_acl_groups_acl", "acl_groups", ["acl_id"])

    op.create_table(
        "acl_versions",
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("acl_version", sa.Text(), nullable=False),
        sa.Column("acl_id", sa.String(length=255), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("doc_id"),
    )
    op.create_table(
        "acls",
        sa.Column("acl_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("allow_groups", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("acl_id"),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("key_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("key_id"),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant_id"])

    op.create_table(
        "backfills",
        sa.Column("backfill_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=True),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("target_index", sa.String(length=255), nullable=False),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("done", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("max_docs_per_s", sa.Double(), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("backfill_id"),
    )
    op.create_table(
        "chunks",
        sa.Column("chunk_id", sa.String(length=64), nullable=False),
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("text_hash", sa.String(length=255), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("heading_path", sa.Text(), nullable=False),
        sa.Column("page", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("acl_ids", sa.Text(), nullable=False),
        sa.Column("near_dup_group", sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint("chunk_id"),
    )
    op.create_index("ix_chunks_doc", "chunks", ["doc_id"])
    op.create_index("ix_chunks_text_hash", "chunks", ["text_hash"])

    op.create_table(
        "dead_letter_retries",
        sa.Column("retry_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("dead_letter_id", sa.BigInteger(), nullable=True),
        sa.Column("event_id", sa.String(length=255), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("requested_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("retry_id"),
    )
    op.create_index("ix_dead_letter_retries_state", "dead_letter_retries", ["state"])

    op.create_table(
        "dead_letters",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("stage", sa.String(length=64), nullable=False),
        sa.Column("error_class", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("traceback", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("source_version", sa.Text(), nullable=False),
        sa.Column("resolved_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dead_letters_source", "dead_letters", ["source_id"])
    op.create_index("ix_dead_letters_tenant", "dead_letters", ["tenant_id"])

    op.create_table(
        "doc_bands",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("band_key", sa.String(length=64), nullable=False),
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "band_key", "doc_id"),
    )
    op.create_table(
        "doc_signatures",
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("signature", sa.LargeBinary(), nullable=False),
        sa.Column("near_dup_group", sa.String(length=255), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("doc_id"),
    )
    op.create_index("ix_doc_signatures_group", "doc_signatures", ["near_dup_group"])

    op.create_table(
        "documents",
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("source_object_id", sa.Text(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("mime", sa.String(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("source_version", sa.Text(), nullable=True),
        sa.Column("content_hash", sa.String(length=255), nullable=True),
        sa.Column("canonical_doc_id", sa.String(length=255), nullable=True),
        sa.Column("acl_id", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("error_class", sa.String(length=64), nullable=True),
        sa.Column("parser_version", sa.String(length=255), nullable=True),
        sa.Column("chunker_id", sa.String(length=255), nullable=True),
        sa.Column("indexed_version", sa.Text(), nullable=True),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("indexed_at", sa.Double(), nullable=True),
        sa.Column("deleted_at", sa.Double(), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("doc_id"),
    )
    op.create_index("ix_documents_source", "documents", ["source_id"])
    op.create_index("ix_documents_tenant_content", "documents", ["tenant_id", "content_hash"])

    op.create_table(
        "embedding_cache",
        sa.Column("text_hash", sa.String(length=255), nullable=False),
        sa.Column("model_version", sa.String(length=255), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("text_hash", "model_version", name="pk_embedding_cache"),
    )
    op.create_table(
        "events",
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("source_version", sa.Text(), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("event_time", sa.Double(), nullable=True),
        sa.Column("enqueued_at", sa.Double(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("available_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("ix_events_doc", "events", ["doc_id"])
    op.create_index("ix_events_state_available", "events", ["state", "available_at"])

    op.create_table(
        "freshness",
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("lane", sa.String(length=16), nullable=False),
        sa.Column("event_time", sa.Double(), nullable=False),
        sa.Column("applied_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("ix_freshness_source_lane", "freshness", ["source_id", "lane"])

    op.create_table(
        "index_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("model_name", sa.String(length=255), nullable=False),
        sa.Column("model_version", sa.String(length=255), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector_collection", sa.String(length=255), nullable=False),
        sa.Column("keyword_index", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("flipped_at", sa.Double(), nullable=True),
        sa.Column("retire_after", sa.Double(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    op.create_table(
        "parsed_docs",
        sa.Column("content_hash", sa.String(length=255), nullable=False),
        sa.Column("parser_version", sa.String(length=255), nullable=False),
        sa.Column("elements_uri", sa.Text(), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("pages_for_review", sa.Text(), nullable=False),
        sa.Column("ocr_confidence", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("content_hash", "parser_version", name="pk_parsed_docs"),
    )
    op.create_table(
        "sources",
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("credentials_ref", sa.Text(), nullable=True),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_reconciled_at", sa.Double(), nullable=True),
        sa.Column("sync", sa.String(length=16), nullable=True),
        sa.Column("poll_interval_s", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("source_id"),
    )
    op.create_table(
        "sync_requests",
        sa.Column("sync_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("source_id", sa.String(length=255), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("requested_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("sync_id"),
    )
    op.create_index("ix_sync_requests_source", "sync_requests", ["source_id", "state"])

    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "tombstones",
        sa.Column("doc_id", sa.String(length=255), nullable=False),
        sa.Column("tenant_id", sa.String(length=255), nullable=False),
        sa.Column("source_version", sa.Text(), nullable=True),
        sa.Column("deleted_at", sa.Double(), nullable=False),
        sa.Column("completed_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("doc_id"),
    )


def downgrade() -> None:
    op.drop_table("tombstones")
    op.drop_table("tenants")
    op.drop_table("sync_requests")
    op.drop_table("sources")
    op.drop_table("parsed_docs")
    op.drop_table("index_versions")
    op.drop_table("freshness")
    op.drop_table("events")
    op.drop_table("embedding_cache")
    op.drop_table("documents")
    op.drop_table("doc_signatures")
    op.drop_table("doc_bands")
    op.drop_table("dead_letters")
    op.drop_table("dead_letter_retries")
    op.drop_table("chunks")
    op.drop_table("backfills")
    op.drop_table("api_keys")
    op.drop_table("acls")
    op.drop_table("acl_versions")
    op.drop_table("acl_groups")
