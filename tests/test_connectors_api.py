"""Drive and Jira connectors, and the API rate-limit policy, against recorded
answers in the APIs' real shape (paging, 429 + Retry-After, deletions)
served by ``httpx.MockTransport`` through the located client.

Neither service can run here; the answers follow their documentation (Drive
API v3: files.list, changes.getStartPageToken, changes.list,
permissions.list, files.export; Jira REST v2: search, issue, comment,
serverInfo) and, for Jira, real issues of the shared corpus.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from connectors.api import ApiClient, RateLimitedError, parse_retry_after
from connectors.base import list_all
from connectors.drive import groups_from_permissions
from connectors.location import Location
from connectors.reader import FetchLimits, LocatedHttpClient
from connectors.registry import open_connector
from ragsync.errors import FetchError, InvalidEventError, OutsideLocationError, TooLargeError
from ragsync.model import SourceFile
from ragsync.source_types import SourceSpec
from tests.corpus import corpus_dir

DRIVE = "https://www.googleapis.com/drive/v3"
JIRA = "https://issues.example.org/jira"
CORPUS = corpus_dir() / "documents" / "tickets-jira-apache-lucene"

Handler = Callable[[httpx.Request], httpx.Response]


def _body(content: bytes, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    """An answer whose body is streamed, as from the network (the located
    client reads bodies block by block under its byte limit)."""
    return httpx.Response(status, headers=headers or {}, stream=httpx.ByteStream(content))


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
    return _body(json.dumps(data).encode(), status, {"content-type": "application/json", **(headers or {})})


def _params(request: httpx.Request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(request.url.query.decode()).items()}


class Recorder:
    """A MockTransport handler that logs every request and answers from a function."""

    def __init__(self, answer: Handler) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


def _open(
    kind: str, uri: str, handler: Handler, sleeps: list[float], max_bytes: int = 64 * 1024, **options: Any
) -> Any:
    spec = SourceSpec(source_id=f"{kind}-1", tenant_id="acme", type=kind, uri=uri, options=options)
    return open_connector(
        spec,
        limits=FetchLimits(max_bytes=max_bytes, timeout_s=30),
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
    )


# -- the rate-limit policy -----------------------------------------------------------


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None


def test_429_is_waited_out_when_short_and_rescheduled_when_long() -> None:
    answers = [
        _json({}, 429, {"Retry-After": "2"}),
        _json({}, 503, {"Retry-After": "1"}),
        _json({"ok": 1}),
        _json({}, 429, {"Retry-After": "3600"}),
    ]
    rec = Recorder(lambda r: answers.pop(0))
    sleeps: list[float] = []
    http = LocatedHttpClient(Location.parse(JIRA), FetchLimits(), transport=httpx.MockTransport(rec))
    api = ApiClient(http, retry_cap_s=60, sleep=sleeps.append)
    assert api.get_json(f"{JIRA}/rest/api/2/serverInfo") == {"ok": 1}
    assert sleeps == [2.0, 1.0]
    with pytest.raises(RateLimitedError) as info:
        api.get_json(f"{JIRA}/rest/api/2/serverInfo")
    assert info.value.retry_after_s == 3600.0
    assert sleeps == [2.0, 1.0]  # the long wait is not slept in place


def test_rate_limited_after_max_attempts_even_when_each_wait_is_short() -> None:
    rec = Recorder(lambda r: _json({}, 429, {"Retry-After": "1"}))
    sleeps: list[float] = []
    http = LocatedHttpClient(Location.parse(JIRA), FetchLimits(), transport=httpx.MockTransport(rec))
    api = ApiClient(http, max_attempts=3, sleep=sleeps.append)
    with pytest.raises(RateLimitedError):
        api.get_json(f"{JIRA}/x")
    assert len(rec.requests) == 3 and sleeps == [1.0, 1.0]


# -- Google Drive ----------------------------------------------------------------------

_FILES = {
    "doc1": {"id": "doc1", "name": "Travel policy", "mimeType": "application/vnd.google-apps.document"},
    "pdf2": {"id": "pdf2", "name": "Report.pdf", "mimeType": "application/pdf", "size": "2048"},
    "fold3": {"id": "fold3", "name": "Team", "mimeType": "application/vnd.google-apps.folder"},
    "form4": {"id": "form4", "name": "Survey", "mimeType": "application/vnd.google-apps.form"},
    "priv5": {"id": "priv5", "name": "Secret.txt", "mimeType": "text/plain", "size": "10"},
}
_PERMISSIONS = {
    "doc1": [
        [
            {"id": "p1", "type": "user", "role": "owner", "emailAddress": "Ann@Example.com"},
            {"id": "p2", "type": "anyone", "role": "reader", "allowFileDiscovery": False},
        ],
        [{"id": "p3", "type": "group", "role": "reader", "emailAddress": "eng@example.com"}],
    ],
    "pdf2": [
        [
            {
                "id": "p4",
                "type": "domain",
                "role": "reader",
                "domain": "example.com",
                "allowFileDiscovery": True,
            }
        ]
    ],
}


def _drive_answer(request: httpx.Request) -> httpx.Response:
    path, q = request.url.path, _params(request)
    stamp = "2026-11-30T10:00:00.000Z"
    if path == "/drive/v3/files":
        assert q["q"] == "trashed = false" and q["corpora"] == "user"
        if q.get("pageToken") == "files-2":
            return _json(
                {
                    "files": [
                        {**_FILES["form4"], "modifiedTime": stamp},
                        {**_FILES["priv5"], "modifiedTime": stamp},
                    ]
                }
            )
        first = [{**_FILES[k], "modifiedTime": stamp} for k in ("doc1", "pdf2", "fold3")]
        return _json({"nextPageToken": "files-2", "files": first})
    if path.endswith("/permissions"):
        file_id = path.split("/")[-2]
        if file_id not in _PERMISSIONS:
            return _json({"error": {"code": 403, "message": "insufficientFilePermissions"}}, 403)
        pages = _PERMISSIONS[file_id]
        index = int(q.get("pageToken", "0"))
        body: dict[str, Any] = {"permissions": pages[index]}
        if index + 1 < len(pages):
            body["nextPageToken"] = str(index + 1)
        return _json(body)
    if path == "/drive/v3/changes/startPageToken":
        return _json({"kind": "drive#startPageToken", "startPageToken": "100"})
    if path == "/drive/v3/changes":
        if q["pageToken"] == "100":
            return _json(
                {
                    "nextPageToken": "101",
                    "changes": [
                        {
                            "changeType": "file",
                            "removed": True,
                            "fileId": "gone9",
                            "time": "2026-12-01T09:00:00.000Z",
                        },
                        {
                            "changeType": "file",
                            "removed": False,
                            "fileId": "pdf2",
                            "time": "2026-12-01T09:01:00.000Z",
                            "file": {**_FILES["pdf2"], "trashed": True},
                        },
                    ],
                }
            )
        assert q["pageToken"] == "101"
        return _json(
            {
                "newStartPageToken": "102",
                "changes": [
                    {
                        "changeType": "file",
                        "removed": False,
                        "fileId": "doc1",
                        "time": "2026-12-01T09:02:00.000Z",
                        "file": {
                            **_FILES["doc1"],
                            "trashed": False,
                            "modifiedTime": "2026-12-01T09:02:00.000Z",
                        },
                    },
                    {"changeType": "drive", "driveId": "sd1", "time": "2026-12-01T09:03:00.000Z"},
                ],
            }
        )
    if path == "/drive/v3/files/doc1/export":
        assert q["mimeType"] == "text/html"
        return _body(b"<html><body><h1>Travel</h1><p>Economy class.</p></body></html>")
    if path == "/drive/v3/files/pdf2":
        return _body(b"x" * 100_000)  # above the 64 KiB test limit
    raise AssertionError(f"unexpected request {request.url}")


def test_drive_listing_pages_files_and_permissions_and_fails_closed() -> None:
    rec = Recorder(_drive_answer)
    drive = _open("drive", DRIVE, rec, [])
    items = list(list_all(drive))
    assert [i.source_object_id for i in items] == ["doc1", "pdf2", "priv5"]  # no folder, no form
    by_id = {i.source_object_id: i for i in items}
    # Link-only "anyone" grants nothing; both permission pages are read.
    assert by_id["doc1"].acl_groups == ("group:eng@example.com", "user:ann@example.com")
    assert by_id["pdf2"].acl_groups == ("domain:example.com",)
    assert by_id["priv5"].acl_groups == ()  # 403 on permissions.list: fail closed
    assert by_id["doc1"].uri == f"{DRIVE}/files/doc1/export?mimeType=text%2Fhtml"
    assert by_id["pdf2"].uri == f"{DRIVE}/files/pdf2?alt=media&supportsAllDrives=true"
    assert by_id["pdf2"].size == 2048 and by_id["doc1"].source_version == "2026-11-30T10:00:00.000Z"


def test_drive_changes_page_tokens_deletes_and_trash() -> None:
    drive = _open("drive", DRIVE, Recorder(_drive_answer), [])
    cursor = drive.start_cursor()
    assert cursor == "100"
    first = drive.changes(cursor)
    assert first.more and first.cursor == "101"
    assert [(e.doc_id, e.op, e.source_version) for e in first.events] == [
        ("gone9", "delete", "2026-12-01T09:00:00.000Z"),
        ("pdf2", "delete", "2026-12-01T09:01:00.000Z"),  # trashed is a delete
    ]
    second = drive.changes(first.cursor)
    assert not second.more and second.cursor == "102"
    (upsert,) = second.events  # the shared-drive change is not a file
    assert (upsert.doc_id, upsert.op) == ("doc1", "upsert")
    assert upsert.acl_groups == ("group:eng@example.com", "user:ann@example.com")
    assert upsert.content_uri == f"{DRIVE}/files/doc1/export?mimeType=text%2Fhtml"


def test_drive_fetch_exports_and_refuses_other_addresses_and_huge_bodies() -> None:
    drive = _open("drive", DRIVE, Recorder(_drive_answer), [])
    doc = SourceFile(
        "acme", "drive-1", "doc1", f"{DRIVE}/files/doc1/export?mimeType=text%2Fhtml", acl_groups=("x",)
    )
    assert b"Economy class" in drive.fetch(doc)
    for uri in (
        "https://evil.example/files/doc1?alt=media",  # another host
        f"{DRIVE}/files/pdf2?alt=media&supportsAllDrives=true",  # another file's content
        f"{DRIVE}/about?fields=user",  # not content
    ):
        with pytest.raises(OutsideLocationError):
            drive.fetch(SourceFile("acme", "drive-1", "doc1", uri))
    pdf = SourceFile("acme", "drive-1", "pdf2", f"{DRIVE}/files/pdf2?alt=media&supportsAllDrives=true")
    with pytest.raises(TooLargeError):
        drive.fetch(pdf)


def test_drive_rate_limit_403_with_reason_is_retried() -> None:
    calls: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            error = {"code": 403, "errors": [{"reason": "userRateLimitExceeded"}], "message": "slow down"}
            return _json({"error": error}, 403)
        return _json({"startPageToken": "7"})

    sleeps: list[float] = []
    drive = _open("drive", DRIVE, answer, sleeps)
    assert drive.start_cursor() == "7"
    assert len(sleeps) == 1 and 0 < sleeps[0] <= 1.0  # backoff: no Retry-After given


def test_drive_webhooks_trigger_a_feed_read() -> None:
    drive = _open("drive", DRIVE, Recorder(_drive_answer), [], channel_token="t0k")
    base = {"X-Goog-Channel-ID": "ch1", "X-Goog-Channel-Token": "t0k"}
    assert drive.webhook_events(b"", {**base, "X-Goog-Resource-State": "sync"}) == []
    assert drive.webhook_events(b"", {**base, "X-Goog-Resource-State": "change"}) is None
    with pytest.raises(InvalidEventError):
        drive.webhook_events(b"", {**base, "X-Goog-Resource-State": "change", "X-Goog-Channel-Token": "no"})
    with pytest.raises(InvalidEventError):
        drive.webhook_events(b"{}", {})


def test_drive_permission_mapping() -> None:
    assert groups_from_permissions(
        [
            {"type": "anyone", "allowFileDiscovery": True},
            {"type": "user", "emailAddress": "A@B.C", "deleted": True},
            {"type": "domain", "domain": "Example.com", "allowFileDiscovery": False},
        ]
    ) == ("everyone",)


# -- Jira --------------------------------------------------------------------------------


def _issue(issue_id: str, key: str, updated: str, **fields: Any) -> dict[str, Any]:
    """A Jira REST v2 issue in the shape of the corpus's real ones."""
    return {
        "expand": "renderedFields,names,schema,operations,editmeta,changelog,versionedRepresentations",
        "id": issue_id,
        "self": f"{JIRA}/rest/api/2/issue/{issue_id}",
        "key": key,
        "fields": {
            "summary": f"{key} summary",
            "updated": updated,
            "created": "2019-01-01T00:00:00.000+0000",
            "project": {"key": key.split("-")[0], "id": "1"},
            "issuetype": {"name": "Bug"},
            "status": {"name": "Open"},
            "description": f"Description of {key}.",
            "attachment": [],
            "comment": {"comments": [], "maxResults": 0, "total": 0, "startAt": 0},
            **fields,
        },
    }


