"""The event queue's lanes, tenant fairness, lease heartbeat and crash-loop
guard, on SQLite and on a real PostgreSQL (``catalog_url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragsync.catalog import Catalog
from ragsync.catalog.queue import lane_of_op
from ragsync.model import Event


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Catalog]:
    cat = Catalog.open(catalog_url)
    for tenant in ("a", "b"):
        cat.sources.create_source(
            tenant, source_id="docs", type="object_store", uri=f"/srv/{tenant}", if_exists="update"
        )
    try:
        yield cat
    finally:
        cat.close()


def _event(tenant: str, n: int, op: str = "upsert") -> Event:
    return Event(
        event_id=f"{tenant}-{op}-{n:02d}",
        source_id="docs",
        doc_id=f"d{n}",
        op=op,
        source_version=str(n),
        acl_groups=("staff",) if op != "delete" else (),
        content_uri=f"/srv/{tenant}/d{n}.md" if op == "upsert" else "",
        event_time=1000.0 + n,
        tenant_id=tenant,
    )


def _ids(rows: list[dict[str, object]]) -> list[str]:
    return [str(r["event_id"]) for r in rows]


def test_deletes_and_permission_changes_never_wait_behind_content(catalog: Catalog) -> None:
    assert [lane_of_op(op) for op in ("upsert", "delete", "acl")] == ["fast", "priority", "priority"]
    catalog.queue.enqueue_events([_event("a", n) for n in range(50)], now=100.0)
    catalog.queue.enqueue_events([_event("b", 1, "acl"), _event("a", 99, "delete")], now=200.0)
    assert catalog.queue_views.queue_stats(now=300.0)["by_lane"] == {"fast": 50, "priority": 2}
    first = catalog.queue.claim_events(limit=3, now=300.0)
    # Both priority events, though queued last, then the oldest content.
    assert _ids(first.claimed) == ["a-delete-99", "b-acl-01", "a-upsert-00"]


def test_one_tenants_backlog_does_not_hold_another_tenant(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", n) for n in range(20)], now=100.0)
    catalog.queue.enqueue_events([_event("b", 1)], now=500.0)
    got = catalog.queue.claim_events(limit=4, now=600.0)
    # Round-robin over tenants inside the lane: b's one event is second.
    assert _ids(got.claimed) == ["a-upsert-00", "b-upsert-01", "a-upsert-01", "a-upsert-02"]


def test_the_slow_lane_is_served_only_by_its_own_workers(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", 1), _event("a", 2)], now=100.0)
    assert catalog.queue.move_to_lane([("a", "a-upsert-01")], "slow", now=150.0) == 1
    fast = catalog.queue.claim_events(lanes=("priority", "fast"), now=200.0)
    assert _ids(fast.claimed) == ["a-upsert-02"]
    assert catalog.queue.unfinished_events(("slow",)) == 1
    slow = catalog.queue.claim_events(lanes=("slow",), now=200.0)
    assert _ids(slow.claimed) == ["a-upsert-01"]


def test_a_heartbeat_keeps_long_work_from_a_second_worker(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", 1), _event("a", 2)], now=0.0)
    assert len(catalog.queue.claim_events(lease_s=10.0, now=1.0).claimed) == 2
    catalog.queue.ack_events([("a", "a-upsert-02")])
    # Still working on 1 at t=8: the heartbeat pushes its lease to t=18 and
    # reports that 2 needs no more heartbeats.
    assert catalog.queue.extend_leases([("a", "a-upsert-01"), ("a", "a-upsert-02")], 10.0, now=8.0) == {
        ("a", "a-upsert-01")
    }
    assert catalog.queue.claim_events(now=15.0).claimed == []  # without it, t=11 would hand it out again
    again = catalog.queue.claim_events(now=19.0)  # the worker died: delivered again
    assert (_ids(again.claimed), again.claimed[0]["deliveries"]) == (["a-upsert-01"], 2)


def test_an_event_that_kills_its_worker_every_time_is_set_aside(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", 1), _event("a", 2)], now=0.0)
    for attempt in range(3):  # leased three times, never acknowledged
        got = catalog.queue.claim_events(limit=1, lease_s=5.0, max_deliveries=3, now=10.0 * (attempt + 1))
        assert _ids(got.claimed) == ["a-upsert-01"]
    got = catalog.queue.claim_events(limit=2, lease_s=5.0, max_deliveries=3, now=100.0)
    assert _ids(got.crash_looped) == ["a-upsert-01"]
    assert _ids(got.claimed) == ["a-upsert-02"]
    assert catalog.queue.tenant_event("a", "a-upsert-01")["state"] == "dead"  # type: ignore[index]
    # Re-driven after a fix, it starts counting again.
    assert catalog.queue.requeue_event("a", "a-upsert-01")
    assert _ids(catalog.queue.claim_events(limit=1, max_deliveries=3).claimed) == ["a-upsert-01"]


def test_a_heartbeat_lets_go_of_events_requeued_or_handed_to_the_slow_lane(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", 1), _event("a", 2), _event("a", 3)], now=0.0)
    rows = catalog.queue.claim_events(lease_s=10.0, now=1.0).claimed
    claims = {(str(r["tenant_id"]), str(r["event_id"])): (int(r["attempts"]), str(r["lane"])) for r in rows}
    assert catalog.queue.retry_event_later(("a", "a-upsert-01"), 60.0) == "pending"  # a retryable failure
    assert catalog.queue.move_to_lane([("a", "a-upsert-02")], "slow", now=2.0) == 1  # found to need OCR
    held = catalog.queue.extend_leases(list(claims), 10.0, now=5.0, claimed=claims)
    assert held == {("a", "a-upsert-03")}
    # The slow lane's reader gets the scan at once; the requeued one waits for its retry time.
    assert _ids(catalog.queue.claim_events(lanes=("slow",), now=6.0).claimed) == ["a-upsert-02"]


def test_a_scoped_claim_leases_only_its_tenants_source_events(catalog: Catalog) -> None:
    from ragsync.catalog.queue import EventScope

    catalog.sources.create_source(
        "a", source_id="other", type="object_store", uri="/srv/a-other", if_exists="update"
    )
    other = Event(**{**_event("a", 7).__dict__, "event_id": "a-other-07", "source_id": "other"})
    catalog.queue.enqueue_events([_event("a", 1), _event("b", 1), _event("b", 2, "delete"), other], now=100.0)
    scope = EventScope("a", "docs")
    assert catalog.queue.unfinished_events(scope=scope) == 1
    assert catalog.queue.unfinished_events(scope=EventScope("a")) == 2
    got = catalog.queue.claim_events(now=200.0, scope=scope)
    assert (_ids(got.claimed), got.crash_looped) == (["a-upsert-01"], [])
    assert catalog.queue.claim_events(now=201.0, scope=scope).claimed == []  # leased: nothing more of its own
    rest = catalog.queue.claim_events(now=201.0)
    assert sorted(_ids(rest.claimed)) == ["a-other-07", "b-delete-02", "b-upsert-01"]


def test_a_stream_killed_again_and_again_never_makes_a_crash_loop(catalog: Catalog) -> None:
    """Leases lost with their whole process (the holder is gone) are not
    deliveries; leases lost while the holder runs on (a worker died) are."""
    catalog.queue.enqueue_events([_event("a", 1)], now=0.0)
    dead_runs = {f"host:{pid}:1" for pid in range(100, 120)}
    for i, run in enumerate(sorted(dead_runs)):  # 20 kills of the whole stream
        got = catalog.queue.claim_events(
            lease_s=5.0, max_deliveries=3, now=10.0 * (i + 1), holder=run, holder_gone=dead_runs.__contains__
        )
        assert (_ids(got.claimed), got.claimed[0]["deliveries"], got.crash_looped) == (["a-upsert-01"], 1, [])
    assert catalog.queue.tenant_event("a", "a-upsert-01")["lease_holder"] == "host:119:1"  # type: ignore[index]
    # The same run leasing again (its worker died): counted, then set aside.
    for i in range(2):
        got = catalog.queue.claim_events(
            lease_s=5.0,
            max_deliveries=3,
            now=500.0 + 10 * i,
            holder="host:119:1",
            holder_gone=dead_runs.__contains__,
        )
    assert got.claimed[0]["deliveries"] == 3
    got = catalog.queue.claim_events(
        lease_s=5.0, max_deliveries=3, now=600.0, holder="host:7:1", holder_gone=lambda h: False
    )
    assert (_ids(got.crash_looped), got.claimed) == (["a-upsert-01"], [])


def test_a_restart_takes_the_events_a_killed_stream_held_at_once(catalog: Catalog) -> None:
    catalog.queue.enqueue_events([_event("a", 1), _event("a", 2)], now=0.0)
    catalog.queue.claim_events(limit=1, lease_s=300.0, now=1.0, holder="host:1:1")  # killed
    catalog.queue.claim_events(limit=1, lease_s=300.0, now=1.0, holder="host:2:1")  # still running
    assert catalog.queue.release_orphaned_leases(lambda h: h == "host:1:1", now=2.0) == 1
    got = catalog.queue.claim_events(now=2.0, holder="host:3:1", holder_gone=lambda h: h == "host:1:1")
    assert (_ids(got.claimed), got.claimed[0]["deliveries"]) == (["a-upsert-01"], 1)
    # Acknowledged or retried events are held by no one.
    catalog.queue.ack_events([("a", "a-upsert-01")])
    catalog.queue.retry_event_later(("a", "a-upsert-02"), 0.0)
    rows = [catalog.queue.tenant_event("a", f"a-upsert-0{n}") for n in (1, 2)]
    assert [r["lease_holder"] for r in rows] == [None, None]  # type: ignore[index]
