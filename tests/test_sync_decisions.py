"""Pure decisions and plain-Python pieces of syncing: the partial-listing
guard, the sync plan, pausing, the schedule, reading a change feed into a
sink, object-store shards and webhook translation."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from connectors.base import ChangePage, make_event
from connectors.feed import CollectingSink, read_feed
from connectors.files import FolderConnector
from ragsync.decisions import (
    SourceSchedule,
    SyncMode,
    after_failure,
    due_syncs,
    failure_backoff_s,
    listing_verdict,
    next_tenant,
    plan_sync,
)
from ragsync.errors import InvalidEventError, OutsideLocationError
from ragsync.source_types import SourceSpec


@pytest.mark.parametrize(
    ("known", "vanished", "share", "delete"),
    [
        (0, 0, 0.5, True),  # a first listing
        (10, 0, 0.5, True),
        (10, 5, 0.5, True),  # exactly the limit is allowed
        (10, 6, 0.5, False),
        (3, 3, 0.5, False),  # an empty listing of a source with documents
        (3, 3, 1.0, True),  # an operator allowed it
        (1000, 1, 0.0, False),
    ],
)
def test_listing_verdict(known: int, vanished: int, share: float, delete: bool) -> None:
    verdict = listing_verdict(known=known, vanished=vanished, max_delete_share=share)
    assert verdict.delete is delete
    assert (verdict.reason == "") is delete
    if not delete:
        assert f"would delete {vanished} of {known} documents" in verdict.reason


def test_an_empty_listing_never_deletes() -> None:
    verdict = listing_verdict(known=5, vanished=5, max_delete_share=1.0, listed=0)
    assert not verdict.delete and "returned no object" in verdict.reason
    assert listing_verdict(known=5, vanished=4, max_delete_share=1.0, listed=1).delete


def test_listing_verdict_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError):
        listing_verdict(known=1, vanished=2, max_delete_share=0.5)
    with pytest.raises(ValueError):
        listing_verdict(known=1, vanished=0, max_delete_share=1.5)


def test_plan_sync() -> None:
    assert plan_sync("s", supports_changes=True, cursor=None, full_requested=False).mode == SyncMode.FULL
    assert plan_sync("s", supports_changes=False, cursor="c", full_requested=False).mode == SyncMode.FULL
    assert plan_sync("s", supports_changes=True, cursor="c", full_requested=True).mode == SyncMode.FULL
    plan = plan_sync("s", supports_changes=True, cursor="c", full_requested=False, max_delete_share=0.2)
    assert (plan.mode, plan.cursor, plan.max_delete_share) == (SyncMode.INCREMENTAL, "c", 0.2)


def test_after_failure_pauses_listings_at_once_and_feeds_after_n() -> None:
    assert after_failure(0, error="x", pause_after=3, listing_failed=True).pause
    first = after_failure(0, error="boom", pause_after=3, listing_failed=False)
    second = after_failure(first.failures, error="boom", pause_after=3, listing_failed=False)
    third = after_failure(second.failures, error="boom", pause_after=3, listing_failed=False)
    assert [o.pause for o in (first, second, third)] == [False, False, True]
    assert third.reason == "3 syncs failed in a row; last error: boom"
    # Until paused, each failure in a row backs the next sync off longer.
    assert [o.retry_after_s for o in (first, second, third)] == [60.0, 120.0, 0.0]


def test_failure_backoff_doubles_up_to_an_hour() -> None:
    assert [failure_backoff_s(n) for n in (1, 2, 3, 6, 7, 8, 1000)] == [
        60.0,
        120.0,
        240.0,
        1920.0,
        3600.0,
        3600.0,
        3600.0,
    ]
    with pytest.raises(ValueError):
        failure_backoff_s(0)


def _schedule(source_id: str, **kw: object) -> SourceSchedule:
    base: dict[str, object] = {
        "sync": "poll",
        "poll_interval_s": 300,
        "paused": False,
        "last_sync_at": 1000.0,
        "last_full_at": 1000.0,
    }
    base.update(kw)
    return SourceSchedule(source_id=source_id, **base)  # type: ignore[arg-type]


def test_due_syncs() -> None:
    now = 1000.0 + 400
    sources = [
        _schedule("polled"),  # 400 s since the last sync, interval 300
        _schedule("recent", last_sync_at=now - 10),
        _schedule("never-listed", last_full_at=None),
        _schedule("day-old", last_full_at=now - 90_000, last_sync_at=now - 1),
        _schedule("paused", paused=True, last_full_at=None),
        _schedule("busy", busy=True, last_full_at=None),
        _schedule("rate-limited", retry_at=now + 60, last_full_at=None),
        _schedule("webhook", sync="webhook"),  # pushed changes: only the daily listing
        _schedule("manual", sync=None, last_full_at=None),
    ]
    assert due_syncs(sources, now) == [
        ("polled", SyncMode.INCREMENTAL),
        ("never-listed", SyncMode.FULL),
        ("day-old", SyncMode.FULL),
    ]


# -- reading a change feed -------------------------------------------------------------

SPEC = SourceSpec("s1", "acme", "wiki", "https://wiki.example.org/w/api.php")


@dataclass
class _Feed:
    """A connector whose change feed is a list of pages; records the cursors asked for."""

    pages: dict[str, ChangePage]
    asked: list[str] = field(default_factory=list)

    def changes(self, cursor: str) -> ChangePage:
        self.asked.append(cursor)
        return self.pages[cursor]


def _upsert(doc: str, version: str) -> object:
    return make_event(
        SPEC, doc, "upsert", version, acl_groups=["everyone"], content_uri=f"{SPEC.uri}?p={doc}"
    )


def test_read_feed_queues_each_page_before_saving_its_cursor() -> None:
    log: list[str] = []

    class Sink(CollectingSink):
        def queue(self, events):  # type: ignore[no-untyped-def]
            log.append(f"queue {len(events)}")
            return super().queue(events)

    feed = _Feed(
        {
            "c0": ChangePage((_upsert("a", "1"), _upsert("b", "2")), "c1", more=True),  # type: ignore[arg-type]
            "c1": ChangePage((make_event(SPEC, "a", "delete", "3"),), "c2", more=False),
        }
    )
    result = read_feed(feed, "c0", Sink(), lambda c: log.append(f"save {c}"))  # type: ignore[arg-type]
    assert log == ["queue 2", "save c1", "queue 1", "save c2"]
    assert (result.pages, result.events_read, result.upserts, result.deletes, result.cursor) == (
        2,
        3,
        2,
        1,
        "c2",
    )


def test_a_failing_page_keeps_the_cursor_of_the_pages_before_it() -> None:
    saved: list[str] = []

    class Broken(_Feed):
        def changes(self, cursor: str) -> ChangePage:
            if cursor == "c1":
                raise ConnectionError("the source went away")
            return super().changes(cursor)

    feed = Broken({"c0": ChangePage((_upsert("a", "1"),), "c1", more=True)})  # type: ignore[arg-type]
    sink = CollectingSink()
    with pytest.raises(ConnectionError):
        read_feed(feed, "c0", sink, saved.append)  # type: ignore[arg-type]
    assert saved == ["c1"] and len(sink.events) == 1


def test_a_feed_that_never_moves_is_stopped() -> None:
    feed = _Feed({"c0": ChangePage((), "c0", more=True)})
    with pytest.raises(RuntimeError, match="did not move"):
        read_feed(feed, "c0", CollectingSink(), lambda c: None)  # type: ignore[arg-type]


# -- object stores: shards and notifications -------------------------------------------


class _NoFs:
    def match(self, pattern: str) -> list[object]:
        return []

    def open(self, path: str) -> object:
        raise AssertionError("not read")

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])


def _folder(uri: str) -> FolderConnector:
    spec = SourceSpec("f1", "acme", "object_store", uri, options={"acl_groups": ["staff"]})
    return FolderConnector(spec, _NoFs())  # type: ignore[arg-type]


def test_object_store_shards_cover_every_first_character_once() -> None:
    shards = _folder("s3://bucket/docs").list_shards()
    assert (
        len(shards) == 63
        and shards[0] == "s3://bucket/docs/0**"
        and shards[-1] == "s3://bucket/docs/[!0-9A-Za-z]**"
    )
    from apache_beam.io.filesystem import FileSystem  # the pattern syntax shards are matched with

    keys = ["s3://bucket/docs/" + k for k in ("a.txt", "Z/x", "9", "_x", "é.txt", "-", "[a]")]
    for key in keys:
        matched = [s for s in shards if re.match(FileSystem.translate_pattern(s), key)]
        assert len(matched) == 1, (key, matched)


def test_local_folders_are_one_shard(tmp_path: Path) -> None:
    assert _folder(str(tmp_path)).list_shards() == [""]


def test_gcs_notifications_become_events_under_the_root_only() -> None:
    gcs = _folder("gs://bucket/docs")

    def message(kind: str, name: str, **attrs: str) -> bytes:
        data = base64.b64encode(json.dumps({"updated": "2026-12-01T10:00:00.5Z"}).encode()).decode()
        attributes = {"eventType": kind, "bucketId": "bucket", "objectId": name, **attrs}
        return json.dumps({"message": {"attributes": attributes, "data": data}}).encode()

    (up,) = gcs.webhook_events(message("OBJECT_FINALIZE", "docs/a/b.pdf"), {}) or []
    assert (up.doc_id, up.op, up.content_uri, up.acl_groups) == (
        "a/b.pdf",
        "upsert",
        "gs://bucket/docs/a/b.pdf",
        ("staff",),
    )
    assert up.source_version == "1796119200.500000"
    (gone,) = gcs.webhook_events(message("OBJECT_DELETE", "docs/a/b.pdf"), {}) or []
    assert (gone.op, gone.content_uri) == ("delete", "")
    assert gcs.webhook_events(message("OBJECT_DELETE", "docs/a/b.pdf", overwrittenByGeneration="7"), {}) == []
    for outside in ("other/x.pdf", "docs/../secret", "docsx/a.pdf"):  # outside the root: refused
        with pytest.raises(OutsideLocationError):
            gcs.webhook_events(message("OBJECT_FINALIZE", outside), {})
    assert gcs.webhook_events(message("OBJECT_FINALIZE", "docs/.hidden"), {}) == []
    with pytest.raises(InvalidEventError):
        gcs.webhook_events(b"not json", {})


def test_s3_notifications_become_events() -> None:
    s3 = _folder("s3://bucket/docs")
    record = {
        "eventName": "ObjectCreated:Put",
        "eventTime": "2026-12-01T10:00:00.000Z",
        "s3": {"bucket": {"name": "bucket"}, "object": {"key": "docs/travel+policy.pdf"}},
    }
    removed = {**record, "eventName": "ObjectRemoved:Delete"}
    restored = {**record, "eventName": "ObjectRestore:Completed"}
    events = s3.webhook_events(json.dumps({"Records": [record, removed, restored]}).encode(), {}) or []
    assert [(e.doc_id, e.op) for e in events] == [
        ("travel policy.pdf", "upsert"),
        ("travel policy.pdf", "delete"),
    ]
    with pytest.raises(InvalidEventError):
        _folder("gs://bucket/docs").webhook_events(json.dumps({"Records": [record]}).encode(), {})


def test_next_tenant_is_round_robin_over_eligible_tenants() -> None:
    queued = ["b", "a", "a", "c", "a"]
    assert next_tenant(queued, {}, None) == "a"
    assert next_tenant(queued, {}, "a") == "b"
    assert next_tenant(queued, {}, "b") == "c"
    assert next_tenant(queued, {}, "c") == "a"  # wraps around
    assert next_tenant(queued, {}, "zz") == "a"  # the last tenant has nothing queued any more
    assert next_tenant(["a"], {}, "a") == "a"  # alone: served again
    # A tenant at its running cap waits; others go first.
    assert next_tenant(queued, {"b": 1}, "a") == "c"
    assert next_tenant(queued, {"a": 1, "b": 1, "c": 1}, None) is None
    assert next_tenant(queued, {"a": 1}, None, max_running=2) == "a"
    assert next_tenant([], {}, "a") is None
    with pytest.raises(ValueError):
        next_tenant(queued, {}, None, max_running=0)
