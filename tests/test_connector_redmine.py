"""The Redmine connector against a real Redmine (Debian's package, SQLite,
WEBrick; see tests/redmine.py): listing, the change feed with its deletes,
permissions, attachments, and what it does when Redmine fails or throttles."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from connectors.base import list_all
from connectors.redmine import RedmineConnector, decode_ids, encode_ids
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync.detect import detect_mime
from ragsync.errors import OutsideLocationError
from ragsync.model import SourceFile
from ragsync.parsing import parse
from ragsync.source_types import SourceSpec
from tests.redmine import DEVELOPER, Redmine


def _connector(redmine: Redmine, monkeypatch: pytest.MonkeyPatch, **options: Any) -> RedmineConnector:
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.key)
    spec = SourceSpec(
        "rm", "acme", "redmine", redmine.url, credentials_ref="env://RAGSYNC_TEST_REDMINE_KEY", options=options
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


def test_create_edit_comment_attach_private_move_delete(redmine: Redmine, monkeypatch: pytest.MonkeyPatch) -> None:
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
    issue = redmine.issue(project, "Quarterly numbers", "See the attached sheet.")
    redmine.attach(issue, "numbers.csv", b"quarter,revenue\nQ1,100\nQ2,140\n", "text/csv")
    redmine.update(issue, notes="Visible to every reader.")
    redmine.update(issue, notes="Only for managers.", private_notes=True)
    rm = _connector(redmine, monkeypatch, projects=["bundle"])
    (item,) = list(list_all(rm))
    data = rm.fetch(item)
    mime = detect_mime(data)
    result = parse(data, mime)
    text = "\n".join(e.text for e in result.elements)
    assert text.startswith(f"#{issue} Quarterly numbers")
    assert "See the attached sheet." in text and "Visible to every reader." in text
    assert "Only for managers." not in text  # a private note: not in a document its readers share
    assert [(a.name, a.data) for a in result.attachments] == [
        (f"{redmine.call('GET', f'issues/{issue}.json?include=attachments')['issue']['attachments'][0]['id']}-numbers.csv",
         b"quarter,revenue\nQ1,100\nQ2,140\n")
    ]
    for uri in (
        item.uri.replace("127.0.0.1", "localhost"),
        rm.issue_uri(issue + 1),
        f"{redmine.url}/users.json",
    ):
        with pytest.raises(OutsideLocationError):
            rm.fetch(SourceFile("acme", "rm", item.source_object_id, uri))
