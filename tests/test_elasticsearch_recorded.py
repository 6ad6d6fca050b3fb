"""The Elasticsearch keyword index against recorded server answers (real
JSON shapes and headers, replayed over HTTP to the unchanged official
client): 429 retries with backoff, API-key and basic auth from the options,
and the alias moves of index versions. ``tests/test_stores_servers.py`` runs
the same code against a server when ``RAGSYNC_ES_URL`` is set."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from ragsync.errors import WriteError
from ragsync.index import elasticsearch as esmod
from ragsync.index.backends import open_keyword_index
from ragsync.index.elasticsearch import ElasticsearchKeywordIndex
from ragsync.options import option_values, settings_from
from tests.es_replay import TOO_MANY_REQUESTS, Exchange, Replay, bulk_answer, bulk_item
from tests.store_contract import make_chunk

EXISTS = Exchange("HEAD", "/kw")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(esmod, "_sleep", waited.append)
    return waited


def test_bulk_sends_again_only_the_items_rejected_with_429(sleeps: list[float]) -> None:
    chunks = [make_chunk(i) for i in range(3)]
    ids = [c.chunk_id for c in chunks]
    first = bulk_answer(
        [bulk_item("kw_v1", ids[0], 201), bulk_item("kw_v1", ids[1], 429), bulk_item("kw_v1", ids[2], 429)]
    )
    second = bulk_answer([bulk_item("kw_v1", ids[1], 201), bulk_item("kw_v1", ids[2], 429)])
    third = bulk_answer([bulk_item("kw_v1", ids[2], 201)])
    script = [EXISTS, Exchange("PUT", "/_bulk", body=first), Exchange("PUT", "/_bulk", body=second)]
    script.append(Exchange("PUT", "/_bulk", body=third))
    with Replay(script) as es:
        index = ElasticsearchKeywordIndex(es.url, "kw")
        assert index.upsert(chunks) == 3
        index.close()
    assert es.errors == [] and es.script == []
    sent = [[line["index"]["_id"] for line in r.json_lines() if "index" in line] for r in es.requests[1:]]
    assert sent == [ids, ids[1:], ids[2:]]
    assert sleeps == [0.5, 1.0]
    assert all(r.query == "refresh=wait_for" for r in es.requests[1:])


def test_items_still_rejected_after_the_retries_are_a_write_error(sleeps: list[float]) -> None:
    chunk = make_chunk(1)
    rejected = bulk_answer([bulk_item("kw_v1", chunk.chunk_id, 429)])
    script = [EXISTS] + [Exchange("PUT", "/_bulk", body=rejected) for _ in range(esmod.BULK_RETRIES + 1)]
    with Replay(script) as es:
        index = ElasticsearchKeywordIndex(es.url, "kw")
        with pytest.raises(WriteError, match="rejected 1 bulk items with 429 .* 6 times"):
            index.upsert([chunk])
        index.close()
    assert es.errors == [] and es.script == []
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_a_whole_request_answered_429_is_retried(sleeps: list[float]) -> None:
    from elasticsearch import Elasticsearch

    chunk = make_chunk(2)
    script = [EXISTS, Exchange("PUT", "/_bulk", status=429, body=TOO_MANY_REQUESTS)]
    script.append(Exchange("PUT", "/_bulk", body=bulk_answer([bulk_item("kw_v1", chunk.chunk_id, 201)])))
    with Replay(script) as es:
        client = Elasticsearch(es.url, max_retries=0)  # the client's own 429 retries are used up
        index = ElasticsearchKeywordIndex(es.url, "kw", client=client)
        assert index.upsert([chunk]) == 1
        index.close()
    assert es.errors == [] and es.script == []
    assert sleeps == [0.5]


def test_a_mapping_error_is_not_retried(sleeps: list[float]) -> None:
    chunk = make_chunk(3)
    item = {
        "index": {
            "_index": "kw_v1",
            "_id": chunk.chunk_id,
            "status": 400,
            "error": {
                "type": "document_parsing_exception",
                "reason": "[1:2] strict_dynamic_mapping_exception",
            },
        }
    }
    with Replay([EXISTS, Exchange("PUT", "/_bulk", body=bulk_answer([item]))]) as es:
        index = ElasticsearchKeywordIndex(es.url, "kw")
        with pytest.raises(WriteError, match="strict_dynamic_mapping_exception"):
            index.upsert([chunk])
        index.close()
    assert es.errors == [] and sleeps == []


@pytest.mark.parametrize(
    "env,header",
    [
        ({"RAGSYNC_ES_API_KEY": "aWQ6a2V5"}, "ApiKey aWQ6a2V5"),
        (
            {"RAGSYNC_ES_USERNAME": "elastic", "RAGSYNC_ES_PASSWORD": "s3cret"},
            "Basic " + base64.b64encode(b"elastic:s3cret").decode(),
        ),
    ],
)
def test_credentials_from_the_options_reach_every_request(
    env: dict[str, str], header: str, tmp_path: Path
) -> None:
    with Replay([Exchange("HEAD", "/ragsync_chunks")]) as es:
        settings = settings_from(
            option_values(env={**env, "RAGSYNC_ES_URL": es.url, "RAGSYNC_HOME": str(tmp_path)})
        )
        open_keyword_index(settings).close()
    assert es.errors == [] and [r.headers.get("authorization") for r in es.requests] == [header]


def test_point_alias_moves_the_alias_in_one_request_and_drop_deletes_the_version() -> None:
    script = [
        Exchange("HEAD", "/kw_v2"),  # the version's index exists
        Exchange("HEAD", "/_alias/kw_v2", status=404, body={"error": "alias [kw_v2] missing", "status": 404}),
        Exchange("HEAD", "/_alias/kw"),
        Exchange("GET", "/_alias/kw", body={"kw_v1": {"aliases": {"kw": {"is_write_index": True}}}}),
        Exchange("POST", "/_aliases", body={"acknowledged": True, "errors": False}),
        Exchange("HEAD", "/_alias/kw_v2", status=404, body={"error": "alias [kw_v2] missing", "status": 404}),
        Exchange("DELETE", "/kw_v2", body={"acknowledged": True}),
    ]
    with Replay(script) as es:
        version = ElasticsearchKeywordIndex(es.url, "kw_v2", alias=False)
        version.point_alias("kw")
        version.drop_physical()
        version.close()
    assert es.errors == [] and es.script == []
    assert es.requests[4].json_lines() == [
        {
            "actions": [
                {"remove": {"index": "kw_v1", "alias": "kw"}},
                {"add": {"index": "kw_v2", "alias": "kw", "is_write_index": True}},
            ]
        }
    ]


def test_a_new_version_index_is_created_without_an_alias() -> None:
    script = [
        Exchange("HEAD", "/kw_v2", status=404, body={}),
        Exchange("PUT", "/kw_v2", body={"acknowledged": True, "shards_acknowledged": True, "index": "kw_v2"}),
    ]
    with Replay(script) as es:
        ElasticsearchKeywordIndex(es.url, "kw_v2", create=True, alias=False).close()
    assert es.errors == [] and es.script == []
    body = es.requests[1].json_lines()[0]
    assert set(body) == {"mappings"} and body["mappings"]["dynamic"] == "strict"


def _alias_moves(old: str, new: str) -> list[Exchange]:
    """What a flip asks Elasticsearch, with its recorded answers."""
    missing = {"error": f"alias [{new}] missing", "status": 404}
    return [
        Exchange("HEAD", f"/{new}"),
        Exchange("HEAD", f"/_alias/{new}", status=404, body=missing),
        Exchange("HEAD", "/_alias/kw"),
        Exchange("GET", "/_alias/kw", body={old: {"aliases": {"kw": {"is_write_index": True}}}}),
        Exchange("POST", "/_aliases", body={"acknowledged": True, "errors": False}),
    ]


def test_flip_and_rollback_move_the_milvus_and_elasticsearch_aliases_together(tmp_path: Path) -> None:
    import time

    from ragsync.catalog import IndexVersion
    from ragsync.config import Settings, open_catalog
    from ragsync.index import versions as iv
    from ragsync.index.milvus_vectors import MilvusVectorIndex

    def row(n: int, state: str) -> IndexVersion:
        return IndexVersion(
            n, "minilm", "1", 8, f"ragsync_chunks_v{n}", f"kw_v{n}", state, time.time(), None, None, ""
        )

    with Replay(_alias_moves("kw_v1", "kw_v2") + _alias_moves("kw_v2", "kw_v1")) as es:
        settings = Settings(home=str(tmp_path / "home"), es_url=es.url, es_index="kw")
        MilvusVectorIndex(settings.milvus_uri, "ragsync_chunks", 8, create=True).close()
        MilvusVectorIndex(settings.milvus_uri, "ragsync_chunks_v2", 8, create=True, alias=False).close()
        catalog = open_catalog(settings)
        catalog.index_versions.add_index_version(row(1, iv.LIVE))
        catalog.index_versions.add_index_version(row(2, iv.BUILDING))
        catalog.close()

        assert iv.flip(settings, 2).state == iv.LIVE
        vectors = MilvusVectorIndex(settings.milvus_uri, "ragsync_chunks", 8)
        assert vectors.physical_collection == "ragsync_chunks_v2"
        vectors.close()
        assert iv.rollback(settings).version == 1
        vectors = MilvusVectorIndex(settings.milvus_uri, "ragsync_chunks", 8)
        assert vectors.physical_collection == "ragsync_chunks_v1"
        vectors.close()
        assert [(v.version, v.state) for v in iv.list_versions(settings)] == [(1, iv.LIVE), (2, iv.RETIRED)]
    assert es.errors == [] and es.script == []
    moves = [r.json_lines()[0]["actions"] for r in es.requests if r.path == "/_aliases"]
    assert moves == [
        [
            {"remove": {"index": "kw_v1", "alias": "kw"}},
            {"add": {"index": "kw_v2", "alias": "kw", "is_write_index": True}},
        ],
        [
            {"remove": {"index": "kw_v2", "alias": "kw"}},
            {"add": {"index": "kw_v1", "alias": "kw", "is_write_index": True}},
        ],
    ]
