"""docs/connectors.md "Adding a sink", followed literally, for both kinds of store: an
in-memory keyword store registered through
``ragsync.index.backends.register_keyword_backend`` and selected with
``keyword_index``, and an in-memory vector store registered through
``register_vector_backend`` and selected with ``vector_index``. Each passes
the same test: the real backfill writes it, the real query reads it,
reconcile counts it, a deleted file leaves it, and index versions are
created, flipped, rolled back and dropped through it; nothing in the product
names either.

Real SQLite catalog, the packaged model and, beside each sink, the default
store of the other kind (Milvus Lite for vectors, tantivy for keywords).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError
from ragsync.index import versions as iv
from ragsync.index.backends import (
    KEYWORD_BACKENDS,
    VECTOR_BACKENDS,
    open_keyword_index,
    open_vector_index,
    register_keyword_backend,
    register_vector_backend,
)
from ragsync.index.base import NO_FILTER, ClosesOnExit, Hit, SearchFilter, check_chunk_tenants
from ragsync.index.reconcile import reconcile
from ragsync.model import Chunk
from ragsync.query.search import hybrid_query

# ----------------------------------------------------------------- step 1: the store


class MemoryKeywordIndex(ClosesOnExit):
    """``KeywordIndex`` over a dict (chunk id -> chunk) kept by its backend."""

    searches: list[str] = []  # every query text this store answered

    def __init__(self, rows: dict[str, Chunk]) -> None:
        self.rows = rows

    def upsert(self, chunks: Sequence[Chunk]) -> int:
        for chunk in chunks:
            self.rows[chunk.chunk_id] = chunk
        return len(chunks)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        for chunk_id in chunk_ids:
            if chunk_id in self.rows and self.rows[chunk_id].tenant_id == tenant_id:
                del self.rows[chunk_id]
        return len(chunk_ids)

    def set_acl_ids(self, tenant_id: str, chunks: Sequence[Chunk]) -> None:
        check_chunk_tenants(tenant_id, chunks)
        self.upsert(chunks)

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, where: SearchFilter = NO_FILTER
    ) -> list[Hit]:
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        MemoryKeywordIndex.searches.append(text)
        words = set(text.lower().split())
        hits = []
        for chunk in self.rows.values():
            acl = set(chunk.acl_ids)
            if chunk.tenant_id != tenant_id or not acl & set(acl_ids) or acl & set(deny_acl_ids):
                continue
            if doc_ids is not None and chunk.doc_id not in doc_ids:
                continue
            score = sum(1 for w in chunk.text.lower().split() if w in words)
            if score:
                hits.append(Hit(chunk.chunk_id, chunk.doc_id, float(score)))
        return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for chunk in self.rows.values():
            if tenant_id is None or chunk.tenant_id == tenant_id:
                counts[chunk.doc_id] = counts.get(chunk.doc_id, 0) + 1
        return counts

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        return sum(1 for c in chunk_ids if c in self.rows and self.rows[c].tenant_id == tenant_id)

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        return set(self.iter_chunk_ids(tenant_id))

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]:
        for chunk_id, chunk in sorted(self.rows.items()):
            if tenant_id is None or chunk.tenant_id == tenant_id:
                yield chunk_id

    def close(self) -> None:
        pass


class MemoryVectorIndex(ClosesOnExit):
    """``VectorIndex`` over a dict (chunk id -> (chunk, unit vector)) kept by
    its backend; search is exact cosine."""

    def __init__(self, rows: dict[str, Chunk], vectors: dict[str, np.ndarray], dim: int) -> None:
        self.rows, self.vectors, self.dim = rows, vectors, dim

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> int:
        arrays = [np.asarray(v, dtype=np.float64) for v in vectors]
        if any(a.shape != (self.dim,) or not np.all(np.isfinite(a)) for a in arrays):
            raise ValueError("a vector of the wrong dimension or with a non-finite value")
        for chunk, array in zip(chunks, arrays, strict=True):
            self.rows[chunk.chunk_id] = chunk
            self.vectors[chunk.chunk_id] = array / (np.linalg.norm(array) or 1.0)
        return len(chunks)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        for chunk_id in chunk_ids:
            if chunk_id in self.rows and self.rows[chunk_id].tenant_id == tenant_id:
                del self.rows[chunk_id], self.vectors[chunk_id]
        return len(chunk_ids)

    def set_acl_ids(self, tenant_id: str, chunk_ids: Sequence[str], acl_ids: Sequence[str]) -> None:
        for chunk_id in chunk_ids:
            chunk = self.rows.get(chunk_id)
            if chunk is not None and chunk.tenant_id == tenant_id:
                self.rows[chunk_id] = dataclasses.replace(chunk, acl_ids=tuple(acl_ids))

    def search(
        self,
        tenant_id: str,
        vector: Sequence[float],
        acl_ids: Sequence[str],
        k: int,
        *,
        where: SearchFilter = NO_FILTER,
    ) -> list[Hit]:
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        query = np.asarray(vector, dtype=np.float64)
        query = query / (np.linalg.norm(query) or 1.0)
        hits = []
        for chunk_id, chunk in self.rows.items():
            acl = set(chunk.acl_ids)
            if chunk.tenant_id != tenant_id or not acl & set(acl_ids) or acl & set(deny_acl_ids):
                continue
            if doc_ids is not None and chunk.doc_id not in doc_ids:
                continue
            hits.append(Hit(chunk_id, chunk.doc_id, float(self.vectors[chunk_id] @ query)))
        return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]

    count_by_doc = MemoryKeywordIndex.count_by_doc
    count_ids = MemoryKeywordIndex.count_ids
    chunk_ids = MemoryKeywordIndex.chunk_ids
    iter_chunk_ids = MemoryKeywordIndex.iter_chunk_ids

    def close(self) -> None:
        pass


# ----------------------------------------------------------------- step 2: the backend


class MemoryBackend:
    """Physical indexes are dicts by name; the alias is a name -> name map."""

    name = "memory"
    store = MemoryKeywordIndex

    def one_process(self, settings: Any) -> str:
        return "held in this process's memory"

    def __init__(self) -> None:
        self.indexes: dict[str, dict[str, Chunk]] = {}
        self.alias = "memory_v1"

    def _rows(self, physical: str | None, create: bool) -> dict[str, Chunk]:
        name = self.alias if physical is None else physical
        if name not in self.indexes:
            if not create:
                raise ConfigurationError(f"memory index {name!r} does not exist")
            self.indexes[name] = {}
        return self.indexes[name]

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> MemoryKeywordIndex:
        return MemoryKeywordIndex(self._rows(physical, create))

    def version_name(self, settings: Settings, version: int) -> str:
        return f"memory_v{version}"

    def live_name(self, settings: Settings) -> str:
        return self.alias

    def point_alias(self, settings: Settings, physical: str) -> None:
        self.alias = physical

    def drop(self, settings: Settings, physical: str) -> None:
        self.indexes.pop(physical, None)


# ----------------------------------------------------------------- step 3: register, select


class MemoryVectorBackend(MemoryBackend):
    """The same containers, holding vectors beside the chunks."""

    store = MemoryVectorIndex  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.embedded: dict[str, dict[str, np.ndarray]] = {}

    def open(  # type: ignore[override]
        self, settings: Settings, dim: int, physical: str | None, *, create: bool
    ) -> MemoryVectorIndex:
        rows = self._rows(physical, create)
        vectors = self.embedded.setdefault(self.alias if physical is None else physical, {})
        return MemoryVectorIndex(rows, vectors, dim)

    def drop(self, settings: Settings, physical: str) -> None:
        super().drop(settings, physical)
        self.embedded.pop(physical, None)


# ----------------------------------------------------------------- step 3: register, select

KEYWORDS = MemoryBackend()
register_keyword_backend(KEYWORDS)
VECTORS = MemoryVectorBackend()
register_vector_backend(VECTORS)

DOCS = {
    "hotels.md": "# Hotels\n\nEmployees may book a hotel for up to 180 EUR per night in London.\n",
    "bikes.txt": "Bicycles are stored in the locked shed behind building C.\n",
    "vpn.txt": "Connect to the VPN before opening the intranet from home.\n",
}

KINDS = {"keyword": ("keyword_index", KEYWORDS), "vector": ("vector_index", VECTORS)}


@pytest.fixture(scope="module", params=sorted(KINDS))
def sink(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(kind, source folder): a home whose ``kind`` store is the memory sink."""
    kind = request.param
    setting, backend = KINDS[kind]
    root = tmp_path_factory.mktemp(f"sink-{kind}")
    src = root / "src"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    settings = Settings(home=str(root / "home"), **{setting: "memory"})
    summary = run_backfill(str(src), settings, show_progress=False)
    assert summary.documents_indexed == 3
    return kind, src


