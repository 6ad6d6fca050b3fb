"""Catalog tests: every method, on SQLite and on a real PostgreSQL (``catalog_url``)."""

from __future__ import annotations

import gc
import json
import multiprocessing
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text

from ragsync.catalog import (
    STATUS_FETCHED,
    STATUS_INDEXED,
    Catalog,
    ConflictError,
    DocumentRow,
    FetchRecord,
    LegacyCatalogError,
    SourceState,
    create_catalog_engine,
    current_revision,
    head_revision,
    migrate,
    normalize_url,
    schema,
)
from ragsync.catalog.base import POOL_SIZE_ENV, catalog_pool_size, shared_engine_users
from ragsync.decisions import Stamp
from ragsync.errors import AmbiguousSourceError
from ragsync.model import Chunk, DeadLetter, FetchedDocument, SourceFile
from ragsync.source_types import SourceSpec
from tests.catalog_rows import flip
from tests.migration_helpers import make_legacy_catalog, migrations_copy, revision_source

ALL_TABLES = {
    "sources",
    "documents",
    "acls",
    "acl_groups",
    "acl_denies",
    "parsed_docs",
    "chunks",
    "paragraphs",
    "embedding_cache",
    "events",
    "backfills",
    "dead_letters",
    "tombstones",
    "alembic_version",
    # control plane
    "tenants",
    "api_keys",
    "sync_requests",
    "dead_letter_retries",
    # index versions
    "index_versions",
    # streaming sync
    "acl_versions",
    "freshness",
    # near duplicates
    "doc_signatures",
    "doc_bands",
    # operations
    "pipeline_runs",
    # precomputed counts (revision 0010)
    "document_tallies",
    # identities (revision 0012)
    "identity_users",
    "identity_groups",
    "identity_memberships",
}
# The Alembic revisions, oldest first.
ALL_VERSIONS = [f"{n:04d}" for n in range(1, 18)]


def fetch(
    doc_id: str, *, version: str = "v1", content_hash: str = "h1", tenant: str = "t1", **kw: str
) -> FetchRecord:
    return FetchRecord(
        doc_id=doc_id,
        source_id=kw.get("source_id", "s1"),
        tenant_id=tenant,
        source_object_id=f"obj/{doc_id}",
        uri=f"file:///src/{doc_id}",
        size=123,
        source_version=version,
        content_hash=content_hash,
        acl_id=kw.get("acl_id", "acl1"),
        canonical_doc_id=kw.get("canonical_doc_id", doc_id),
        mime=kw.get("mime", "text/plain"),
    )


def chunk(i: int, *, doc_id: str = "d1", tenant: str = "t1", text_: str | None = None) -> Chunk:
    body = text_ if text_ is not None else f"chunk text {i} — ünïcode"
    return Chunk(
        chunk_id=f"{doc_id}-{i:04d}".ljust(32, "0")[:32],
        doc_id=doc_id,
        tenant_id=tenant,
        text_hash=f"th{i}",
        ordinal=i,
        heading_path=("Title", f"Section {i}"),
        page=i + 1,
        text=body,
        token_count=10 + i,
        acl_ids=("acl1", "acl2"),
    )


# ----------------------------------------------------------------------- migrations


def test_open_creates_schema_and_migrate_is_idempotent(catalog_url: str) -> None:
    engine = create_catalog_engine(catalog_url)
    try:
        assert migrate(engine) == ALL_VERSIONS
        assert migrate(engine) == []
        assert current_revision(engine) == head_revision() == ALL_VERSIONS[-1]
        assert set(inspect(engine).get_table_names()) == ALL_TABLES
        doc_indexes = {ix["name"] for ix in inspect(engine).get_indexes("documents")}
        assert {"ix_documents_tenant_content", "ix_documents_source"} <= doc_indexes
        chunk_indexes = {ix["name"] for ix in inspect(engine).get_indexes("chunks")}
        assert {"ix_chunks_doc", "ix_chunks_text_hash"} <= chunk_indexes
    finally:
        engine.dispose()
    # Catalog.open on a migrated database applies nothing and works.
    with Catalog.open(catalog_url) as cat:
        assert current_revision(cat.engine) == ALL_VERSIONS[-1]
        assert cat.documents.document_counts_by_status() == {}


def test_the_migrations_build_exactly_the_schema_module(catalog_url: str) -> None:
    """schema.py and the revisions may not drift apart: a schema change without
    a revision (or the reverse) fails here, on both backends."""
    with Catalog.open(catalog_url) as cat, cat.engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), schema.metadata
        )
    assert diff == []


