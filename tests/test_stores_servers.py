"""Store contract against servers: a Milvus server and Elasticsearch.

- Milvus: ``RAGSYNC_MILVUS_URI=http://host:19530`` (``RAGSYNC_MILVUS_TOKEN``
  for auth) when set; otherwise the tests start ``milvus-lite server`` (the
  Milvus server protocol on a port, from the installed milvus-lite package)
  for the session and stop it after; skipped with the reason only when it
  cannot start.
- ``RAGSYNC_ES_URL=http://host:9200`` (``RAGSYNC_ES_API_KEY`` for auth).

Every test uses its own uniquely named collection/index and drops it after.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragsync.index.elasticsearch import ElasticsearchKeywordIndex
from ragsync.index.milvus_keyword import MilvusKeywordIndex
from ragsync.index.milvus_vectors import MilvusVectorIndex
from tests import store_contract as contract
from tests.store_contract import DIM, Harness, KeywordHarness, VectorHarness

MILVUS_URI = os.environ.get("RAGSYNC_MILVUS_URI", "")
MILVUS_LITE_START_S = 90.0
MILVUS_TOKEN = os.environ.get("RAGSYNC_MILVUS_TOKEN", "")
MILVUS_DATABASE = "ragsync_test"
"""The BM25 store's tests run in their own Milvus database (``database=``)."""
ES_URL = os.environ.get("RAGSYNC_ES_URL", "")
ES_API_KEY = os.environ.get("RAGSYNC_ES_API_KEY", "")


def _milvus_lite_command() -> list[str] | None:
    script = os.path.join(os.path.dirname(sys.executable), "milvus-lite")
    if os.path.exists(script):
        return [sys.executable, script]
    found = shutil.which("milvus-lite")
    return [found] if found else None


def _answers(uri: str) -> str:
    """'' when a Milvus server at ``uri`` lists collections, else the error."""
    from pymilvus import MilvusClient

    try:
        client = MilvusClient(uri=uri, timeout=5)
        try:
            client.list_collections()
        finally:
            client.close()
        return ""
    except Exception as exc:  # noqa: BLE001 - any failure means "not up yet"
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="session")
def milvus_uri() -> Iterator[str]:
    """``$RAGSYNC_MILVUS_URI``, else a ``milvus-lite server`` started here."""
    if MILVUS_URI:
        yield MILVUS_URI
        return
    from tests.mediawiki import free_port

    command = _milvus_lite_command()
    if command is None:
        pytest.skip("milvus-lite server not found (pip install milvus-lite) and RAGSYNC_MILVUS_URI not set")
    data = tempfile.mkdtemp(prefix="ragsync-milvus-server-")
    port = free_port()
    log = open(os.path.join(data, "server.log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            *command,
            "server",
            "--data-dir",
            os.path.join(data, "db"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + MILVUS_LITE_START_S
    error = "not started"
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            error = _answers(uri)
            if not error:
                break
            time.sleep(0.5)
        if error:
            with open(os.path.join(data, "server.log"), "rb") as fh:
                tail = fh.read()[-500:].decode("utf-8", "replace")
            pytest.skip(
                f"milvus-lite server did not answer on {uri} within {MILVUS_LITE_START_S:.0f}s: "
                f"{error}; {tail}"
            )
        yield uri
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            from tests.proc import kill_group

            kill_group(proc.pid)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def _drop_milvus(uri: str, name: str, database: str = "") -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri, token=MILVUS_TOKEN)
    try:
        if database:
            client.use_database(database)
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


@pytest.fixture(params=["milvus-server", "milvus-bm25-server", "elasticsearch"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    name = f"ragsync_test_{uuid.uuid4().hex[:12]}"
    h: Harness
    drop: Callable[[str], None]
    if request.param == "milvus-server":
        uri = request.getfixturevalue("milvus_uri")

        def open_milvus(create: bool) -> Any:
            return MilvusVectorIndex(uri, name, DIM, create=create, token=MILVUS_TOKEN)

        h, drop = VectorHarness("milvus-server", open_milvus), functools.partial(_drop_milvus, uri)
    elif request.param == "milvus-bm25-server":
        uri = request.getfixturevalue("milvus_uri")

        def open_bm25(create: bool) -> Any:
            return MilvusKeywordIndex(uri, name, create=create, token=MILVUS_TOKEN, database=MILVUS_DATABASE)

        h = KeywordHarness("milvus-bm25-server", open_bm25)
        drop = functools.partial(_drop_milvus, uri, database=MILVUS_DATABASE)
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


def test_elasticsearch_index_versions_flip_and_roll_back_on_a_server() -> None:
    """A version index beside the live one; the alias moves to it and back."""
    if not ES_URL:
        pytest.skip("set RAGSYNC_ES_URL=http://host:9200 to run against Elasticsearch")
    name = f"ragsync_test_{uuid.uuid4().hex[:12]}"
    live = ElasticsearchKeywordIndex(ES_URL, name, create=True, api_key=ES_API_KEY)
    v2 = ElasticsearchKeywordIndex(ES_URL, f"{name}_v2", create=True, api_key=ES_API_KEY, alias=False)
    try:
        assert live.physical_index == f"{name}_v1"
        v2.upsert([contract.make_chunk(1)])
        v2.point_alias(name)
        assert ElasticsearchKeywordIndex(ES_URL, name, api_key=ES_API_KEY).physical_index == f"{name}_v2"
        assert sum(live.count_by_doc().values()) == 1  # the alias now reads v2
        ElasticsearchKeywordIndex(ES_URL, f"{name}_v1", api_key=ES_API_KEY, alias=False).point_alias(name)
        assert sum(live.count_by_doc().values()) == 0
        v2.drop_physical()
    finally:
        v2.close()
        live.close()
        _drop_es(name)
