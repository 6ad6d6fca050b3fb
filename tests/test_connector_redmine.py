"""The Redmine connector against a real Redmine (Debian's package, SQLite,
WEBrick; see tests/redmine.py): listing, the change feed with its deletes,
permissions, attachments, and what it does when Redmine fails or throttles."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from connectors import redmine as redmine_module
from connectors.api import RateLimitedError
from connectors.base import list_all
from connectors.reader import FetchLimits
from connectors.redmine import RedmineConnector, decode_ids, encode_ids
from connectors.registry import open_connector
from ragsync.errors import ConfigurationError, FetchError, InvalidEventError, OutsideLocationError
from ragsync.ingest.detect import detect_mime
from ragsync.model import SourceFile
from ragsync.parsing import parse
from ragsync.source_types import SourceSpec
from tests.redmine import MANAGER, Fault, FaultProxy, Redmine


def _connector(redmine: Redmine, monkeypatch: pytest.MonkeyPatch, **options: Any) -> RedmineConnector:
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.key)
    spec = SourceSpec(
        "rm",
        "acme",
        "redmine",
        redmine.url,
        credentials_ref="env://RAGSYNC_TEST_REDMINE_KEY",
        options=options,
    )
    connector = open_connector(spec, limits=FetchLimits(max_bytes=1 << 20, timeout_s=60))
    assert isinstance(connector, RedmineConnector)
    return connector


def _settle(connector: RedmineConnector) -> None:
    """Wait until the changes made so far lie past the feed's lag (whole seconds)."""
    time.sleep(connector.lag_s + 1.1)


def _drain(connector: RedmineConnector, cursor: str) -> tuple[list[tuple[str, str, tuple[str, ...]]], str]:
    """Every event of one incremental pass: (issue id, op, groups)."""
    events: list[tuple[str, str, tuple[str, ...]]] = []
    for _ in range(1000):
        page = connector.changes(cursor)
        events += [(e.doc_id, e.op, e.acl_groups) for e in page.events]
        cursor = page.cursor
        if not page.more:
            return events, cursor
    raise AssertionError("the feed did not end")


def test_known_ids_round_trip() -> None:
    ids = [1, 2, 3, 200, 70_000, 70_001, 2**40]
    assert decode_ids(encode_ids(list(reversed(ids)))) == ids
    assert decode_ids(encode_ids([])) == []
    assert len(encode_ids(list(range(1, 100_001)))) < 400  # dense ids: a few hundred bytes


