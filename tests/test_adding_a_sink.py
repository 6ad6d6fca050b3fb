"""README "Adding a sink", followed literally: an in-memory keyword store
registered through ``ragsync.index.backends.register_keyword_backend`` and
selected with ``keyword_index``. The real backfill writes it, the real query
reads it, reconcile counts it, and index versions are created, flipped,
rolled back and dropped through it; nothing in the product names it.

Real Milvus Lite (vectors), SQLite catalog and the packaged model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError
from ragsync.index import versions as iv
from ragsync.index.backends import KEYWORD_BACKENDS, open_keyword_index, register_keyword_backend
from ragsync.index.base import ClosesOnExit, Hit, check_chunk_tenants
from ragsync.index.reconcile import reconcile
from ragsync.model import Chunk
from ragsync.query import hybrid_query

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
        self,
        tenant_id: str,
        text: str,
        acl_ids: Sequence[str],
        k: int,
        *,
        deny_acl_ids: Sequence[str] = (),
        doc_ids: Sequence[str] | None = None,
    ) -> list[Hit]:
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


# ----------------------------------------------------------------- step 2: the backend


class MemoryBackend:
    """Physical indexes are dicts by name; the alias is a name -> name map."""

    name = "memory"
    one_process = True

    def __init__(self) -> None:
        self.indexes: dict[str, dict[str, Chunk]] = {}
        self.alias = "memory_v1"

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> MemoryKeywordIndex:
        name = self.alias if physical is None else physical
        if name not in self.indexes:
            if not create:
                raise ConfigurationError(f"memory index {name!r} does not exist")
            self.indexes[name] = {}
        return MemoryKeywordIndex(self.indexes[name])

    def version_name(self, settings: Settings, version: int) -> str:
        return f"memory_v{version}"

    def live_name(self, settings: Settings) -> str:
        return self.alias

    def point_alias(self, settings: Settings, physical: str) -> None:
        self.alias = physical

    def drop(self, settings: Settings, physical: str) -> None:
        self.indexes.pop(physical, None)


# ----------------------------------------------------------------- step 3: register, select

BACKEND = MemoryBackend()
register_keyword_backend(BACKEND)

DOCS = {
    "hotels.md": "# Hotels\n\nEmployees may book a hotel for up to 180 EUR per night in London.\n",
    "bikes.txt": "Bicycles are stored in the locked shed behind building C.\n",
    "vpn.txt": "Connect to the VPN before opening the intranet from home.\n",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("sink")
    src = root / "src"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    settings = Settings(home=str(root / "home"), keyword_index="memory")
    summary = run_backfill(str(src), settings, show_progress=False)
    assert summary.documents_indexed == 3
    return settings


def _catalog_chunk_ids(settings: Settings) -> set[str]:
    catalog = open_catalog(settings)
    try:
        return catalog.chunk_ids_for_tenant("default")
    finally:
        catalog.close()


def test_a_registered_sink_is_selectable_and_unknown_names_are_refused(tmp_path: Path) -> None:
    assert KEYWORD_BACKENDS["memory"] is BACKEND
    with pytest.raises(ValueError, match="already registered"):
        register_keyword_backend(MemoryBackend())
    with pytest.raises(ConfigurationError, match="keyword_index must be one of .*memory.*got 'nope'"):
        Settings(home=str(tmp_path), keyword_index="nope")


def test_the_backfill_writes_the_sink_and_queries_read_it(home: Settings) -> None:
    ids = _catalog_chunk_ids(home)
    assert len(ids) == 3
    assert set(BACKEND.indexes) == {"memory_v1"}
    assert set(BACKEND.indexes["memory_v1"]) == ids
    hits = hybrid_query(home, "hotel London night", groups=["everyone"], k=3)
    assert hits[0].uri.endswith("hotels.md")
    assert MemoryKeywordIndex.searches == ["hotel London night"]
    assert hybrid_query(home, "hotel London night", groups=["nobody"], k=3) == []
    report = reconcile(home, 384)
    assert report.ok, report
    assert (report.documents, report.chunks) == (3, 3)


def test_index_versions_flip_roll_back_and_drop_through_the_sink(home: Settings) -> None:
    v1 = iv.live_version(home)
    assert v1.keyword_index == "memory_v1"
    v2 = iv.create_version(home, "all-MiniLM-L6-v2", "test-v2", 384)
    assert (v2.version, v2.keyword_index, v2.state) == (2, "memory_v2", "building")
    with iv.open_version_keyword(home, v2) as kw:
        kw.upsert([next(iter(BACKEND.indexes["memory_v1"].values()))])
    iv.flip(home, 2)
    with open_keyword_index(home) as live:
        assert len(live.chunk_ids()) == 1
    assert iv.rollback(home).version == 1
    with open_keyword_index(home) as live:
        assert len(live.chunk_ids()) == 3
    assert iv.gc(home, now=10**12) == [2]
    assert set(BACKEND.indexes) == {"memory_v1"}