def _settings(sink: tuple[str, Path]) -> Settings:
    kind, src = sink
    return Settings(home=str(src.parent / "home"), **{KINDS[kind][0]: "memory"})


def _catalog_chunk_ids(settings: Settings) -> set[str]:
    catalog = open_catalog(settings)
    try:
        return catalog.chunks.chunk_ids_for_tenant("default")
    finally:
        catalog.close()


def _open_live(kind: str, settings: Settings) -> Any:
    return open_keyword_index(settings) if kind == "keyword" else open_vector_index(settings, 384)


def test_registered_sinks_are_selectable_and_unknown_names_are_refused(tmp_path: Path) -> None:
    assert KEYWORD_BACKENDS["memory"] is KEYWORDS
    assert VECTOR_BACKENDS["memory"] is VECTORS
    with pytest.raises(ValueError, match="keyword backend 'memory' is already registered"):
        register_keyword_backend(MemoryBackend())
    with pytest.raises(ValueError, match="vector backend 'memory' is already registered"):
        register_vector_backend(MemoryVectorBackend())
    with pytest.raises(ConfigurationError, match="keyword_index must be one of .*memory.*got 'nope'"):
        Settings(home=str(tmp_path), keyword_index="nope")
    with pytest.raises(ConfigurationError, match="vector_index must be one of memory, milvus, got 'nope'"):
        Settings(home=str(tmp_path), vector_index="nope")