def _comment(n: int) -> dict[str, Any]:
    return {
        "id": str(n),
        "author": {"displayName": f"User {n}"},
        "body": f"Comment number {n}.",
        "created": "2019",
    }


ISSUES = [
    _issue("101", "LUC-1", "2019-03-14T13:08:10.254+0000"),
    _issue(
        "102",
        "LUC-2",
        "2019-03-14T14:00:00.000+0000",
        attachment=[
            {
                "id": "9001",
                "filename": "fix.patch",
                "created": "2019-03-14T13:59:00.000+0000",
                "size": 12,
                "mimeType": "text/plain",
                "content": f"{JIRA}/secure/attachment/9001/fix.patch",
            },
            {
                "id": "9002",
                "filename": "evil.bin",
                "created": "2019-03-14T13:59:30.000+0000",
                "size": 12,
                "content": "https://evil.example/steal",
            },
        ],
        comment={"comments": [_comment(1)], "maxResults": 1, "total": 3, "startAt": 0},
    ),
    _issue("103", "LUC-3", "2019-03-15T08:00:00.000+0000", security={"id": "5", "name": "Committers"}),
]


def _jira_answer(log: list[str]) -> Handler:
    def answer(request: httpx.Request) -> httpx.Response:
        path, q = request.url.path, _params(request)
        if path == "/jira/rest/api/2/serverInfo":
            return _json({"version": "8.20.0", "serverTime": "2019-03-16T09:30:00.000+0100"})
        if path == "/jira/rest/api/2/search":
            log.append(q["jql"])
            start = int(q.get("startAt", "0"))
            page = ISSUES[start : start + 2]  # the server caps maxResults at 2
            return _json({"startAt": start, "maxResults": 2, "total": len(ISSUES), "issues": page})
        if path.startswith("/jira/rest/api/2/issue/") and path.endswith("/comment"):
            start = int(q["startAt"])
            comments = [_comment(n) for n in (1, 2, 3)][start : start + 2]
            return _json({"startAt": start, "maxResults": 2, "total": 3, "comments": comments})
        if path.startswith("/jira/rest/api/2/issue/"):
            issue_id = path.rsplit("/", 1)[-1]
            return _json(next(i for i in ISSUES if i["id"] == issue_id))
        if path == "/jira/secure/attachment/9001/fix.patch":
            return _body(b"--- a\n+++ b\n")
        raise AssertionError(f"unexpected request {request.url}")

    return answer


