"""The control-plane HTTP API, served by uvicorn on a loopback port and called
with a real HTTP client, on SQLite and PostgreSQL (``catalog_url``)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import inspect, select

pytest.importorskip("fastapi", reason="control plane needs fastapi (pip install fastapi uvicorn httpx)")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from cli.control_plane import is_loopback  # noqa: E402
from connectors.events import parse_event  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from control_plane.keys import ApiKeys  # noqa: E402
from control_plane.worker import Worker  # noqa: E402
from ragsync import ids  # noqa: E402
from ragsync.catalog import Catalog, FetchRecord, create_catalog_engine, schema  # noqa: E402
from ragsync.model import DeadLetter, Event, FetchedDocument, QueuedEvent  # noqa: E402
from tests.catalog_rows import flip  # noqa: E402
from tests.migration_helpers import make_legacy_catalog  # noqa: E402
from tests.serving import served  # noqa: E402
from transforms.events import upsert_to_source_file  # noqa: E402

# The operator's secret store for tenants: secrets named <tenant>_NAME.
SECRET_STORES = ("secretmanager://projects/p/secrets/{tenant}",)
SECRET_REF = "secretmanager://projects/p/secrets/tenant-a_wiki-token-7f3a"
MAX_BODY = 64 * 1024


@dataclass
class Api:
    """A running server, its catalog and one client per tenant."""

    base_url: str
    catalog: Catalog
    keys: ApiKeys
    a: Any  # httpx.Client with tenant A's key
    b: Any  # httpx.Client with tenant B's key
    key_a: str
    seen: list[str]
    app_state: Any = None  # the app's settings (app.state)


# The operator lets each tenant declare wikis under its own path.
ALLOWED = ("https://wiki.example.org/{tenant}", "https://wiki.example.org/w")
WIKI_A = "https://wiki.example.org/tenant-a/api.php"
WIKI_B = "https://wiki.example.org/tenant-b/api.php"


@pytest.fixture
def api(catalog_url: str) -> Iterator[Api]:
    app = create_app(
        catalog_url, max_body_bytes=MAX_BODY, allowed_locations=ALLOWED, secret_stores=SECRET_STORES
    )
    keys: ApiKeys = app.state.keys
    _, key_a = keys.create_tenant("tenant-a")
    _, key_b = keys.create_tenant("tenant-b")
    seen: list[str] = []

    def record(response: Any) -> None:
        response.read()
        seen.append(response.text)

    hooks = {"response": [record]}
    try:
        with served(app) as port:
            base = f"http://127.0.0.1:{port}"
            a = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key_a}"}, event_hooks=hooks)
            b = httpx.Client(base_url=base, headers={"X-API-Key": key_b}, event_hooks=hooks)
            try:
                yield Api(base, app.state.catalog, keys, a, b, key_a, seen, app.state)
            finally:
                a.close()
                b.close()
    finally:
        app.state.catalog.close()
    # Whatever a test did, no response ever carried the credentials reference.
    assert not [text for text in seen if "wiki-token-7f3a" in text]


def _source(api: Api, source_id: str = "wiki-eng", client: Any = None) -> dict[str, Any]:
    uri = WIKI_B if client is api.b else WIKI_A
    body = {
        "type": "wiki",
        "credentials_ref": SECRET_REF.replace("-a_", "-b_") if client is api.b else SECRET_REF,
        "sync": "webhook",
        "source_id": source_id,
        "uri": uri,
    }
    r = (client or api.a).post("/v1/sources", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def _event(
    source_id: str = "wiki-eng", doc_id: str = "pages/1", version: int = 1, **kw: Any
) -> dict[str, Any]:
    return {
        "source_id": source_id,
        "doc_id": doc_id,
        "op": "upsert",
        "source_version": version,
        "acl_groups": ["eng"],
        "content_uri": f"{WIKI_A}?title={doc_id}",
        "event_time": "2026-12-01T10:00:00Z",
        **kw,
    }


def _fetched_wiki_page(
    api: Api, doc_id: str, *, uri: str, size: int, version: str, content_hash: str, acl_id: str
) -> None:
    """Catalog row of tenant A's wiki page ``pages/1`` as fetched."""
    api.catalog.documents.record_fetch(
        FetchRecord(
            doc_id=doc_id,
            source_id="wiki-eng",
            tenant_id="tenant-a",
            source_object_id="pages/1",
            uri=uri,
            size=size,
            source_version=version,
            content_hash=content_hash,
            acl_id=acl_id,
            canonical_doc_id=doc_id,
        )
    )


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": []}}


# -------------------------------------------------------------------- basics


