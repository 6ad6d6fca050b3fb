"""The MediaWiki connector against a real MediaWiki (Debian's package, SQLite,
``php -S``; see tests/mediawiki.py), plus recorded answers for what a real
wiki will not do on request (redirect to another host, rate limits)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from connectors.api import AccessDeniedError, RateLimitedError
from connectors.base import CursorExpiredError, list_all
from connectors.mediawiki import MediaWikiConnector
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync.errors import FetchError, InvalidEventError, OutsideLocationError, TooLargeError
from ragsync.model import SourceFile
from ragsync.source_types import SourceSpec
from tests.mediawiki import MediaWiki


def _connector(wiki: MediaWiki, max_bytes: int = 1 << 20, **options: Any) -> MediaWikiConnector:
    spec = SourceSpec("wiki-test", "acme", "wiki", wiki.api_url, options=options)
    connector = open_connector(spec, limits=FetchLimits(max_bytes=max_bytes, timeout_s=60))
    assert isinstance(connector, MediaWikiConnector)
    return connector


def _drain(connector: MediaWikiConnector, cursor: str) -> tuple[list[tuple[str, str]], str]:
    events: list[tuple[str, str]] = []
    while True:
        page = connector.changes(cursor)
        events += [(e.doc_id, e.op) for e in page.events]
        cursor = page.cursor
        if not page.more:
            return events, cursor


def test_listing_then_changes_edit_delete_move_create(mediawiki: MediaWiki) -> None:
    mediawiki.edit("Alpha", "== Llamas ==\nAlpha talks about llamas.")
    mediawiki.edit("Beta", "Beta is about boats.")
    mediawiki.edit("Gamma", "Gamma is about gardens.")
    wiki = _connector(mediawiki)
    cursor = wiki.start_cursor()
    listed = {i.source_object_id: i for i in list_all(wiki)}
    titles = {}
    for pageid, item in listed.items():
        titles[wiki.fetch(item).split(b"<h1>")[1].split(b"</h1>")[0].decode()] = pageid
    assert sorted(titles) == ["Alpha", "Beta", "Gamma", "Main Page"]
    assert {i.acl_groups for i in listed.values()} == {("everyone",)}
    versions = {i.source_version for i in listed.values()}
    assert len(versions) == 1 and versions.pop().isdigit()

    events, cursor = _drain(wiki, cursor)
    assert events == []  # nothing changed since the cursor was taken

    mediawiki.edit("Alpha", "== Llamas ==\nAlpha talks about alpacas now.")
    mediawiki.delete("Beta")
    mediawiki.move("Gamma", "Delta")
    mediawiki.edit("Epsilon", "Epsilon is new.")
    events, cursor = _drain(wiki, cursor)
    created = [doc for doc, op in events if doc not in listed]
    assert len(created) == 1
    assert sorted(events) == sorted(
        [
            (titles["Alpha"], "upsert"),
            (titles["Beta"], "delete"),
            (titles["Gamma"], "upsert"),  # a move keeps the page id
            (created[0], "upsert"),
        ]
    )
    moved = SourceFile("acme", "wiki-test", titles["Gamma"], wiki.content_uri(int(titles["Gamma"])))
    assert b"<h1>Delta</h1>" in wiki.fetch(moved)
    assert _drain(wiki, cursor)[0] == []


def test_fetch_refuses_addresses_the_connector_does_not_make(mediawiki: MediaWiki) -> None:
    wiki = _connector(mediawiki)
    page = next(iter(list_all(wiki)))
    for uri in (
        page.uri.replace("127.0.0.1", "localhost"),  # another host
        f"{mediawiki.api_url}?action=query&list=allusers&format=json",  # another action
        wiki.content_uri(int(page.source_object_id) + 1),  # another page than the id says
        f"http://127.0.0.1:{mediawiki.port}/index.php?curid=1",  # outside api.php
    ):
        with pytest.raises(OutsideLocationError):
            wiki.fetch(SourceFile("acme", "wiki-test", page.source_object_id, uri))


def test_a_page_over_the_byte_limit_is_refused(mediawiki: MediaWiki) -> None:
    mediawiki.edit("Huge", "Lorem ipsum dolor sit amet. " * 4000)
    wiki = _connector(mediawiki, max_bytes=32 * 1024)
    huge = next(i for i in list_all(wiki) if i.size > 100_000)
    with pytest.raises(TooLargeError):
        wiki.fetch(huge)


def test_a_private_wiki_read_anonymously_fails_the_listing(mediawiki: MediaWiki) -> None:
    mediawiki.stop()
    with mediawiki.conf.open("a", encoding="utf-8") as fh:
        fh.write("\n$wgGroupPermissions['*']['read'] = false;\n")
    mediawiki.start()
    wiki = _connector(mediawiki)
    with pytest.raises(AccessDeniedError, match="readapidenied"):
        list(list_all(wiki))


def test_a_stopped_wiki_fails_instead_of_listing_nothing(mediawiki: MediaWiki) -> None:
    wiki = _connector(mediawiki)
    mediawiki.stop()
    wiki.api.sleep = lambda s: None  # do not wait out the retries
    with pytest.raises(FetchError, match="cannot reach"):
        list(list_all(wiki))


def test_a_trimmed_change_log_expires_the_cursor(mediawiki: MediaWiki) -> None:
    mediawiki.edit("Alpha", "one")
    wiki = _connector(mediawiki)
    old = wiki.start_cursor()
    mediawiki.edit("Alpha", "two")
    mediawiki.edit("Beta", "three")
    # MediaWiki trims recent changes older than $wgRCMaxAge: do what that
    # trimming does to the table, keeping only the newest change.
    import sqlite3

    db = sqlite3.connect(mediawiki.root / "db" / "wiki.sqlite")
    db.execute("DELETE FROM recentchanges WHERE rc_id < (SELECT MAX(rc_id) FROM recentchanges)")
    db.execute("UPDATE recentchanges SET rc_timestamp = '20991231000000'")
    db.commit()
    db.close()
    with pytest.raises(CursorExpiredError):
        wiki.changes(old)


# -- recorded answers -------------------------------------------------------------------


def _recorded(answer: Any, **options: Any) -> tuple[MediaWikiConnector, list[float]]:
    sleeps: list[float] = []
    spec = SourceSpec("wiki-rec", "acme", "wiki", "https://wiki.example.org/w/api.php", options=options)
    connector = open_connector(
        spec,
        limits=FetchLimits(max_bytes=1 << 20),
        transport=httpx.MockTransport(answer),
        sleep=sleeps.append,
    )
    assert isinstance(connector, MediaWikiConnector)
    return connector, sleeps


def _stream(status: int, data: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, headers=headers or {}, stream=httpx.ByteStream(json.dumps(data).encode()))


def test_a_redirect_to_another_host_is_refused() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"location": "https://evil.example/api.php"})

    wiki, _ = _recorded(answer)
    with pytest.raises(OutsideLocationError):
        list(list_all(wiki))


def test_maxlag_and_429_are_honoured() -> None:
    answers = [
        _stream(429, {}, {"Retry-After": "3"}),
        _stream(
            200, {"error": {"code": "maxlag", "info": "Waiting for a database server: 7 seconds lagged."}}
        ),
    ]
    wiki, sleeps = _recorded(lambda r: answers.pop(0))
    with pytest.raises(RateLimitedError):
        wiki.start_cursor()
    assert sleeps == [3.0]


def test_pages_not_readable_anonymously_get_the_source_groups_or_none() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        q = dict(request.url.params)
        if q.get("list") == "recentchanges":
            return _stream(
                200, {"query": {"recentchanges": [{"rcid": 41, "timestamp": "2026-12-01T00:00:00Z"}]}}
            )
        pages = [
            {"pageid": 1, "ns": 0, "title": "Public", "length": 10, "actions": {"read": True}},
            {"pageid": 2, "ns": 0, "title": "Staff only", "length": 10, "actions": {"read": False}},
        ]
        return _stream(200, {"batchcomplete": True, "query": {"pages": pages}})

    closed, _ = _recorded(answer)
    assert [(i.source_object_id, i.acl_groups, i.source_version) for i in list_all(closed)] == [
        ("1", ("everyone",), "41"),
        ("2", (), "41"),  # fail closed: not indexed
    ]
    staff, _ = _recorded(answer, acl_groups=["staff"])
    assert [i.acl_groups for i in list_all(staff)] == [("everyone",), ("staff",)]


def test_webhooks_trigger_a_feed_read() -> None:
    wiki, _ = _recorded(lambda r: _stream(200, {}))
    body = json.dumps({"$schema": "/mediawiki/revision/create/2.0.0", "meta": {"dt": "2026-12-01T00:00:00Z"}})
    assert wiki.webhook_events(body.encode(), {}) is None
    with pytest.raises(InvalidEventError):
        wiki.webhook_events(b'{"page_id": 3}', {})