def test_jira_listing_pages_with_start_at_and_lists_attachments_as_children() -> None:
    log: list[str] = []
    jira = _open("tickets", JIRA, _jira_answer(log), [], security_levels={"Committers": ["committers"]})
    items = list(list_all(jira))
    assert [i.source_object_id for i in items] == [
        "101",
        "102",
        "102/attachments/9001",
        "102/attachments/9002",
        "103",
    ]
    assert log == ["ORDER BY created ASC, key ASC"] * 2  # two pages: startAt 0 and 2
    by_id = {i.source_object_id: i for i in items}
    assert by_id["101"].acl_groups == ("everyone",)  # read anonymously
    assert by_id["103"].acl_groups == ("committers",)  # security level mapped
    assert by_id["101"].source_version == "1552568890254"
    assert by_id["102/attachments/9001"].uri == f"{JIRA}/secure/attachment/9001/fix.patch"


def test_jira_security_level_without_mapping_fails_closed() -> None:
    jira = _open("tickets", JIRA, _jira_answer([]), [])
    items = {i.source_object_id: i for i in list_all(jira)}
    assert items["103"].acl_groups == ()


def test_jira_changes_use_updated_in_the_server_time_zone() -> None:
    log: list[str] = []
    jira = _open("tickets", JIRA, _jira_answer(log), [], projects=["LUC"])
    cursor = jira.start_cursor()
    assert json.loads(cursor) == {"since": "2019-03-16T08:30:00+00:00"}
    page = jira.changes(json.dumps({"since": "2019-03-14T12:00:00+00:00"}))
    # 12:00 UTC minus one minute of overlap, written in the server's +01:00.
    assert log[-1] == '(project in ("LUC")) AND updated >= "2019/03/14 12:59" ORDER BY updated ASC, key ASC'
    assert page.more and json.loads(page.cursor)["position"] == "2"
    assert [e.doc_id for e in page.events] == ["101", "102", "102/attachments/9001", "102/attachments/9002"]
    last = jira.changes(page.cursor)
    assert not last.more and [e.doc_id for e in last.events] == ["103"]
    assert json.loads(last.cursor) == {"since": "2019-03-15T08:00:00+00:00"}