def test_healthz_is_public_and_openapi_lists_every_endpoint(api: Api) -> None:
    r = httpx.get(api.base_url + "/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})
    doc = httpx.get(api.base_url + "/openapi.json").json()
    assert {(p, m) for p, ops in doc["paths"].items() for m in ops} == {
        ("/healthz", "get"),
        ("/v1/sources", "post"),
        ("/v1/sources", "get"),
        ("/v1/sources/{source_id}", "get"),
        ("/v1/sources/{source_id}/resume", "post"),
        ("/v1/sources/{source_id}/sync", "post"),
        ("/v1/sources/{source_id}/sync/{sync_id}", "get"),
        ("/v1/sources/{source_id}/status", "get"),
        ("/v1/sources/{source_id}/webhook", "post"),
        ("/internal/events", "post"),
        ("/v1/docs/{doc_id}/status", "get"),
        ("/v1/backfills", "post"),
        ("/v1/backfills/{backfill_id}", "get"),
        ("/v1/dead-letters", "get"),
        ("/v1/dead-letters/{event_id}/retry", "post"),
        ("/v1/events/stale", "get"),
        ("/v1/query", "post"),
        ("/v1/documents/{doc_id}/pages/{page}", "get"),
    }
    assert set(doc["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyHeader"}
    assert "swagger-ui" in httpx.get(api.base_url + "/docs").text


def test_requests_without_or_with_a_bad_key_get_401(api: Api) -> None:
    url = api.base_url + "/v1/dead-letters"
    r = httpx.get(url)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json() == _error("unauthorized", "missing API key: send Authorization: Bearer <key>")
    forged = api.key_a[:-4] + ("AAAA" if not api.key_a.endswith("AAAA") else "BBBB")
    for headers in (
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": "Bearer not-a-key"},
        {"X-API-Key": "rsk_0000000000000000_" + "x" * 43},
    ):
        r = httpx.get(url, headers=headers)
        assert (r.status_code, r.json()) == (401, _error("unauthorized", "invalid or revoked API key"))
    # The same key works until it is revoked.
    assert httpx.get(url, headers={"X-API-Key": api.key_a}).status_code == 200
    assert api.catalog.tenants.revoke_api_key(api.key_a.split("_")[1]) is True
    assert httpx.get(url, headers={"X-API-Key": api.key_a}).status_code == 401
    # Unauthenticated writes change nothing.
    r = httpx.post(
        api.base_url + "/v1/backfills", json={"reason": "parser", "target_index": "x", "max_docs_per_s": 1}
    )
    assert r.status_code == 401
    assert api.catalog.backfills.list_backfills() == []


def test_oversized_bodies_get_413_before_parsing(api: Api) -> None:
    expected = _error("payload_too_large", f"request body is larger than {MAX_BODY} bytes")
    big = b'{"events": [' + b" " * MAX_BODY + b"]}"
    r = api.a.post("/internal/events", content=big, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (413, expected)

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        yield b'{"events": ['
        for _ in range(MAX_BODY // 1024 + 1):
            yield b" " * 1024
        yield b"]}"

    r = api.a.post("/internal/events", content=chunks(), headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (413, expected)
    # Unauthenticated too: the size check comes first.
    assert httpx.post(api.base_url + "/v1/sources", content=big).status_code == 413
    assert api.catalog.queue_views.queue_stats()["depth"] == 0


# ------------------------------------------------------------------- sources


def test_create_source_and_request_sync(api: Api) -> None:
    assert _source(api) == {
        "source_id": "wiki-eng",
        "tenant_id": "tenant-a",
        "type": "wiki",
        "uri": WIKI_A,
        "sync": "webhook",
        "poll_interval_s": None,
        "credentials_ref_set": True,
        "paused": False,
        "pause_reason": "",
        "failures": 0,
        "last_sync_at": None,
        "last_full_at": None,
        "version_domain": "",
    }
    r = api.a.post("/v1/sources", json={"type": "drive", "credentials_ref": SECRET_REF, "sync": "poll"})
    assert r.status_code == 201
    generated = r.json()
    assert generated["source_id"].startswith("src_") and generated["poll_interval_s"] == 300
    assert generated["uri"] == "https://www.googleapis.com/drive/v3"  # Drive's API is the default location
    # Stored as given, never returned.
    with api.catalog.engine.connect() as conn:
        stored = conn.execute(
            select(schema.sources.c.credentials_ref, schema.sources.c.sync).where(
                schema.sources.c.source_id == "wiki-eng"
            )
        ).one()
    assert tuple(stored) == (SECRET_REF, "webhook")

    r = api.a.post("/v1/sources/wiki-eng/sync", json={"mode": "full"})
    assert r.status_code == 202
    body = r.json()
    assert body["sync_id"].startswith("sync_")
    assert (body["source_id"], body["mode"], body["state"], body["counts"], body["error"]) == (
        "wiki-eng",
        "full",
        "queued",
        {},
        None,
    )
    # Asking again while it is queued answers the same run.
    again = api.a.post("/v1/sources/wiki-eng/sync", json={"mode": "incremental"}).json()
    assert again["sync_id"] == body["sync_id"]
    r = api.a.get(f"/v1/sources/wiki-eng/sync/{body['sync_id']}")
    assert r.status_code == 200 and r.json() == body
    # The worker's side: claim, then record the outcome the API then shows.
    run = api.catalog.syncs.claim_sync_run()
    assert run is not None and (run.sync_id, run.state) == (body["sync_id"], "running")
    assert api.a.get(f"/v1/sources/wiki-eng/sync/{body['sync_id']}").json()["state"] == "running"
    api.catalog.syncs.finish_sync_run(run.sync_id, succeeded=False, error="cannot reach the wiki")
    shown = api.a.get(f"/v1/sources/wiki-eng/sync/{body['sync_id']}").json()
    assert (shown["state"], shown["error"]) == ("failed", "cannot reach the wiki")
    assert api.b.get(f"/v1/sources/wiki-eng/sync/{body['sync_id']}").status_code == 404  # another tenant


def test_a_sync_request_needs_no_body(api: Api) -> None:
    """``POST /v1/sources/{id}/sync`` answered 422 without the ``{"mode": ...}``
    body the README did not show; no body (or ``{}``) is an incremental
    sync, which lists everything when the source has no cursor yet."""
    _source(api)
    r = api.a.post("/v1/sources/wiki-eng/sync")
    assert r.status_code == 202, r.text
    assert (r.json()["mode"], r.json()["state"]) == ("incremental", "queued")
    run = api.catalog.syncs.claim_sync_run()
    assert run is not None
    api.catalog.syncs.finish_sync_run(run.sync_id, succeeded=True)
    r = api.a.post("/v1/sources/wiki-eng/sync", json={})
    assert (r.status_code, r.json()["mode"]) == (202, "incremental")
    assert api.a.post("/v1/sources/wiki-eng/sync", json={"mode": "sometimes"}).status_code == 422
    schema_ = api.a.get("/openapi.json").json()
    body = schema_["paths"]["/v1/sources/{source_id}/sync"]["post"]["requestBody"]
    assert body.get("required", False) is False


def test_version_domain_and_stale_events_over_the_api(api: Api) -> None:
    body = {"type": "wiki", "sync": "webhook"}
    r = api.a.post("/v1/sources", json={**body, "source_id": "rev", "version_domain": "revision"})
    assert r.status_code == 201 and r.json()["version_domain"] == "revision", r.text
    assert api.a.get("/v1/sources/rev").json()["version_domain"] == "revision"
    r = api.a.post("/v1/sources", json={**body, "source_id": "bad", "version_domain": "mtime"})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "version_domain"]
    assert api.a.get("/v1/events/stale").json() == {"count": 0, "recent": []}
    event = {
        "source_id": "rev",
        "doc_id": "p1",
        "op": "delete",
        "source_version": 3,
        "event_time": 1796119200,
    }
    event["event_id"] = "late-1"
    assert api.a.post("/internal/events", json=event).status_code == 202
    tenant_a = api.catalog.sources.get_source("rev").tenant_id  # type: ignore[union-attr]
    note = "delete '3' (revision, observed 1796119200.000) is stale: the document holds content version '5'"
    api.catalog.queue.note_event((tenant_a, "late-1"), note)
    api.catalog.queue.ack_events([(tenant_a, "late-1")], state="stale")
    stale = api.a.get("/v1/events/stale").json()
    assert stale["count"] == 1
    assert stale["recent"] == [
        {
            "event_id": "late-1",
            "source_id": "rev",
            "doc_id": "p1",
            "op": "delete",
            "source_version": "3",
            "note": note,
        }
    ]
    assert api.b.get("/v1/events/stale").json() == {"count": 0, "recent": []}  # another tenant's

    # Dead letters over HTTP: the same identity as the CLI, the same re-drive.
    gone = {**event, "event_id": "ev-del", "source_version": 9}
    assert api.a.post("/internal/events", json=gone).status_code == 202
    api.catalog.queue.ack_events([(tenant_a, "ev-del")])
    queued = QueuedEvent(
        Event.from_json(api.catalog.queue.tenant_event(tenant_a, "ev-del")["payload"]), tenant_a, "d"
    )
    dl = DeadLetter(
        "delete", "d", "", "transient", "store down", payload=queued.to_json(), tenant_id=tenant_a
    )
    api.catalog.dead_letters.add_dead_letter(dl, "rev")
    garbage = api.catalog.dead_letters.add_dead_letter(
        DeadLetter("resolve", "", "", "invalid_event", "not JSON", payload="{oops", tenant_id=tenant_a), "rev"
    )
    assert [d["event_id"] for d in api.a.get("/v1/dead-letters").json()] == ["ev-del", str(garbage)]
    assert api.b.post("/v1/dead-letters/ev-del/retry").status_code == 404
    r = api.a.post("/v1/dead-letters/ev-del/retry")
    assert (r.status_code, r.json()["kind"], r.json()["state"]) == (202, "event", "requeued")
    assert api.catalog.queue.tenant_event(tenant_a, "ev-del")["state"] == "pending"  # type: ignore[index]
    assert api.a.post(f"/v1/dead-letters/{garbage}/retry").status_code == 404  # not an event: nothing to run
    assert [d["event_id"] for d in api.a.get("/v1/dead-letters").json()] == [str(garbage)]


def test_source_locations_pause_and_resume(api: Api) -> None:
    body = {"type": "wiki", "sync": "poll", "uri": "https://wiki.example.org/w/api.php", "source_id": "pub"}
    r = api.a.post("/v1/sources", json={**body, "options": {"namespaces": [0, 4]}})  # public: no credentials
    assert r.status_code == 201, r.text
    assert (r.json()["uri"], r.json()["credentials_ref_set"]) == ("https://wiki.example.org/w/api.php", False)
    for bad in (
        {
            "type": "object_store",
            "uri": "https://example.org/x",
        },  # no connector reads an object store over HTTP
        {"type": "wiki", "uri": "/proc/self"},  # a system folder
        {"type": "wiki", "uri": "ftp://example.org/"},
        {"type": "tickets", "uri": "https://user:pw@jira.example.org"},  # credentials in the URL
    ):
        r = api.a.post("/v1/sources", json={**bad, "sync": "webhook"})
        assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == ["body", "uri"], r.text
        assert bad["uri"] not in r.text  # never echoed
    api.catalog.syncs.sync_failed(
        "pub", failures=3, pause_reason="the listing would delete 9 of 10 documents"
    )
    (listed,) = api.a.get("/v1/sources").json()
    assert (listed["paused"], listed["pause_reason"], listed["failures"]) == (
        True,
        "the listing would delete 9 of 10 documents",
        3,
    )
    assert api.b.get("/v1/sources").json() == []
    assert api.b.post("/v1/sources/pub/resume").status_code == 404
    resumed = api.a.post("/v1/sources/pub/resume").json()
    assert (resumed["paused"], resumed["pause_reason"], resumed["failures"]) == (False, "", 0)


def test_source_validation_errors_are_422_and_never_echo_the_input(api: Api) -> None:
    bad_ref = "wiki-token-7f3a with spaces"
    r = api.a.post("/v1/sources", json={"type": "wiki", "credentials_ref": bad_ref, "sync": "webhook"})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "validation_error"
    assert err["message"].startswith("credentials_ref: String should match pattern")
    assert [d["loc"] for d in err["details"]] == [["body", "credentials_ref"]]
    cases = [
        ({"type": "fax", "credentials_ref": SECRET_REF, "sync": "webhook"}, ["body", "type"]),
        ({"type": "wiki", "credentials_ref": SECRET_REF, "sync": "webhook", "poll_interval_s": 60}, ["body"]),
        ({"type": "wiki", "credentials_ref": SECRET_REF, "sync": "poll", "poll_interval_s": 5}, None),
        ({"type": "wiki", "credentials_ref": SECRET_REF, "sync": "poll", "extra": 1}, ["body", "extra"]),
        ({"type": "wiki", "credentials_ref": SECRET_REF, "sync": "poll", "source_id": "a/b"}, None),
    ]
    for body, loc in cases:
        r = api.a.post("/v1/sources", json=body)
        assert r.status_code == 422, body
        if loc is not None:
            assert r.json()["error"]["details"][0]["loc"] == loc
    r = api.a.post(
        "/v1/sources",
        json={"type": "wiki", "credentials_ref": SECRET_REF, "sync": "poll", "tenant_id": "tenant-b"},
    )
    assert r.status_code == 422
    assert r.json()["error"]["message"] == "tenant_id: must be the API key's tenant (or omitted)"
    r = api.a.post("/v1/sources/nope/sync", json={"mode": "sometimes"})
    assert r.status_code == 422
    with api.catalog.engine.connect() as conn:
        assert conn.execute(select(schema.sources.c.source_id)).all() == []


# -------------------------------------------------------------------- events


def test_the_same_event_twice_is_queued_once(api: Api) -> None:
    _source(api)
    r1 = api.a.post("/internal/events", json=_event())
    r2 = api.a.post("/internal/events", json=_event())
    assert (r1.status_code, r1.json()) == (202, {"accepted": 1, "duplicates": 0, "rejected": []})
    assert (r2.status_code, r2.json()) == (202, {"accepted": 0, "duplicates": 1, "rejected": []})
    assert api.catalog.queue_views.queue_stats()["depth"] == 1
    (queued,) = api.catalog.queue.pending_events()
    expected = parse_event(_event())
    assert (queued["event_id"], queued["source_id"], queued["doc_id"]) == (
        expected.event_id,
        "wiki-eng",
        "pages/1",
    )


def test_idempotency_key_deduplicates_single_event_posts(api: Api) -> None:
    _source(api)
    first = api.a.post("/internal/events", json=_event(), headers={"Idempotency-Key": "k-1"})
    resent = api.a.post("/internal/events", json=_event(), headers={"Idempotency-Key": "k-1"})
    # The same key with a different change is refused, never silently dropped
    # (the IETF Idempotency-Key draft's rule).
    reused = api.a.post("/internal/events", json=_event(version=2), headers={"Idempotency-Key": "k-1"})
    other = api.a.post("/internal/events", json=_event(version=2), headers={"Idempotency-Key": "k-2"})
    assert [r.json() for r in (first, resent, other)] == [
        {"accepted": 1, "duplicates": 0, "rejected": []},
        {"accepted": 0, "duplicates": 1, "rejected": []},
        {"accepted": 1, "duplicates": 0, "rejected": []},
    ]
    assert (reused.status_code, reused.json()["error"]["code"]) == (409, "conflict")
    assert api.catalog.queue_views.queue_stats()["depth"] == 2
    r = api.a.post("/internal/events", json={"events": [_event()]}, headers={"Idempotency-Key": "k-3"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "bad_request")


def test_an_event_id_reused_with_only_new_deny_groups_is_a_conflict(api: Api) -> None:
    """The red team's LOW: a re-post differing only in ``deny_groups`` was
    dropped as a duplicate, and a batch's second event with an earlier id was lost."""
    _source(api)
    first = api.a.post("/internal/events", json=_event(event_id="e-1"))
    denied = api.a.post("/internal/events", json=_event(event_id="e-1", deny_groups=["contractors"]))
    assert first.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
    assert (denied.status_code, denied.json()["error"]["code"]) == (409, "conflict")
    batch = [_event(event_id="e-2"), _event(event_id="e-2", doc_id="pages/2"), _event(event_id="e-2")]
    r = api.a.post("/internal/events", json={"events": batch})
    assert (r.status_code, r.json()) == (
        202,
        {
            "accepted": 1,
            "duplicates": 1,
            "rejected": [
                {"index": 1, "error": "event_id 'e-2' is used by an earlier, different event of this batch"}
            ],
        },
    )
    assert api.catalog.queue_views.queue_stats()["depth"] == 2


def test_malformed_events_are_reported_by_index_and_valid_ones_kept(api: Api) -> None:
    _source(api)
    batch = [
        _event(doc_id="a"),
        {k: v for k, v in _event(doc_id="b").items() if k != "op"},
        "not an event",
        _event(doc_id="c", op="delete"),
        _event(source_id="nope"),
        _event(doc_id="d", event_time="yesterday"),
        _event(doc_id="x" * 1100),
        _event(doc_id="e", acl_groups="eng"),
    ]
    r = api.a.post("/internal/events", json={"events": batch})
    assert r.status_code == 202
    assert r.json() == {
        "accepted": 2,
        "duplicates": 0,
        "rejected": [
            {"index": 1, "error": "'op' is required"},
            {"index": 2, "error": "an event must be a JSON object"},
            {"index": 4, "error": "unknown source 'nope'"},
            {"index": 5, "error": "'event_time' 'yesterday' is not ISO 8601"},
            {"index": 6, "error": "'doc_id' is longer than 1024 characters"},
            {"index": 7, "error": "'acl_groups' must be a list of strings"},
        ],
    }
    assert sorted(e["doc_id"] for e in api.catalog.queue.pending_events()) == ["a", "c"]
    for body, message in (
        ([_event()], 'the body must be one event object or {"events": [...]}'),
        ({"events": _event()}, "'events' must be a list of events"),
        ({"events": [{}] * 1001}, "at most 1000 events per request, got 1001"),
        ({"events": [], "x": 1}, "unknown fields beside 'events': x"),
    ):
        r = api.a.post("/internal/events", json=body)
        assert (r.status_code, r.json()["error"]["message"]) == (422, message)
    r = api.a.post("/internal/events", content=b"{not json", headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "validation_error")
    r = api.a.post("/internal/events", content=b"[" * 50_000, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert api.catalog.queue_views.queue_stats()["depth"] == 2


# ----------------------------------------------------------------- documents


def test_document_status_follows_the_pipeline(api: Api) -> None:
    _source(api)
    api.a.post("/internal/events", json=_event(version=3))
    internal = ids.doc_id("tenant-a", "wiki-eng", "pages/1")
    r = api.a.get("/v1/docs/pages/1/status", params={"source_id": "wiki-eng"})
    assert (r.status_code, r.json()) == (
        200,
        {
            "doc_id": internal,
            "source_id": "wiki-eng",
            "source_object_id": "pages/1",
            "stage": "queued",
            "source_version": "3",
            "indexed_version": None,
            "chunks": 0,
            "indexed_at": None,
            "error": None,
        },
    )
    _fetched_wiki_page(
        api, internal, uri="gs://bucket/pages/1.html", size=10, version="3", content_hash="h3", acl_id="acl1"
    )
    assert flip(api.catalog, internal, version="3", content_hash="h3", chunk_count=4, indexed_at=1000.5)
    indexed = {
        "doc_id": internal,
        "source_id": "wiki-eng",
        "source_object_id": "pages/1",
        "stage": "indexed",
        "source_version": "3",
        "indexed_version": "h3@3",
        "chunks": 4,
        "indexed_at": 1000.5,
        "error": None,
    }
    assert api.a.get("/v1/docs/pages/1/status", params={"source_id": "wiki-eng"}).json() == indexed
    assert api.a.get(f"/v1/docs/{internal}/status").json() == indexed
    api.catalog.dead_letters.record_dead_letter(
        DeadLetter(
            stage="parse",
            doc_id=internal,
            uri="gs://bucket/pages/1.html",
            error_class="corrupt",
            message="not a valid HTML file",
            tenant_id="tenant-a",
            source_version="4",
        ),
        source_id="wiki-eng",
    )
    # The update failed: the last good version stays searchable, its status says stale.
    body = api.a.get(f"/v1/docs/{internal}/status").json()
    assert (body["stage"], body["error"]) == (
        "stale",
        {"error_class": "corrupt", "message": "not a valid HTML file"},
    )
    for path, params in (
        ("/v1/docs/pages/2/status", {"source_id": "wiki-eng"}),
        ("/v1/docs/pages/1/status", {"source_id": "other"}),
        ("/v1/docs/pages/1/status", {}),
        ("/v1/docs/d%00x/status", {}),
    ):
        r = api.a.get(path, params=params)
        assert r.status_code == 404, path
        assert r.json()["error"]["code"] == "not_found"


# ----------------------------------------------------------------- backfills


def test_a_tenant_over_its_caps_gets_429_for_syncs_and_403_for_sources(api: Api) -> None:
    # Default caps: 4 syncs queued or running per tenant; a repeated request
    # for a source with one pending answers that one (not counted twice).
    for n in range(5):
        _source(api, f"wiki-{n}")
    runs = [api.a.post(f"/v1/sources/wiki-{n}/sync", json={"mode": "full"}) for n in range(4)]
    assert [r.status_code for r in runs] == [202] * 4
    again = api.a.post("/v1/sources/wiki-0/sync", json={"mode": "full"})
    assert (again.status_code, again.json()["sync_id"]) == (202, runs[0].json()["sync_id"])
    over = api.a.post("/v1/sources/wiki-4/sync", json={"mode": "full"})
    assert (over.status_code, over.headers["Retry-After"]) == (429, "60")
    assert "4 syncs queued or running" in over.json()["error"]["message"]
    # Another tenant is not held back by tenant A's queue.
    _source(api, "wiki-b", client=api.b)
    assert api.b.post("/v1/sources/wiki-b/sync", json={"mode": "full"}).status_code == 202
    # Sources: at the cap (lowered here) a new one is refused, nothing is stored.
    tenant_a = api.keys.authenticate(api.key_a) or ""
    assert api.catalog.sources.count_sources(tenant_a) == 5
    api.app_state.max_sources = 5
    body = {"type": "wiki", "credentials_ref": SECRET_REF, "sync": "webhook", "source_id": "x", "uri": WIKI_A}
    refused = api.a.post("/v1/sources", json=body)
    assert refused.status_code == 403 and "5 sources (its limit)" in refused.json()["error"]["message"]
    assert api.catalog.sources.count_sources(tenant_a) == 5


def test_embedding_model_backfill_is_the_operators(api: Api, tmp_path: Any) -> None:
    # An index version holds every tenant's chunks: a tenant cannot start one.
    body = {"reason": "embedding_model", "target_index": "chunks_v2", "max_docs_per_s": 50}
    r = api.a.post("/v1/backfills", json=body)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    assert "operator" in r.json()["error"]["message"]
    assert api.catalog.backfills.list_backfills() == []
    # A tenant's request queued before the API refused them is refused by the
    # worker, never run; the operator's (no tenant) runs.
    fake = [sys.executable, "-c", 'print(\'{"total": 7, "failed": 0, "state": "live"}\')']
    worker = Worker(api.catalog, [], schedule=False, command=fake)
    tenant_id = api.keys.authenticate(api.key_a)
    queued = api.catalog.backfills.create_backfill(tenant_id=tenant_id, **body)
    operator = api.catalog.backfills.create_backfill(**body)
    assert worker.run_once() and worker.run_once()
    mine = api.catalog.backfills.get_backfill(queued.backfill_id)
    ops = api.catalog.backfills.get_backfill(operator.backfill_id)
    assert mine is not None and (mine.state, mine.total) == ("refused", 0)
    assert mine.error is not None and "ask the operator" in mine.error
    assert ops is not None and (ops.state, ops.total) == ("flipped", 7)


def test_backfill_request_and_progress(api: Api) -> None:
    r = api.a.post(
        "/v1/backfills", json={"reason": "parser", "target_index": "chunks_v2", "max_docs_per_s": 50}
    )
    assert r.status_code == 201
    created = r.json()
    bid = created["backfill_id"]
    assert bid.startswith("bf_")
    assert created == {
        "backfill_id": bid,
        "reason": "parser",
        "target_index": "chunks_v2",
        "max_docs_per_s": 50.0,
        "state": "requested",
        "total": 0,
        "done": 0,
        "failed": 0,
        "eta_s": None,
        "created_at": created["created_at"],
        "error": None,
    }
    assert api.a.get(f"/v1/backfills/{bid}").json() == created
    # The worker reports: started 100 s ago, 40 done + 10 failed of 150 -> 0.5 docs/s, 100 left.
    assert api.catalog.backfills.update_backfill_progress(
        bid, state="running", total=150, now=time.time() - 100
    )
    api.catalog.backfills.update_backfill_progress(bid, done=40, failed=10, cursor="doc-50")
    body = api.a.get(f"/v1/backfills/{bid}").json()
    assert {k: body[k] for k in ("state", "total", "done", "failed")} == {
        "state": "running",
        "total": 150,
        "done": 40,
        "failed": 10,
    }
    assert body["eta_s"] == pytest.approx(200, abs=5)
    api.catalog.backfills.update_backfill_progress(bid, done=140, state="done")
    assert api.a.get(f"/v1/backfills/{bid}").json()["eta_s"] == 0.0
    assert (
        api.catalog.backfills.get_backfill(bid) is not None
        and api.catalog.backfills.get_backfill(bid).cursor == "doc-50"
    )  # type: ignore[union-attr]
    for body in (
        {"reason": "mood", "target_index": "v2", "max_docs_per_s": 1},
        {"reason": "parser", "target_index": "bad name", "max_docs_per_s": 1},
        {"reason": "parser", "target_index": "v2", "max_docs_per_s": 0},
        {"reason": "parser", "target_index": "v2"},
    ):
        assert api.a.post("/v1/backfills", json=body).status_code == 422
    assert api.a.get("/v1/backfills/bf_unknown").status_code == 404


# -------------------------------------------------------------- dead letters


def _add_dead_letter(
    api: Api, stage: str, doc_id: str, uri: str, error_class: str, message: str, **fields: Any
) -> int:
    """Add a dead letter of tenant A's source ``wiki-eng`` (a new row each call); its id."""
    dl = DeadLetter(stage, doc_id, uri, error_class, message, tenant_id="tenant-a", **fields)
    return api.catalog.dead_letters.add_dead_letter(dl, source_id="wiki-eng")


def _dead_letters(api: Api) -> tuple[str, int]:
    """An event-backed dead letter and a backfill-file dead letter for tenant A."""
    _source(api)
    api.a.post("/internal/events", json=_event())
    (queued,) = api.catalog.queue.pending_events()
    api.catalog.queue.ack_events([("tenant-a", queued["event_id"])], state="dead")
    _add_dead_letter(
        api,
        "fetch",
        "d-event",
        "gs://bucket/pages/1.html",
        "fetch_failed",
        "403 from the source",
        attempts=5,
        payload=queued["payload"],
    )
    # A backfill file's dead letter carries the listed file.
    listed = json.dumps({"source_object_id": "broken.pdf", "uri": "/corpus/broken.pdf"})
    file_id = _add_dead_letter(
        api, "parse", "d-file", "/corpus/broken.pdf", "corrupt", "no PDF header", payload=listed
    )
    return str(queued["event_id"]), file_id


def test_dead_letters_are_listed_and_retried(api: Api) -> None:
    event_id, file_id = _dead_letters(api)
    listed = api.a.get("/v1/dead-letters").json()
    assert [{k: v for k, v in d.items() if k != "created_at"} for d in listed] == [
        {
            "event_id": event_id,
            "doc_id": "d-event",
            "source_id": "wiki-eng",
            "stage": "fetch",
            "error": "403 from the source",
            "error_class": "fetch_failed",
            "attempts": 5,
        },
        {
            "event_id": str(file_id),
            "doc_id": "d-file",
            "source_id": "wiki-eng",
            "stage": "parse",
            "error": "no PDF header",
            "error_class": "corrupt",
            "attempts": 1,
        },
    ]
    assert api.a.get("/v1/dead-letters", params={"source_id": "wiki-eng", "limit": 1}).json() == listed[:1]
    assert api.a.get("/v1/dead-letters", params={"limit": 0}).status_code == 422

    r = api.a.post(f"/v1/dead-letters/{event_id}/retry")
    assert r.status_code == 202
    assert r.json() == {
        "event_id": event_id,
        "retry_id": r.json()["retry_id"],
        "kind": "event",
        "state": "requeued",
    }
    assert api.catalog.queue.get_event(event_id)["state"] == "pending"  # type: ignore[index]
    assert api.catalog.queue_views.queue_stats()["depth"] == 1

    r = api.a.post(f"/v1/dead-letters/{file_id}/retry")
    assert r.status_code == 202
    assert r.json() == {
        "event_id": str(file_id),
        "retry_id": r.json()["retry_id"],
        "kind": "file",
        "state": "requested",
    }
    with api.catalog.engine.connect() as conn:
        kinds = conn.execute(select(schema.dead_letter_retries.c.kind).order_by("kind")).scalars().all()
    assert kinds == ["event", "file"]
    assert api.a.get("/v1/dead-letters").json() == []
    # Retried dead letters are resolved: retrying again finds nothing.
    assert api.a.post(f"/v1/dead-letters/{file_id}/retry").status_code == 404
    assert api.a.post(f"/v1/dead-letters/{event_id}/retry").status_code == 404
    assert api.a.post("/v1/dead-letters/999999/retry").status_code == 404


def test_pipeline_dead_letters_are_retried_by_their_event_id(api: Api) -> None:
    """Payloads as the pipeline writes them: a QueuedEvent (resolve, gate,
    acl, delete) and a FetchedDocument (fetch, parse, ... of an upsert event)."""
    _source(api)
    api.a.post("/internal/events", json=_event(doc_id="pages/q", event_id="ev-queued"))
    (queued,) = api.catalog.queue.pending_events()
    api.catalog.queue.ack_events([("tenant-a", "ev-queued")], state="dead")
    event = parse_event(json.loads(queued["payload"]))
    internal = ids.doc_id("tenant-a", "wiki-eng", "pages/q")
    qe = QueuedEvent(event, "tenant-a", internal, attempts=4)
    _add_dead_letter(api, "acl", internal, "", "write_failed", "boom", payload=qe.to_json())
    # An upsert that arrived through Pub/Sub: not in the local queue at all.
    remote = parse_event(_event(doc_id="pages/r", event_id="ev-remote"))
    remote_id = ids.doc_id("tenant-a", "wiki-eng", "pages/r")
    source = upsert_to_source_file(QueuedEvent(remote, "tenant-a", remote_id))
    fetched = FetchedDocument(
        doc_id=remote_id,
        source=source,
        content_hash="h",
        raw_uri="raw",
        size=1,
        acl_id="acl",
        canonical_doc_id="c",
    )
    _add_dead_letter(api, "parse", fetched.doc_id, source.uri, "corrupt", "bad", payload=fetched.to_json())
    assert [d["event_id"] for d in api.a.get("/v1/dead-letters").json()] == ["ev-queued", "ev-remote"]
    for event_id in ("ev-queued", "ev-remote"):
        r = api.a.post(f"/v1/dead-letters/{event_id}/retry")
        assert (r.status_code, r.json()["kind"], r.json()["state"]) == (202, "event", "requeued"), r.text
    assert {e["event_id"]: e["doc_id"] for e in api.catalog.queue.pending_events()} == {
        "ev-queued": "pages/q",
        "ev-remote": "pages/r",
    }
    replayed = parse_event(json.loads(api.catalog.queue.get_event("ev-remote")["payload"]))  # type: ignore[index]
    assert (replayed.tenant_id, dataclasses.replace(replayed, tenant_id="")) == ("tenant-a", remote)
    assert api.a.get("/v1/dead-letters").json() == []


# -------------------------------------------------------------- tenant isolation


def test_another_tenants_ids_are_404_on_every_endpoint(api: Api) -> None:
    event_id, file_id = _dead_letters(api)
    internal = ids.doc_id("tenant-a", "wiki-eng", "pages/1")
    _fetched_wiki_page(api, internal, uri="u", size=1, version="1", content_hash="h", acl_id="acl")
    backfill = api.a.post(
        "/v1/backfills", json={"reason": "parser", "target_index": "v2", "max_docs_per_s": 1}
    ).json()["backfill_id"]
    not_found = [
        api.b.post("/v1/sources/wiki-eng/sync", json={"mode": "incremental"}),
        api.b.get("/v1/docs/pages/1/status", params={"source_id": "wiki-eng"}),
        api.b.get(f"/v1/docs/{internal}/status"),
        api.b.get(f"/v1/backfills/{backfill}"),
        api.b.get("/v1/dead-letters", params={"source_id": "wiki-eng"}),
        api.b.post(f"/v1/dead-letters/{event_id}/retry"),
        api.b.post(f"/v1/dead-letters/{file_id}/retry"),
    ]
    assert [(r.status_code, r.json()["error"]["code"]) for r in not_found] == [(404, "not_found")] * 7
    # B sees none of A's dead letters and cannot queue events for A's source.
    assert api.b.get("/v1/dead-letters").json() == []
    r = api.b.post("/internal/events", json=_event(doc_id="pages/9"))
    assert (r.status_code, r.json()["error"]["message"]) == (422, "unknown source 'wiki-eng'")
    # Source ids are each tenant's own: B may name a source "wiki-eng" too
    # (its own), and only A's second "wiki-eng" is a conflict.
    body = {"type": "wiki", "credentials_ref": SECRET_REF, "sync": "webhook", "source_id": "wiki-eng"}
    r = api.b.post(
        "/v1/sources", json={**body, "uri": WIKI_B, "credentials_ref": SECRET_REF.replace("-a_", "-b_")}
    )
    r_own = api.a.post("/v1/sources", json={**body, "uri": WIKI_A})
    assert (r.status_code, r.json()["tenant_id"]) == (201, "tenant-b")
    assert (r_own.status_code, r_own.json()) == (
        409,
        _error("conflict", "source_id 'wiki-eng' is already taken"),
    )
    # B's events for its own "wiki-eng" never touch A's, even under A's event id.
    r = api.b.post(
        "/internal/events",
        json=_event(doc_id="pages/9", event_id=event_id, content_uri=f"{WIKI_B}?title=pages/9"),
    )
    assert r.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
    assert api.catalog.queue.tenant_event("tenant-b", event_id)["doc_id"] == "pages/9"  # type: ignore[index]
    # Nothing of A's changed: A's dead letters are still open, its event is still dead.
    assert len(api.a.get("/v1/dead-letters").json()) == 2
    assert api.catalog.queue.tenant_event("tenant-a", event_id)["state"] == "dead"  # type: ignore[index]
    assert api.catalog.backfills.get_backfill(backfill, tenant_id="tenant-b") is None


# ------------------------------------------------------------- migration and CLI


def test_adopted_legacy_catalog_serves_sources_registered_before_the_api(catalog_url: str) -> None:
    """A catalog of the hand-written migrations, with a source registered by
    ``ragsync sources add`` (no sync settings, no credentials), is adopted by
    the API: the source keeps its row and shows as never configured."""
    engine = create_catalog_engine(catalog_url)
    try:
        make_legacy_catalog(engine)
        with engine.begin() as conn:
            conn.execute(
                schema.sources.insert().values(
                    source_id="old", tenant_id="t", type="drive", uri="", created_at=1.0
                )
            )
    finally:
        engine.dispose()
    app = create_app(catalog_url)
    try:
        insp = inspect(app.state.catalog.engine)
        assert {"tenants", "api_keys", "sync_requests", "dead_letter_retries"} <= set(insp.get_table_names())
        assert "schema_migrations" not in insp.get_table_names()
        source = app.state.catalog.sources.get_source("old", tenant_id="t")
        assert source is not None and (source.sync, source.credentials_ref_set) == (None, False)
        assert app.state.catalog.sources.get_source("old", tenant_id="other") is None
    finally:
        app.state.catalog.close()


def test_cli_tenants_create_list_and_serve_guard(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    home = str(tmp_path / "home")
    assert main(["tenants", "create", "acme", "--home", home, "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert set(created) == {"tenant_id", "name", "api_key"}
    assert (created["tenant_id"], created["name"]) == ("acme", "acme")
    with Catalog.open(f"sqlite:///{home}/catalog.db") as catalog:
        assert ApiKeys(catalog).authenticate(created["api_key"]) == "acme"
        with catalog.engine.connect() as conn:  # the key itself is not stored
            hashes = conn.execute(select(schema.api_keys.c.key_hash)).scalars().all()
        assert created["api_key"] not in hashes and len(hashes) == 1
    assert main(["tenants", "create", "acme", "--home", home]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["tenants", "list", "--home", home, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(t["tenant_id"], t["name"], t["active_keys"]) for t in listed] == [("acme", "acme", 1)]
    assert main(["serve", "--home", home, "--host", "0.0.0.0"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err
    assert [
        is_loopback(h)
        for h in ("127.0.0.1", "127.8.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.1", "example.com")
    ] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_backfill_eta_from_the_rate_so_far(tmp_path: Any) -> None:
    store = Catalog.open(f"sqlite:///{tmp_path}/c.db")
    try:
        created = store.backfills.create_backfill(reason="chunker", target_index="v3", max_docs_per_s=10)
        assert created.eta_s(now=1e9) is None
        bid = created.backfill_id
        started = store.backfills.update_backfill_progress(bid, state="running", total=1000, now=1000.0)
        assert started is not None and started.eta_s(now=1010.0) is None  # nothing processed yet
        row = store.backfills.update_backfill_progress(bid, done=90, failed=10, now=1010.0)
        assert row is not None and row.started_at == 1000.0
        assert row.eta_s(now=1020.0) == 180.0  # 100 docs in 20 s -> 5/s, 900 left
        failed = store.backfills.update_backfill_progress(row.backfill_id, state="failed")
        assert failed is not None and failed.eta_s() is None
        assert store.backfills.update_backfill_progress("missing", done=1) is None
        with pytest.raises(ValueError):
            store.backfills.update_backfill_progress(row.backfill_id, done=-1)
        with pytest.raises(ValueError):
            store.backfills.update_backfill_progress(row.backfill_id, state="exploded")
    finally:
        store.close()


def test_control_plane_never_imports_beam() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "control_plane"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n.split(".")[0] in ("apache_beam", "beam_pipelines")
            ]
    assert len(list(root.rglob("*.py"))) >= 4
    assert offenders == []


def test_source_status_gives_coverage_and_metrics_are_served_to_loopback(api: Api) -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from sqlalchemy import insert

    from ragsync.catalog import schema

    _source(api, "wiki-eng")
    _source(api, "wiki-eng", client=api.b)  # the same id in tenant B: never mixed in
    tenant_a = api.keys.authenticate(api.key_a)
    rows = (
        [("indexed", None)] * 995 + [("dead_letter", "corrupt")] * 3 + [("dead_letter", "no_permissions")] * 7
    )
    rows += [("deleted", None)] * 4
    docs = [
        {"doc_id": f"a{i}", "source_id": "wiki-eng", "tenant_id": tenant_a, "status": s, "error_class": e,
         "updated_at": 1.0}
        for i, (s, e) in enumerate(rows)
    ]  # fmt: skip
    docs.append({"doc_id": "b0", "source_id": "wiki-eng", "tenant_id": "tenant-b", "status": "dead_letter",
                 "error_class": "corrupt", "updated_at": 1.0})  # fmt: skip
    with api.catalog.engine.begin() as conn:
        conn.execute(insert(schema.documents), docs)
    r = api.a.get("/v1/sources/wiki-eng/status")
    assert r.status_code == 200, r.text
    cov = r.json()["coverage"]
    assert (cov["seen"], cov["indexed"], cov["excluded"], cov["not_indexed"]) == (
        1005,
        995,
        {"no_permissions": 7},
        {"corrupt": 3},
    )
    assert cov["coverage"] == round(995 / 998, 6) and cov["meets_target"] is True and cov["target"] == 0.995
    assert r.json()["source"]["source_id"] == "wiki-eng"
    assert api.b.get("/v1/sources/wiki-eng/status").json()["coverage"]["not_indexed"] == {"corrupt": 1}
    assert api.a.get("/v1/sources/nope/status").status_code == 404
    # /metrics: loopback without a token (this client is on 127.0.0.1), no API key needed.
    m = httpx.get(api.base_url + "/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(m.text)
        for s in f.samples
    }
    assert samples[("ragsync_documents", (("state", "indexed"),))] == 995
    key = ("ragsync_coverage_ratio", (("source_id", "wiki-eng"), ("tenant_id", tenant_a)))
    assert samples[key] == pytest.approx(995 / 998, abs=1e-6)
    assert not [k for k in samples if k[0] == "ragsync_dead_letters"]  # no dead-letter rows were written
    # Freshness of two tenants' sources that share an id: separate series (they were merged).
    fresh = [
        {"tenant_id": tenant, "event_id": f"e{n}", "source_id": "wiki-eng", "op": "upsert", "lane": "fast",
         "event_time": 100.0, "applied_at": 100.0 + lag}
        for n, (tenant, lag) in enumerate([(tenant_a, 2.0), (tenant_a, 4.0), ("tenant-b", 60.0)])
    ]  # fmt: skip
    api.catalog.freshness.record_freshness(fresh)
    m = httpx.get(api.base_url + "/metrics")
    events = {
        s.labels["tenant_id"]: (s.value, s.labels["source_id"])
        for f in text_string_to_metric_families(m.text)
        for s in f.samples
        if s.name == "ragsync_freshness_events"
    }
    assert events == {tenant_a: (2, "wiki-eng"), "tenant-b": (1, "wiki-eng")}