def test_the_backfill_writes_the_sink_queries_read_it_and_a_delete_leaves_it(sink: tuple[str, Path]) -> None:
    kind, src = sink
    settings = _settings(sink)
    backend = KINDS[kind][1]
    ids = _catalog_chunk_ids(settings)
    assert len(ids) == 3
    assert set(backend.indexes) == {"memory_v1"}
    assert set(backend.indexes["memory_v1"]) == ids
    hits = hybrid_query(settings, "hotel London night", groups=["everyone"], k=3)
    assert hits[0].uri.endswith("hotels.md")
    assert hybrid_query(settings, "hotel London night", groups=["nobody"], k=3) == []
    report = reconcile(settings, 384)
    assert report.ok, report
    assert (report.documents, report.chunks) == (3, 3)
    # A file that vanished from a full listing is deleted from the sink.
    (src / "bikes.txt").unlink()
    summary = run_backfill(str(src), settings, show_progress=False)
    assert summary.documents_deleted == 1
    assert set(backend.indexes["memory_v1"]) == _catalog_chunk_ids(settings)
    assert len(backend.indexes["memory_v1"]) == 2
    assert all("Bicycles" not in c.text for c in backend.indexes["memory_v1"].values())
    report = reconcile(settings, 384)
    assert report.ok, report
    assert (report.documents, report.chunks) == (2, 2)


def test_index_versions_flip_roll_back_and_drop_through_the_sink(sink: tuple[str, Path]) -> None:
    kind, _ = sink
    settings = _settings(sink)
    backend = KINDS[kind][1]
    live_ids = set(backend.indexes["memory_v1"])
    v1 = iv.live_version(settings)
    assert (v1.vector_collection if kind == "vector" else v1.keyword_index) == "memory_v1"
    v2 = iv.create_version(settings, "all-MiniLM-L6-v2", "test-v2", 384)
    assert (v2.version, v2.state) == (2, "building")
    assert (v2.vector_collection if kind == "vector" else v2.keyword_index) == "memory_v2"
    one = next(iter(backend.indexes["memory_v1"].values()))
    if kind == "keyword":
        with iv.open_version_keyword(settings, v2) as kw:
            kw.upsert([one])
    else:
        with iv.open_version_vector(settings, v2) as vec:
            vec.upsert([one], [[1.0] * 384])
    iv.flip(settings, 2)
    with _open_live(kind, settings) as live:
        assert live.chunk_ids() == {one.chunk_id}
    assert iv.rollback(settings).version == 1
    with _open_live(kind, settings) as live:
        assert live.chunk_ids() == live_ids
    assert iv.gc(settings, now=10**12) == [2]
    assert set(backend.indexes) == {"memory_v1"}