def test_jira_fetch_reads_every_comment_and_refuses_foreign_attachments() -> None:
    jira = _open("tickets", JIRA, _jira_answer([]), [])
    items = {i.source_object_id: i for i in list_all(jira)}
    issue = json.loads(jira.fetch(items["102"]))
    assert [c["body"] for c in issue["fields"]["comment"]["comments"]] == [
        "Comment number 1.",
        "Comment number 2.",
        "Comment number 3.",
    ]
    assert jira.fetch(items["102/attachments/9001"]) == b"--- a\n+++ b\n"
    with pytest.raises(OutsideLocationError):
        jira.fetch(items["102/attachments/9002"])  # content pointing at another host
    with pytest.raises(OutsideLocationError):
        jira.fetch(SourceFile("acme", "tickets-1", "101", f"{JIRA}/rest/api/2/myself"))


def test_jira_webhooks() -> None:
    jira = _open("tickets", JIRA, _jira_answer([]), [])
    deleted = jira.webhook_events(
        json.dumps(
            {"webhookEvent": "jira:issue_deleted", "timestamp": 1552900000000, "issue": {"id": "101"}}
        ).encode(),
        {},
    )
    assert deleted is not None and [(e.doc_id, e.op, e.source_version) for e in deleted] == [
        ("101", "delete", "1552900000000")
    ]
    updated = jira.webhook_events(
        json.dumps(
            {"webhookEvent": "jira:issue_updated", "timestamp": 1552900000000, "issue": ISSUES[1]}
        ).encode(),
        {},
    )
    assert updated is not None and [e.doc_id for e in updated] == [
        "102",
        "102/attachments/9001",
        "102/attachments/9002",
    ]
    with pytest.raises(InvalidEventError):
        jira.webhook_events(b'{"hello": 1}', {})


