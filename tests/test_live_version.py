"""Queries show only chunks of each document's live version (issue 25).

A new version's chunks are in the vector and keyword indexes and the
catalog before the flip; until the flip a query must still answer with the
old version alone, a crash there (the flip never happens) must leave nothing
extra searchable before any repair, and from the flip on only the new
version's chunks are shown, even while the replaced ones still wait for
their deletion. A chunk both versions share is shown exactly once.

Real stores (Milvus Lite, tantivy, SQLite), the real write stage on the
FnApiRunner, and the query path's catalog checks (``ragsync.query.search._assemble``;
the query vector is a fixed one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest

from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.operations import WriteDocuments
from ragsync.index.service import EmbeddedPlan
from ragsync.model import Chunk, DocumentPlan, FetchedDocument, SourceFile
from tests.write_plans import embedded, empty_home
from transforms.index import UpdateIndex

DIM = 384  # the live model's: repair checks it
DOC_ID = ids.doc_id("t", "s", "policy")


def _chunk(text: str, ordinal: int) -> Chunk:
    text_hash = ids.text_hash(text)
    return Chunk(
        ids.chunk_id(DOC_ID, "c1", text_hash), DOC_ID, "t", text_hash, ordinal, (), 0, text, 3, ("acl",)
    )


KEEP = _chunk("policy text kept in both versions", 0)
OLD = _chunk("policy text of the first version", 1)
NEW = _chunk("policy text of the second version", 2)


def _version(version: str, chunks: list[Chunk], new: list[Chunk], vanished: list[Chunk]) -> EmbeddedPlan:
    source = SourceFile(
        tenant_id="t", source_id="s", source_object_id="policy", uri="/corpus/policy", source_version=version
    )
    doc = FetchedDocument(DOC_ID, source, "h-" + version, "raw", 1, "acl", DOC_ID)
    plan = DocumentPlan(
        doc,
        "p1",
        "c1",
        tuple(chunks),
        tuple(c.chunk_id for c in new),
        tuple(c.chunk_id for c in vanished),
        ("acl",),
    )
    return embedded(plan, dim=DIM)


V1 = _version("v1", [KEEP, OLD], [KEEP, OLD], [])
V2 = _version("v2", [KEEP, NEW], [NEW], [OLD])


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return empty_home(tmp_path, DIM)


def _write(settings: Settings, embedded: EmbeddedPlan) -> None:
    """Record the version as fetched (the fetch stage) and run the write stage."""
    catalog = open_catalog(settings)
    try:
        catalog.documents.record_fetch(embedded.plan.doc)
    finally:
        catalog.close()
    with beam.Pipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create([embedded], reshuffle=False) | UpdateIndex(settings, DIM, WriteDocuments())


def _query(settings: Settings) -> list[str]:
    """Chunk ids a reader of ``acl`` gets for a query every chunk matches."""
    from ragsync.query.identity import Reader, ReadGrant
    from ragsync.query.search import _assemble

    vectors, keywords, catalog = (
        open_vector_index(settings, DIM),
        open_keyword_index(settings),
        open_catalog(settings),
    )
    try:
        vhits = vectors.search("t", [0.1] * DIM, ["acl"], 50)
        khits = keywords.search("t", "policy text", ["acl"], 50)
        reader = Reader(everywhere=ReadGrant(frozenset({"acl"})))
        return sorted(r.chunk_id for r in _assemble(catalog, "t", vhits, khits, reader, 50, None))
    finally:
        keywords.close()
        vectors.close()
        catalog.close()


def _repair(settings: Settings) -> list[tuple[str, str, str, int]]:
    """``ragsync reconcile --repair``'s actions, as tuples."""
    from ragsync.index.service import IndexService

    with IndexService.open(settings, DIM) as service:
        return [(a.action, a.store, a.tenant_id, a.chunks) for a in service.repair().actions]


def _everywhere(settings: Settings) -> tuple[set[str], set[str], set[str]]:
    """Chunk ids in the vector index, the keyword index and the catalog."""
    vectors, keywords, catalog = (
        open_vector_index(settings, DIM),
        open_keyword_index(settings),
        open_catalog(settings),
    )
    try:
        return set(vectors.chunk_ids()), set(keywords.chunk_ids()), catalog.chunks.chunk_ids_for_doc(DOC_ID)
    finally:
        keywords.close()
        vectors.close()
        catalog.close()


