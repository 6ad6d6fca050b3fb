"""Store contract against the local stores: Milvus Lite (vectors and BM25) and tantivy.

Every check in ``tests/store_contract.py`` runs against both; vector-only
checks (validation, dimension, alias, >16384 rows) follow.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragsync.errors import ConfigurationError
from ragsync.index.elasticsearch import ElasticsearchKeywordIndex
from ragsync.index.milvus_keyword import MilvusKeywordIndex
from ragsync.index.milvus_vectors import MilvusVectorIndex
from ragsync.index.tantivy import TantivyKeywordIndex
from tests import store_contract as contract
from tests.store_contract import DIM, Harness, KeywordHarness, VectorHarness, make_chunk, vector_for

ROOT = Path(__file__).resolve().parents[1]


def milvus_harness(tmp_path: Path) -> VectorHarness:
    uri = str(tmp_path / "lite" / "milvus.db")
    return VectorHarness("milvus-lite", lambda create: MilvusVectorIndex(uri, "chunks", DIM, create=create))


def tantivy_harness(tmp_path: Path) -> KeywordHarness:
    path = str(tmp_path / "keyword")
    return KeywordHarness("tantivy", lambda create: TantivyKeywordIndex(path, create=create))


def milvus_bm25_harness(tmp_path: Path) -> KeywordHarness:
    uri = str(tmp_path / "lite" / "milvus.db")
    return KeywordHarness("milvus-bm25", lambda create: MilvusKeywordIndex(uri, "keywords", create=create))


HARNESSES: dict[str, Callable[[Path], Harness]] = {
    "milvus-lite": milvus_harness,
    "milvus-bm25": milvus_bm25_harness,
    "tantivy": tantivy_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    return HARNESSES[request.param](tmp_path)


@pytest.mark.parametrize("check", contract.CONTRACT, ids=lambda f: f.__name__)
def test_contract(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)


@pytest.mark.parametrize("check", contract.VECTOR_CONTRACT, ids=lambda f: f.__name__)
def test_vector_contract(tmp_path: Path, check: Callable[[Harness], None]) -> None:
    check(milvus_harness(tmp_path))


def test_milvus_dimension_mismatch(tmp_path: Path) -> None:
    uri = str(tmp_path / "lite" / "milvus.db")
    contract.dimension_mismatch_on_reopen(
        milvus_harness(tmp_path), lambda dim: MilvusVectorIndex(uri, "chunks", dim)
    )


def test_milvus_alias_points_to_v1(tmp_path: Path) -> None:
    store = MilvusVectorIndex(str(tmp_path / "m.db"), "chunks", DIM, create=True)
    try:
        assert store.physical_collection == "chunks_v1"
        assert store._require_open().describe_alias("chunks")["collection_name"] == "chunks_v1"
    finally:
        store.close()
    # Opening the physical name directly also works.
    store = MilvusVectorIndex(str(tmp_path / "m.db"), "chunks_v1", DIM)
    store.close()


def test_milvus_bad_uri(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"\.db"):
        MilvusVectorIndex(str(tmp_path / "milvus"), "chunks", DIM, create=True)
    with pytest.raises(ConfigurationError, match="create"):
        MilvusVectorIndex(str(tmp_path / "nowhere" / "m.db"), "chunks", DIM)


def test_milvus_filter_values_are_escaped(tmp_path: Path) -> None:
    store = MilvusVectorIndex(str(tmp_path / "m.db"), "chunks", DIM, create=True)
    try:
        odd = make_chunk(1, tenant='t"1\\', acl=('a"] or true or ["',))
        plain = make_chunk(2, tenant="t1")
        store.upsert([odd, plain], [vector_for(odd.chunk_id), vector_for(plain.chunk_id)])
        assert store.search("t1", vector_for(plain.chunk_id), ['a"] or true or ["'], 5) == []
        hits = store.search('t"1\\', vector_for(odd.chunk_id), ['a"] or true or ["'], 5)
        assert [h.chunk_id for h in hits] == [odd.chunk_id]
        store.delete('t"1\\', [odd.chunk_id])
        assert store.chunk_ids() == {plain.chunk_id}
        with pytest.raises(ValueError, match="control"):
            store.delete("t1\n", [plain.chunk_id])
    finally:
        store.close()


def test_milvus_beyond_query_window(tmp_path: Path) -> None:
    """count_by_doc and chunk_ids page past Milvus' 16384-row query limit."""
    store = MilvusVectorIndex(str(tmp_path / "m.db"), "chunks", DIM, create=True)
    try:
        n = 17_000
        chunks = [make_chunk(i, doc=f"d{i % 4}") for i in range(n)]
        store.upsert(chunks, [vector_for(c.chunk_id) for c in chunks])
        assert store.count() == n
        assert store.count_by_doc("t1") == {f"d{j}": n // 4 for j in range(4)}
        assert len(store.chunk_ids()) == n
        # A selective filter still returns k hits.
        store.set_acl_ids("t1", [c.chunk_id for c in chunks[:20]], ["acl-rare"])
        hits = store.search("t1", vector_for(chunks[5].chunk_id), ["acl-rare"], 10)
        assert len(hits) == 10
        assert hits[0].chunk_id == chunks[5].chunk_id
        assert math.isclose(hits[0].score, 1.0, abs_tol=1e-4)
    finally:
        store.close()


def test_tantivy_query_syntax_is_plain_text(tmp_path: Path) -> None:
    store = TantivyKeywordIndex(str(tmp_path / "kw"), create=True)
    try:
        target = make_chunk(1)
        store.upsert([target, make_chunk(2), make_chunk(3)])
        for text in [
            "VPN AND (password",
            "tenant_id:t1 vpn",
            '"unbalanced vpn',
            "-vpn +password^3 ~",
            "NOT vpn",
        ]:
            hits = store.search("t1", text, ["acl-a"], 3)
            assert hits and hits[0].chunk_id == target.chunk_id, text
        assert store.search("t1", "()[]:^", ["acl-a"], 3) == []
        assert store.search("t1", "acl-b", ["acl-b"], 3) == []
    finally:
        store.close()


def test_tantivy_writer_lock_is_released_after_every_write(tmp_path: Path) -> None:
    """Several steps of one pipeline hold clients of the same index at once
    (write, permission changes, deletes): each write call takes and releases
    tantivy's one-writer lock, so they write in turn."""
    path = str(tmp_path / "kw")
    first = TantivyKeywordIndex(path, create=True)
    second = TantivyKeywordIndex(path)
    try:
        first.upsert([make_chunk(1)])
        assert second.chunk_ids() == {make_chunk(1).chunk_id}  # readers see commits
        second.upsert([make_chunk(2)])
        first.delete(make_chunk(1).tenant_id, [make_chunk(1).chunk_id])
        assert first.chunk_ids() == second.chunk_ids() == {make_chunk(2).chunk_id}
    finally:
        first.close()
        second.close()


# -- Elasticsearch store against an in-memory stand-in --------------------------------
# No Elasticsearch server runs here; this fake implements just the request shapes the
# store sends (and asserts on them), so the store's own logic runs the whole contract.


def _words(text: str) -> set[str]:
    return {w[:5] for w in "".join(c.lower() if c.isalnum() else " " for c in text).split()}


class _FakeIndices:
    def __init__(self, es: FakeElasticsearch) -> None:
        self.es = es

    def exists(self, *, index: str) -> bool:
        return index in self.es.aliases or index in self.es.indices

    def create(self, *, index: str, mappings: dict[str, Any], aliases: dict[str, Any]) -> None:
        assert mappings["properties"]["acl_ids"] == {"type": "keyword"}
        assert mappings["properties"]["text"]["analyzer"] == "english"
        self.es.indices.setdefault(index, {})
        for alias in aliases:
            self.es.aliases[alias] = index


class FakeElasticsearch:
    """Shared state across clients, like a server."""

    def __init__(self) -> None:
        self.indices: dict[str, dict[str, dict[str, Any]]] = {}
        self.aliases: dict[str, str] = {}
        self.calls: list[str] = []

    def client(self) -> FakeElasticsearch:
        return self

    @property
    def indices_api(self) -> _FakeIndices:
        return _FakeIndices(self)

    def _docs(self, index: str) -> dict[str, dict[str, Any]]:
        return self.indices[self.aliases.get(index, index)]

    @staticmethod
    def _matches(doc: dict[str, Any], query: dict[str, Any]) -> bool:
        ((kind, body),) = query.items()
        if kind == "match_all":
            return True
        if kind == "term":
            ((field, value),) = body.items()
            values = doc[field] if isinstance(doc[field], list) else [doc[field]]
            return value in values
        if kind == "terms":
            ((field, wanted),) = body.items()
            values = doc[field] if isinstance(doc[field], list) else [doc[field]]
            return bool(set(values) & set(wanted))
        if kind == "bool":
            assert set(body) <= {"filter", "must", "must_not"}
            return all(
                FakeElasticsearch._matches(doc, q) for q in body.get("filter", []) + body.get("must", [])
            ) and not any(FakeElasticsearch._matches(doc, q) for q in body.get("must_not", []))
        if kind == "multi_match":
            return bool(FakeElasticsearch._score(doc, body))
        raise AssertionError(f"unexpected query {query}")

    @staticmethod
    def _score(doc: dict[str, Any], multi_match: dict[str, Any]) -> float:
        words = _words(multi_match["query"])
        return float(sum(len(words & _words(doc[f])) for f in multi_match["fields"]))

    def bulk(self, *, operations: list[dict[str, Any]], refresh: str) -> dict[str, Any]:
        assert refresh == "wait_for"
        self.calls.append("bulk")
        items = []
        for action, body in zip(operations[::2], operations[1::2], strict=True):
            ((op, meta),) = action.items()
            docs = self._docs(meta["_index"])
            if op == "index":
                assert body["chunk_id"] == meta["_id"]
                docs[meta["_id"]] = dict(body)
                items.append({op: {"_id": meta["_id"], "status": 200}})
            elif meta["_id"] in docs:
                script = body["script"]
                assert "ctx.op = 'noop'" in script["source"]
                if docs[meta["_id"]]["tenant_id"] == script["params"]["tenant_id"]:
                    docs[meta["_id"]]["acl_ids"] = script["params"]["acl_ids"]
                items.append({op: {"_id": meta["_id"], "status": 200}})
            else:
                error = {"type": "document_missing_exception", "reason": "missing"}
                items.append({op: {"_id": meta["_id"], "status": 404, "error": error}})
        return {"errors": any("error" in next(iter(i.values())) for i in items), "items": items}

    def delete_by_query(
        self, *, index: str, query: dict[str, Any], refresh: bool, conflicts: str
    ) -> dict[str, Any]:
        assert refresh is True and conflicts == "proceed"
        docs = self._docs(index)
        doomed = [i for i, d in docs.items() if self._matches(d, query)]
        for i in doomed:
            del docs[i]
        return {"deleted": len(doomed), "failures": []}

    def search(self, *, index: str, query: dict[str, Any], size: int, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("search")
        docs = [d for d in self._docs(index).values() if self._matches(d, query)]
        if "aggs" in kwargs:
            composite = kwargs["aggs"]["values"]["composite"]
            field = composite["sources"][0]["key"]["terms"]["field"]
            counts: dict[str, int] = {}
            for d in docs:
                counts[d[field]] = counts.get(d[field], 0) + 1
            keys = sorted(k for k in counts if "after" not in composite or k > composite["after"]["key"])
            page = keys[: composite["size"]]
            agg: dict[str, Any] = {"buckets": [{"key": {"key": k}, "doc_count": counts[k]} for k in page]}
            if page:
                agg["after_key"] = {"key": page[-1]}
            return {"aggregations": {"values": agg}}
        assert kwargs == {"source_includes": ["doc_id"]}
        multi = query["bool"]["must"][0]["multi_match"]
        scored = sorted(((self._score(d, multi), d) for d in docs), key=lambda p: -p[0])[:size]
        hits = [{"_id": d["chunk_id"], "_score": s, "_source": {"doc_id": d["doc_id"]}} for s, d in scored]
        return {"hits": {"hits": hits}}

    def count(self, *, index: str, query: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("count")
        return {"count": sum(1 for d in self._docs(index).values() if self._matches(d, query))}

    def close(self) -> None:
        pass


def _fake_es() -> FakeElasticsearch:
    fake = FakeElasticsearch()
    fake.indices_api  # noqa: B018 - make sure the property works
    return fake


class _FakeClient:
    """The client surface the store uses, backed by one FakeElasticsearch."""

    def __init__(self, server: FakeElasticsearch) -> None:
        self.indices = server.indices_api
        self.bulk = server.bulk
        self.delete_by_query = server.delete_by_query
        self.search = server.search
        self.count = server.count

    def close(self) -> None:
        pass


@pytest.fixture
def fake_es_harness() -> Iterator[tuple[KeywordHarness, FakeElasticsearch]]:
    server = _fake_es()

    def open_store(create: bool) -> ElasticsearchKeywordIndex:
        return ElasticsearchKeywordIndex(
            "http://fake:9200", "chunks", create=create, client=_FakeClient(server)
        )

    yield KeywordHarness("elasticsearch-fake", open_store), server


@pytest.mark.parametrize("check", contract.CONTRACT, ids=lambda f: f.__name__)
def test_elasticsearch_contract_on_fake(
    fake_es_harness: tuple[KeywordHarness, FakeElasticsearch], check: Callable[[Harness], None]
) -> None:
    check(fake_es_harness[0])


def test_elasticsearch_layout_and_paging(fake_es_harness: tuple[KeywordHarness, FakeElasticsearch]) -> None:
    h, server = fake_es_harness
    store = h.open()
    try:
        assert server.aliases == {"chunks": "chunks_v1"}
        chunks = [make_chunk(i, doc=f"d{i % 3}") for i in range(2_345)]
        assert store.upsert(chunks) == len(chunks)
        assert server.calls.count("bulk") == 5  # batches of 500
        server.calls.clear()
        assert len(store.chunk_ids()) == len(chunks)
        assert server.calls.count("search") == 4  # three full pages of 1000 and an empty one
        assert sum(store.count_by_doc("t1").values()) == len(chunks)
        server.calls.clear()
        assert store.search("t1", "vpn", [], 5) == []
        assert server.calls == []  # fail closed without a request
    finally:
        store.close()


def test_elasticsearch_missing_client_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "elasticsearch", None)
    with pytest.raises(ConfigurationError, match=r"ragsync\[elasticsearch\]"):
        ElasticsearchKeywordIndex("http://fake:9200", "chunks")


_WRITE_THEN_DIE = """
import os, signal, sys
from ragsync.index.milvus_vectors import MilvusVectorIndex
from tests.store_contract import DIM, make_chunk, vector_for
store = MilvusVectorIndex(sys.argv[1], "chunks", DIM, create=True)
chunks = [make_chunk(i) for i in range(5)]
store.upsert(chunks, [vector_for(c.chunk_id) for c in chunks])
store.upsert([chunks[0]], [vector_for("moved")])
store.delete("t1", [chunks[1].chunk_id])
os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close
"""


def test_milvus_writes_survive_a_kill_without_flush(tmp_path: Path) -> None:
    uri = str(tmp_path / "m.db")
    proc = subprocess.run([sys.executable, "-c", _WRITE_THEN_DIE, uri], cwd=ROOT, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    store = MilvusVectorIndex(uri, "chunks", DIM)
    try:
        chunks = [make_chunk(i) for i in range(5)]
        assert store.chunk_ids() == {c.chunk_id for i, c in enumerate(chunks) if i != 1}
        hits = store.search("t1", vector_for("moved"), ["acl-a"], 1)
        assert [h.chunk_id for h in hits] == [chunks[0].chunk_id]
        assert math.isclose(hits[0].score, 1.0, abs_tol=1e-4)
    finally:
        store.close()