def test_jira_rate_limit_answer_is_honoured() -> None:
    answers = [_json({}, 429, {"Retry-After": "5"})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop(0) if answers else _jira_answer([])(request)

    sleeps: list[float] = []
    jira = _open("tickets", JIRA, answer, sleeps)
    assert len(list(list_all(jira))) == 5
    assert sleeps == [5.0]


def _list(jira: Any) -> Any:
    return list(list_all(jira))


def _changes(jira: Any) -> Any:
    return jira.changes(json.dumps({"since": "2019-03-14T12:00:00+00:00"}))


def _comments(jira: Any) -> Any:
    return jira.fetch(SourceFile("acme", "tickets-1", "102", jira.issue_uri("102")))


@pytest.mark.parametrize(
    ("path", "options", "read"),
    [
        ("/jira/rest/api/2/search", {}, _list),
        ("/jira/rest/api/3/search/jql", {"search_api": "jql"}, _list),
        ("/jira/rest/api/2/search", {}, _changes),
        ("/jira/rest/api/3/search/jql", {"search_api": "jql"}, _changes),
        ("/jira/rest/api/2/issue/102/comment", {}, _comments),
    ],
    ids=["listing", "listing-jql", "changes", "changes-jql", "comments"],
)
@pytest.mark.parametrize(
    ("page", "error"),
    [
        ([{"id": "101"}], "Jira answered a page of .* that is not a JSON object"),
        ({"startAt": 0, "total": 3}, "Jira answered a page without a list of"),
    ],
    ids=["array", "no-list"],
)
def test_a_malformed_jira_page_fails_the_read_in_every_paging_loop(
    path: str, options: dict[str, Any], read: Callable[[Any], Any], page: Any, error: str
) -> None:
    """Issues (both search APIs), changes and comments are paged by one
    helper: a page that is not a JSON object, or holds no list, is a
    FetchError (a listing taken as complete without it would delete)."""
    rec = Recorder(lambda r: _json(page) if r.url.path == path else _jira_answer([])(r))
    jira = _open("tickets", JIRA, rec, [], **options)
    with pytest.raises(FetchError, match=error):
        read(jira)
    assert rec.paths().count(path) == 1  # not retried, not skipped


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus (../shared/corpus) is absent")
def test_jira_replay_of_real_lucene_issues_through_search_and_fetch() -> None:
    from ragsync.parsing import parse

    real = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.json"))]
    base = "https://issues.apache.org/jira"

    def answer(request: httpx.Request) -> httpx.Response:
        path, q = request.url.path, _params(request)
        if path == "/jira/rest/api/2/search":
            start = int(q.get("startAt", "0"))
            return _json(
                {"startAt": start, "maxResults": 50, "total": len(real), "issues": real[start : start + 50]}
            )
        issue_id = path.rsplit("/", 1)[-1]
        return _json(next(i for i in real if i["id"] == issue_id))

    jira = _open("tickets", base, answer, [], max_bytes=16 * 1024 * 1024)
    items = [i for i in list_all(jira) if "/" not in i.source_object_id]
    assert sorted(i.source_object_id for i in items) == sorted(i["id"] for i in real)
    lucene_6572 = next(i for i in items if i.source_object_id == "12838134")
    parsed = parse(jira.fetch(lucene_6572), "application/json", filename="issue.json")
    text = "\n".join(e.text for e in parsed.elements)
    assert "LUCENE-6572" in text and "I also don't understand why it depends on join" in text
    attachments = [i for i in list_all(jira) if i.source_object_id.startswith("12838134/attachments/")]
    assert len(attachments) == len(real[[r["id"] for r in real].index("12838134")]["fields"]["attachment"])


def test_one_list_of_source_types_for_the_registry_the_catalog_the_cli_and_the_api() -> None:
    """``ragsync.source_types`` is the one list: every type has a connector,
    and the API's schema offers exactly those types and sync kinds."""
    from connectors.drive import DriveConnector
    from connectors.registry import connector_class
    from control_plane.routers.sources import SourceIn
    from ragsync.source_types import SYNC_KINDS, default_uri, source_types

    assert source_types()[:5] == ("object_store", "wiki", "drive", "tickets", "redmine")
    classes = {
        t: connector_class(SourceSpec("s", "t", t, "/srv/docs" if t == "object_store" else JIRA)).__name__
        for t in source_types()[:5]
    }
    assert classes == {
        "object_store": "FolderConnector",
        "wiki": "MediaWikiConnector",
        "drive": "DriveConnector",
        "tickets": "JiraConnector",
        "redmine": "RedmineConnector",
    }
    assert default_uri("drive") == DriveConnector.default_uri == DRIVE
    assert [default_uri(t) for t in ("object_store", "wiki", "tickets", "nope")] == ["", "", "", ""]
    schema = SourceIn.model_json_schema()["properties"]
    assert schema["type"]["enum"] == list(source_types())
    assert schema["sync"]["enum"] == list(SYNC_KINDS)
    with pytest.raises(ValueError, match="must be one of object_store, wiki, drive, tickets, redmine"):
        SourceIn.model_validate({"type": "sharepoint", "sync": "poll"})


# -- throttling in the services' recorded shapes: waited out, nothing skipped ----------

# Drive's documented rate-limit answers (developers.google.com/drive/api/guides/limits,
# .../handle-errors): 403 with a reason in error.errors[], 429, and the newer
# google.rpc.ErrorInfo shape with error.details[].reason.
DRIVE_403_USER_RATE = {
    "error": {
        "errors": [
            {
                "domain": "usageLimits",
                "reason": "userRateLimitExceeded",
                "message": "User Rate Limit Exceeded",
            }
        ],
        "code": 403,
        "message": "User Rate Limit Exceeded",
    }
}
DRIVE_429 = {
    "error": {
        "errors": [
            {"domain": "usageLimits", "reason": "rateLimitExceeded", "message": "Rate Limit Exceeded"}
        ],
        "code": 429,
        "message": "Rate Limit Exceeded",
    }
}
DRIVE_403_ERROR_INFO = {
    "error": {
        "code": 403,
        "message": "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user'.",
        "status": "PERMISSION_DENIED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RATE_LIMIT_EXCEEDED",
                "domain": "googleapis.com",
                "metadata": {"service": "drive.googleapis.com", "quota_limit": "defaultPerMinutePerUser"},
            }
        ],
    }
}
# Jira Cloud's 429 (developer.atlassian.com/cloud/jira/platform/rate-limiting/).
JIRA_429_HEADERS = {
    "Retry-After": "7",
    "X-RateLimit-Limit": "100",
    "X-RateLimit-Remaining": "0",
    "X-RateLimit-Reset": "2026-12-01T10:00:07Z",
    "RateLimit-Reason": "jira-quota-tenant-based",
}


