"""Production event buses: the Pub/Sub and Kafka readers are wired into the
streaming graph. They cannot run here (no credentials, emulator or Java
expansion service); the graph is constructed where the library allows it,
and wire messages are validated like every other event: raw bytes that are
not a valid event become dead letters with those bytes, never a failed
bundle."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import apache_beam as beam
import pytest

from beam_pipelines.streaming import GuardBusMessages, event_source
from connectors.events import wire_message_to_row
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError, InvalidEventError
from ragsync.model import EVENT_LIMITS, Event


def test_pubsub_reader_is_constructed_into_the_graph(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.pubsub", reason="apache-beam[gcp] is not installed")
    p = beam.Pipeline()
    rows = event_source(
        p, Settings(home=str(tmp_path)), source="pubsub", until_idle=False,
        subscription="projects/acme-prod/subscriptions/ragsync-events",
    )  # fmt: skip
    assert rows.producer.full_label.startswith("PubSubToRow/")
    read = p.applied_labels
    assert "ReadPubSub" in read
    # Read with attributes: the decode step gets the PubsubMessage (tested below).
    read_transform = next(t for t in p.transforms_stack[0].parts if t.full_label == "ReadPubSub").transform
    assert read_transform.with_attributes is True


def test_kafka_reader_is_the_cross_language_transform() -> None:
    """ReadFromKafka expands through Beam's Java expansion service, which it
    would download at construction time: it is not constructed offline. Check
    the wiring points at Beam's reader with the expected arguments instead."""
    import inspect

    from apache_beam.io.kafka import ReadFromKafka

    source = inspect.getsource(event_source)
    assert "ReadFromKafka(consumer_config=consumer, topics=[topic], commit_offset_in_finalize=True)" in source
    assert '"enable.auto.commit": "false"' in source and '"KafkaToRow" >> GuardBusMessages' in source
    assert {"consumer_config", "topics", "commit_offset_in_finalize"} <= set(
        inspect.signature(ReadFromKafka.__init__).parameters
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "pubsub"}, "--pubsub-subscription"),
        ({"source": "kafka", "topic": "t"}, "--kafka-topic and --kafka-bootstrap"),
        ({"source": "sqs"}, "unknown event source 'sqs'"),
    ],
)
def test_event_source_settings_are_checked(tmp_path: Path, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        event_source(beam.Pipeline(), Settings(home=str(tmp_path)), until_idle=False, **kwargs)  # type: ignore[arg-type]


def test_wire_messages_become_queue_rows_or_invalid_events() -> None:
    msg = {
        "source_id": "wiki",
        "doc_id": "p1",
        "op": "acl",
        "source_version": "7",
        "acl_groups": ["eng"],
        "event_time": 1796119200,
    }
    row = wire_message_to_row(json.dumps(msg).encode(), bus="pubsub")
    event = Event.from_json(row["payload"])
    assert (event.op, event.acl_groups, row["attempts"]) == ("acl", ("eng",), 0)
    assert row["event_id"] == event.event_id
    with pytest.raises(InvalidEventError):
        wire_message_to_row(b'{"op": "upsert"}', bus="kafka")
    with pytest.raises(InvalidEventError, match="empty kafka message"):
        wire_message_to_row(None, bus="kafka")


GOOD = {"source_id": "wiki", "doc_id": "p1", "op": "delete", "source_version": "3", "event_time": 1796119200}
RAW_MESSAGES = [
    json.dumps(GOOD).encode(),  # valid
    json.dumps({**GOOD, "doc_id": "p2"}).encode(),  # valid
    b"\xff\xfe\x00not utf-8",
    b"{not json",
    b"[1, 2, 3]",
    b"",  # a Kafka tombstone
    json.dumps({**GOOD, "op": "move"}).encode(),
    b"[" * 100_000,  # nested too deeply
    b"x" * (EVENT_LIMITS.event_bytes + 1),  # too long: the first event_bytes are kept
]


def test_bus_messages_that_are_not_events_become_dead_letters_with_their_raw_bytes(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    out = tmp_path / "rows.json"
    p = beam.Pipeline(runner="FnApiRunner")
    rows = p | beam.Create(RAW_MESSAGES) | GuardBusMessages(settings, "kafka", "ragsync-events")
    (
        rows
        | beam.Map(lambda r: Event.from_json(r["payload"]).doc_id)
        | beam.combiners.ToList()
        | beam.Map(lambda ids: out.write_text(json.dumps(sorted(ids))))
    )
    p.run().wait_until_finish()  # the bundle never fails
    assert json.loads(out.read_text()) == ["p1", "p2"]
    catalog = open_catalog(settings)
    try:
        dead = catalog.dead_letters.list_dead_letters(limit=100)
    finally:
        catalog.close()
    assert len(dead) == 7
    assert {(d.stage, d.error_class, d.uri) for d in dead} == {
        ("decode", "invalid_event", "kafka:ragsync-events")
    }
    payloads = [json.loads(d.payload) for d in dead]
    raw = sorted(base64.b64decode(x["raw_base64"]) for x in payloads)
    assert raw == sorted(m[: EVENT_LIMITS.event_bytes] for m in RAW_MESSAGES[2:])
    assert sorted((x["bytes"], x["truncated"]) for x in payloads)[-1] == (EVENT_LIMITS.event_bytes + 1, True)
    by_start = {base64.b64decode(json.loads(d.payload)["raw_base64"])[:4]: d.message for d in dead}
    assert "not valid UTF-8" in by_start[b"\xff\xfe\x00n"]
    assert "not valid JSON" in by_start[b"{not"]
    assert "must be a JSON object" in by_start[b"[1, "]
    assert "empty kafka message" in by_start[b""]
    assert "nested too deeply" in by_start[b"[[[["]
    assert "longer than" in by_start[b"xxxx"]


def test_pubsub_messages_with_attributes_through_test_stream(tmp_path: Path) -> None:
    """The Pub/Sub read path with the messages Pub/Sub delivers
    (``ReadFromPubSub(with_attributes=True)``: ``PubsubMessage`` with data,
    attributes, message id and publish time), in two bursts through
    TestStream on the streaming runner: the valid bodies become queue rows,
    the others dead letters naming the message and the reason."""
    pubsub = pytest.importorskip("apache_beam.io.gcp.pubsub", reason="apache-beam[gcp] is not installed")
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.utils.timestamp import Timestamp

    def message(n: int, data: bytes) -> object:
        return pubsub.PubsubMessage(
            data,
            {"origin": "control-plane", "tenant": "acme"},
            message_id=f"m{n}",
            publish_time=Timestamp(1796119200 + n),
        )

    first = [message(1, json.dumps(GOOD).encode()), message(2, b"{not json"), message(3, b"")]
    second = [message(4, json.dumps({**GOOD, "doc_id": "p2"}).encode()), message(5, b"\xff\xfe\x00not utf-8")]
    stream = (
        TestStream()
        .advance_watermark_to(0)
        .add_elements(first)
        .advance_watermark_to(10)
        .add_elements(second)
        .advance_watermark_to_infinity()
    )
    settings = Settings(home=str(tmp_path / "home"))
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    sub = "projects/acme-prod/subscriptions/ragsync-events"
    with beam.Pipeline(runner="BundleBasedDirectRunner", options=options) as p:
        rows = p | stream | GuardBusMessages(settings, "pubsub", sub)
        doc_ids = rows | beam.Map(lambda r: (Event.from_json(r["payload"]).doc_id, r["attempts"]))
        assert_that(doc_ids, equal_to([("p1", 0), ("p2", 0)]))
    catalog = open_catalog(settings)
    try:
        dead = catalog.dead_letters.list_dead_letters(limit=100)
    finally:
        catalog.close()
    assert sorted((d.uri, d.stage, d.error_class) for d in dead) == [
        (f"pubsub:{sub}#m{n}", "decode", "invalid_event") for n in (2, 3, 5)
    ]
    reasons = {d.uri.rsplit("#", 1)[1]: d.message for d in dead}
    assert "not valid JSON" in reasons["m2"]
    assert "empty pubsub message" in reasons["m3"]
    assert "not valid UTF-8" in reasons["m5"]
