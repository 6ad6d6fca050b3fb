"""At-least-once on every bus: an event read from Pub/Sub or Kafka that meets
a retryable failure (a store briefly down) becomes a row of the catalog's
event queue, with its lane and backoff, and is applied once the store is
back; none is lost to a log line. Bus-shaped input (the bytes and attributes
``ReadFromPubSub(with_attributes=True)`` delivers, Kafka record values)
through TestStream on the streaming runner, then the production graph after
the read (``apply_event_rows``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_pipelines.streaming import GuardBusMessages, apply_event_rows
from connectors.sources import register_source
from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.decisions import FailureRoute, failure_route, retry_dead_letters
from ragsync.embedding.models import default_model
from ragsync.errors import WriteError
from ragsync.index.backends import open_vector_index
from ragsync.index.milvus_vectors import MilvusVectorIndex
from ragsync.index.versions import prepare_stores
from ragsync.model import DeadLetter
from tests.queue_events import apply_events, change_event, stream_until_idle
from transforms.dead_letters import replay_event

TENANT = "acme"
SOURCE = "wiki"
SUB = "projects/acme-prod/subscriptions/ragsync-events"
NOTES = {
    "a": "# Alpha\n\nThe alpha budget is forty thousand euros this year.\n",
    "b": "# Beta\n\nThe beta launch moved to the ninth of March.\n",
    "c": "# Gamma\n\nGamma reviews happen every second Tuesday.\n",
}


def test_failure_route_never_leaves_an_event_to_a_log_line() -> None:
    assert failure_route("e1", True, 1, 5) == FailureRoute.RETRY
    assert failure_route("e1", True, 4, 5) == FailureRoute.RETRY
    assert failure_route("e1", True, 5, 5) == FailureRoute.DEAD_LETTER  # attempts used up
    assert failure_route("e1", False, 1, 5) == FailureRoute.DEAD_LETTER  # permanent
    assert failure_route("", True, 1, 5) == FailureRoute.DEAD_LETTER  # backfill work
    assert [retry_dead_letters(s) for s in ("pending", "dead", "missing")] == [False, True, True]


def _settings(tmp_path: Path) -> Settings:
    settings = Settings(home=str(tmp_path / "home"), event_lease_s=2.0)
    (tmp_path / "docs").mkdir()
    prepare_stores(settings, default_model())
    register_source(settings, SOURCE, TENANT, "wiki", str(tmp_path / "docs"))
    return settings


def test_a_bus_event_that_has_no_row_is_queued_for_retry(tmp_path: Path) -> None:
    """The catalog half: ``retry_event_later`` with the event writes its row
    (lane by op, the backoff, the attempts so far); without it the answer is
    ``missing`` and nothing is written; a second failure counts on the row."""
    settings = Settings(home=str(tmp_path / "home"))
    (tmp_path / "docs").mkdir()
    register_source(settings, SOURCE, TENANT, "wiki", str(tmp_path / "docs"))
    dl = DeadLetter(
        stage="delete",
        doc_id="d",
        uri="",
        error_class="write_failed",
        message="Milvus delete failed: connection refused",
        payload=json.dumps({"event": {**change_event(SOURCE, "a", "delete", 2, [], eid="bus-1")}}),
        attempts=1,
        tenant_id=TENANT,
        event_id="bus-1",
    )
    event = replay_event(dl)
    assert event is not None and (event.op, event.tenant_id, event.source_version) == ("delete", TENANT, "2")
    cat = open_catalog(settings)
    try:
        assert cat.queue.retry_event_later((TENANT, "other"), 5.0) == "missing"
        before = time.time()
        assert cat.queue.retry_event_later((TENANT, "bus-1"), 5.0, replay=event, attempts=1) == "pending"
        row = cat.queue.get_event("bus-1", TENANT)
        assert row is not None
        assert (row["state"], row["attempts"], row["lane"], row["op"]) == ("pending", 1, "priority", "delete")
        assert before + 5.0 <= row["available_at"] <= time.time() + 5.0
        assert cat.queue.retry_event_later((TENANT, "bus-1"), 1.0, replay=event, attempts=1) == "pending"
        assert cat.queue.get_event("bus-1", TENANT)["attempts"] == 2  # type: ignore[index]
        assert cat.queue.get_event("other", TENANT) is None
        assert cat.queue_views.queue_stats()["by_state"] == {"pending": 1}
    finally:
        cat.close()


def _pubsub(n: int, event: dict[str, Any]) -> object:
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.utils.timestamp import Timestamp

    return PubsubMessage(
        json.dumps(event).encode(),
        {"origin": "control-plane", "tenant": TENANT},
        message_id=f"m{n}",
        publish_time=Timestamp(1796119200 + n),
    )


def _run_bus(settings: Settings, bus: str, messages: list[Any]) -> None:
    """The streaming graph on ``messages`` as the bus delivers them, in two
    bursts through TestStream, run to its end."""
    from apache_beam.testing.test_stream import TestStream

    half = len(messages) // 2
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements(messages[:half])
        .advance_watermark_to(10)
        .add_elements(messages[half:])
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner="BundleBasedDirectRunner", options=options)
    rows = p | stream | GuardBusMessages(settings, bus, SUB if bus == "pubsub" else "ragsync-events")
    apply_event_rows(rows, settings, default_model())
    p.run().wait_until_finish()


def _applied(settings: Settings) -> set[str]:
    """Ids of the events applied so far (one freshness row each)."""
    from sqlalchemy import select

    from ragsync.catalog import schema

    cat = open_catalog(settings)
    try:
        with cat._read_engine.connect() as conn:
            return set(conn.execute(select(schema.freshness.c.event_id)).scalars())
    finally:
        cat.close()


def _chunks(settings: Settings, doc: str) -> tuple[int, int]:
    """(vector index, catalog) chunk counts of ``doc``."""
    doc_id = ids.doc_id(TENANT, SOURCE, doc)
    cat = open_catalog(settings)
    vec = open_vector_index(settings, default_model().dim)
    try:
        held = sorted(cat.chunks.chunk_ids_for_doc(doc_id))
        return vec.count_ids(TENANT, held) if held else 0, len(held)
    finally:
        vec.close()
        cat.close()


@pytest.mark.slow
@pytest.mark.parametrize("bus", ["pubsub", "kafka"])
def test_bus_events_that_meet_a_store_outage_are_applied_when_it_is_back(
    tmp_path: Path, bus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if bus == "pubsub":
        pytest.importorskip("apache_beam.io.gcp.pubsub", reason="apache-beam[gcp] is not installed")
    settings = _settings(tmp_path)
    docs = tmp_path / "docs"
    for name, text in NOTES.items():
        (docs / f"{name}.md").write_text(text)
    seeded = apply_events(
        settings,
        [change_event(SOURCE, n, "upsert", 1, ["staff"], str(docs / f"{n}.md"), f"{n}1") for n in NOTES],
    )
    assert (seeded.documents_indexed, seeded.dead_lettered) == (3, 0)
    assert [_chunks(settings, n) for n in NOTES] == [(1, 1), (1, 1), (1, 1)]

    # The vector store is down while the bus delivers: every delete fails
    # with the error Milvus's client gives (retryable); permission changes
    # (no delete) go through.
    calls = {"failed": 0}
    real_delete = MilvusVectorIndex.delete

    def down(self: MilvusVectorIndex, tenant_id: str, chunk_ids: Any) -> int:
        calls["failed"] += 1
        raise WriteError("Milvus delete from 'ragsync_chunks' failed: <connection refused>")

    monkeypatch.setattr(MilvusVectorIndex, "delete", down)
    sent = [
        change_event(SOURCE, "a", "delete", 2, [], eid="bus-a2"),
        change_event(SOURCE, "b", "delete", 2, [], eid="bus-b2"),
        change_event(SOURCE, "c", "acl", 2, ["staff", "finance"], eid="bus-c2"),
    ]
    messages: list[Any] = (
        [_pubsub(i, e) for i, e in enumerate(sent)]
        if bus == "pubsub"
        else [json.dumps(e).encode() for e in sent]
    )
    _run_bus(settings, bus, messages)
    assert calls["failed"] == 2
    # Exact facts from the catalog (the streaming DirectRunner's counters
    # are not reliable): an applied event has a freshness row.
    assert _applied(settings) == {"a1", "b1", "c1", "bus-c2"}
    cat = open_catalog(settings)
    try:
        rows = {e: cat.queue.get_event(e, TENANT) for e in ("bus-a2", "bus-b2", "bus-c2")}
        assert rows["bus-c2"] is None  # applied straight from the bus: no row
        queued = {e: (r["state"], r["attempts"], r["lane"], r["op"]) for e, r in rows.items() if r}
        assert queued == {
            "bus-a2": ("pending", 1, "priority", "delete"),
            "bus-b2": ("pending", 1, "priority", "delete"),
        }
        assert cat.dead_letters.list_dead_letters(limit=10) == []
        acl = cat.gate_state.get_acl_version(ids.doc_id(TENANT, SOURCE, "c"))
        assert acl is not None and acl["acl_version"] == "2"
    finally:
        cat.close()
    assert [_chunks(settings, n) for n in NOTES] == [(1, 1), (1, 1), (1, 1)]  # nothing deleted yet

    # The store is back: what serves the queue applies both deletes.
    monkeypatch.setattr(MilvusVectorIndex, "delete", real_delete)
    after = stream_until_idle(settings)
    assert (after.events_applied, after.documents_deleted, after.dead_lettered) == (2, 2, 0)
    assert [_chunks(settings, n) for n in NOTES] == [(0, 0), (0, 0), (1, 1)]
    cat = open_catalog(settings)
    try:
        assert cat.queue_views.queue_stats()["by_state"] == {
            "done": 5
        }  # 3 seeded upserts + 2 retried deletes
        assert cat.dead_letters.list_dead_letters(limit=10) == []
        for name in ("a", "b"):
            tomb = cat.gate_state.get_tombstone(ids.doc_id(TENANT, SOURCE, name))
            assert tomb is not None and tomb["source_version"] == "2" and tomb["completed_at"] is not None
    finally:
        cat.close()
    applied = _applied(settings)
    assert applied == {"a1", "b1", "c1", "bus-a2", "bus-b2", "bus-c2"}
    lost = [e["event_id"] for e in sent if e["event_id"] not in applied]
    assert lost == []