def _throttled(answer: Handler, plan: dict[tuple[str, str], list[httpx.Response]]) -> Recorder:
    """``answer``, except that requests to (path, pageToken or startAt) first
    get the listed throttling answers, in order."""

    def handler(request: httpx.Request) -> httpx.Response:
        q = _params(request)
        key = (request.url.path, q.get("pageToken") or q.get("startAt") or "")
        queued = plan.get(key)
        return queued.pop(0) if queued else answer(request)

    return Recorder(handler)


def test_drive_listing_waits_out_403_and_429_rate_limits_and_lists_every_file() -> None:
    rec = _throttled(
        _drive_answer,
        {
            ("/drive/v3/files/doc1/permissions", "1"): [
                _json(DRIVE_403_ERROR_INFO, 403, {"Retry-After": "1"})
            ],
            ("/drive/v3/files", "files-2"): [
                _json(DRIVE_403_USER_RATE, 403),
                _json(DRIVE_429, 429, {"Retry-After": "2"}),
            ],
        },
    )
    sleeps: list[float] = []
    items = list(list_all(_open("drive", DRIVE, rec, sleeps)))
    # Every file, and the throttled permission page was read (not failed closed).
    assert [i.source_object_id for i in items] == ["doc1", "pdf2", "priv5"]
    assert items[0].acl_groups == ("group:eng@example.com", "user:ann@example.com")
    assert [r.url.params.get("pageToken") for r in rec.requests if r.url.path == "/drive/v3/files"] == [
        None,
        "files-2",
        "files-2",
        "files-2",
    ]
    # Retry-After honoured; without one (Drive's 403), exponential backoff with jitter.
    assert len(sleeps) == 3 and sleeps[0] == 1.0 and 0.5 <= sleeps[1] <= 1.0 and sleeps[2] == 2.0