def test_a_crash_between_write_and_flip_leaves_only_the_old_version_searchable(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragsync.catalog.documents import DocumentsRepository

    _write(settings, V1)
    assert _query(settings) == sorted([KEEP.chunk_id, OLD.chunk_id])

    def crash(self: Any, doc_id: str, **kw: Any) -> Any:
        raise RuntimeError("stopped before the flip")

    monkeypatch.setattr(DocumentsRepository, "flip_indexed_version", crash)
    _write(settings, V2)
    monkeypatch.undo()
    # The new version's chunk is everywhere (stores and catalog), not flipped.
    every = {KEEP.chunk_id, OLD.chunk_id, NEW.chunk_id}
    assert _everywhere(settings) == (every, every, every)
    # Only the old version is searchable; the shared chunk exactly once.
    assert _query(settings) == sorted([KEEP.chunk_id, OLD.chunk_id])
    # Repair agrees: the unflipped chunk is a dead row, removed everywhere.
    assert _repair(settings) == [("delete_dead_rows", "catalog", "t", 1)]
    assert _everywhere(settings) == ({KEEP.chunk_id, OLD.chunk_id},) * 3
    assert _query(settings) == sorted([KEEP.chunk_id, OLD.chunk_id])

    # The replay flips it: only the new version, the shared chunk once.
    _write(settings, V2)
    assert _everywhere(settings) == ({KEEP.chunk_id, NEW.chunk_id},) * 3
    assert _query(settings) == sorted([KEEP.chunk_id, NEW.chunk_id])


def test_after_the_flip_the_replaced_chunks_are_hidden_before_their_deletion(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragsync.catalog.copies import CopiesRepository

    _write(settings, V1)

    def crash(self: Any, *args: Any, **kw: Any) -> Any:
        raise RuntimeError("stopped right after the flip")

    # The flip happens; the old chunk stays in both indexes and the catalog
    # (the next step after the flip fails, so nothing is deleted).
    monkeypatch.setattr(CopiesRepository, "set_near_dup", crash)
    _write(settings, V2)
    monkeypatch.undo()
    catalog = open_catalog(settings)
    try:
        assert catalog.documents.get_document(DOC_ID).source_version == "v2"  # type: ignore[union-attr]
    finally:
        catalog.close()
    every = {KEEP.chunk_id, OLD.chunk_id, NEW.chunk_id}
    assert _everywhere(settings) == (every, every, every)
    assert _query(settings) == sorted([KEEP.chunk_id, NEW.chunk_id])
    # Repair agrees: the replaced chunk is a dead row, removed everywhere.
    assert _repair(settings) == [("delete_dead_rows", "catalog", "t", 1)]
    assert _everywhere(settings) == ({KEEP.chunk_id, NEW.chunk_id},) * 3
    assert _query(settings) == sorted([KEEP.chunk_id, NEW.chunk_id])


HOTELS_V1 = "# Hotels\n\nIn London the nightly hotel limit is 250 EUR.\n\n## Oslo\n\nIn Oslo it is 210 EUR.\n"
HOTELS_V2 = (
    "# Hotels\n\nIn Lisbon the nightly hotel limit is 999 EUR.\n\n## Porto\n\nIn Porto it is 180 EUR.\n"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "hook",
    [
        "RAGSYNC_CRASH_AFTER_INDEX_WRITES",  # new chunks in both indexes, no catalog row yet
        "RAGSYNC_CRASH_BEFORE_FLIPS",  # new chunks in both indexes and pending in the catalog
    ],
)
def test_sigkill_between_index_write_and_flip(tmp_path: Path, hook: str) -> None:
    """A real SIGKILL of the backfill process (the fault hook ``hook=1``)
    between the edited document's index write and its flip: while crashed,
    a query (``hybrid_query``, real model, Milvus Lite, tantivy, SQLite)
    returns exactly the old version's chunks of that document, never the new
    ones that are already in the indexes; a re-run converges to the state of
    a clean run of the edited files, reconcile passes, no pending row left."""
    import signal

    from beam_pipelines.backfill import run_backfill
    from ragsync.index.reconcile import reconcile
    from ragsync.query.search import hybrid_query
    from tests.crash_hooks import crash_env
    from tests.proc import cli, run_json, run_until_killed

    src = tmp_path / "src"
    src.mkdir()
    (src / "hotels.md").write_text(HOTELS_V1)
    (src / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    settings = Settings(home=str(tmp_path / "home"))
    run_backfill(str(src), settings, show_progress=False)

    def hotel_rows() -> tuple[str, set[str], set[str]]:
        """(doc id, live chunk ids, pending chunk ids) of hotels.md."""
        catalog = open_catalog(settings)
        try:
            doc = next(
                d
                for d in catalog.documents.documents_for_source(_source(catalog))
                if d.uri.endswith("hotels.md")
            )
            rows = catalog.chunks.chunk_ids_for_doc(doc.doc_id)
            pending = catalog.chunks.pending_chunk_ids("default") & rows
            return doc.doc_id, rows - pending, pending
        finally:
            catalog.close()

    def hotel_hits() -> set[str]:
        hits: set[str] = set()
        for question in ("nightly hotel limit London Oslo", "nightly hotel limit Lisbon Porto 999"):
            hits |= {h.chunk_id for h in hybrid_query(settings, question, groups=["everyone"], k=20)
                     if h.doc_id == doc_id}  # fmt: skip
        return hits

    doc_id, old_ids, pending = hotel_rows()
    assert old_ids and not pending
    assert hotel_hits() == old_ids

    (src / "hotels.md").write_text(HOTELS_V2)
    env = crash_env(**{hook: "1"})
    cmd = cli("backfill", str(src), "--home", settings.home, "--quiet")
    log = tmp_path / "crash.log"
    assert run_until_killed(cmd, env, log) == -signal.SIGKILL, log.read_text()[-2000:]

    # Crashed inside the window: the new chunks are in both indexes (and,
    # before the flip, pending in the catalog), the old version still live.
    vectors, keywords = open_vector_index(settings, DIM), open_keyword_index(settings)
    try:
        in_vectors, in_keywords = set(vectors.chunk_ids("default")), set(keywords.chunk_ids("default"))
    finally:
        keywords.close()
        vectors.close()
    _, live, pending = hotel_rows()
    assert live == old_ids
    new_in_index = (in_vectors & in_keywords) - live - _all_catalog_ids(settings, exclude=pending)
    assert new_in_index, "the kill should leave the new version's chunks in both indexes"
    if hook == "RAGSYNC_CRASH_BEFORE_FLIPS":
        assert pending and pending <= new_in_index
    else:
        assert not pending
    hits = hotel_hits()
    assert hits == old_ids and not hits & new_in_index
    assert not [
        h for h in hybrid_query(settings, "Lisbon Porto 999", groups=["everyone"], k=20) if "Lisbon" in h.text
    ]

    # The re-run converges: the state of a clean run of the edited files.
    env.pop(hook)
    run_json(cmd + ["--json"], env, Path(__file__).resolve().parents[1])
    clean = Settings(home=str(tmp_path / "clean"))
    run_backfill(str(src), clean, show_progress=False)
    _, live, pending = hotel_rows()
    assert not pending and live != old_ids
    assert _all_catalog_ids(settings) == _all_catalog_ids(clean)
    vectors, keywords = open_vector_index(settings, DIM), open_keyword_index(settings)
    try:
        assert (
            set(vectors.chunk_ids("default")) == set(keywords.chunk_ids("default")) == _all_catalog_ids(clean)
        )
    finally:
        keywords.close()
        vectors.close()
    assert reconcile(settings, DIM).ok
    catalog = open_catalog(settings)
    try:
        assert catalog.chunks.pending_chunk_ids("default") == set()
    finally:
        catalog.close()
    assert hotel_hits() == live
    assert any("Lisbon" in h.text for h in hybrid_query(settings, "Lisbon nightly", groups=["everyone"], k=5))


def _source(catalog: Any) -> str:
    from sqlalchemy import select

    from ragsync.catalog import schema

    with catalog.engine.connect() as conn:
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())


def _all_catalog_ids(settings: Settings, exclude: set[str] | None = None) -> set[str]:
    """Every chunk id the catalog holds for the tenant ``default``, less ``exclude``."""
    catalog = open_catalog(settings)
    try:
        return catalog.chunks.chunk_ids_for_tenant("default") - (exclude or set())
    finally:
        catalog.close()
