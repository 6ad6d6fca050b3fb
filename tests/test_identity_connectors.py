"""Identities from Google Drive (Admin SDK Directory API) and Jira Cloud
(REST v3), replayed from recorded answers in the APIs' documented shape
through the connectors' own clients (``httpx.MockTransport`` under the
located client, as ``tests/test_connectors_api.py`` replays their listings):
paging, a nested group, throttled pages; then the catalog's memberships and
queries by user on real stores (``tests.query_home``).

Answer shapes: Directory API ``users.list`` / ``groups.list`` /
``members.list`` (``users``, ``groups``, ``members`` lists with
``nextPageToken``; member ``type`` USER / GROUP / CUSTOMER, ``status``);
Jira Cloud ``GET /rest/api/3/users/search`` (a bare JSON array),
``/rest/api/3/group/bulk`` and ``/rest/api/3/group/member`` (page beans with
``isLast`` and ``values``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from beam_pipelines.sync import sync_identities
from connectors.api import AccessDeniedError
from ragsync.catalog import Catalog
from ragsync.errors import FetchError, OutsideLocationError
from ragsync.query.identity import Identities
from ragsync.query.search import hybrid_query
from tests.query_home import Doc, QueryHome
from tests.test_connectors_api import DRIVE, JIRA, Recorder, _json, _open, _params

DIRECTORY = "/admin/directory/v1"
DRIVE_403_USER_RATE = {
    "error": {
        "code": 403,
        "message": "User Rate Limit Exceeded",
        "errors": [{"domain": "usageLimits", "reason": "userRateLimitExceeded", "message": "Rate"}],
    }
}
JIRA_429 = {"Retry-After": "5", "X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "0"}


def _user(email: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "admin#directory#user",
        "id": str(abs(hash(email)) % 10**12),
        "primaryEmail": email,
        "name": {"fullName": email.split("@")[0].title()},
        "isAdmin": False,
        "suspended": False,
        "archived": False,
        **extra,
    }


def _member(email: str, kind: str = "USER", status: str | None = "ACTIVE") -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "admin#directory#member", "email": email, "role": "MEMBER", "type": kind}
    if status is not None:
        out["status"] = status
    return out


USERS_PAGES = {
    "": {"users": [_user("ann@example.com"), _user("bob@example.com")], "nextPageToken": "u2"},
    "u2": {"users": [_user("carol@example.com"), _user("dave@example.com", suspended=True)]},
}
GROUPS_PAGES = {
    "": {
        "groups": [
            {"kind": "admin#directory#group", "id": "01eng", "email": "eng@example.com", "name": "Eng"},
            {"kind": "admin#directory#group", "id": "02staff", "email": "staff@example.com", "name": "Staff"},
        ],
        "nextPageToken": "g2",
    },
    "g2": {"groups": [{"kind": "admin#directory#group", "id": "03all", "email": "ALL@example.com"}]},
}
MEMBERS_PAGES = {
    ("01eng", ""): {"members": [_member("ann@example.com")], "nextPageToken": "m2"},
    ("01eng", "m2"): {
        "members": [_member("Bob@Example.com"), _member("carol@example.com", status="SUSPENDED")]
    },
    ("02staff", ""): {"members": [_member("eng@example.com", "GROUP", None), _member("carol@example.com")]},
    ("03all", ""): {
        "members": [_member("staff@example.com", "GROUP", None), {"type": "CUSTOMER", "id": "C01abc"}]
    },
}


def _directory_answer(request: httpx.Request) -> httpx.Response:
    assert request.url.host == "admin.googleapis.com"
    path, q = request.url.path, _params(request)
    token = q.get("pageToken", "")
    if path == f"{DIRECTORY}/users":
        assert q["customer"] == "my_customer"
        return _json({"kind": "admin#directory#users", **USERS_PAGES[token]})
    if path == f"{DIRECTORY}/groups":
        assert q["customer"] == "my_customer"
        return _json({"kind": "admin#directory#groups", **GROUPS_PAGES[token]})
    if path.startswith(f"{DIRECTORY}/groups/") and path.endswith("/members"):
        key = path.split("/")[-2]
        return _json({"kind": "admin#directory#members", **MEMBERS_PAGES[(key, token)]})
    raise AssertionError(f"unexpected request {request.url}")


def _throttled_directory() -> Recorder:
    """The recorded answers, with the second users page first answered 429
    (Retry-After) and the eng group's second members page a 403
    ``userRateLimitExceeded`` (Google's rate-limit answer without Retry-After)."""
    plan = {
        (f"{DIRECTORY}/users", "u2"): [_json({"error": {"code": 429}}, 429, {"Retry-After": "3"})],
        (f"{DIRECTORY}/groups/01eng/members", "m2"): [_json(DRIVE_403_USER_RATE, 403)],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        queued = plan.get((request.url.path, _params(request).get("pageToken", "")))
        return queued.pop(0) if queued else _directory_answer(request)

    return Recorder(handler)


USER_GROUPS = {"user:{u}", "domain:example.com", "everyone"}
DRIVE_EXPECTED = Identities(
    users=frozenset({"ann@example.com", "bob@example.com", "carol@example.com"}),
    groups=frozenset(
        {
            "group:eng@example.com",
            "group:staff@example.com",
            "group:all@example.com",
            "user:ann@example.com",
            "user:bob@example.com",
            "user:carol@example.com",
            "domain:example.com",
            "everyone",
        }
    ),
    user_groups=frozenset(
        {
            (u, g.format(u=u))
            for u in ("ann@example.com", "bob@example.com", "carol@example.com")
            for g in USER_GROUPS
        }
        | {
            ("ann@example.com", "group:eng@example.com"),
            ("bob@example.com", "group:eng@example.com"),
            ("carol@example.com", "group:staff@example.com"),
        }
        | {(u, "group:all@example.com") for u in ("ann@example.com", "bob@example.com", "carol@example.com")}
    ),
    group_groups=frozenset(
        {
            ("group:eng@example.com", "group:staff@example.com"),
            ("group:staff@example.com", "group:all@example.com"),
        }
    ),
)


def test_drive_identities_page_through_the_directory_waiting_out_throttled_pages() -> None:
    rec = _throttled_directory()
    sleeps: list[float] = []
    drive = _open("drive", DRIVE, rec, sleeps, identities=True)
    try:
        assert drive.list_identities() == DRIVE_EXPECTED
    finally:
        drive.close()
    # Every page read, the throttled ones again after their wait (3 s asked; 403 backoff with jitter).
    assert [(r.url.path.removeprefix(DIRECTORY), r.url.params.get("pageToken")) for r in rec.requests] == [
        ("/users", None),
        ("/users", "u2"),
        ("/users", "u2"),
        ("/groups", None),
        ("/groups/01eng/members", None),
        ("/groups/01eng/members", "m2"),
        ("/groups/01eng/members", "m2"),
        ("/groups/02staff/members", None),
        ("/groups", "g2"),
        ("/groups/03all/members", None),
    ]
    assert len(sleeps) == 2 and sleeps[0] == 3.0 and 0.5 <= sleeps[1] <= 1.0


def test_drive_lists_no_identities_without_the_option_and_never_outside_the_directory() -> None:
    rec = Recorder(_directory_answer)
    drive = _open("drive", DRIVE, rec, [])
    assert drive.list_identities() is None and rec.requests == []
    drive.close()
    directory = _open("drive", DRIVE, rec, [], identities=True).directory
    with pytest.raises(OutsideLocationError):
        directory.get_json("https://www.googleapis.com/drive/v3/files")
    with pytest.raises(OutsideLocationError):
        directory.get_json("https://evil.example.org/admin/directory/v1/users")


def test_drive_identities_fail_when_the_credentials_are_not_an_admins() -> None:
    rec = Recorder(
        lambda r: _json(
            {"error": {"code": 403, "message": "Not Authorized to access this resource/api"}}, 403
        )
    )
    drive = _open("drive", DRIVE, rec, [], identities=True)
    with pytest.raises(AccessDeniedError):
        drive.list_identities()


# ---------------------------------------------------------------------------------- Jira


def _account(account_id: str, *, kind: str = "atlassian", active: bool = True) -> dict[str, Any]:
    return {
        "self": f"{JIRA}/rest/api/3/user?accountId={account_id}",
        "accountId": account_id,
        "accountType": kind,
        "displayName": account_id.title(),
        "active": active,
    }


JIRA_USERS = [
    _account("5b10a2844c20165700ede21g"),
    _account("557058:jira-automation", kind="app"),
    _account("5b10ac8d82e05b22cc7d4ef5"),
    _account("5a9e4b5c6d7e8f9000000001", active=False),
]
DEV, SEC = "276f955c-63d7-42c8-9520-92d01dca0625", "6e87dc72-4f1f-421f-9382-2fee8b652487"
GROUP_PAGES = [
    {"name": "jira-developers", "groupId": DEV},
    {"name": "security-team", "groupId": SEC},
]
GROUP_MEMBERS = {DEV: [JIRA_USERS[0], JIRA_USERS[2]], SEC: [JIRA_USERS[2], JIRA_USERS[3]]}


def _jira_identity_answer(request: httpx.Request) -> httpx.Response:
    path, q = request.url.path, _params(request)
    start, size = int(q["startAt"]), min(int(q["maxResults"]), 2)  # the server caps pages at 2
    if path == "/jira/rest/api/3/users/search":
        return _json(JIRA_USERS[start : start + size])
    if path == "/jira/rest/api/3/group/bulk":
        values = GROUP_PAGES[start : start + 1]  # one group a page
        return _json(
            {"maxResults": 1, "startAt": start, "total": 2, "isLast": start + 1 >= 2, "values": values}
        )
    if path == "/jira/rest/api/3/group/member":
        assert q["includeInactiveUsers"] == "false"
        members = GROUP_MEMBERS[q["groupId"]]
        values = members[start : start + 1]
        return _json(
            {"startAt": start, "total": len(members), "isLast": start + 1 >= len(members), "values": values}
        )
    raise AssertionError(f"unexpected request {request.url}")


JIRA_EXPECTED = Identities(
    users=frozenset({"5b10a2844c20165700ede21g", "5b10ac8d82e05b22cc7d4ef5"}),
    groups=frozenset({"jira-developers", "security-team", "everyone"}),
    user_groups=frozenset(
        {
            ("5b10a2844c20165700ede21g", "everyone"),
            ("5b10ac8d82e05b22cc7d4ef5", "everyone"),
            ("5b10a2844c20165700ede21g", "jira-developers"),
            ("5b10ac8d82e05b22cc7d4ef5", "jira-developers"),
            ("5b10ac8d82e05b22cc7d4ef5", "security-team"),
        }
    ),
)


def test_jira_identities_page_users_groups_and_members_and_wait_out_a_429() -> None:
    plan = {
        ("/jira/rest/api/3/group/member", DEV, "1"): [_json({"errorMessages": ["Rate limit"]}, 429, JIRA_429)]
    }

    def handler(request: httpx.Request) -> httpx.Response:
        q = _params(request)
        queued = plan.get((request.url.path, q.get("groupId", ""), q.get("startAt", "")))
        return queued.pop(0) if queued else _jira_identity_answer(request)

    rec = Recorder(handler)
    sleeps: list[float] = []
    jira = _open("tickets", JIRA, rec, sleeps, identities=True)
    try:
        assert jira.list_identities() == JIRA_EXPECTED
    finally:
        jira.close()
    assert sleeps == [5.0]
    pages = [
        (r.url.path.rsplit("/api/3/", 1)[1], r.url.params.get("groupId"), r.url.params["startAt"])
        for r in rec.requests
    ]
    assert pages == [
        ("users/search", None, "0"),
        ("users/search", None, "2"),
        ("users/search", None, "4"),  # empty: the end
        ("group/bulk", None, "0"),
        ("group/member", DEV, "0"),
        ("group/member", DEV, "1"),
        ("group/member", DEV, "1"),
        ("group/bulk", None, "1"),
        ("group/member", SEC, "0"),
        ("group/member", SEC, "1"),
    ]


@pytest.mark.parametrize(
    ("path", "page", "error"),
    [
        ("/jira/rest/api/3/users/search", {"values": JIRA_USERS}, "a page of users that is not a JSON array"),
        ("/jira/rest/api/3/group/bulk", GROUP_PAGES, "a page of values that is not a JSON object"),
        ("/jira/rest/api/3/group/member", "members", "a page of values that is not a JSON object"),
    ],
    ids=["users", "groups", "members"],
)
def test_a_malformed_jira_identity_page_fails_the_listing(path: str, page: Any, error: str) -> None:
    """Users, groups and members are paged by the same helper as issues:
    a page of the wrong JSON shape fails the listing (the catalog keeps its
    memberships) instead of ending it early."""
    rec = Recorder(lambda r: _json(page) if r.url.path == path else _jira_identity_answer(r))
    jira = _open("tickets", JIRA, rec, [], identities=True)
    with pytest.raises(FetchError, match=f"Jira answered {error}"):
        jira.list_identities()
    assert rec.paths().count(path) == 1


def test_jira_lists_no_identities_without_the_option() -> None:
    rec = Recorder(_jira_identity_answer)
    jira = _open("tickets", JIRA, rec, [])
    assert jira.list_identities() is None and rec.requests == []


# ------------------------------------------------- through the catalog to a query by user


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> QueryHome:
    h = QueryHome(tmp_path_factory.mktemp("identity-connectors"))
    drive, jira = "drive-1", "tickets-1"
    h.write(
        [
            Doc("acme", drive, "eng-doc", "Hotel nights for engineers.", ("group:eng@example.com",)),
            Doc("acme", drive, "staff-doc", "Hotel nights for staff.", ("group:staff@example.com",)),
            Doc("acme", drive, "ann-doc", "Hotel nights Ann booked.", ("user:ann@example.com",)),
            Doc("acme", drive, "domain-doc", "Hotel nights in the domain.", ("domain:example.com",)),
            Doc("acme", drive, "exec-doc", "Hotel nights for executives.", ("group:exec@example.com",)),
            Doc("acme", jira, "101", "Hotel nights ticket for developers.", ("jira-developers",)),
            Doc("acme", jira, "103", "Hotel nights security ticket.", ("security-team",)),
            Doc("acme", jira, "104", "Hotel nights public ticket.", ("everyone",)),
        ]
    )
    return h


@pytest.fixture(scope="module")
def synced(home: QueryHome) -> Iterator[Catalog]:
    catalog = Catalog.open(home.settings.catalog_url)
    for kind, uri, answer in (("drive", DRIVE, _directory_answer), ("tickets", JIRA, _jira_identity_answer)):
        connector = _open(kind, uri, Recorder(answer), [], identities=True)
        try:
            assert sync_identities(catalog, connector, connector.spec) is not None
        finally:
            connector.close()
    yield catalog
    catalog.close()


def test_the_catalog_holds_exactly_the_listed_identities(synced: Catalog) -> None:
    assert synced.identities.get_identities("acme", "drive-1") == DRIVE_EXPECTED
    assert synced.identities.get_identities("acme", "tickets-1") == JIRA_EXPECTED
    assert synced.identities.groups_of_user("acme", "carol@example.com") == {
        "user:carol@example.com",
        "domain:example.com",
        "everyone",
        "group:staff@example.com",
        "group:all@example.com",
    }


def test_a_query_by_user_reads_exactly_the_documents_of_their_nested_groups(
    home: QueryHome, synced: Catalog
) -> None:
    assert _names(home, "ann@example.com") == {"eng-doc", "staff-doc", "ann-doc", "domain-doc"}
    assert _names(home, "bob@example.com") == {"eng-doc", "staff-doc", "domain-doc"}  # eng -> staff
    assert _names(home, "carol@example.com") == {"staff-doc", "domain-doc"}  # eng membership suspended
    assert _names(home, "dave@example.com") == set()  # a suspended user
    assert _names(home, "5b10a2844c20165700ede21g") == {"101", "104"}
    assert _names(home, "5b10ac8d82e05b22cc7d4ef5") == {"101", "103", "104"}
    assert _names(home, "5a9e4b5c6d7e8f9000000001") == set()  # inactive


def _names(home: QueryHome, user: str) -> set[str]:
    from ragsync import ids

    hits = hybrid_query(home.settings, "hotel nights", user=user, tenant_id="acme", k=20)
    by_id = {
        ids.doc_id("acme", src, obj): obj
        for src, objs in (
            ("drive-1", ("eng-doc", "staff-doc", "ann-doc", "domain-doc", "exec-doc")),
            ("tickets-1", ("101", "103", "104")),
        )
        for obj in objs
    }
    return {by_id[h.doc_id] for h in hits}