def test_jira_listing_waits_out_429_with_retry_after_and_lists_every_issue() -> None:
    body = {"errorMessages": ["Rate limit exceeded."]}
    rec = _throttled(
        _jira_answer([]),
        {
            ("/jira/rest/api/2/search", "2"): [
                _json(body, 429, JIRA_429_HEADERS),
                _json(body, 429, JIRA_429_HEADERS),
            ]
        },
    )
    sleeps: list[float] = []
    items = list(list_all(_open("tickets", JIRA, rec, sleeps)))
    assert [i.source_object_id for i in items] == [
        "101",
        "102",
        "102/attachments/9001",
        "102/attachments/9002",
        "103",
    ]
    assert sleeps == [7.0, 7.0]
    assert [r.url.params.get("startAt") for r in rec.requests if r.url.path.endswith("/search")] == [
        "0",
        "2",
        "2",
        "2",
    ]


def test_jira_rate_limit_reset_time_stands_in_for_a_missing_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    headers = {k: v for k, v in JIRA_429_HEADERS.items() if k != "Retry-After"}
    answers = [_json({}, 429, headers), _json({"ok": 1})]
    rec = Recorder(lambda r: answers.pop(0))
    sleeps: list[float] = []
    http = LocatedHttpClient(Location.parse(JIRA), FetchLimits(), transport=httpx.MockTransport(rec))
    api = ApiClient(http, sleep=sleeps.append)
    now = datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone.utc).timestamp()
    monkeypatch.setattr("connectors.api.time.time", lambda: now)
    assert api.get_json(f"{JIRA}/rest/api/2/serverInfo") == {"ok": 1}
    assert sleeps == [7.0]  # until X-RateLimit-Reset


def test_waits_are_bounded_in_total_per_request() -> None:
    rec = Recorder(lambda r: _json(DRIVE_429, 429, {"Retry-After": "40"}))
    sleeps: list[float] = []
    http = LocatedHttpClient(Location.parse(DRIVE), FetchLimits(), transport=httpx.MockTransport(rec))
    api = ApiClient(http, retry_cap_s=60, max_wait_s=100, sleep=sleeps.append)
    with pytest.raises(RateLimitedError) as info:
        api.get_json(f"{DRIVE}/files")
    # 40 + 40 fit in 100 s; a third wait would not: the sync is rescheduled instead.
    assert len(rec.requests) == 3 and sleeps == [40.0, 40.0] and info.value.retry_after_s == 40.0


