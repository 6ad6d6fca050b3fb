"""Secrets a source may name, and where a tenant's folder really is (issue 29).

The red team's reproductions, on loopback:

* a tenant declares a wiki on its own host with ``credentials_ref`` set to
  ``env://`` a server variable or ``file://`` a server file: the sync must
  never send that secret (a local HTTP server records what it receives);
* every credential failure reads the same, whether the variable or file
  exists or not (no oracle);
* a tenant's secrets are those the operator granted it (a Secret Manager
  prefix, recorded REST answers; or a folder, compared by real paths);
* a link in a tenant's granted folder that points at another tenant's folder
  or at ragsync's own state is refused when the source is created, and a
  registered folder replaced by such a link is refused when it is read.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from connectors.credentials import CREDENTIALS_REFUSED, credential_error, resolve_secret, tenant_may_use
from connectors.location import register_location, source_location
from connectors.registry import open_connector
from control_plane.app import create_app
from ragsync.catalog import Catalog
from ragsync.errors import ConfigurationError
from ragsync.source_types import SourceSpec
from tests.serving import served

SERVER_SECRET = "Bearer server-operator-secret-4711"


class _Recorder(BaseHTTPRequestHandler):
    """Answers every GET with an empty JSON object; records each request's
    Authorization header (None when absent)."""

    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        type(self).seen.append(self.headers.get("Authorization"))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tenant_host() -> Iterator[tuple[int, list[str | None]]]:
    """The tenant's own web server on loopback: its port and what it saw."""
    seen: list[str | None] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def _wiki_spec(port: int, ref: str, by: str) -> SourceSpec:
    return SourceSpec(
        source_id="wiki",
        tenant_id="acme",
        type="wiki",
        uri=f"http://127.0.0.1:{port}/acme/api.php",
        credentials_ref=ref,
        credentials_by=by,
    )


def _request(spec: SourceSpec) -> None:
    connector: Any = open_connector(spec)
    try:
        connector.api.get_json(connector.location.base_url)
    finally:
        connector.close()


# ------------------------------------------------------------- server secrets


