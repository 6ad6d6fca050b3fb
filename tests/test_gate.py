"""The version gate: pure decisions, a property over random orders, and its
Beam semantics pinned with TestStream on the BundleBasedDirectRunner."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.events import parse_event
from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.decisions import (
    DocVersions,
    GateAction,
    Order,
    PermissionEvidence,
    Stamp,
    backoff_delay,
    choose_permissions,
    compare_versions,
    evidence_predates_delete,
    gate_event,
    gate_verdict,
    version_key,
)
from ragsync.errors import InvalidEventError
from ragsync.model import Event, QueuedEvent
from tests.catalog_rows import flip
from transforms.events import DELETE, DUPLICATE, STALE, UPSERT, GateEvents

A, S, D = GateAction.APPLY, GateAction.STALE, GateAction.DUPLICATE


@pytest.mark.parametrize(
    ("op", "version", "known", "expected"),
    [
        ("upsert", "1", DocVersions(), A),
        ("upsert", "5", DocVersions(indexed="5", accepted="5"), D),
        ("upsert", "5", DocVersions(indexed="5", accepted="5", complete=False), A),
        ("upsert", "4", DocVersions(indexed="5", accepted="5"), S),
        ("upsert", "6", DocVersions(indexed="5", accepted="5"), A),
        ("upsert", "6", DocVersions(indexed="5", accepted="7"), S),  # v7 in flight
        ("upsert", "7", DocVersions(indexed="5", accepted="7"), A),  # redelivery of the in-flight one
        ("upsert", "7", DocVersions(deleted="7"), S),  # tie with a delete: the delete wins
        ("upsert", "6", DocVersions(deleted="7"), S),  # tombstone blocks older upserts
        ("upsert", "8", DocVersions(deleted="7"), A),  # recreation
        ("delete", "7", DocVersions(indexed="5", accepted="5"), A),
        ("delete", "4", DocVersions(indexed="5", accepted="5"), S),
        ("delete", "7", DocVersions(deleted="7"), D),
        ("delete", "7", DocVersions(deleted="7", delete_complete=False), A),  # a failed delete retries
        ("delete", "6", DocVersions(deleted="7"), S),
        ("acl", "3", DocVersions(indexed="5"), A),  # permissions are versioned on their own
        ("acl", "3", DocVersions(acl="3"), D),
        ("acl", "2", DocVersions(acl="3"), S),
        ("acl", "6", DocVersions(deleted="7"), S),
        ("upsert", "10", DocVersions(indexed="9", accepted="9"), A),  # numeric, not text, order
        ("upsert", "2026-12-02T10:00:00Z", DocVersions(indexed="2026-12-01T10:00:00Z"), A),
    ],
)
def test_gate_event_table(op: str, version: str, known: DocVersions, expected: GateAction) -> None:
    assert gate_event(op, version, known) == expected


def test_gate_rejects_unknown_ops_and_orders_versions() -> None:
    with pytest.raises(ValueError):
        gate_event("rename", "1", DocVersions())
    assert version_key("9") < version_key("10") < version_key("a")


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    for attempt, full in ((1, 2.0), (2, 4.0), (3, 8.0), (10, 300.0)):
        delays = [backoff_delay(attempt) for _ in range(50)]
        assert all(full * 0.5 <= d <= full for d in delays)
        assert len(set(delays)) > 1  # jittered
    with pytest.raises(ValueError):
        backoff_delay(0)


def _simulate(events: list[tuple[str, int]]) -> int | None:
    """Apply events through the gate to a model of the catalog; returns the
    live content version (None when absent)."""
    indexed: str | None = None
    deleted: str | None = None
    for op, v in events:
        known = DocVersions(indexed=indexed, accepted=indexed, deleted=deleted)
        if gate_event(op, str(v), known) != GateAction.APPLY:
            continue
        if op == "upsert":
            indexed = str(v)
        else:
            deleted, indexed = str(v), None
    return int(indexed) if indexed is not None else None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["upsert", "delete"]), min_size=1, max_size=8).flatmap(
        lambda ops: st.permutations([(op, i + 1) for i, op in enumerate(ops)]).map(
            lambda perm: (perm, max(perm, key=lambda e: e[1]))
        )
    )
)
def test_any_order_ends_with_the_newest_version(case: tuple[list[tuple[str, int]], tuple[str, int]]) -> None:
    events, (newest_op, newest_v) = case
    expected = newest_v if newest_op == "upsert" else None
    assert _simulate(list(events)) == expected
    # Delivering everything twice changes nothing.
    assert _simulate(list(events) + list(events)) == expected


def test_event_validation_names_the_bad_field() -> None:
    good = {
        "source_id": "wiki",
        "doc_id": "p/1",
        "op": "upsert",
        "source_version": 3,
        "acl_groups": ["eng", "eng", " hr "],
        "content_uri": "/tmp/x.md",
        "event_time": "2026-12-01T10:00:00Z",
    }
    ev = parse_event(good)
    assert (ev.source_version, ev.acl_groups, ev.event_time) == ("3", ("eng", "hr"), 1796119200.0)
    assert ev.event_id == parse_event(dict(good)).event_id  # derived ids are stable
    cases = [
        ({**good, "op": "move"}, "'op' must be one of"),
        ({k: v for k, v in good.items() if k != "source_id"}, "'source_id' is required"),
        ({**good, "content_uri": ""}, "'content_uri' is required"),
        ({**good, "acl_groups": "eng"}, "'acl_groups' must be a list"),
        ({**good, "event_time": "yesterday"}, "not ISO 8601"),
        ({**good, "extra": 1}, "unknown fields: extra"),
        ([], "must be a JSON object"),
    ]
    for data, message in cases:
        with pytest.raises(InvalidEventError, match=message):
            parse_event(data)


def _qe(doc: str, op: str, version: str, tenant: str = "t") -> tuple[str, QueuedEvent]:
    ev = Event(f"{doc}-{op}-{version}", "src", doc, op, version, ("g",), "/x" if op == "upsert" else "", 0.0)
    doc_id = ids.doc_id(tenant, "src", doc)
    return doc_id, QueuedEvent(ev, tenant, doc_id, 0)


def test_gate_semantics_under_teststream(tmp_path: Path) -> None:
    """Stale, duplicate, tombstone and recreation, on a streaming runner."""
    settings_ = Settings(home=str(tmp_path))
    cat = open_catalog(settings_)
    try:  # d1 is live at version 5 in the catalog (the gate's authority)
        from ragsync.model import FetchedDocument, SourceFile

        doc_id = ids.doc_id("t", "src", "d1")
        src = SourceFile("t", "src", "d1", "/x", 1, ("g",), "5")
        cat.documents.record_fetch(FetchedDocument(doc_id, src, "h", "/raw", 1, "acl", doc_id))
        flip(cat, doc_id, version="5", content_hash="h", indexed_version="5", chunk_count=0, indexed_at=1.0)
    finally:
        cat.close()

    stream = (
        TestStream()
        .add_elements([_qe("d1", "upsert", "5")])  # already live: duplicate
        .add_elements([_qe("d1", "upsert", "4")])  # older than live: stale
        .add_elements([_qe("d1", "upsert", "6")])  # newer: apply
        .add_elements([_qe("d1", "upsert", "5")])  # older than what passed: stale
        .add_elements([_qe("d2", "delete", "3")])  # apply (tombstone 3)
        .add_elements([_qe("d2", "upsert", "2")])  # blocked by the tombstone: stale
        .add_elements([_qe("d2", "upsert", "4")])  # recreation: apply
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(runner="BundleBasedDirectRunner", options=options) as p:
        out = p | stream | GateEvents(settings_)

        def label(tag: str):  # noqa: ANN202
            return lambda qe: f"{tag}:{qe.event.doc_id}:{qe.event.op}:{qe.event.source_version}"

        assert_that(
            out[UPSERT] | "u" >> beam.Map(label("apply")),
            equal_to(["apply:d1:upsert:6", "apply:d2:upsert:4"]),
            label="applied_upserts",
        )
        assert_that(
            out[DELETE] | "d" >> beam.Map(label("apply")),
            equal_to(["apply:d2:delete:3"]),
            label="applied_deletes",
        )
        assert_that(
            out[STALE] | "s" >> beam.Map(label("stale")),
            equal_to(["stale:d1:upsert:4", "stale:d1:upsert:5", "stale:d2:upsert:2"]),
            label="stale",
        )
        assert_that(
            out[DUPLICATE] | "dup" >> beam.Map(label("dup")), equal_to(["dup:d1:upsert:5"]), label="dups"
        )


# -- version domains ------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (Stamp("10", "revision"), Stamp("9", "revision"), Order.NEWER),
        (Stamp("2", "revision"), Stamp("2", "revision"), Order.SAME),
        (Stamp("2026-12-02T10:00:00Z", "timestamp"), Stamp("1796119200", "timestamp"), Order.NEWER),
        (Stamp("1796119200.0", "timestamp"), Stamp("2026-12-01T10:00:00Z", "timestamp"), Order.SAME),
        (Stamp('"abc"', "etag"), Stamp('"abc"', "etag"), Order.SAME),
        # Two etags: only the observation times order them.
        (Stamp('"abc"', "etag", 20.0), Stamp('"xyz"', "etag", 10.0), Order.NEWER),
        (Stamp('"abc"', "etag"), Stamp('"xyz"', "etag", 10.0), Order.UNKNOWN),
        # A revision against a file time: never by value, by observation time.
        (
            Stamp("2", "revision", 1_800_000_100.0),
            Stamp("1733000000.0", "timestamp", 1_800_000_000.0),
            Order.NEWER,
        ),
        (Stamp("2", "revision", 1_799_999_000.0), Stamp("1.0", "timestamp", 1_800_000_000.0), Order.OLDER),
        (Stamp("2", "revision", 5.0), Stamp("1", "timestamp", 5.0), Order.UNKNOWN),  # a tie
        (Stamp("x", "revision", 9.0), Stamp("3", "revision", 4.0), Order.NEWER),  # unparsable: by time
        (Stamp("10"), Stamp("9"), Order.NEWER),  # undeclared: the old rule
    ],
)
def test_compare_versions(a: Stamp, b: Stamp, expected: Order) -> None:
    assert compare_versions(a, b) == expected


def test_gate_orders_two_domains_by_observation_time_and_fails_closed() -> None:
    listed = Stamp("1733000000.000000", "timestamp", 1_800_000_000.0)  # a backfill saw the file
    later_delete = Stamp("2", "revision", 1_800_000_050.0)
    earlier_delete = Stamp("2", "revision", 1_799_000_000.0)
    known = DocVersions(indexed=listed, accepted=listed)
    assert gate_event("delete", later_delete, known) == A
    verdict = gate_verdict("delete", earlier_delete, known)
    assert verdict.action == S and verdict.held == "1733000000.000000"
    assert "'2' (revision" in verdict.reason and "'1733000000.000000' (timestamp" in verdict.reason
    # Unknown order: a delete applies, an upsert or permission change does not pass a tombstone.
    untimed = Stamp("7", "revision")
    assert gate_event("delete", untimed, known) == A
    assert gate_event("upsert", untimed, DocVersions(deleted=Stamp("1.0", "timestamp", 5.0))) == S
    assert gate_event("acl", untimed, DocVersions(deleted=Stamp("1.0", "timestamp", 5.0))) == S
    # Etags: the same one is a duplicate, another one is ordered by time.
    e1, e2 = Stamp('"a"', "etag", 10.0), Stamp('"b"', "etag", 20.0)
    assert gate_event("upsert", e1, DocVersions(indexed=e1, accepted=e1)) == D
    assert gate_event("upsert", e2, DocVersions(indexed=e1, accepted=e1)) == A
    assert gate_event("upsert", e1, DocVersions(indexed=e2, accepted=e2)) == S


@pytest.mark.parametrize(
    ("held", "new", "expected"),
    [
        (None, PermissionEvidence(("everyone",), 5.0), ("everyone",)),
        (PermissionEvidence(("hr",), 10.0), PermissionEvidence(("everyone", "hr"), 5.0), ("hr",)),  # older
        (PermissionEvidence(("hr",), 10.0), PermissionEvidence(("everyone", "hr"), 20.0), ("everyone", "hr")),
        (PermissionEvidence(("hr",), 10.0), PermissionEvidence(("everyone", "hr"), 0.0), ("hr",)),  # unknown
        (PermissionEvidence(("everyone", "hr"), 10.0), PermissionEvidence(("hr",), 10.0), ("hr",)),  # tie
        (
            PermissionEvidence(("a", "b"), 0.0),
            PermissionEvidence(("b", "c"), 0.0),
            ("b",),
        ),  # neither: both allow
    ],
)
def test_choose_permissions_newest_wins_else_narrower(
    held: PermissionEvidence | None, new: PermissionEvidence, expected: tuple[str, ...]
) -> None:
    assert choose_permissions(held, new).groups == expected


def test_choose_permissions_keeps_every_denial_on_a_tie() -> None:
    held = PermissionEvidence(("eng",), 0.0, ("contractors",))
    new = PermissionEvidence(("eng",), 0.0, ("interns",))
    assert choose_permissions(held, new).deny == ("contractors", "interns")


def test_permission_evidence_from_before_a_delete_is_not_applied_to_a_recreated_document(
    tmp_path: Path,
) -> None:
    """Regression (found by tests/test_interleavings_property.py): an acl
    event made before a file was deleted, applied after the file was
    re-created, narrowed the new file's groups. A backfill's tombstone holds
    the file's last time (about 1.7e9), not the delete's: the acl event's
    version passed it. Evidence at or before the delete's time is about the
    deleted document (the gate drops it; held evidence is ignored)."""
    from transforms.events import held_permissions

    tomb = Stamp("1700000000.000000", "timestamp", 1_800_000_100.0)  # deleted at ...100
    before = Stamp("1800000050.000000", "timestamp", 1_800_000_050.0)
    after = Stamp("1800000150.000000", "timestamp", 1_800_000_150.0)
    verdict = gate_verdict("acl", before, DocVersions(deleted=tomb))
    assert verdict.action == S and "tombstone" in verdict.reason
    assert gate_event("acl", after, DocVersions(deleted=tomb)) == A
    assert (
        gate_event("acl", Stamp("1800000050.000000", "timestamp"), DocVersions(deleted=tomb)) == A
    )  # untimed
    assert evidence_predates_delete(100.0, 100.0) and evidence_predates_delete(99.0, 100.0)
    assert not evidence_predates_delete(101.0, 100.0)
    assert not evidence_predates_delete(0.0, 100.0) and not evidence_predates_delete(50.0, None)

    # The catalog side: evidence recorded before the delete is not held for the re-created document.
    cat = open_catalog(Settings(home=str(tmp_path / "home")))
    try:
        cat.acls.upsert_acl("acl-hr", "t", ["hr"], [])
        cat.gate_state.set_acl_version(
            "d1", "t", "50", "acl-hr", version_domain="timestamp", observed_at=50.0
        )
        assert held_permissions(cat, "d1") == PermissionEvidence(
            ("hr",), 50.0, (), Stamp("50", "timestamp", 50.0)
        )
        cat.gate_state.put_tombstone("d1", "t", "10", version_domain="timestamp", observed_at=100.0)
        assert held_permissions(cat, "d1") is None
        cat.gate_state.set_acl_version(
            "d1", "t", "150", "acl-hr", version_domain="timestamp", observed_at=150.0
        )
        assert held_permissions(cat, "d1") == PermissionEvidence(
            ("hr",), 150.0, (), Stamp("150", "timestamp", 150.0)
        )
    finally:
        cat.close()


REV = "revision"


@pytest.mark.parametrize(
    ("held", "new", "expected"),
    [
        # An acl event of revision 5 applied; the content's upsert (revision 4,
        # observed the same second) is fetched after it: the acl event stands.
        (
            PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("5", REV, 100.0)),
            PermissionEvidence(("eng",), 100.0, (), Stamp("4", REV, 100.0)),
            ("eng", "sales"),
        ),
        # The acl event (revision 5) widens what the content (revision 4) held.
        (
            PermissionEvidence(("eng",), 100.0, (), Stamp("4", REV, 100.0)),
            PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("5", REV, 100.0)),
            ("eng", "sales"),
        ),
        # Unknown times: the versions still order them.
        (
            PermissionEvidence(("eng",), 0.0, (), Stamp("4", REV)),
            PermissionEvidence(("sales",), 0.0, (), Stamp("5", REV)),
            ("sales",),
        ),
        # Versions that do not order (two domains, two etags): narrower set.
        (
            PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("100.000000", "listing", 100.0)),
            PermissionEvidence(("eng", "hr"), 100.0, (), Stamp("5", REV, 100.0)),
            ("eng",),
        ),
        (
            PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("abc", "etag", 100.0)),
            PermissionEvidence(("eng", "hr"), 100.0, (), Stamp("def", "etag", 100.0)),
            ("eng",),
        ),
        # One side without a version (a listing): narrower set, as before.
        (
            PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("5", REV, 100.0)),
            PermissionEvidence(("eng", "hr"), 100.0),
            ("eng",),
        ),
        # Times that differ still decide before versions.
        (
            PermissionEvidence(("eng",), 200.0, (), Stamp("4", REV, 200.0)),
            PermissionEvidence(("sales",), 100.0, (), Stamp("5", REV, 100.0)),
            ("eng",),
        ),
    ],
)
def test_a_time_tie_falls_back_to_comparable_versions_before_narrowing(
    held: PermissionEvidence, new: PermissionEvidence, expected: tuple[str, ...]
) -> None:
    assert choose_permissions(held, new).groups == expected


def test_a_tied_acl_event_of_a_higher_revision_applies_and_keeps_its_denials() -> None:
    held = PermissionEvidence(("eng",), 100.0, ("contractors",), Stamp("4", REV, 100.0))
    new = PermissionEvidence(("eng", "sales"), 100.0, (), Stamp("5", REV, 100.0))
    assert choose_permissions(held, new) is new
    assert (
        gate_event(
            "acl",
            Stamp("5", REV, 100.0),
            DocVersions(indexed=Stamp("4", REV, 100.0), acl=Stamp("4", REV, 100.0)),
        )
        == GateAction.APPLY
    )


def test_a_delivery_lost_with_its_whole_process_is_not_counted() -> None:
    from ragsync.decisions import Delivery, next_delivery

    assert next_delivery(0, lost_with_process=False, max_deliveries=5) == Delivery(False, 1)
    assert next_delivery(3, lost_with_process=False, max_deliveries=5) == Delivery(False, 4)
    assert next_delivery(3, lost_with_process=True, max_deliveries=5) == Delivery(False, 3)
    assert next_delivery(5, lost_with_process=False, max_deliveries=5) == Delivery(True, 5)
    assert next_delivery(5, lost_with_process=True, max_deliveries=5) == Delivery(False, 5)
    assert next_delivery(6, lost_with_process=True, max_deliveries=5) == Delivery(True, 5)
    assert next_delivery(0, lost_with_process=True, max_deliveries=5) == Delivery(False, 1)


@pytest.mark.parametrize(
    ("held", "new", "expected"),
    [
        # An acl event (numeric version, timed) on a folder whose listing gives
        # the source's default groups (no time, no version): the event stands.
        # The two share no group, and meeting them gave none (issue 43).
        (
            PermissionEvidence(("it",), 100.0, (), Stamp("2", "", 100.0)),
            PermissionEvidence(("everyone",)),
            ("it",),
        ),
        # An acl event that widened the document stands too.
        (
            PermissionEvidence(("it", "staff"), 100.0, (), Stamp("2", "", 100.0)),
            PermissionEvidence(("staff",)),
            ("it", "staff"),
        ),
        # Held configuration, new timed evidence: the evidence.
        (PermissionEvidence(("staff",)), PermissionEvidence(("hr",), 50.0), ("hr",)),
        # Two pieces of configuration: still the groups both allow.
        (PermissionEvidence(("a", "b")), PermissionEvidence(("b", "c")), ("b",)),
    ],
)
def test_configuration_without_a_time_never_outranks_timed_evidence(
    held: PermissionEvidence, new: PermissionEvidence, expected: tuple[str, ...]
) -> None:
    assert choose_permissions(held, new).groups == expected