def test_failed_migration_rolls_back_and_is_not_recorded(catalog_url: str, tmp_path: Path) -> None:
    bad = revision_source(
        "9001",
        ALL_VERSIONS[-1],
        'op.execute("CREATE TABLE half_done (x INTEGER)")\nraise RuntimeError("boom")',
    )
    location = migrations_copy(tmp_path, bad)
    engine = create_catalog_engine(catalog_url)
    try:
        # From empty: one transaction, so the good revisions before it roll back too.
        with pytest.raises(RuntimeError, match="boom"):
            migrate(engine, script_location=location)
        assert current_revision(engine) is None
        assert inspect(engine).get_table_names() == []
        # From an up-to-date catalog: only the failing revision is missing afterwards.
        assert migrate(engine) == ALL_VERSIONS
        with pytest.raises(RuntimeError, match="boom"):
            migrate(engine, script_location=location)
        assert current_revision(engine) == ALL_VERSIONS[-1]
        assert "half_done" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_a_new_revision_changes_a_catalog_that_holds_rows(catalog_url: str, tmp_path: Path) -> None:
    """The path every later schema change takes: a revision that adds a column
    to a table with rows (batch mode: SQLite copies the table)."""
    add_column = revision_source(
        "9001",
        ALL_VERSIONS[-1],
        'with op.batch_alter_table("sources") as batch:\n'
        '    batch.add_column(sa.Column("region", sa.String(32), nullable=True))',
    )
    with Catalog.open(catalog_url) as cat:
        cat.sources.create_source(
            "t1", source_id="s1", type="object_store", uri="file:///data", if_exists="update"
        )
        cat.acls.upsert_acl("a1", "t1", ["eng", "hr"])
    engine = create_catalog_engine(catalog_url)
    try:
        assert migrate(engine, script_location=migrations_copy(tmp_path, add_column)) == ["9001"]
        assert "region" in {c["name"] for c in inspect(engine).get_columns("sources")}
        cat = Catalog(engine, catalog_url)
        source = cat.sources.get_source("s1", tenant_id="t1")
        assert source is not None and (source.type, source.uri, source.sync) == (
            "object_store",
            "file:///data",
            None,
        )
        assert cat.acls.acl_ids_for_groups("t1", ["hr"]) == ["a1"]
    finally:
        engine.dispose()


def test_a_catalog_of_the_hand_written_migrations_is_stamped_and_keeps_its_rows(catalog_url: str) -> None:
    engine = create_catalog_engine(catalog_url)
    try:
        make_legacy_catalog(engine, version=6)
        with engine.begin() as conn:
            conn.execute(
                schema.acls.insert(),
                [
                    {"acl_id": "a1", "tenant_id": "t1", "allow_groups": '["eng", "hr"]', "updated_at": 1.0},
                    {"acl_id": "a2", "tenant_id": "t2", "allow_groups": '["eng"]', "updated_at": 1.0},
                ],
            )
            conn.execute(
                schema.acl_groups.insert(),
                [
                    {"tenant_id": "t1", "group_name": "eng", "acl_id": "a1"},
                    {"tenant_id": "t1", "group_name": "hr", "acl_id": "a1"},
                    {"tenant_id": "t2", "group_name": "eng", "acl_id": "a2"},
                ],
            )
        # Stamped at the baseline (not re-created), then the later revisions run.
        assert migrate(engine) == ALL_VERSIONS[1:]
        assert current_revision(engine) == ALL_VERSIONS[-1]
        assert set(inspect(engine).get_table_names()) == ALL_TABLES  # schema_migrations dropped
    finally:
        engine.dispose()
    with Catalog.open(catalog_url) as cat:
        assert cat.acls.acl_ids_for_groups("t1", ["eng"]) == ["a1"]
        assert cat.acls.acl_ids_for_groups("t2", ["eng", "hr"]) == ["a2"]


def test_an_older_hand_written_catalog_is_refused_unchanged(catalog_url: str) -> None:
    engine = create_catalog_engine(catalog_url)
    try:
        make_legacy_catalog(engine, version=3)
        with pytest.raises(LegacyCatalogError, match="version 3"):
            migrate(engine)
        assert current_revision(engine) is None
        assert "schema_migrations" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_concurrent_open_applies_each_migration_once(catalog_url: str) -> None:
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            engine = create_catalog_engine(catalog_url)
            try:
                results.append(migrate(engine))
            finally:
                engine.dispose()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(v for r in results for v in r) == ALL_VERSIONS


def test_normalize_url_accepts_bare_paths(tmp_path: Path) -> None:
    path = f"{tmp_path}/sub/dir/cat.db"
    assert normalize_url(path) == f"sqlite:///{path}"
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    with Catalog.open(path) as cat:
        assert cat.url == f"sqlite:///{path}"
        cat.sources.create_source("t1", source_id="s1", type="object_store", if_exists="update")
        with cat.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_catalog_pool_size_from_the_environment() -> None:
    assert catalog_pool_size({}) == catalog_pool_size({POOL_SIZE_ENV: " "}) == 4
    assert catalog_pool_size({POOL_SIZE_ENV: "12"}) == 12
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match=POOL_SIZE_ENV):
            catalog_pool_size({POOL_SIZE_ENV: bad})


def _open_in_forked_child(url: str, out: multiprocessing.queues.SimpleQueue) -> None:  # type: ignore[name-defined]
    before = shared_engine_users()
    with Catalog.open(url) as cat:
        cat.ping()
        out.put((before, shared_engine_users()))


