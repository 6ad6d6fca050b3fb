"""Store contract against servers: a Milvus server and Elasticsearch.

Skipped unless the servers are named in the environment:

- ``RAGSYNC_MILVUS_URI=http://host:19530`` (``RAGSYNC_MILVUS_TOKEN`` for
  auth); a ``milvus-lite server`` works too.
- ``RAGSYNC_ES_URL=http://host:9200`` (``RAGSYNC_ES_API_KEY`` for auth).

Every test uses its own uniquely named collection/index and drops it after.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragsync.stores.elasticsearch_index import ElasticsearchKeywordIndex
from ragsync.stores.milvus import MilvusVectorIndex
from tests import store_contract as contract
from tests.store_contract import DIM, Harness, KeywordHarness, VectorHarness

MILVUS_URI = os.environ.get("RAGSYNC_MILVUS_URI", "")
MILVUS_TOKEN = os.environ.get("RAGSYNC_MILVUS_TOKEN", "")
ES_URL = os.environ.get("RAGSYNC_ES_URL", "")
ES_API_KEY = os.environ.get("RAGSYNC_ES_API_KEY", "")


def _drop_milvus(name: str) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=MILVUS_URI, token=MILVUS_TOKEN)
    try:
        if name in client.list_aliases().get("aliases", []):
            client.drop_alias(name)
        for collection in (f"{name}_v1", name):
            if client.has_collection(collection):
                client.drop_collection(collection)
    finally:
        client.close()


def _drop_es(name: str) -> None:
    from elasticsearch import Elasticsearch

    client = Elasticsearch(ES_URL, api_key=ES_API_KEY or None)
    try:
        client.options(ignore_status=404).indices.delete(index=f"{name}_v1")
        client.options(ignore_status=404).indices.delete(index=name)
    finally:
        client.close()


@pytest.fixture(params=["milvus-server", "elasticsearch"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    name = f"ragsync_test_{uuid.uuid4().hex[:12]}"
    h: Harness
    drop: Callable[[str], None]
    if request.param == "milvus-server":
        if not MILVUS_URI:
            pytest.skip("set RAGSYNC_MILVUS_URI=http://host:19530 to run against a Milvus server")

        def open_milvus(create: bool) -> Any:
            return MilvusVectorIndex(MILVUS_URI, name, DIM, create=create, token=MILVUS_TOKEN)

        h, drop = VectorHarness("milvus-server", open_milvus), _drop_milvus
    else:
        if not ES_URL:
            pytest.skip("set RAGSYNC_ES_URL=http://host:9200 to run against Elasticsearch")

        def open_es(create: bool) -> Any:
            return ElasticsearchKeywordIndex(ES_URL, name, create=create, api_key=ES_API_KEY)

        h, drop = KeywordHarness("elasticsearch", open_es), _drop_es
    yield h
    drop(name)


@pytest.mark.parametrize("check", contract.CONTRACT, ids=lambda f: f.__name__)
def test_contract(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)


@pytest.mark.parametrize("check", contract.VECTOR_CONTRACT, ids=lambda f: f.__name__)
def test_vector_contract(harness: Harness, check: Callable[[Harness], None]) -> None:
    if harness.kind != "vector":
        pytest.skip("vector stores only")
    check(harness)
