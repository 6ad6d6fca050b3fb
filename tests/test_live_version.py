"""Queries show only chunks of each document's live version (issue 25).

A new version's chunks are in the vector and keyword indexes and the
catalog before the flip; until the flip a query must still answer with the
old version alone, a crash there (the flip never happens) must leave nothing
extra searchable before any repair, and from the flip on only the new
version's chunks are shown, even while the replaced ones still wait for
their deletion. A chunk both versions share is shown exactly once.

Real stores (Milvus Lite, tantivy, SQLite), the real write stage on the
FnApiRunner, and the query path's catalog checks (``ragsync.query._assemble``;
the query vector is a fixed one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pytest

from ragsync import ids
from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from ragsync.model import Chunk, DocumentPlan, FetchedDocument, SourceFile
from transforms.embed import EmbeddedPlan
from transforms.write import WriteIndexes

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
    vectors = {c.chunk_id: np.full(DIM, 0.1 * (i + 1), dtype=np.float32) for i, c in enumerate(chunks)}
    return EmbeddedPlan(plan, vectors)


V1 = _version("v1", [KEEP, OLD], [KEEP, OLD], [])
V2 = _version("v2", [KEEP, NEW], [NEW], [OLD])


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    s = Settings(home=str(tmp_path / "home"))
    open_catalog(s).close()
    open_vector_index(s, DIM, create=True).close()
    open_keyword_index(s, create=True).close()
    return s


def _write(settings: Settings, embedded: EmbeddedPlan) -> None:
    """Record the version as fetched (the fetch stage) and run the write stage."""
    catalog = open_catalog(settings)
    try:
        catalog.record_fetch(embedded.plan.doc)
    finally:
        catalog.close()
    with beam.Pipeline(runner="FnApiRunner") as p:
        _ = p | beam.Create([embedded], reshuffle=False) | WriteIndexes(settings, DIM)


def _query(settings: Settings) -> list[str]:
    """Chunk ids a reader of ``acl`` gets for a query every chunk matches."""
    from ragsync.identity import Reader, ReadGrant
    from ragsync.query import _assemble

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
    from ragsync.reconcile import repair

    return [(a.action, a.store, a.tenant_id, a.chunks) for a in repair(settings, DIM).actions]


def _everywhere(settings: Settings) -> tuple[set[str], set[str], set[str]]:
    """Chunk ids in the vector index, the keyword index and the catalog."""
    vectors, keywords, catalog = (
        open_vector_index(settings, DIM),
        open_keyword_index(settings),
        open_catalog(settings),
    )
    try:
        return set(vectors.chunk_ids()), set(keywords.chunk_ids()), catalog.chunk_ids_for_doc(DOC_ID)
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
        assert catalog.get_document(DOC_ID).source_version == "v2"  # type: ignore[union-attr]
    finally:
        catalog.close()
    every = {KEEP.chunk_id, OLD.chunk_id, NEW.chunk_id}
    assert _everywhere(settings) == (every, every, every)
    assert _query(settings) == sorted([KEEP.chunk_id, NEW.chunk_id])
    # Repair agrees: the replaced chunk is a dead row, removed everywhere.
    assert _repair(settings) == [("delete_dead_rows", "catalog", "t", 1)]
    assert _everywhere(settings) == ({KEEP.chunk_id, NEW.chunk_id},) * 3
    assert _query(settings) == sorted([KEEP.chunk_id, NEW.chunk_id])
