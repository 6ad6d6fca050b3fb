"""The write stage takes documents in batches: one vector upsert and one
keyword-index commit for a batch, then each document's catalog rows and
version flip on its own; a document that fails is dead-lettered alone and
the rest of its batch is written.

Real stores (Milvus Lite, tantivy, SQLite) in process, on the FnApiRunner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.operations import WRITE_BATCH_CHUNKS, WriteDocuments
from ragsync.index.service import EmbeddedPlan
from ragsync.index.tantivy import TantivyKeywordIndex
from tests.write_plans import DIM, empty_home, new_document
from transforms.index import UpdateIndex


def _embedded(name: str, n_chunks: int, *, dim: int = DIM) -> EmbeddedPlan:
    return new_document(name, n_chunks, dim=dim)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return empty_home(tmp_path)


def _write(settings: Settings, plans: list[EmbeddedPlan], written: list[str], dead: list[Any]) -> None:
    """Record the plans' documents as fetched (as the fetch stage does), run
    UpdateIndex(WriteDocuments()) over them; check the names written and the (stage, doc_id)
    of the dead letters."""
    catalog = open_catalog(settings)
    try:
        for e in plans:
            catalog.documents.record_fetch(e.plan.doc)
    finally:
        catalog.close()
    with beam.Pipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(plans, reshuffle=False) | UpdateIndex(settings, DIM, WriteDocuments())
        names = out["written"] | "Names" >> beam.Map(lambda plan: plan.doc.source.source_object_id)
        assert_that(names, equal_to(written), label="written")
        letters = out["dead"] | "Letters" >> beam.Map(lambda d: (d.stage, d.doc_id))
        assert_that(letters, equal_to(dead), label="dead")


def _stored(settings: Settings, plans: list[EmbeddedPlan]) -> tuple[set[str], set[str], dict[str, str]]:
    """(vector chunk ids, keyword chunk ids, {doc_id: status} of the plans' documents in the catalog)."""
    vectors, keywords, catalog = (
        open_vector_index(settings, DIM),
        open_keyword_index(settings),
        open_catalog(settings),
    )
    try:
        rows = [catalog.documents.get_document(e.plan.doc.doc_id) for e in plans]
        statuses = {row.doc_id: row.status for row in rows if row is not None}
        return set(vectors.chunk_ids()), set(keywords.chunk_ids()), statuses
    finally:
        keywords.close()
        vectors.close()
        catalog.close()


def test_a_batch_of_documents_is_indexed_with_one_keyword_commit(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[int] = []
    upsert = TantivyKeywordIndex.upsert

    def counted(self: TantivyKeywordIndex, chunks: Any) -> int:
        commits.append(len(chunks))
        return upsert(self, chunks)

    monkeypatch.setattr(TantivyKeywordIndex, "upsert", counted)
    plans = [_embedded(f"doc{i}", 3) for i in range(6)]
    _write(settings, plans, [f"doc{i}" for i in range(6)], [])
    # Six documents of 3 new chunks fit one batch (WRITE_BATCH_CHUNKS): one commit.
    assert WRITE_BATCH_CHUNKS > 6 * 3
    assert commits == [18]
    vectors, keywords, statuses = _stored(settings, plans)
    every = {c.chunk_id for e in plans for c in e.plan.chunks}
    assert vectors == keywords == every and len(every) == 18
    assert statuses == {e.plan.doc.doc_id: "indexed" for e in plans}


def test_a_document_the_index_refuses_is_dead_lettered_alone(settings: Settings) -> None:
    # The middle document's vectors have the wrong dimension (a corrupted
    # cache row, say): Milvus refuses the batch's upsert, each document is
    # then tried alone, and only that one fails.
    good_a, bad, good_b = _embedded("good-a", 2), _embedded("bad", 2, dim=DIM + 1), _embedded("good-b", 1)
    _write(settings, [good_a, bad, good_b], ["good-a", "good-b"], [("write", bad.plan.doc.doc_id)])
    vectors, keywords, statuses = _stored(settings, [good_a, bad, good_b])
    good = {c.chunk_id for e in (good_a, good_b) for c in e.plan.chunks}
    assert vectors == keywords == good
    # (The dead-letter sink, not run here, marks the failed one ``dead_letter``.)
    expected = {
        good_a.plan.doc.doc_id: "indexed",
        bad.plan.doc.doc_id: "fetched",
        good_b.plan.doc.doc_id: "indexed",
    }
    assert statuses == expected


def test_a_document_whose_flip_fails_is_dead_lettered_alone(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragsync.catalog.documents import DocumentsRepository

    plans = [_embedded("first", 2), _embedded("broken", 2), _embedded("last", 1)]
    broken = plans[1].plan.doc.doc_id
    flip = DocumentsRepository.flip_indexed_version

    def failing(self: Any, doc_id: str, **kw: Any) -> Any:
        if doc_id == broken:
            raise RuntimeError("the catalog refused the flip")
        return flip(self, doc_id, **kw)

    monkeypatch.setattr(DocumentsRepository, "flip_indexed_version", failing)
    _write(settings, plans, ["first", "last"], [("write", broken)])
    vectors, keywords, statuses = _stored(settings, plans)
    # The broken document's chunks were indexed with the batch but never
    # flipped: they are index rows without a live version (the end-of-run
    # sweep's orphans), and the catalog does not serve them.
    assert vectors == keywords == {c.chunk_id for e in plans for c in e.plan.chunks}
    assert statuses == {
        plans[0].plan.doc.doc_id: "indexed",
        broken: "fetched",
        plans[2].plan.doc.doc_id: "indexed",
    }