def test_a_process_shares_one_bounded_engine_per_server_catalog(
    catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: every catalog a process opens on one URL shares one engine
    (pool 3 + 3 overflow here), the last close disposes it, a forked child
    opens its own instead of using its parent's connections, and catalogs
    dropped unclosed do not keep it alive. SQLite:
    an engine per catalog, as before."""
    monkeypatch.setenv(POOL_SIZE_ENV, "3")
    first, second = Catalog.open(catalog_url), Catalog.open(catalog_url)
    url = first.url
    if catalog_url.startswith("sqlite"):
        assert first.engine is not second.engine and url not in shared_engine_users()
        first.close()
        second.ping()
        second.close()
        return
    assert first.engine is second.engine and shared_engine_users()[url] == 2
    pool = first.engine.pool
    assert (pool.size(), pool._max_overflow) == (3, 3)  # type: ignore[attr-defined]
    held = [first.engine.connect() for _ in range(6)]
    assert (pool.checkedout(), pool.overflow()) == (6, 3)  # type: ignore[attr-defined]  # a 7th waits
    for conn in held:
        conn.close()
    ctx = multiprocessing.get_context("fork")
    out = ctx.SimpleQueue()
    child = ctx.Process(target=_open_in_forked_child, args=(url, out))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert out.get() == ({}, {url: 1})  # the parent's engine was not the child's
    second.ping()  # the child closed none of the parent's connections
    first.close()
    first.close()  # twice: counted once
    assert shared_engine_users()[url] == 1
    second.ping()
    second.close()
    assert url not in shared_engine_users()
    dropped = Catalog.open(catalog_url)  # never closed: its engine goes with it, as before the sharing
    assert shared_engine_users()[url] == 1
    del dropped
    gc.collect()
    assert url not in shared_engine_users()


# ------------------------------------------------------------------------ sources


def test_registering_again_updates_and_is_scoped_per_tenant(catalog: Catalog) -> None:
    catalog.sources.create_source(
        "t1", source_id="s1", type="object_store", uri="file:///data", if_exists="update"
    )
    catalog.sources.create_source(
        "t1", source_id="s1", type="object_store", uri="file:///data", if_exists="update"
    )
    with catalog.engine.connect() as conn:
        rows = conn.execute(select(schema.sources)).mappings().all()
    assert len(rows) == 1
    assert (rows[0]["tenant_id"], rows[0]["type"], rows[0]["uri"]) == ("t1", "object_store", "file:///data")
    assert rows[0]["created_at"] > 0
    # Another tenant's "s1" is its own source: t1's is untouched.
    catalog.sources.create_source(
        "t2", source_id="s1", type="wiki", uri="https://wiki.example.com/w", if_exists="update"
    )
    one = catalog.sources.get_source("s1", tenant_id="t1")
    two = catalog.sources.get_source("s1", tenant_id="t2")
    assert one is not None and two is not None
    assert (one.type, one.uri, two.type, two.uri) == (
        "object_store",
        "file:///data",
        "wiki",
        "https://wiki.example.com/w",
    )
    # Without a tenant an id held by two tenants is refused, never guessed.
    with pytest.raises(AmbiguousSourceError):
        catalog.sources.get_source("s1")
    # The operator may move a source's location (an empty uri keeps it).
    catalog.sources.create_source(
        "t1", source_id="s1", type="object_store", uri="file:///data2", if_exists="update"
    )
    catalog.sources.create_source("t1", source_id="s1", type="object_store", if_exists="update")
    moved = catalog.sources.get_source("s1", tenant_id="t1")
    assert moved is not None and moved.uri == "file:///data2"
    # The API's registration refuses a taken id; both paths refuse the same bad definitions.
    with pytest.raises(ConflictError):
        catalog.sources.create_source("t1", source_id="s1", type="object_store")
    for if_exists in ("fail", "update"):
        with pytest.raises(ValueError, match="source type 'filesystem' must be one of"):
            catalog.sources.create_source("t1", source_id="s9", type="filesystem", if_exists=if_exists)
        with pytest.raises(ValueError, match="source id '../x' must match"):
            catalog.sources.create_source("t1", source_id="../x", type="wiki", if_exists=if_exists)
        with pytest.raises(ValueError, match="sync must be one of webhook, poll, got 'push'"):
            catalog.sources.create_source("t1", source_id="s9", type="wiki", sync="push", if_exists=if_exists)
    assert catalog.sources.get_source("s9", tenant_id="t1") is None


def test_get_source_returns_the_one_source_row_and_its_connector_spec(catalog: Catalog) -> None:
    """``get_source`` reads the row into the one source type,
    ``SourceState``: its ``spec()`` is what a connector gets, its ``public()``
    never shows the credentials reference."""
    catalog.sources.create_source(
        "t1", source_id="w", type="wiki", uri="https://wiki.example.com/w", credentials_ref="env://T1_WIKI"
    )
    assert catalog.syncs.configure_source("w", tenant_id="t1", options={"acl_groups": ["eng"]})
    catalog.sources.create_source("t1", source_id="open", type="object_store", uri="file:///data")
    source = catalog.sources.get_source("w", tenant_id="t1")
    assert isinstance(source, SourceState) and source == catalog.sources.get_source("w")
    assert source.created_at > 0 and source.credentials_ref_set is True
    assert source.spec() == SourceSpec(
        source_id="w",
        tenant_id="t1",
        type="wiki",
        uri="https://wiki.example.com/w",
        credentials_ref="env://T1_WIKI",
        options={"acl_groups": ["eng"]},
        credentials_by="tenant",
    )
    public = source.public()
    assert "credentials_ref" not in public and "env://T1_WIKI" not in json.dumps(public)
    assert (public["credentials_ref_set"], public["created_at"]) == (True, source.created_at)
    public_source = catalog.sources.get_source("open", tenant_id="t1")
    assert public_source is not None and public_source.credentials_ref_set is False
    assert public_source.spec() == SourceSpec(
        source_id="open", tenant_id="t1", type="object_store", uri="file:///data", credentials_by="tenant"
    )


# ---------------------------------------------------------------------------- ACLs


def test_acl_ids_for_groups_intersects_and_is_tenant_scoped(catalog: Catalog) -> None:
    catalog.acls.upsert_acl("acl-eng", "t1", ["eng", "all"])
    catalog.acls.upsert_acl("acl-hr", "t1", ["hr", "all", "hr"])
    catalog.acls.upsert_acl("acl-fin", "t1", ["finance"])
    catalog.acls.upsert_acl("other-eng", "t2", ["eng"])  # same group name, another tenant

    assert catalog.acls.acl_ids_for_groups("t1", ["eng"]) == ["acl-eng"]
    assert catalog.acls.acl_ids_for_groups("t1", ["all"]) == ["acl-eng", "acl-hr"]
    assert catalog.acls.acl_ids_for_groups("t1", ["hr", "finance", "nobody"]) == ["acl-fin", "acl-hr"]
    assert catalog.acls.acl_ids_for_groups("t1", []) == []
    assert catalog.acls.acl_ids_for_groups("t1", ["nobody"]) == []
    assert catalog.acls.acl_ids_for_groups("t2", ["eng", "all"]) == ["other-eng"]
    assert catalog.acls.acl_ids_for_groups("t3", ["eng"]) == []
    assert catalog.acls.get_acl_groups("acl-hr") == ("all", "hr")
    assert catalog.acls.get_acl_groups("missing") is None

    # Replacing an ACL's groups removes the old memberships (permission removal).
    catalog.acls.upsert_acl("acl-eng", "t1", ["eng-leads"])
    catalog.acls.upsert_acl("acl-eng", "t1", ["eng-leads"])
    assert catalog.acls.acl_ids_for_groups("t1", ["eng"]) == []
    assert catalog.acls.acl_ids_for_groups("t1", ["all"]) == ["acl-hr"]
    assert catalog.acls.acl_ids_for_groups("t1", ["eng-leads"]) == ["acl-eng"]
    with catalog.engine.connect() as conn:
        assert conn.execute(select(schema.acls.c.acl_id)).all().__len__() == 4
        n_groups = conn.execute(select(schema.acl_groups.c.acl_id)).all()
    assert len(n_groups) == 1 + 2 + 1 + 1  # eng-leads; all, hr; finance; t2 eng


def test_acl_lookup_with_more_groups_than_one_batch(catalog: Catalog) -> None:
    catalog.acls.upsert_acl("a-last", "t1", ["g1199"])
    catalog.acls.upsert_acl("a-first", "t1", ["g0000"])
    groups = [f"g{i:04d}" for i in range(1200)]
    assert catalog.acls.acl_ids_for_groups("t1", groups) == ["a-first", "a-last"]


# ------------------------------------------------------------------------ documents


def test_record_fetch_get_document_and_status(catalog: Catalog) -> None:
    assert catalog.documents.get_document("d1") is None
    catalog.documents.record_fetch(fetch("d1"))
    catalog.documents.record_fetch(fetch("d1"))  # repeated delivery: same row
    doc = catalog.documents.get_document("d1")
    assert isinstance(doc, DocumentRow)
    assert (doc.status, doc.source_version, doc.content_hash, doc.size) == (STATUS_FETCHED, "v1", "h1", 123)
    assert (doc.source_id, doc.tenant_id, doc.acl_id, doc.canonical_doc_id) == ("s1", "t1", "acl1", "d1")
    assert (doc.mime, doc.uri, doc.source_object_id) == ("text/plain", "file:///src/d1", "obj/d1")
    assert doc.indexed_version is None and doc.chunk_count == 0 and doc.indexed_at is None
    assert doc.updated_at > 0

    catalog.documents.set_status("d1", "failed", "corrupt")
    doc = catalog.documents.get_document("d1")
    assert doc is not None and (doc.status, doc.error_class) == ("failed", "corrupt")
    catalog.documents.set_status("d1", "parsed")
    doc = catalog.documents.get_document("d1")
    assert doc is not None and (doc.status, doc.error_class) == ("parsed", None)
    catalog.documents.set_status("missing", "parsed")  # no row, no error
    assert catalog.documents.get_document("missing") is None
    assert catalog.documents.document_counts_by_status() == {"parsed": 1}


def test_record_fetch_keeps_indexed_for_same_hash_only(catalog: Catalog) -> None:
    catalog.documents.record_fetch(fetch("d1", version="v1", content_hash="h1"))
    assert flip(catalog, "d1", version="v1", content_hash="h1", expected_version_guard="v1")

    # Touched (new mtime) but same bytes: stays indexed, live fields kept.
    catalog.documents.record_fetch(fetch("d1", version="v2", content_hash="h1"))
    doc = catalog.documents.get_document("d1")
    assert doc is not None
    assert (doc.status, doc.source_version, doc.indexed_version) == (STATUS_INDEXED, "v1", "h1@v1")
    assert doc.chunk_count == 3

    # New bytes: the live version (status, hash of the live bytes, and the
    # version stamp the gate compares with) stays until the next flip: no
    # observation of v3 is recorded before v3 is written.
    catalog.documents.record_fetch(fetch("d1", version="v3", content_hash="h2"))
    doc = catalog.documents.get_document("d1")
    assert doc is not None
    assert (doc.status, doc.content_hash, doc.source_version, doc.indexed_version, doc.chunk_count) == (
        STATUS_INDEXED,
        "h1",
        "v1",
        "h1@v1",
        3,
    )
    assert flip(catalog, "d1", version="v3", content_hash="h2", expected_version_guard="v1")
    doc = catalog.documents.get_document("d1")
    assert doc is not None and (doc.content_hash, doc.source_version) == ("h2", "v3")


def test_record_fetch_accepts_fetched_document(catalog: Catalog) -> None:
    src = SourceFile("t9", "s9", "a/b.txt", "file:///root/a/b.txt", 10, ("eng",), "etag-1")
    fd = FetchedDocument("d9", src, "hash9", "mem://raw/hash9", 10, "acl9", "d9", "text/markdown", "fast")
    catalog.documents.record_fetch(fd)
    doc = catalog.documents.get_document("d9")
    assert doc is not None
    assert (doc.tenant_id, doc.source_id, doc.source_object_id, doc.uri) == (
        "t9",
        "s9",
        "a/b.txt",
        "file:///root/a/b.txt",
    )
    assert (doc.source_version, doc.content_hash, doc.acl_id, doc.mime, doc.size) == (
        "etag-1",
        "hash9",
        "acl9",
        "text/markdown",
        10,
    )
    # A DocumentRow round-trips through record_fetch too.
    catalog.documents.record_fetch(
        DocumentRow(doc_id="d10", source_id="s9", tenant_id="t9", content_hash="x")
    )
    d10 = catalog.documents.get_document("d10")
    assert d10 is not None and d10.canonical_doc_id == "d10" and d10.status == STATUS_FETCHED


def _fields(catalog: Catalog, doc_id: str, *names: str) -> tuple[object, ...]:
    """The named fields of the document's row (which must exist)."""
    doc = catalog.documents.get_document(doc_id)
    assert doc is not None, doc_id
    return tuple(getattr(doc, name) for name in names)


def test_flip_indexed_version_and_guard(catalog: Catalog) -> None:
    assert not flip(catalog, "missing")
    catalog.documents.record_fetch(fetch("d1", version="v1"))
    assert flip(catalog, "d1", version="v1", expected_version_guard="v1")
    live = ("status", "indexed_version", "chunker_id", "parser_version")
    assert _fields(catalog, "d1", *live) == (STATUS_INDEXED, "h1@v1", "chunker-1", "parser-1")
    assert _fields(catalog, "d1", "chunk_count", "indexed_at", "error_class") == (3, 1000.5, None)

    # A newer fetch (v2) records nothing the gate reads before its write.
    catalog.documents.record_fetch(fetch("d1", version="v2", content_hash="h2"))
    versions = ("status", "source_version", "content_hash", "indexed_version")
    assert _fields(catalog, "d1", *versions) == (STATUS_INDEXED, "v1", "h1", "h1@v1")
    # Two writers saw v1 live: the first flip (v2) passes, the slow one is refused.
    assert flip(catalog, "d1", version="v2", content_hash="h2", expected_version_guard="v1")
    assert not flip(catalog, "d1", version="v1", content_hash="h1", expected_version_guard="v1")
    assert _fields(catalog, "d1", "indexed_version") == ("h2@v2",)
    assert flip(catalog, "d1", version="v2", content_hash="h2")  # repeated: same end state
    assert catalog.documents.document_counts_by_status() == {STATUS_INDEXED: 1}


def test_find_indexed_by_content_links_exact_duplicates(catalog: Catalog) -> None:
    catalog.documents.record_fetch(fetch("d1", content_hash="same"))
    assert (
        catalog.documents.find_indexed_by_content("t1", "same", exclude_doc_id="d2") is None
    )  # not indexed yet
    assert flip(catalog, "d1", content_hash="same")

    catalog.documents.record_fetch(fetch("d2", content_hash="same", canonical_doc_id="d1"))
    assert flip(catalog, "d2", content_hash="same")  # indexed, but as a copy of d1
    catalog.documents.record_fetch(fetch("x1", content_hash="same", tenant="t2"))
    assert flip(catalog, "x1", content_hash="same")

    found = catalog.documents.find_indexed_by_content("t1", "same", exclude_doc_id="d3")
    assert found is not None and found.doc_id == "d1"
    assert (
        catalog.documents.find_indexed_by_content("t1", "same", exclude_doc_id="d1") is None
    )  # d2 is not canonical
    other = catalog.documents.find_indexed_by_content("t2", "same", exclude_doc_id="d3")
    assert other is not None and other.doc_id == "x1"
    assert catalog.documents.find_indexed_by_content("t1", "other-hash", exclude_doc_id="d3") is None

    # A deleted canonical document is not a link target.
    with catalog.engine.begin() as conn:
        conn.execute(
            schema.documents.update().where(schema.documents.c.doc_id == "d1").values(deleted_at=5.0)
        )
    assert catalog.documents.find_indexed_by_content("t1", "same", exclude_doc_id="d3") is None


def test_documents_for_source_and_counts(catalog: Catalog) -> None:
    for i in range(5):
        catalog.documents.record_fetch(fetch(f"d{i}", source_id="s1"))
    catalog.documents.record_fetch(fetch("e0", source_id="s2", tenant="t2"))
    assert flip(catalog, "d1")
    assert flip(catalog, "d3")
    catalog.documents.set_status("d4", "failed", "corrupt")

    docs = catalog.documents.documents_for_source("s1")
    assert [d.doc_id for d in docs] == ["d0", "d1", "d2", "d3", "d4"]
    assert [d.doc_id for d in catalog.documents.documents_for_source("s2")] == ["e0"]
    assert catalog.documents.documents_for_source("nope") == []
    assert catalog.documents.document_counts_by_status() == {
        STATUS_FETCHED: 3,
        STATUS_INDEXED: 2,
        "failed": 1,
    }
    assert catalog.documents.document_counts_by_status("t1") == {
        STATUS_FETCHED: 2,
        STATUS_INDEXED: 2,
        "failed": 1,
    }
    assert catalog.documents.document_counts_by_status("t2") == {STATUS_FETCHED: 1}
    assert catalog.documents.document_counts_by_status("t3") == {}


# -------------------------------------------------------------------- parsed docs


def test_parsed_docs_round_trip_and_overwrite(catalog: Catalog) -> None:
    assert catalog.parsed.get_parsed("h1", "p1") is None
    catalog.parsed.put_parsed("h1", "p1", "mem://parsed/h1/p1.json", 12, [3, 7], 0.82)
    catalog.parsed.put_parsed("h1", "p1", "mem://parsed/h1/p1.json", 12, [3, 7], 0.82)
    catalog.parsed.put_parsed("h1", "p2", "mem://parsed/h1/p2.json", 12)
    row = catalog.parsed.get_parsed("h1", "p1")
    assert row is not None
    assert (row.elements_uri, row.pages, row.pages_for_review, row.ocr_confidence) == (
        "mem://parsed/h1/p1.json",
        12,
        (3, 7),
        0.82,
    )
    row2 = catalog.parsed.get_parsed("h1", "p2")
    assert row2 is not None and row2.pages_for_review == () and row2.ocr_confidence is None
    catalog.parsed.put_parsed("h1", "p1", "mem://parsed/h1/p1-v2.json", 11, [], None)
    row = catalog.parsed.get_parsed("h1", "p1")
    assert row is not None and (row.elements_uri, row.pages, row.pages_for_review) == (
        "mem://parsed/h1/p1-v2.json",
        11,
        (),
    )
    with catalog.engine.connect() as conn:
        assert len(conn.execute(select(schema.parsed_docs.c.content_hash)).all()) == 2


def test_a_stored_parse_keeps_the_parsers_metadata(catalog: Catalog) -> None:
    """A stored parse is read again instead of parsing (a re-run, a
    re-chunk): the document's identity line, part of every chunk id, reads
    the parser's title and author, so they come back with it."""
    meta = {"title": "Harbor annual report 2022", "author": "Harbor Logistics Group plc"}
    catalog.parsed.put_parsed("h1", "p1", "mem://parsed/h1/p1.json", 3, metadata=meta)
    catalog.parsed.put_parsed("h2", "p1", "mem://parsed/h2/p1.json", 3)
    row, bare = catalog.parsed.get_parsed("h1", "p1"), catalog.parsed.get_parsed("h2", "p1")
    assert row is not None and row.doc_metadata == meta
    assert bare is not None and bare.doc_metadata == {}


# -------------------------------------------------------------------------- chunks


def test_write_chunks_idempotent_and_round_trip(catalog: Catalog) -> None:
    chunks = [chunk(i) for i in range(5)]
    assert catalog.chunks.write_chunks(chunks) == 5
    assert catalog.chunks.write_chunks(chunks) == 5
    assert catalog.chunks.write_chunks([]) == 0
    assert catalog.chunks.chunk_counts_by_doc() == {"d1": 5}
    assert catalog.chunks.chunk_ids_for_doc("d1") == {c.chunk_id for c in chunks}
    assert catalog.chunks.chunk_ids_for_doc("d2") == set()

    stored = catalog.chunks.chunks_by_ids([c.chunk_id for c in chunks] + ["missing"])
    assert stored == {c.chunk_id: c for c in chunks}  # exact round trip, tuples and unicode included
    assert catalog.chunks.chunks_for_doc("d1") == chunks

    # Same chunk_id with new content updates in place; duplicates in one call collapse.
    changed = chunk(0, text_="rewritten")
    assert catalog.chunks.write_chunks([chunk(0), changed]) == 1
    assert catalog.chunks.chunks_by_ids([changed.chunk_id])[changed.chunk_id].text == "rewritten"
    assert catalog.chunks.chunk_counts_by_doc() == {"d1": 5}


def test_chunk_citations_round_trip(catalog: Catalog) -> None:
    from dataclasses import replace

    cited = [
        replace(
            chunk(i),
            page_end=i + 3,
            char_start=100 * i,
            char_end=100 * i + 80,
            boxes=((i + 1, 0.1, 0.2, 0.9, 0.25), (i + 2, 0.1, 0.05, 0.5, 0.1)),
            context="Acme Corp | fiscal year ended December 31, 2022",
        )
        for i in range(3)
    ]
    assert catalog.chunks.write_chunks(cited) == 3
    assert catalog.chunks.chunks_by_ids([c.chunk_id for c in cited]) == {c.chunk_id: c for c in cited}
    plain = chunk(7)
    catalog.chunks.write_chunks([plain])
    back = catalog.chunks.chunks_by_ids([plain.chunk_id])[plain.chunk_id]
    assert (back.page_end, back.char_start, back.char_end, back.boxes, back.context) == (0, 0, 0, (), "")


def test_paragraph_holders_per_source(catalog: Catalog) -> None:
    par = catalog.paragraphs
    assert par.record("t1", "s1", "d1", ["p1", "p2", "p2"]) == 2
    assert par.record("t1", "s1", "d2", ["p1"]) == 1
    assert par.record("t1", "s2", "d3", ["p1"]) == 1  # another source
    assert par.record("t2", "s1", "d4", ["p1"]) == 1  # another tenant
    assert par.holders("t1", "s1", ["p1", "p2", "p3"]) == {"p1": 2, "p2": 1}
    assert par.holders("t1", "s1", ["p1"], exclude_doc_id="d1") == {"p1": 1}
    assert par.record("t1", "s1", "d1", ["p3"]) == 1  # a new version replaces the rows
    assert par.holders("t1", "s1", ["p1", "p2", "p3"]) == {"p1": 1, "p3": 1}
    assert par.forget("d1") == 1 and par.forget("d1") == 0
    assert par.holders("t1", "s1", ["p1", "p3"]) == {"p1": 1}
    assert par.source_documents("t1", "s1") == 0
    catalog.documents.record_fetch(fetch("d1"))
    catalog.documents.flip_indexed_version(
        "d1",
        content_hash="h1",
        source_version="v1",
        indexed_version="v1",
        chunker_id="c",
        parser_version="p",
        chunk_count=0,
        indexed_at=1.0,
    )
    assert par.source_documents("t1", "s1") == 1


def test_chunks_many_batches_delete_and_counts(catalog: Catalog) -> None:
    big = [chunk(i, doc_id="big") for i in range(1234)]
    other = [chunk(i, doc_id="o1", tenant="t2") for i in range(3)]
    assert catalog.chunks.write_chunks(big + other) == 1237
    assert len(catalog.chunks.chunks_by_ids([c.chunk_id for c in big])) == 1234
    assert catalog.chunks.chunk_counts_by_doc() == {"big": 1234, "o1": 3}
    assert catalog.chunks.chunk_counts_by_doc("t2") == {"o1": 3}
    assert catalog.chunks.chunk_counts_by_doc("t3") == {}

    gone = [c.chunk_id for c in big[:1100]]
    assert catalog.chunks.delete_chunks(gone) == 1100
    assert catalog.chunks.delete_chunks(gone) == 0  # repeated: nothing left
    assert catalog.chunks.chunk_counts_by_doc() == {"big": 134, "o1": 3}
    # Tenant scope: another tenant's chunk id is not deleted.
    assert catalog.chunks.delete_chunks([other[0].chunk_id], tenant_id="t1") == 0
    assert catalog.chunks.delete_chunks([other[0].chunk_id], tenant_id="t2") == 1
    assert catalog.chunks.delete_chunks([]) == 0
    assert catalog.chunks.chunk_counts_by_doc() == {"big": 134, "o1": 2}


def test_set_chunk_acl_ids(catalog: Catalog) -> None:
    catalog.chunks.write_chunks([chunk(i) for i in range(4)] + [chunk(0, doc_id="d2")])
    assert catalog.chunks.set_chunk_acl_ids("d1", ["acl9"]) == 4
    assert catalog.chunks.set_chunk_acl_ids("d1", ["acl9"]) == 4
    assert catalog.chunks.set_chunk_acl_ids("d1", ["acl7"], tenant_id="t2") == 0
    assert catalog.chunks.set_chunk_acl_ids("nope", ["acl9"]) == 0
    assert {c.acl_ids for c in catalog.chunks.chunks_for_doc("d1")} == {("acl9",)}
    assert [c.acl_ids for c in catalog.chunks.chunks_for_doc("d2")] == [("acl1", "acl2")]


# ----------------------------------------------------------------- embedding cache


def test_embeddings_round_trip_bit_exact(catalog: Catalog) -> None:
    rng = np.random.default_rng(7)
    vectors = {f"th{i}": rng.standard_normal(384).astype(np.float32) for i in range(700)}
    vectors["tiny"] = np.array([np.float32(1e-38), np.float32(-0.0), np.float32(3.4e38)], dtype=np.float32)
    assert catalog.chunks.put_embeddings(vectors, "model-a") == 701
    assert catalog.chunks.put_embeddings(vectors, "model-a") == 701  # idempotent
    assert catalog.chunks.put_embeddings({}, "model-a") == 0

    got = catalog.chunks.get_embeddings([*vectors, "missing", "th0"], "model-a")
    assert set(got) == set(vectors)
    for key, vec in vectors.items():
        assert got[key].dtype == np.float32
        assert got[key].tobytes() == vec.tobytes()
    assert catalog.chunks.get_embeddings(list(vectors), "model-b") == {}

    # float64 input is stored as float32; another model version is a separate key.
    catalog.chunks.put_embeddings({"th0": np.ones(4)}, "model-b")
    assert catalog.chunks.get_embeddings(["th0"], "model-b")["th0"].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert catalog.chunks.get_embeddings(["th0"], "model-a")["th0"].shape == (384,)
    with catalog.engine.connect() as conn:
        assert len(conn.execute(select(schema.embedding_cache.c.text_hash)).all()) == 702


def test_put_embeddings_rejects_bad_vectors(catalog: Catalog) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        catalog.chunks.put_embeddings({"ok": np.ones(3), "bad": np.array([1.0, np.nan])}, "m")
    with pytest.raises(ValueError, match="1-D"):
        catalog.chunks.put_embeddings({"bad": np.ones((2, 2))}, "m")
    with pytest.raises(ValueError, match="1-D"):
        catalog.chunks.put_embeddings({"bad": np.array([], dtype=np.float32)}, "m")
    assert catalog.chunks.get_embeddings(["ok", "bad"], "m") == {}  # nothing written


# -------------------------------------------------------------------- dead letters


def test_dead_letters_list_counts_and_resolve(catalog: Catalog) -> None:
    def dl(doc: str, error_class: str, tenant: str = "t1") -> DeadLetter:
        return DeadLetter(
            stage="parse",
            doc_id=doc,
            uri=f"file:///{doc}",
            error_class=error_class,
            message=f"{doc} failed",
            traceback="Traceback...",
            attempts=5,
            payload=json.dumps({"doc_id": doc}),
            tenant_id=tenant,
            source_version="v1",
        )

    ids = [
        catalog.dead_letters.add_dead_letter(dl("d1", "corrupt"), source_id="s1"),
        catalog.dead_letters.add_dead_letter(dl("d2", "corrupt"), source_id="s1"),
        catalog.dead_letters.add_dead_letter(dl("d3", "encrypted"), source_id="s2"),
        catalog.dead_letters.add_dead_letter(dl("x1", "timeout", tenant="t2"), source_id="s9"),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 4

    rows = catalog.dead_letters.list_dead_letters()
    assert [r.doc_id for r in rows] == ["d1", "d2", "d3", "x1"]
    first = rows[0]
    assert first.id == ids[0] and first.resolved_at is None and first.created_at > 0
    assert first.to_dead_letter() == dl("d1", "corrupt")
    assert (first.source_id, first.stage, first.attempts) == ("s1", "parse", 5)
    assert [r.doc_id for r in catalog.dead_letters.list_dead_letters(source_id="s1")] == ["d1", "d2"]
    assert [r.doc_id for r in catalog.dead_letters.list_dead_letters(tenant_id="t2")] == ["x1"]
    assert [r.doc_id for r in catalog.dead_letters.list_dead_letters(tenant_id="t1", source_id="s2")] == [
        "d3"
    ]
    assert [r.doc_id for r in catalog.dead_letters.list_dead_letters(limit=2)] == ["d1", "d2"]
    assert catalog.dead_letters.dead_letter_counts() == {"corrupt": 2, "encrypted": 1, "timeout": 1}

    assert catalog.dead_letters.resolve_dead_letter(ids[1])
    assert not catalog.dead_letters.resolve_dead_letter(ids[1])
    assert not catalog.dead_letters.resolve_dead_letter(999_999)
    assert catalog.dead_letters.dead_letter_counts() == {"corrupt": 1, "encrypted": 1, "timeout": 1}
    assert [r.doc_id for r in catalog.dead_letters.list_dead_letters(source_id="s1")] == ["d1"]
    all_s1 = catalog.dead_letters.list_dead_letters(source_id="s1", unresolved_only=False)
    assert [(r.doc_id, r.resolved_at is not None) for r in all_s1] == [("d1", False), ("d2", True)]


def test_a_later_good_version_or_delete_settles_the_documents_dead_letters(catalog: Catalog) -> None:
    """A dead letter stays open until a later success of its document: the
    flip of a version that settles it, the link of an exact copy, a completed
    delete (``ragsync.decisions.settles_dead_letter``, in the same
    transaction). A failure of a newer version stays open when an older one
    is written (two workers), and so does another document's."""

    def dead(doc: str, version: str, *, event: str = "") -> int:
        payload = {"event_id": event, "doc_id": doc} if event else {"source_object_id": doc}
        letter = DeadLetter(
            stage="parse",
            doc_id=doc,
            uri=f"file:///{doc}",
            error_class="corrupt",
            message="bad",
            payload=json.dumps(payload),
            tenant_id="t1",
            source_version=version,
        )
        return catalog.dead_letters.record_dead_letter(letter, source_id="s1")[0]

    def open_ids() -> list[int]:
        return sorted(r.id for r in catalog.dead_letters.list_dead_letters())

    # A backfill's failure, then a later listing writes the fixed file: the
    # listing saw it after the failure was recorded (its mtime may be older).
    catalog.documents.record_fetch(fetch("d1", version="100.0"))
    listed = dead("d1", "200.0")
    other = dead("d9", "200.0")
    assert flip(
        catalog, "d1", version="150.0", version_domain="timestamp", version_observed_at=time.time() - 60
    )
    assert open_ids() == [listed, other]  # observed before the failure: not settled
    assert flip(
        catalog, "d1", version="150.0", version_domain="timestamp", version_observed_at=time.time() + 1
    )
    assert open_ids() == [other]
    assert catalog.documents.document_counts_by_status() == {"dead_letter": 1, STATUS_INDEXED: 1}

    # Events: version 7 failed while version 6 was written (another worker):
    # still open; version 8 settles it. Times do not decide between events.
    catalog.documents.record_fetch(fetch("d2", version="5"))
    assert flip(catalog, "d2", version="5", by_event=True)
    newer = dead("d2", "7", event="ev7")
    assert flip(catalog, "d2", version="6", by_event=True, version_observed_at=time.time() + 60)
    assert open_ids() == [other, newer] and catalog.documents.get_document("d2").status == STATUS_INDEXED
    assert flip(catalog, "d2", version="8", by_event=True)
    assert open_ids() == [other]

    # An exact copy linked after its failure, and a completed delete.
    catalog.documents.record_fetch(fetch("d3", version="1"))
    copied = dead("d3", "1", event="ev3")
    catalog.copies.mark_duplicate("d3", "d1", content_hash="h1", written=Stamp("2"), by_event=True)
    assert open_ids() == [other] and catalog.documents.get_document("d3").status == "duplicate"
    gone = dead("d9", "201.0")
    catalog.gate_state.put_tombstone(
        "d9", "t1", "300.0", version_domain="timestamp", observed_at=time.time() + 1
    )
    assert open_ids() == [other, gone]  # recorded, not completed: still open
    catalog.gate_state.complete_tombstone("d9")
    assert open_ids() == [] and copied not in open_ids()


def test_close_is_safe_twice(catalog_url: str) -> None:
    cat = Catalog.open(catalog_url)
    cat.sources.create_source("t1", source_id="s1", type="object_store", if_exists="update")
    cat.close()
    cat.close()
    with Catalog.open(catalog_url) as again, again.engine.connect() as conn:  # data persisted
        assert len(conn.execute(select(schema.sources.c.source_id)).all()) == 1
