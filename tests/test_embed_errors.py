"""The embed stage's failures end as dead letters through Beam's exception
handling: one per document, and a bad chunk never takes its batch-mates down."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that, equal_to

from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import (
    EmbeddingModel,
    ModelSpec,
    embed_failure,
    embed_with_cache,
    register_model,
)
from ragsync.model import Chunk, DocumentPlan, FetchedDocument, SourceFile
from transforms.dead_letters import dead_letters_from_beam
from transforms.embed import EmbedChunks

POISON = "poison-test"


class _PoisonModel(EmbeddingModel):
    """Deterministic vectors; refuses any text that contains POISON."""

    name = POISON
    version = "poison-test@1"
    dim = 8

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if any("POISON" in t for t in texts):
            raise ValueError("the model refuses this text")
        return np.stack([np.full(self.dim, float(len(t)), dtype=np.float32) for t in texts])


def _plan(name: str, texts: list[str]) -> tuple[str, DocumentPlan]:
    source = SourceFile(tenant_id="t", source_id="s", source_object_id=name, uri=f"/corpus/{name}")
    doc_id = ids.doc_id("t", "s", name)
    doc = FetchedDocument(doc_id, source, "h-" + name, "raw", 1, "acl", doc_id)
    chunks = tuple(
        Chunk(f"{name}-{i}".ljust(32, "0"), doc_id, "t", f"{name}-th{i}", i, (), 0, text, 3, ("acl",))
        for i, text in enumerate(texts)
    )
    plan = DocumentPlan(doc, "p1", "c1", chunks, tuple(c.chunk_id for c in chunks), (), ("acl",))
    return doc_id, plan


def test_a_rejected_chunk_dead_letters_its_document_only(tmp_path: Path) -> None:
    register_model(POISON, _PoisonModel)
    settings = Settings(home=str(tmp_path / "home"))
    open_catalog(settings).close()
    spec = ModelSpec(name=POISON, path="", dim=8, max_seq_length=64, model_version="poison-test@1")
    plans = [
        _plan("good-a", ["alpha text", "beta text"]),
        _plan("bad", ["fine text", "POISON text"]),
        _plan("good-b", ["gamma"]),
    ]
    with beam.Pipeline(runner="FnApiRunner") as p:
        out = p | beam.Create(plans) | EmbedChunks(settings, spec)
        written = out["embedded"] | "Written" >> beam.Map(
            lambda e: (e.plan.doc.source.source_object_id, len(e.vectors))
        )
        assert_that(written, equal_to([("good-a", 2), ("good-b", 1)]), label="embedded")
        dead = [
            pcoll | f"Key{i}" >> beam.Map(lambda d: (d.stage, d.error_class, d.doc_id))
            for i, pcoll in enumerate(out["dead"])
        ]
        assert_that(dead[0], equal_to([]), label="lookup")
        assert_that(dead[1], equal_to([]), label="inference")
        assert_that(dead[2], equal_to([("embed", "embed_failed", plans[1][0])]), label="store")
    # The good vectors were cached, the refused one was not.
    catalog = open_catalog(settings)
    try:
        cached = catalog.chunks.get_embeddings(
            ["good-a-th0", "bad-th0", "bad-th1", "good-b-th0"], "poison-test@1"
        )
    finally:
        catalog.close()
    assert sorted(cached) == ["bad-th0", "good-a-th0", "good-b-th0"]


def test_a_failed_batch_gives_one_dead_letter_per_document() -> None:
    batch = [_plan("a", ["x"]), _plan("b", ["y"])]
    letters = dead_letters_from_beam(
        "embed", (batch, (RuntimeError, "RuntimeError('catalog down')", ["tb\n"]))
    )
    assert [(d.stage, d.doc_id, d.uri, d.error_class) for d in letters] == [
        ("embed", batch[0][0], "/corpus/a", "internal"),
        ("embed", batch[1][0], "/corpus/b", "internal"),
    ]
    (single,) = dead_letters_from_beam("write", (batch[0], (ValueError, "ValueError('x')", [])))
    assert (single.doc_id, single.payload) == (batch[0][0], batch[0][1].doc.to_json())


def test_the_shared_embedding_path_caches_isolates_and_batches(tmp_path: Path) -> None:
    """``embed_with_cache`` (re-embedding, the dual write, repairs): each
    distinct text embedded once, in batches of ``batch_size``, a refused text
    isolated from its batch-mates, good vectors cached, cache hits counted."""
    calls: list[int] = []

    class _Counting(_PoisonModel):
        def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
            calls.append(len(texts))
            return super()._encode(texts, is_query)

    settings = Settings(home=str(tmp_path / "home"))
    catalog = open_catalog(settings)
    try:
        _, plan = _plan("d", ["one", "two", "POISON", "four", "five"])
        chunks = [*plan.chunks, plan.chunks[0]]  # a repeated text is embedded once
        got = embed_with_cache(catalog, _Counting(), chunks, batch_size=4)
        assert (got.hits, got.embedded, sorted(got.failures)) == (0, 4, ["d-th2"])
        assert got.failures["d-th2"] == "ValueError: the model refuses this text"
        # Batch of 4 fails, halves of 2 (one fails), singles; then the last batch of 1.
        assert calls == [4, 2, 2, 1, 1, 1]
        assert sorted(catalog.chunks.get_embeddings([c.text_hash for c in chunks], "poison-test@1")) == [
            "d-th0",
            "d-th1",
            "d-th3",
            "d-th4",
        ]
        calls.clear()
        again = embed_with_cache(catalog, _Counting(), chunks, batch_size=4)
        assert (again.hits, again.embedded, list(again.failures), calls) == (5, 0, ["d-th2"], [1])
        assert str(embed_failure(again.failures)).startswith("1 chunks could not be embedded: d-th2:")
    finally:
        catalog.close()