def test_create_edit_comment_attach_private_move_delete(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    alpha = redmine.project("feed-alpha")
    beta = redmine.project("feed-beta", public=True)
    first = redmine.issue(alpha, "Printer on fire", "The printer on floor 3 is on fire.")
    second = redmine.issue(alpha, "Coffee machine", "It makes tea.")
    rm = _connector(redmine, monkeypatch, projects=["feed-alpha", "feed-beta"])
    _settle(rm)
    cursor = rm.start_cursor()
    listed = {i.source_object_id: i for i in list_all(rm)}
    assert sorted(listed) == sorted([str(first), str(second)])
    assert listed[str(first)].acl_groups == (
        "admins",
        f"project:{alpha}:all",
        f"project:{alpha}:own:1",
        f"project:{alpha}:public",
    )
    _settle(rm)
    events, cursor = _drain(rm, cursor)
    assert [(d, op) for d, op, _ in events if op == "delete"] == []

    redmine.update(first, description="The printer on floor 3 was put out.")  # edit
    redmine.update(second, notes="Tea is fine too.")  # comment
    _settle(rm)
    events, cursor = _drain(rm, cursor)
    assert sorted((d, op) for d, op, _ in events) == sorted([(str(first), "upsert"), (str(second), "upsert")])

    redmine.attach(first, "report.txt", b"Fire report: toner caught fire.\n")  # attach
    redmine.update(second, is_private=True)  # make private
    _settle(rm)
    events, cursor = _drain(rm, cursor)
    assert sorted((d, op) for d, op, _ in events) == sorted([(str(first), "upsert"), (str(second), "upsert")])
    private = next(g for d, _, g in events if d == str(second))
    assert f"project:{alpha}:public" not in private and f"project:{alpha}:all" in private

    redmine.update(second, project_id=beta)  # move
    redmine.delete_issue(first)  # delete
    _settle(rm)
    events, cursor = _drain(rm, cursor)
    assert sorted((d, op) for d, op, _ in events) == sorted([(str(first), "delete"), (str(second), "upsert")])
    moved = next(g for d, op, g in events if d == str(second))
    assert all(g == "admins" or g.startswith(f"project:{beta}:") for g in moved)
    assert _drain(rm, cursor)[0] == []  # nothing new: nothing read again
    assert json.loads(cursor)["known"] == encode_ids([second])


def test_the_fetched_issue_is_a_bundle_with_its_attachments(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = redmine.project("bundle")
    customer = redmine.custom_field("Customer", visible=True)
    margin = redmine.custom_field("Margin", visible=False, role=MANAGER)  # managers only
    fields = [{"id": customer, "value": "Acme Rockets"}, {"id": margin, "value": "42 percent"}]
    issue = redmine.issue(project, "Quarterly numbers", "See the attached sheet.", custom_fields=fields)
    shown = redmine.call("GET", f"issues/{issue}.json")["issue"]["custom_fields"]
    assert {f["name"]: f["value"] for f in shown} == {"Customer": "Acme Rockets", "Margin": "42 percent"}
    attached = redmine.attach(issue, "numbers.csv", b"quarter,revenue\nQ1,100\nQ2,140\n", "text/csv")
    redmine.update(issue, notes="Visible to every reader.")
    redmine.update(issue, notes="Only for managers.", private_notes=True)
    redmine.update(issue, status_id=5)  # Closed: still indexed, with its status
    rm = _connector(redmine, monkeypatch, projects=["bundle"])
    (item,) = list(list_all(rm))
    data = rm.fetch(item)
    mime = detect_mime(data)
    result = parse(data, mime)
    text = "\n".join(e.text for e in result.elements)
    assert text.startswith(f"#{issue} Quarterly numbers")
    assert "See the attached sheet." in text and "Visible to every reader." in text
    assert "Status: Closed" in text and "Customer: Acme Rockets" in text
    assert "42 percent" not in text  # a custom field not visible to every reader: left out
    assert "Only for managers." not in text  # a private note: not in a document its readers share
    assert mime == "application/vnd.ragsync.ticket-bundle+json"
    assert [(a.name, a.data) for a in result.attachments] == [
        (f"{attached}-numbers.csv", b"quarter,revenue\nQ1,100\nQ2,140\n")
    ]
    assert rm.permissions(item) == item.acl_groups
    for uri in (
        item.uri.replace("127.0.0.1", "localhost"),
        rm.issue_uri(issue + 1),
        f"{redmine.url}/users.json",
    ):
        with pytest.raises(OutsideLocationError):
            rm.fetch(SourceFile("acme", "rm", item.source_object_id, uri))


def _issues(redmine: Redmine, monkeypatch: pytest.MonkeyPatch, project: str, n: int) -> list[int]:
    """Pages of two issues, and ``n`` issues in a new project named ``project``."""
    monkeypatch.setattr(redmine_module, "_PAGE", 2)
    project_id = redmine.project(project)
    return [redmine.issue(project_id, f"{project} {k}") for k in range(n)]


def _proxied(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch, plan: Any, **options: Any
) -> tuple[RedmineConnector, FaultProxy, list[float]]:
    proxy = FaultProxy(redmine.url, plan)
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.key)
    spec = SourceSpec(
        "rm", "acme", "redmine", proxy.url, credentials_ref="env://RAGSYNC_TEST_REDMINE_KEY", options=options
    )
    sleeps: list[float] = []
    connector = open_connector(spec, limits=FetchLimits(max_bytes=1 << 20, timeout_s=60), sleep=sleeps.append)
    assert isinstance(connector, RedmineConnector)
    return connector, proxy, sleeps


def test_429_and_5xx_are_waited_out_and_nothing_is_skipped(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = redmine.project("throttled")
    issues = [redmine.issue(project, f"Throttled {n}") for n in range(3)]
    faults: list[Fault] = [(429, {"Retry-After": "1"}), (429, {"Retry-After": "2"}), (502, {})]

    def plan(path: str) -> Fault | None:
        return faults.pop(0) if path.startswith("/projects/throttled/issues.json") and faults else None

    rm, proxy, sleeps = _proxied(redmine, monkeypatch, plan, projects=["throttled"])
    try:
        listed = [int(i.source_object_id) for i in list_all(rm)]
    finally:
        proxy.close()
    assert listed == issues  # every issue, none skipped
    assert (
        sleeps[:2] == [1.0, 2.0] and len(sleeps) == 3 and 1.0 < sleeps[2] <= 4.0
    )  # Retry-After, then backoff
    assert sum(p.startswith("/projects/throttled/issues.json") for p in proxy.seen) == 4


def test_a_wait_longer_than_the_cap_reschedules_instead_of_sleeping(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm, proxy, sleeps = _proxied(redmine, monkeypatch, lambda path: (429, {"Retry-After": "600"}))
    try:
        with pytest.raises(RateLimitedError) as caught:
            rm.start_cursor()
    finally:
        proxy.close()
    assert caught.value.retry_after_s == 600 and sleeps == []


def test_a_listing_cut_short_raises_after_what_it_read(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    issues = _issues(redmine, monkeypatch, "cutshort", 5)

    def plan(path: str) -> Fault | None:  # the second page is gone (a 404 mid-listing)
        return (404, {}) if "issue_id=%3E%3D" in path and f"%3E%3D{issues[2]}" in path else None

    rm, proxy, _ = _proxied(redmine, monkeypatch, plan, projects=["cutshort"])
    read: list[str] = []
    try:
        with pytest.raises(FetchError):
            for item in list_all(rm):
                read.append(item.source_object_id)
    finally:
        proxy.close()
    assert read == [
        str(i) for i in issues[:2]
    ]  # the first page, then the failure: never a short "complete" listing


def test_deletes_are_found_by_halving_ranges(redmine: Redmine, monkeypatch: pytest.MonkeyPatch) -> None:
    issues = _issues(redmine, monkeypatch, "halving", 9)
    rm = _connector(redmine, monkeypatch, projects=["halving"])
    calls: list[str] = []
    count = rm._count
    monkeypatch.setattr(rm, "_count", lambda lo, hi: calls.append(f"{lo}-{hi}") or count(lo, hi))
    assert rm._vanished(issues) == [] and calls == [f"{issues[0]}-{issues[-1]}"]  # nothing deleted: one call
    redmine.delete_issue(issues[1])
    redmine.delete_issue(issues[6])
    assert rm._vanished(issues) == [issues[1], issues[6]]
    left = [i for i in issues if i not in (issues[1], issues[6])]
    calls.clear()
    assert rm._vanished(left) == [] and len(calls) == 1


def test_issues_saved_in_one_second_are_each_read_once(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More issues than a page changed in the same second (a bulk edit),
    their fractions of a second in the opposite order of their ids."""
    issues = _issues(redmine, monkeypatch, "samesecond", 5)
    rm = _connector(redmine, monkeypatch, projects=["samesecond"])
    _settle(rm)
    cursor = rm.start_cursor()
    # A second after the cursor's, in Redmine's own format and time zone (the server's local time).
    second = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(json.loads(cursor)["since"] + 1))
    db = sqlite3.connect(redmine.root / "instance" / "db" / "redmine.sqlite3", timeout=30)
    try:
        for n, issue in enumerate(issues):
            db.execute(
                "UPDATE issues SET updated_on = ? WHERE id = ?", (f"{second}.{900000 - n * 1000}", issue)
            )
        db.commit()
    finally:
        db.close()
    _settle(rm)
    events, cursor = _drain(rm, cursor)
    assert sorted(int(d) for d, op, _ in events if op == "upsert") == issues  # each once, none lost


def test_a_hostile_bundle_is_a_corrupt_document_and_limits_hold() -> None:
    from ragsync.errors import CorruptDocumentError
    from ragsync.parsing import ArchiveLimits
    from ragsync.parsing.bundle import PREFIX, ticket_bundle

    issue = {"redmine_issue": {"id": 7, "subject": "Badges", "description": "Badges at the desk."}}
    for bad in (
        PREFIX + b"}",  # not JSON
        PREFIX + b', "record": [], "attachments": []}',  # no record
        PREFIX + b', "record": {"a": 1}, "attachments": [{"name": "x", "data": "%%%"}]}',  # not base64
    ):
        assert detect_mime(bad) == "application/vnd.ragsync.ticket-bundle+json"
        with pytest.raises(CorruptDocumentError):
            parse(bad, detect_mime(bad))
    files = [(f"{n}-note.txt", "text/plain", b"note %d" % n) for n in range(3)]
    parsed = parse(ticket_bundle(issue, files), "application/vnd.ragsync.ticket-bundle+json")
    assert [a.name for a in parsed.attachments] == ["0-note.txt", "1-note.txt", "2-note.txt"]
    assert parsed.elements[-1].text == "Attachments: 0-note.txt, 1-note.txt, 2-note.txt"
    few = parse(
        ticket_bundle(issue, files),
        "application/vnd.ragsync.ticket-bundle+json",
        limits=ArchiveLimits(max_attachments=2),
    )
    assert few.attachments == () and "above the limit of 2" in few.metadata["attachments_skipped"]


def test_hits_link_to_the_issue_and_attachment_pages() -> None:
    from ragsync.query.search import page_link

    issue = "https://rm.example.org/redmine/issues/12.json?include=journals,attachments"
    assert page_link(issue) == "https://rm.example.org/redmine/issues/12"
    assert page_link(issue + "#34-report.pdf") == "https://rm.example.org/redmine/attachments/34"
    assert page_link("https://rm.example.org/issues/12.json") == "https://rm.example.org/issues/12.json"


def test_webhooks_only_trigger_a_feed_read() -> None:
    spec = SourceSpec("rm", "acme", "redmine", "http://127.0.0.1:9/redmine")
    rm = open_connector(spec, limits=FetchLimits())
    assert rm.webhook_events(b'{"payload": {"action": "opened"}}', {}) is None
    for body in (b"not json", b"[1, 2]"):
        with pytest.raises(InvalidEventError):
            rm.webhook_events(body, {})


def test_an_issue_deleted_while_listing_shifts_no_page(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages go by id, not by offset: a deletion behind the listing skips nothing ahead of it."""
    issues = _issues(redmine, monkeypatch, "shifting", 5)
    deleted: list[int] = []
    pages: list[str] = []

    def plan(path: str) -> Fault | None:
        if path.startswith("/projects/shifting/issues.json"):
            pages.append(path)
            if len(pages) == 2:  # before the second page: delete an issue the first one held
                deleted.append(issues[0])
                redmine.delete_issue(issues[0])
        return None

    rm, proxy, _ = _proxied(redmine, monkeypatch, plan, projects=["shifting"])
    try:
        listed = [int(i.source_object_id) for i in list_all(rm)]
    finally:
        proxy.close()
    assert deleted == [issues[0]] and listed == issues


def test_the_api_key_comes_from_the_tenants_secret_store(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tenant's source names its key in a store the operator granted it;
    any other reference is refused before a request is made."""
    store = tmp_path / "secrets"
    (store / "acme").mkdir(parents=True)
    (store / "acme" / "redmine-key").write_text(redmine.key + "\n", encoding="utf-8")
    (tmp_path / "elsewhere").write_text(redmine.key, encoding="utf-8")
    monkeypatch.setenv("RAGSYNC_TENANT_SECRETS", f"file://{store}/{{tenant}}")

    def spec(ref: str) -> SourceSpec:
        return SourceSpec("rm", "acme", "redmine", redmine.url, credentials_ref=ref, credentials_by="tenant")

    rm = open_connector(spec(f"file://{store}/acme/redmine-key"), limits=FetchLimits())
    assert "admin" in rm.list_identities().users  # an administrator's call: the key was sent
    for ref in (f"file://{tmp_path}/elsewhere", "env://RAGSYNC_TEST_REDMINE_KEY"):
        with pytest.raises(ConfigurationError, match="no readable secret of this tenant"):
            open_connector(spec(ref), limits=FetchLimits())