def test_a_tenant_reference_to_the_servers_environment_or_files_sends_nothing(
    tenant_host: tuple[int, list[str | None]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = tenant_host
    monkeypatch.setenv("RAGSYNC_TEST_OPERATOR_SECRET", SERVER_SECRET)
    monkeypatch.delenv("RAGSYNC_TENANT_SECRETS", raising=False)
    host_file = tmp_path / "operator.token"
    host_file.write_text(SERVER_SECRET + "\n")
    for ref in ("env://RAGSYNC_TEST_OPERATOR_SECRET", f"file://{host_file}"):
        with pytest.raises(ConfigurationError) as refused:
            _request(_wiki_spec(port, ref, "tenant"))
        assert str(refused.value) == str(credential_error(ref))
    assert seen == []  # no request at all, so no secret left the server
    # The operator's own source may name them: the header reaches its host.
    _request(_wiki_spec(port, "env://RAGSYNC_TEST_OPERATOR_SECRET", "operator"))
    _request(_wiki_spec(port, f"file://{host_file}", "operator"))
    assert seen == [SERVER_SECRET, SERVER_SECRET]


def test_every_credential_failure_reads_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSYNC_TEST_EXISTS", SERVER_SECRET)
    monkeypatch.delenv("RAGSYNC_TEST_MISSING", raising=False)
    (tmp_path / "exists.token").write_text(SERVER_SECRET)
    (tmp_path / "two-lines.token").write_text("Bearer a\nX-Injected: 1\n")
    (tmp_path / "a-folder").mkdir()
    cases = [
        ("env://RAGSYNC_TEST_EXISTS", "tenant"),
        ("env://RAGSYNC_TEST_MISSING", "tenant"),
        ("env://RAGSYNC_TEST_MISSING", "operator"),
        (f"file://{tmp_path}/exists.token", "tenant"),
        (f"file://{tmp_path}/missing.token", "tenant"),
        (f"file://{tmp_path}/missing.token", "operator"),
        (f"file://{tmp_path}/a-folder", "operator"),
        (f"file://{tmp_path}/two-lines.token", "operator"),
        ("vault://kv/wiki", "operator"),
        ("secretmanager://projects/p/secrets/x", "tenant"),
    ]
    messages = set()
    for ref, by in cases:
        with pytest.raises(ConfigurationError) as refused:
            resolve_secret(ref, tenant_grants=None if by == "operator" else (), tenant_id="acme")
        messages.add(str(refused.value).replace(repr(ref), "REF"))
    assert messages == {f"credentials_ref REF {CREDENTIALS_REFUSED}"}


# ------------------------------------------------------------- tenant grants


def test_a_tenant_names_only_the_secrets_granted_to_it(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    (secrets / "acme").mkdir(parents=True)
    (secrets / "umbrella").mkdir()
    (secrets / "acme" / "wiki.token").write_text("Bearer acme-token\n")
    (secrets / "umbrella" / "wiki.token").write_text("Bearer umbrella-token\n")
    (secrets / "acme" / "theirs.token").symlink_to(secrets / "umbrella" / "wiki.token")
    grants = ("secretmanager://projects/corp/secrets/{tenant}", f"file://{secrets}/{{tenant}}")

    assert tenant_may_use("secretmanager://projects/corp/secrets/acme_wiki", grants, "acme")
    assert tenant_may_use("secretmanager://projects/corp/secrets/acme_wiki/versions/3", grants, "acme")
    assert not tenant_may_use("secretmanager://projects/corp/secrets/umbrella_wiki", grants, "acme")
    assert not tenant_may_use("secretmanager://projects/other/secrets/acme_wiki", grants, "acme")
    assert not tenant_may_use("secretmanager://projects/corp/secrets/acme_x/../y", grants, "acme")
    assert not tenant_may_use("env://HOME", grants, "acme")
    assert not tenant_may_use("env://HOME", ("env://",), "acme")
    assert resolve_secret(f"file://{secrets}/acme/wiki.token", tenant_grants=grants, tenant_id="acme") == (
        "Bearer acme-token"
    )
    for ref in (
        f"file://{secrets}/umbrella/wiki.token",
        f"file://{secrets}/acme/theirs.token",
        f"file://{secrets}/acme/../umbrella/wiki.token",
    ):
        assert not tenant_may_use(ref, grants, "acme"), ref
        with pytest.raises(ConfigurationError, match=CREDENTIALS_REFUSED):
            resolve_secret(ref, tenant_grants=grants, tenant_id="acme")


def _secret_manager(answers: dict[str, httpx.Response], calls: list[httpx.Request]) -> httpx.MockTransport:
    """Secret Manager and the metadata server as their documented REST
    answers (``:access`` gives ``payload.data`` in base64)."""

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return answers.get(str(request.url), httpx.Response(404, json={"error": {"code": 404}}))

    return httpx.MockTransport(handle)


TOKEN_URL = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
ACCESS_URL = "https://secretmanager.googleapis.com/v1/projects/corp/secrets/acme_wiki/versions/latest:access"


def test_secret_manager_references_are_read_with_the_workers_token() -> None:
    payload = base64.b64encode(b"Bearer from-secret-manager").decode()
    answers = {
        TOKEN_URL: httpx.Response(
            200, json={"access_token": "ya29.worker", "expires_in": 3599, "token_type": "Bearer"}
        ),
        ACCESS_URL: httpx.Response(
            200,
            json={
                "name": "projects/123/secrets/acme_wiki/versions/1",
                "payload": {"data": payload, "dataCrc32c": "1234"},
            },
        ),
    }
    calls: list[httpx.Request] = []
    grants = ("secretmanager://projects/corp/secrets/{tenant}",)
    secret = resolve_secret(
        "secretmanager://projects/corp/secrets/acme_wiki",
        tenant_grants=grants,
        tenant_id="acme",
        transport=_secret_manager(answers, calls),
    )
    assert secret == "Bearer from-secret-manager"
    assert [str(c.url) for c in calls] == [TOKEN_URL, ACCESS_URL]
    assert calls[0].headers["Metadata-Flavor"] == "Google"
    assert calls[1].headers["Authorization"] == "Bearer ya29.worker"
    # A refusal (403 PERMISSION_DENIED) reads like every other failure.
    answers[ACCESS_URL] = httpx.Response(403, json={"error": {"code": 403, "status": "PERMISSION_DENIED"}})
    with pytest.raises(ConfigurationError) as refused:
        resolve_secret(
            "secretmanager://projects/corp/secrets/acme_wiki",
            tenant_grants=grants,
            tenant_id="acme",
            transport=_secret_manager(answers, []),
        )
    assert str(refused.value) == str(credential_error("secretmanager://projects/corp/secrets/acme_wiki"))


# ------------------------------------------------------------- through the API


def _api(key: str, port: int) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key}, timeout=20)


def test_the_api_takes_only_granted_secrets_and_stores_them_as_the_tenants(
    tmp_path: Path, tenant_host: tuple[int, list[str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    wiki_port, seen = tenant_host
    monkeypatch.setenv("RAGSYNC_TEST_OPERATOR_SECRET", SERVER_SECRET)
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    app = create_app(
        url,
        allowed_locations=(f"http://127.0.0.1:{wiki_port}/{{tenant}}",),
        secret_stores=("secretmanager://projects/corp/secrets/{tenant}",),
    )
    _, key = app.state.keys.create_tenant("acme")
    with served(app) as port, _api(key, port) as api:
        own = f"http://127.0.0.1:{wiki_port}/acme/api.php"
        for ref in (
            "env://RAGSYNC_TEST_OPERATOR_SECRET",
            f"file://{tmp_path}/catalog.db",
            "secretmanager://projects/corp/secrets/other_wiki",
        ):
            r = api.post(
                "/v1/sources",
                json={"type": "wiki", "uri": own, "sync": "poll", "source_id": "w", "credentials_ref": ref},
            )
            assert r.status_code == 422, r.text
            assert r.json()["error"]["details"][0]["loc"] == ["body", "credentials_ref"]
            assert "RAGSYNC_TEST" not in r.text
        granted = "secretmanager://projects/corp/secrets/acme_wiki"
        r = api.post(
            "/v1/sources",
            json={"type": "wiki", "uri": own, "sync": "poll", "source_id": "w", "credentials_ref": granted},
        )
        assert r.status_code == 201, r.text
    catalog: Catalog = app.state.catalog
    state = catalog.sources.get_source("w", tenant_id="acme")
    assert state is not None and (state.credentials_ref, state.credentials_by) == (granted, "tenant")
    # A reference stored before grants existed (or by a tenant, by any path)
    # stays a tenant's: the sync refuses it without a request to the host.
    catalog.syncs.configure_source("w", tenant_id="acme", options={})
    with catalog._engine.begin() as conn:  # an old row: env:// stored by a tenant
        from sqlalchemy import update

        from ragsync.catalog import schema

        conn.execute(update(schema.sources).values(credentials_ref="env://RAGSYNC_TEST_OPERATOR_SECRET"))
    state = catalog.sources.get_source("w", tenant_id="acme")
    assert state is not None
    with pytest.raises(ConfigurationError, match=CREDENTIALS_REFUSED):
        _request(state.spec())
    assert seen == []
    # The operator's tool marks its own reference: that one is sent.
    catalog.syncs.configure_source(
        "w", tenant_id="acme", credentials_ref="env://RAGSYNC_TEST_OPERATOR_SECRET"
    )
    state = catalog.sources.get_source("w", tenant_id="acme")
    assert state is not None and state.credentials_by == "operator"
    _request(state.spec())
    assert seen == [SERVER_SECRET]


# ------------------------------------------------------------- links in a grant


def test_a_link_out_of_a_grant_is_refused_at_creation_and_at_each_read(tmp_path: Path) -> None:
    grants = tmp_path / "grants"
    a, b = grants / "acme", grants / "umbrella"
    (a / "docs").mkdir(parents=True)
    (b / "private").mkdir(parents=True)
    (b / "private" / "plan.md").write_text("# Umbrella's secret plan\n")
    home = tmp_path / "home"
    (home / "objects").mkdir(parents=True)
    (a / "theirs").symlink_to(b)
    (a / "ours").symlink_to(home / "objects")
    app = create_app(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        allowed_locations=(f"{grants}/{{tenant}}",),
        reserved_locations=(str(home),),
    )
    _, key = app.state.keys.create_tenant("acme")
    with served(app) as port, _api(key, port) as api:
        for uri in (a / "theirs", a / "theirs" / "private", a / "ours"):
            r = api.post("/v1/sources", json={"type": "object_store", "sync": "webhook", "uri": str(uri)})
            assert (r.status_code, r.json()["error"]["details"][0]["loc"]) == (422, ["body", "uri"]), uri
        r = api.post(
            "/v1/sources",
            json={"type": "object_store", "sync": "webhook", "source_id": "docs", "uri": str(a / "docs")},
        )
        assert r.status_code == 201, r.text
        assert r.json()["uri"] == str(a / "docs")
    # The tenant then puts a link in the registered folder's place: every
    # read checks the stored root again and refuses it.
    (a / "docs").rmdir()
    (a / "docs").symlink_to(b / "private")
    with pytest.raises(ConfigurationError, match="is refused as a source location"):
        source_location(str(a / "docs"), reserved=(str(home),))
    # A folder registered through a link is stored as its real path.
    assert register_location(str(a / "theirs")).uri == str(b)
