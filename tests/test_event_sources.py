"""Production event buses: the Pub/Sub and Kafka readers are wired into the
streaming graph. They cannot run here (no credentials, emulator or Java
expansion service); the graph is constructed where the library allows it,
and wire messages are validated like every other event."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest

from beam_pipelines.streaming import _wire_to_row, event_source
from ragsync.config import Settings
from ragsync.errors import ConfigurationError
from ragsync.model import Event


def test_pubsub_reader_is_constructed_into_the_graph(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.pubsub", reason="apache-beam[gcp] is not installed")
    p = beam.Pipeline()
    rows = event_source(
        p, Settings(home=str(tmp_path)), source="pubsub", until_idle=False,
        subscription="projects/acme-prod/subscriptions/ragsync-events",
    )  # fmt: skip
    assert rows.producer.full_label.endswith("PubSubToRow")


def test_kafka_reader_is_the_cross_language_transform() -> None:
    """ReadFromKafka expands through Beam's Java expansion service, which it
    would download at construction time: it is not constructed offline. Check
    the wiring points at Beam's reader with the expected arguments instead."""
    import inspect

    from apache_beam.io.kafka import ReadFromKafka

    source = inspect.getsource(event_source)
    assert 'ReadFromKafka(consumer_config={"bootstrap.servers": bootstrap}, topics=[topic])' in source
    assert {"consumer_config", "topics"} <= set(inspect.signature(ReadFromKafka.__init__).parameters)


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
    row = _wire_to_row(json.dumps(msg).encode())
    event = Event.from_json(row["payload"])
    assert (event.op, event.acl_groups, row["attempts"]) == ("acl", ("eng",), 0)
    assert row["event_id"] == event.event_id
    # A message that is not a valid event does not fail the read: it becomes
    # a row the resolve step dead-letters, with the message as its payload.
    bad = _wire_to_row(b'{"op": "upsert"}')
    assert (bad["event_id"], bad["payload"]) == ("", '{"op": "upsert"}')
    assert "'source_id' is required" in bad["invalid"]
    garbage = _wire_to_row(b"\xff not json")
    assert garbage["invalid"] and garbage["event_id"] == ""
