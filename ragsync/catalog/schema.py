"""Catalog tables, SQLAlchemy Core, portable between SQLite and PostgreSQL.

Portability rules (so one schema runs on both backends):

* no ARRAY or vector types: lists are JSON text (``json.dumps`` of a list,
  written and read by :mod:`ragsync.catalog.catalog`), vectors are
  little-endian float32 bytes in a ``LargeBinary`` column;
* timestamps are ``DOUBLE PRECISION`` epoch seconds (UTC), never
  ``DATETIME`` (SQLite has no time zones and would silently drop them);
* versions and hashes are text; ``source_version`` is compared only for
  equality in SQL, never ordered (an mtime and an etag do not sort alike).

This module describes the *current* schema. It changes only together with a
new Alembic revision in :mod:`ragsync.catalog.migrations` that brings an
existing database to it (``tests/test_catalog.py`` compares the two). The
migrations never create tables from here: each revision holds its own frozen
DDL.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    false,
    text,
)

from ragsync.model import EVENT_LIMITS

metadata = MetaData()

# SQLite only auto-increments an ``INTEGER PRIMARY KEY`` (a rowid alias), not BIGINT.
_AutoId = BigInteger().with_variant(Integer(), "sqlite")

_ID = 255  # ids and hashes: hex digests or namespaced ids, well under this
_DOC_ID = EVENT_LIMITS.doc_id  # a source's object id as events carry it

sources = Table(
    "sources",
    metadata,
    # Source ids are scoped per tenant (revision 0004): two tenants may both
    # have a source called "wiki", and neither can learn of the other's.
    Column("tenant_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), primary_key=True),
    Column("type", String(64), nullable=False),
    Column("uri", Text, nullable=False, default=""),
    Column("credentials_ref", Text, nullable=True),
    # Who stored credentials_ref (revision 0009): ``operator`` (any secret of
    # the server) or ``tenant`` (only a secret the operator granted the tenant).
    Column("credentials_by", String(16), nullable=False, server_default="tenant"),
    Column("cursor", Text, nullable=True),
    Column("created_at", Double, nullable=False),
    Column("last_reconciled_at", Double, nullable=True),
    # How changes arrive (control plane): ``webhook`` or ``poll``.
    Column("sync", String(16), nullable=True),
    Column("poll_interval_s", Integer, nullable=True),
    # Connectors (revision 0003): connector options and sync bookkeeping.
    Column("options", Text, nullable=True),  # JSON object of connector options
    Column("paused_at", Double, nullable=True),  # set while the source is paused
    Column("pause_reason", Text, nullable=True),
    Column("failures", Integer, nullable=True),  # syncs failed in a row
    Column("retry_at", Double, nullable=True),  # no sync before (a rate limit asked to wait)
    Column("last_sync_at", Double, nullable=True),  # last sync started
    Column("last_success_at", Double, nullable=True),
    Column("last_full_at", Double, nullable=True),  # last complete full listing
    Column("last_listed", BigInteger, nullable=True),  # objects in that listing
    # Revision 0006: how the source's versions compare (revision | timestamp |
    # etag; NULL: undeclared).
    Column("version_domain", String(16), nullable=True),
)

documents = Table(
    "documents",
    metadata,
    Column("doc_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), nullable=False),
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_object_id", Text, nullable=False, default=""),
    Column("uri", Text, nullable=False, default=""),
    Column("mime", String(255), nullable=False, default=""),
    Column("size", BigInteger, nullable=False, default=-1),
    Column("source_version", Text, nullable=True),
    Column("content_hash", String(_ID), nullable=True),
    Column("canonical_doc_id", String(_ID), nullable=True),
    Column("acl_id", String(_ID), nullable=True),
    Column("status", String(32), nullable=False),
    Column("error_class", String(64), nullable=True),
    Column("parser_version", String(_ID), nullable=True),
    Column("chunker_id", String(_ID), nullable=True),
    # The content_hash + source_version that is live in the indexes.
    Column("indexed_version", Text, nullable=True),
    Column("chunk_count", Integer, nullable=False, default=0),
    Column("indexed_at", Double, nullable=True),
    Column("deleted_at", Double, nullable=True),
    Column("updated_at", Double, nullable=False),
    # Revision 0006: the domain of source_version and when it was observed at
    # the source (event_time or listing time), for the version gate.
    Column("version_domain", String(16), nullable=True),
    Column("version_observed_at", Double, nullable=True),
    # Revision 0007: the document a child (attachment, archive member) came from.
    Column("parent_doc_id", String(_ID), nullable=True),
    Index("ix_documents_tenant_content", "tenant_id", "content_hash"),
    Index("ix_documents_source", "source_id"),
    Index("ix_documents_parent", "parent_doc_id"),
    # Revision 0010: a full listing's diff reads a source's documents in
    # doc_id pages (keyset), without sorting the whole source per page.
    Index("ix_documents_source_doc", "source_id", "tenant_id", "doc_id"),
    # Revision 0010: the documents holding some bytes, whatever the tenant
    # (pages for review join the parses on content_hash).
    Index("ix_documents_content", "content_hash"),
    # Revision 0014: a query hit's exact copies (``duplicates_of``) without a table scan.
    Index("ix_documents_canonical", "canonical_doc_id"),
)

# Revision 0010: documents counted by (tenant, source, status, error class),
# kept exact by triggers on ``documents`` (insert, delete, and updates of
# those four columns) in the writer's own transaction, so status, coverage
# and /metrics read a few rows instead of counting millions. ``error_class``
# is '' when the document has none; a row may hold n = 0.
document_tallies = Table(
    "document_tallies",
    metadata,
    Column("tenant_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), primary_key=True),
    Column("status", String(32), primary_key=True),
    Column("error_class", String(64), primary_key=True),
    Column("n", BigInteger, nullable=False),
)

acls = Table(
    "acls",
    metadata,
    Column("acl_id", String(_ID), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("allow_groups", Text, nullable=False),  # JSON list of group names, sorted
    Column("updated_at", Double, nullable=False),
    # Revision 0006: groups explicitly denied (JSON list, sorted).
    Column("deny_groups", Text, nullable=False, server_default="[]"),
)

# Lookup table kept in step with ``acls.allow_groups`` by ``Catalog.upsert_acl``:
# "which ACLs of this tenant allow any of these groups" becomes an
# indexed query instead of a scan that decodes every ACL's JSON.
acl_groups = Table(
    "acl_groups",
    metadata,
    Column("tenant_id", String(_ID), nullable=False),
    Column("group_name", String(512), nullable=False),
    Column("acl_id", String(_ID), nullable=False),
    PrimaryKeyConstraint("tenant_id", "group_name", "acl_id", name="pk_acl_groups"),
    Index("ix_acl_groups_acl", "acl_id"),
)

# Revision 0006: "which ACLs of this tenant deny any of these groups".
acl_denies = Table(
    "acl_denies",
    metadata,
    Column("tenant_id", String(_ID), nullable=False),
    Column("group_name", String(512), nullable=False),
    Column("acl_id", String(_ID), nullable=False),
    PrimaryKeyConstraint("tenant_id", "group_name", "acl_id", name="pk_acl_denies"),
)

parsed_docs = Table(
    "parsed_docs",
    metadata,
    Column("content_hash", String(_ID), nullable=False),
    Column("parser_version", String(_ID), nullable=False),
    Column("elements_uri", Text, nullable=False),
    Column("pages", Integer, nullable=False, default=0),
    Column("pages_for_review", Text, nullable=False, default="[]"),  # JSON list of ints
    Column("ocr_confidence", Double, nullable=True),
    # Revision 0017: the parser's metadata (JSON object), which the document's
    # identity line needs when the stored parse is read again.
    Column("doc_metadata", Text, nullable=False, default="{}", server_default="{}"),
    PrimaryKeyConstraint("content_hash", "parser_version", name="pk_parsed_docs"),
    # Revision 0010: the few parses with pages for review (status, /metrics),
    # found without reading every parse.
    Index(
        "ix_parsed_docs_review",
        "content_hash",
        sqlite_where=text("pages_for_review != '[]'"),
        postgresql_where=text("pages_for_review != '[]'"),
    ),
)

chunks = Table(
    "chunks",
    metadata,
    Column("chunk_id", String(64), primary_key=True),
    Column("doc_id", String(_ID), nullable=False),
    Column("tenant_id", String(_ID), nullable=False),
    Column("text_hash", String(_ID), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("heading_path", Text, nullable=False, default="[]"),  # JSON list of str
    Column("page", Integer, nullable=False, default=0),
    Column("text", Text, nullable=False),
    Column("token_count", Integer, nullable=False, default=0),
    Column("acl_ids", Text, nullable=False, default="[]"),  # JSON list of str
    Column("near_dup_group", String(_ID), nullable=True),
    # True from the write of a new version's chunk until the flip that makes
    # it live (and again for a replaced version's chunks between the flip and
    # their deletion): queries never show a pending chunk.
    Column("pending", Boolean, nullable=False, server_default=false()),
    # Citations (0015): page range, span in the document's text, line boxes; the identity embedded.
    Column("page_end", Integer, nullable=False, server_default="0"),
    Column("char_start", Integer, nullable=False, server_default="0"),
    Column("char_end", Integer, nullable=False, server_default="0"),
    Column("boxes", Text, nullable=False, server_default="[]"),  # JSON list of [page, x0, y0, x1, y1]
    Column("context", Text, nullable=False, server_default=""),
    Index("ix_chunks_doc", "doc_id"),
    Index("ix_chunks_text_hash", "text_hash"),
)

# Which of a source's documents hold each paragraph (``chunking.paragraph_hash``): boilerplate is
# a paragraph held by a sizeable share of its source's documents (``ragsync.ingest.boilerplate``).
paragraphs = Table(
    "paragraphs",
    metadata,
    Column("tenant_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), primary_key=True),
    Column("para_hash", String(32), primary_key=True),
    Column("doc_id", String(_ID), primary_key=True),
    Index("ix_paragraphs_doc", "doc_id"),
)

embedding_cache = Table(
    "embedding_cache",
    metadata,
    Column("text_hash", String(_ID), nullable=False),
    Column("model_version", String(_ID), nullable=False),
    Column("dim", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),  # little-endian float32, dim * 4 bytes
    PrimaryKeyConstraint("text_hash", "model_version", name="pk_embedding_cache"),
)

events = Table(
    "events",
    metadata,
    # Event ids are scoped per tenant (revision 0004).
    Column("tenant_id", String(_ID), primary_key=True),
    Column("event_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), nullable=False),
    Column("doc_id", String(_DOC_ID), nullable=False),
    Column("op", String(16), nullable=False),
    Column("source_version", Text, nullable=True),
    Column("payload", Text, nullable=False, default="{}"),  # JSON object
    Column("event_time", Double, nullable=True),
    Column("enqueued_at", Double, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("state", String(32), nullable=False),
    Column("available_at", Double, nullable=False),
    # Revision 0004: the queue lane (``priority`` for deletes and permission
    # changes, ``fast`` and ``slow`` for content) and how many times the
    # event was leased (a worker that dies on it every time is a crash loop).
    Column("lane", String(16), nullable=False, default="fast"),
    Column("deliveries", Integer, nullable=False, default=0),
    # Revision 0006: why the event was dropped (a stale one names both versions).
    Column("note", Text, nullable=True),
    # Revision 0005: when the event was acknowledged (done, stale, duplicate
    # or dead); the queue's depth at a past instant is counted from it.
    Column("finished_at", Double, nullable=True),
    # Revision 0011: the stream run holding the lease of a claimed pending
    # event (``ragsync.ops.lifecycle.run_identity``); None when not leased.
    Column("lease_holder", String(_ID), nullable=True),
    Index("ix_events_state_available", "state", "available_at"),
    Index("ix_events_lane_state", "lane", "state", "available_at"),
    Index("ix_events_doc", "doc_id"),
)

backfills = Table(
    "backfills",
    metadata,
    Column("backfill_id", String(_ID), primary_key=True),
    Column("tenant_id", String(_ID), nullable=True),
    Column("reason", String(64), nullable=False),
    Column("target_index", String(_ID), nullable=False),
    Column("cursor", Text, nullable=True),
    Column("total", BigInteger, nullable=False, default=0),
    Column("done", BigInteger, nullable=False, default=0),
    Column("failed", BigInteger, nullable=False, default=0),
    Column("state", String(32), nullable=False),
    Column("created_at", Double, nullable=False),
    # The requested rate limit, and when the worker started and last reported
    # progress (for the ETA).
    Column("max_docs_per_s", Double, nullable=True),
    Column("started_at", Double, nullable=True),
    Column("updated_at", Double, nullable=True),
    # Revision 0015: why it failed or left documents behind (the requester reads it).
    Column("error", Text, nullable=True),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", _AutoId, primary_key=True, autoincrement=True),
    Column("created_at", Double, nullable=False),
    Column("tenant_id", String(_ID), nullable=False, default=""),
    Column("source_id", String(_ID), nullable=False, default=""),
    Column("doc_id", String(_ID), nullable=False, default=""),
    Column("uri", Text, nullable=False, default=""),
    Column("stage", String(64), nullable=False),
    Column("error_class", String(64), nullable=False),
    Column("message", Text, nullable=False, default=""),
    Column("traceback", Text, nullable=False, default=""),
    Column("attempts", Integer, nullable=False, default=1),
    Column("payload", Text, nullable=False, default=""),
    Column("source_version", Text, nullable=False, default=""),
    Column("resolved_at", Double, nullable=True),
    Index("ix_dead_letters_source", "source_id"),
    Index("ix_dead_letters_tenant", "tenant_id"),
    # Revision 0010: a document's open dead letters (the unchanged re-run's
    # skip check asks for every listed document).
    Index("ix_dead_letters_doc", "doc_id", "resolved_at"),
)

tombstones = Table(
    "tombstones",
    metadata,
    Column("doc_id", String(_ID), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_version", Text, nullable=True),
    Column("deleted_at", Double, nullable=False),
    Column("completed_at", Double, nullable=True),
    # Revision 0006: the delete's version domain and event time.
    Column("version_domain", String(16), nullable=True),
    Column("observed_at", Double, nullable=True),
)

# ----------------------------------------------------------------- control plane

tenants = Table(
    "tenants",
    metadata,
    Column("tenant_id", String(_ID), primary_key=True),
    Column("name", String(_ID), nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
)

# API keys are stored as a keyed hash, never in clear; ``key_id`` is the key's
# public prefix, so a lookup is by primary key and the hash is compared in
# constant time.
api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("key_hash", String(128), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("revoked_at", Double, nullable=True),
    Index("ix_api_keys_tenant", "tenant_id"),
)

# ``POST /v1/sources/{id}/sync``: a request the connector scheduler picks up.
sync_requests = Table(
    "sync_requests",
    metadata,
    Column("sync_id", String(64), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_id", String(_ID), nullable=False),
    Column("mode", String(16), nullable=False),  # incremental | full
    Column("state", String(32), nullable=False),  # queued | running | succeeded | failed
    Column("requested_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    # Revision 0003: what the worker did.
    Column("started_at", Double, nullable=True),
    Column("finished_at", Double, nullable=True),
    Column("counts", Text, nullable=True),  # JSON object of the sync's counters
    Column("error", Text, nullable=True),
    Column("origin", String(16), nullable=True),  # api | schedule | webhook
    Index("ix_sync_requests_source", "source_id", "state"),
)

# ``POST /v1/dead-letters/{id}/retry``: one row per retry request (audit, and the
# work list for dead letters that have no queued event to requeue).
dead_letter_retries = Table(
    "dead_letter_retries",
    metadata,
    Column("retry_id", String(64), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("dead_letter_id", BigInteger, nullable=True),
    Column("event_id", String(_ID), nullable=True),
    Column("kind", String(16), nullable=False),  # event | file
    Column("state", String(32), nullable=False),  # requeued | requested | done
    Column("requested_at", Double, nullable=False),
    Index("ix_dead_letter_retries_state", "state"),
)

# ---------------------------------------------------------------- index versions

# One row per index version (``ragsync.index.versions``): the physical vector
# collection and keyword directory built for one embedding model, behind the
# alias the pipeline uses. ``state``: building | live | retired | refused | dropped.
index_versions = Table(
    "index_versions",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("model_name", String(_ID), nullable=False),
    Column("model_version", String(_ID), nullable=False),
    Column("dim", Integer, nullable=False),
    Column("vector_collection", String(_ID), nullable=False),
    Column("keyword_index", String(_ID), nullable=False),  # directory name under HOME (tantivy)
    Column("state", String(32), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("flipped_at", Double, nullable=True),
    Column("retire_after", Double, nullable=True),
    Column("note", Text, nullable=False, default=""),  # JSON gate report or refusal reason
)

# ---------------------------------------------------------------- streaming sync

# Version gate bookkeeping that ``documents`` does not hold: the source version
# of the last applied permission change (content versions live in
# documents.source_version / indexed_version, deletes in tombstones).
acl_versions = Table(
    "acl_versions",
    metadata,
    Column("doc_id", String(_ID), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("acl_version", Text, nullable=False),
    Column("acl_id", String(_ID), nullable=False),
    Column("updated_at", Double, nullable=False),
    # Revision 0006: the version's domain and when the permissions were true
    # at the source (the evidence time).
    Column("version_domain", String(16), nullable=True),
    Column("observed_at", Double, nullable=True),
)

# One row per applied event: indexed_at - event_time is the freshness.
freshness = Table(
    "freshness",
    metadata,
    Column("tenant_id", String(_ID), primary_key=True),
    Column("event_id", String(_ID), primary_key=True),
    Column("source_id", String(_ID), nullable=False),
    Column("op", String(16), nullable=False),
    Column("lane", String(16), nullable=False),
    Column("event_time", Double, nullable=False),
    Column("applied_at", Double, nullable=False),
    Index("ix_freshness_source_lane", "source_id", "lane"),
)

# --------------------------------------------------------------- near duplicates

# MinHash signature and near-duplicate group of each indexed document
# (``ragsync.ingest.near_dup``); band keys find candidates without a full scan.
doc_signatures = Table(
    "doc_signatures",
    metadata,
    Column("doc_id", String(_ID), primary_key=True),
    Column("tenant_id", String(_ID), nullable=False),
    Column("signature", LargeBinary, nullable=False),  # uint64 values, native byte order
    Column("near_dup_group", String(_ID), nullable=False),
    Column("updated_at", Double, nullable=False),
    # ``ragsync.ingest.near_dup.ALGORITHM`` of the signature (revision 0008): only
    # signatures of the same algorithm are compared.
    Column("algorithm", String(64), nullable=False),
    Index("ix_doc_signatures_group", "near_dup_group"),
)

doc_bands = Table(
    "doc_bands",
    metadata,
    Column("tenant_id", String(_ID), primary_key=True),
    Column("band_key", String(64), primary_key=True),
    Column("doc_id", String(_ID), primary_key=True),
)

# ---------------------------------------------------------------- operations

# One row per pipeline run (backfill, sync, stream; revision 0005): its
# counters as JSON (``ragsync.runstats``), for cost figures and /metrics.
pipeline_runs = Table(
    "pipeline_runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),  # listing (backfill, full sync) | stream
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_id", String(_ID), nullable=False),
    Column("started_at", Double, nullable=False),
    Column("finished_at", Double, nullable=False),
    Column("documents", BigInteger, nullable=False),
    Column("counters", Text, nullable=False),  # JSON object
    Index("ix_pipeline_runs_finished", "finished_at"),
)

# ---------------------------------------------------------------- identities

# Revision 0012: who is in which group, synced per (tenant, source) from the
# source itself (``ragsync.catalog.identities``). A query by ``user`` reads
# the user's memberships here and expands nested groups
# (``Catalog.groups_of_user_by_source``: one recursive query, any depth). Group ids are the names the source's
# connector writes into document ACLs.
identity_users = Table(
    "identity_users",
    metadata,
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_id", String(_ID), nullable=False),
    Column("user_id", String(512), nullable=False),  # source-local: wiki name, e-mail, accountId
    Column("synced_at", Double, nullable=False),
    PrimaryKeyConstraint("tenant_id", "source_id", "user_id", name="pk_identity_users"),
    Index("ix_identity_users_user", "tenant_id", "user_id"),
)

identity_groups = Table(
    "identity_groups",
    metadata,
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_id", String(_ID), nullable=False),
    Column("group_id", String(512), nullable=False),
    Column("synced_at", Double, nullable=False),
    PrimaryKeyConstraint("tenant_id", "source_id", "group_id", name="pk_identity_groups"),
)

# ``member_kind``: ``user`` (member_id is a user id) or ``group`` (a nested group).
identity_memberships = Table(
    "identity_memberships",
    metadata,
    Column("tenant_id", String(_ID), nullable=False),
    Column("source_id", String(_ID), nullable=False),
    Column("member_kind", String(8), nullable=False),
    Column("member_id", String(512), nullable=False),
    Column("group_id", String(512), nullable=False),
    PrimaryKeyConstraint(
        "tenant_id", "source_id", "member_kind", "member_id", "group_id", name="pk_identity_memberships"
    ),
    Index("ix_identity_memberships_member", "tenant_id", "member_kind", "member_id"),
)
