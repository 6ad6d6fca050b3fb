"""Production event buses: the Pub/Sub and Kafka readers a runner runs itself
(Pub/Sub on Dataflow, Kafka on Flink or Dataflow) are wired into the
streaming graph. Those runners and Beam's Java expansion service cannot run
here; the graph is constructed where the library allows it, and bus messages
go through the one admission of events (``connectors.events.EventAdmission``,
what ``ragsync events push`` and the Pub/Sub relay use): raw bytes that are
not a valid event, or that name an unknown source, become dead letters with
those bytes, never a failed bundle; a groupless upsert takes its source's
default groups. (The Pub/Sub relay of the local runners runs against the
emulator: ``tests/test_pubsub_stream.py``.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import apache_beam as beam
import pytest

from beam_pipelines.streaming import GuardBusMessages, event_source
from connectors.events import Admitted, EventAdmission, admit_bus_message, parse_event, queue_row
from connectors.sources import register_source
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError, UnknownSourceError
from ragsync.model import EVENT_LIMITS, DeadLetter, Event


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

    source = " ".join(inspect.getsource(event_source).split())
    assert (
        "ReadFromKafka( consumer_config=consumer, topics=[topic], commit_offset_in_finalize=True )" in source
    )
    assert (
        '"enable.auto.commit": "false"' in source
        and "return kafka_event_rows(records, settings, topic)" in source
    )
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


def _registered(tmp_path: Path, *, groups: tuple[str, ...] = ()) -> Settings:
    """A home where source ``wiki`` of tenant ``acme`` is registered over a
    folder (with default groups ``groups``)."""
    settings = Settings(home=str(tmp_path / "home"))
    (tmp_path / "wiki").mkdir()
    options = {"acl_groups": list(groups)} if groups else None
    register_source(settings, "wiki", "acme", "object_store", str(tmp_path / "wiki"), options=options)
    return settings


def test_bus_messages_are_admitted_or_dead_lettered_with_their_reason(tmp_path: Path) -> None:
    settings = _registered(tmp_path, groups=("staff",))
    acl = {
        "source_id": "wiki",
        "doc_id": "p1",
        "op": "acl",
        "source_version": "7",
        "event_time": 1796119200,
    }
    catalog = open_catalog(settings)
    try:
        admission = EventAdmission(catalog)

        def admit(raw: bytes | None) -> Admitted | DeadLetter:
            return admit_bus_message(raw, admission, bus="kafka", where="events")

        named = admit(json.dumps({**acl, "acl_groups": ["eng"]}).encode())
        bare = admit(json.dumps(acl).encode())
        assert isinstance(named, Admitted) and isinstance(bare, Admitted)
        assert (named.event.tenant_id, named.event.acl_groups) == ("acme", ("eng",))
        assert bare.event.acl_groups == ("staff",)  # the source's default groups
        row = queue_row(bare.event)
        assert (Event.from_json(row["payload"]), row["tenant_id"], row["attempts"]) == (bare.event, "acme", 0)
        refused = {
            "not an event": admit(b'{"op": "upsert"}'),
            "empty": admit(None),
            "unknown": admit(json.dumps({**acl, "source_id": "nope"}).encode()),
            "tenant": admit(json.dumps({**acl, "tenant_id": "other"}).encode()),
            "outside": admit(json.dumps({**acl, "op": "upsert", "content_uri": "/etc/passwd"}).encode()),
        }
    finally:
        catalog.close()
    assert all(isinstance(d, DeadLetter) for d in refused.values())
    reasons = {
        k: (d.stage, d.error_class, d.message) for k, d in refused.items() if isinstance(d, DeadLetter)
    }
    assert {stage for stage, _, _ in reasons.values()} == {"admit"}
    assert {cls for _, cls, _ in reasons.values()} == {"invalid_event"}
    assert "'doc_id' is required" in reasons["not an event"][2]
    assert "empty kafka message" in reasons["empty"][2]
    assert reasons["unknown"][2] == "unknown source 'nope': register it with `ragsync sources add` first"
    assert "unknown source 'wiki'" in reasons["tenant"][2]  # another tenant's view: no such source
    assert "outside" in reasons["outside"][2]


def test_one_admission_for_a_push_and_a_bus_message(tmp_path: Path) -> None:
    """``ragsync events push`` and a bus message admit the same event the
    same way: same tenant, same default groups; an unknown source is a dead
    letter on the bus and, pushed, queued for the stream to decide."""
    from cli.main import main

    settings = _registered(tmp_path, groups=("staff",))
    body = {
        "source_id": "wiki",
        "doc_id": "a.md",
        "op": "upsert",
        "source_version": 1,
        "content_uri": str(tmp_path / "wiki" / "a.md"),
        "event_time": 1796119200,
    }
    lines = [json.dumps(body), json.dumps({**body, "source_id": "nope"})]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    # An event of an unregistered source is queued too (the stream dead-letters
    # it unless the source is registered by then): the push succeeds.
    assert main(["events", "push", str(tmp_path / "events.jsonl"), "--home", settings.home]) == 0
    catalog = open_catalog(settings)
    try:
        queued = [Event.from_json(row["payload"]) for row in catalog.queue.pending_events()]
        assert sorted(e.source_id for e in queued) == ["nope", "wiki"]
        pushed = next(e for e in queued if e.source_id == "wiki")
        bus = [admit_bus_message(x.encode(), EventAdmission(catalog), bus="pubsub", where="s") for x in lines]
    finally:
        catalog.close()
    assert isinstance(bus[0], Admitted) and bus[0].event == pushed
    assert (pushed.tenant_id, pushed.acl_groups) == ("acme", ("staff",))
    assert isinstance(bus[1], DeadLetter) and "unknown source 'nope'" in bus[1].message


def test_a_source_registered_while_a_stream_runs_is_seen_after_the_cache_time(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path / "home"))
    now = [0.0]
    event = {"source_id": "wiki", "doc_id": "p1", "op": "delete", "source_version": 1, "event_time": 1}
    (tmp_path / "other").mkdir()
    register_source(settings, "other", "acme", "object_store", str(tmp_path / "other"))
    catalog = open_catalog(settings)
    try:
        admission = EventAdmission(catalog, ttl_s=30.0, clock=lambda: now[0])
        with pytest.raises(UnknownSourceError):
            admission.admit(parse_event(event))
        (tmp_path / "wiki").mkdir()
        register_source(settings, "wiki", "acme", "object_store", str(tmp_path / "wiki"))
        now[0] = 10.0
        with pytest.raises(UnknownSourceError):  # still the cached answer
            admission.admit(parse_event(event))
        now[0] = 31.0
        assert admission.admit(parse_event(event)).event.tenant_id == "acme"
    finally:
        catalog.close()


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
    settings = _registered(tmp_path)
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
        ("admit", "invalid_event", "kafka:ragsync-events")
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
    settings = _registered(tmp_path)
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
        (f"pubsub:{sub}#m{n}", "admit", "invalid_event") for n in (2, 3, 5)
    ]
    reasons = {d.uri.rsplit("#", 1)[1]: d.message for d in dead}
    assert "not valid JSON" in reasons["m2"]
    assert "empty pubsub message" in reasons["m3"]
    assert "not valid UTF-8" in reasons["m5"]


@pytest.mark.slow
def test_recorded_kafka_records_are_admitted_like_pushed_events(tmp_path: Path) -> None:
    """Kafka cannot run here: its recorded records (``(key, value)`` as
    ``ReadFromKafka`` gives them, ``tests/fixtures/bus``) go through the
    graph the Kafka read feeds (``kafka_event_rows``, then
    ``apply_event_rows``) on the streaming runner, and end as the same
    events do through Pub/Sub (``tests/test_pubsub_stream.py``): the three
    groupless upserts indexed for the source's default groups, the refusals
    and the tombstone dead letters of stage ``admit`` with their reasons."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.testing.test_stream import TestStream

    from beam_pipelines.streaming import apply_event_rows, kafka_event_rows
    from ragsync.embedding.models import default_model
    from ragsync.index.versions import prepare_stores
    from tests import bus_events as bus

    settings = Settings(home=str(tmp_path / "home"))
    bus.write_notes(tmp_path / "notes")
    prepare_stores(settings, default_model())
    groups = {"acl_groups": list(bus.DEFAULT_GROUPS)}
    register_source(settings, bus.SOURCE, bus.TENANT, "object_store", str(tmp_path / "notes"), options=groups)
    records = bus.kafka_records()
    assert [value for _, value in records[:-1]] == bus.event_bodies() and records[-1][1] is None
    stream = TestStream().advance_watermark_to(0).add_elements(records).advance_watermark_to_infinity()
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(runner="BundleBasedDirectRunner", options=options)
    apply_event_rows(kafka_event_rows(p | stream, settings, "ragsync-events"), settings, default_model())
    p.run().wait_until_finish()
    catalog = open_catalog(settings)
    try:
        assert catalog.documents.document_counts_by_status() == {"indexed": 3}
    finally:
        catalog.close()
    tombstone = ("admit", "invalid_event", "an empty kafka message is not an event")
    bus.assert_dead_as_expected(bus.dead_letters(settings), [*bus.EXPECTED_DEAD, tombstone])
    assert bus.readers_of_notes(settings) == {name: ["staff"] for name in bus.NOTES}