# -- Drive OAuth: access tokens refreshed from a refresh token --------------------------

AUTHORIZED_USER = {  # the shape `gcloud auth application-default login` writes
    "account": "",
    "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
    "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
    "refresh_token": "1//0gExampleRefreshTokenCgYIARAAGBASNwF",
    "type": "authorized_user",
    "universe_domain": "googleapis.com",
}


def _token_answer(n: int) -> httpx.Response:
    # developers.google.com/identity/protocols/oauth2/web-server#offline: the refresh answer.
    return _json(
        {
            "access_token": f"ya29.a0AfB_token{n}",
            "expires_in": 3599,
            "scope": "https://www.googleapis.com/auth/drive.readonly",
            "token_type": "Bearer",
        }
    )


def _oauth_drive(
    tmp_path: Path,
    drive_answers: list[httpx.Response],
    token_answers: list[Any],
) -> tuple[Any, Recorder]:
    secret = tmp_path / "drive-oauth.json"
    secret.write_text(json.dumps(AUTHORIZED_USER, indent=2))  # a multi-line file, as gcloud writes it

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "oauth2.googleapis.com":
            return token_answers.pop(0)  # type: ignore[no-any-return]
        return drive_answers.pop(0)

    rec = Recorder(answer)
    spec = SourceSpec("drive-1", "acme", "drive", DRIVE, credentials_ref=f"file://{secret}")
    drive = open_connector(spec, transport=httpx.MockTransport(rec), sleep=lambda s: None)
    return drive, rec


def test_drive_refreshes_its_access_token_as_it_expires_and_on_401(tmp_path: Path) -> None:
    unauthorized = {"error": {"code": 401, "message": "Request had invalid authentication credentials."}}
    drive, rec = _oauth_drive(
        tmp_path,
        [
            _json({"startPageToken": "1"}),
            _json({"startPageToken": "2"}),
            _json(unauthorized, 401),
            _json({"startPageToken": "3"}),
        ],
        [_token_answer(1), _token_answer(2), _token_answer(3)],
    )
    assert drive.start_cursor() == "1"
    token_call = rec.requests[0]
    assert str(token_call.url) == "https://oauth2.googleapis.com/token" and token_call.method == "POST"
    assert parse_qs(token_call.content.decode()) == {
        "grant_type": ["refresh_token"],
        "client_id": [AUTHORIZED_USER["client_id"]],
        "client_secret": [AUTHORIZED_USER["client_secret"]],
        "refresh_token": [AUTHORIZED_USER["refresh_token"]],
    }
    assert rec.requests[1].headers["authorization"] == "Bearer ya29.a0AfB_token1"
    drive.api.token.expires_at = 0.0  # an hour later
    assert drive.start_cursor() == "2"
    assert rec.requests[3].headers["authorization"] == "Bearer ya29.a0AfB_token2"
    assert drive.start_cursor() == "3"  # 401 (revoked early): one refresh, then the same call again
    hosts = [r.url.host for r in rec.requests]
    assert hosts == ["oauth2.googleapis.com", "www.googleapis.com"] * 2 + [
        "www.googleapis.com",
        "oauth2.googleapis.com",
        "www.googleapis.com",
    ]
    assert rec.requests[-1].headers["authorization"] == "Bearer ya29.a0AfB_token3"
    assert "client_secret" not in repr(drive.api.token.credentials)


def test_a_revoked_refresh_token_is_a_configuration_error(tmp_path: Path) -> None:
    from ragsync.errors import ConfigurationError

    revoked = _json(
        {"error": "invalid_grant", "error_description": "Token has been expired or revoked."}, 400
    )
    drive, rec = _oauth_drive(tmp_path, [], [revoked])
    with pytest.raises(ConfigurationError, match="invalid_grant"):
        drive.start_cursor()
    assert [r.url.host for r in rec.requests] == ["oauth2.googleapis.com"]


def test_oauth_credentials_may_name_only_googles_token_endpoint() -> None:
    from connectors.oauth import refresh_credentials
    from ragsync.errors import ConfigurationError

    assert refresh_credentials("Bearer ya29.x") is None
    assert refresh_credentials(json.dumps(AUTHORIZED_USER)) is not None
    with pytest.raises(ConfigurationError):
        refresh_credentials(json.dumps({**AUTHORIZED_USER, "token_uri": "https://evil.example/token"}))
    with pytest.raises(ConfigurationError):
        refresh_credentials(json.dumps({"client_id": "x"}))
