"""``POST /v1/sources/{source_id}/webhook`` with notifications in each service's
documented shape (``tests/fixtures/webhooks``): GCS through Pub/Sub push, S3
through SNS, Jira webhooks and Drive change channels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="control plane needs fastapi")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from connectors.base import FileInfo  # noqa: E402
from connectors.registry import open_connector  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from control_plane.routers.webhooks import secret_hash  # noqa: E402
from ragsync.catalog import Catalog  # noqa: E402
from ragsync.model import Event  # noqa: E402
from ragsync.source_types import SourceSpec  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "webhooks"
MAX_BODY = 32 * 1024
TOKEN = "wh-3c1f0b7e9a5d4e21b6c8f0a2d4e6b8c0"
JIRA = "https://jira.example.org"
DRIVE = "https://www.googleapis.com/drive/v3"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:ragsync-docs"


class _NoSidecar:
    """An object store without an ACL sidecar; nothing else is ever read."""

    def __init__(self) -> None:
        self.patterns: list[str] = []

    def match(self, pattern: str) -> list[FileInfo]:
        self.patterns.append(pattern)
        return []

    def open(self, path: str) -> Any:
        raise AssertionError(f"a webhook read {path}")

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])


@dataclass
class Hook:
    client: Any
    catalog: Catalog
    fs: _NoSidecar
    requests: list[Any]
    key_a: str

    def post(
        self, source_id: str, body: bytes | dict[str, Any], token: str | None = TOKEN, **headers: str
    ) -> Any:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        params = {"token": token} if token is not None else {}
        return self.client.post(
            f"/v1/sources/{source_id}/webhook", content=content, params=params, headers=headers
        )

    def queued(self, source_id: str) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
        rows = [r for r in self.catalog.queue.pending_events(limit=100) if r["source_id"] == source_id]
        events = [Event.from_json(str(r["payload"])) for r in rows]
        return sorted((e.doc_id, e.op, e.source_version, e.content_uri, e.acl_groups) for e in events)

    def dead_letters(self, source_id: str) -> list[Any]:
        return list(self.catalog.dead_letters.list_dead_letters(source_id=source_id))


def _fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text()))


def _add(catalog: Catalog, tenant: str, source_id: str, type_: str, uri: str, **options: Any) -> None:
    catalog.sources.create_source(
        tenant,
        source_id=source_id,
        type=type_,
        credentials_ref=None,
        sync="webhook",
        poll_interval_s=None,
        uri=uri,
    )
    opts = {"webhook_secret_sha256": secret_hash(TOKEN), "acl_groups": ["staff"], **options}
    catalog.syncs.configure_source(source_id, tenant_id=tenant, options=opts)


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[Hook]:
    app = create_app(str(tmp_path / "catalog.db"), max_body_bytes=MAX_BODY)
    catalog: Catalog = app.state.catalog
    _, key_a = app.state.keys.create_tenant("tenant-a")
    app.state.keys.create_tenant("tenant-b")
    fs = _NoSidecar()
    requests: list[Any] = []

    def answer(request: Any) -> Any:
        requests.append(request)
        raise AssertionError(f"a webhook called {request.url}")

    def opener(spec: SourceSpec) -> Any:
        return open_connector(spec, fs=fs, transport=httpx.MockTransport(answer), sleep=lambda s: None)

    app.state.webhook_connector = opener
    _add(catalog, "tenant-a", "gcs-docs", "object_store", "gs://acme-docs/docs")
    _add(catalog, "tenant-a", "s3-docs", "object_store", "s3://acme-docs/docs", sns_topic_arn=TOPIC)
    _add(catalog, "tenant-a", "jira", "tickets", JIRA)
    _add(catalog, "tenant-a", "drive", "drive", DRIVE)
    with TestClient(app) as client:
        yield Hook(client, catalog, fs, requests, key_a)
    assert requests == []  # no notification made the server call anything


def test_gcs_pubsub_push_queues_the_object_events(hook: Hook) -> None:
    r = hook.post("gcs-docs", _fixture("gcs_finalize.json"))
    assert r.status_code == 202, r.text
    assert r.json() == {"accepted": 1, "duplicates": 0, "sync_requested": False, "note": ""}
    r = hook.post("gcs-docs", _fixture("gcs_delete.json"))
    assert r.status_code == 202 and r.json()["accepted"] == 1
    uri = "gs://acme-docs/docs/handbook/travel policy.pdf"
    assert hook.queued("gcs-docs") == [
        ("handbook/travel policy.pdf", "delete", "1796119500.000000", "", ()),
        ("handbook/travel policy.pdf", "upsert", "1796119200.500000", uri, ("staff",)),
    ]
    # Pub/Sub redelivers (at least once): the same message is queued once.
    r = hook.post("gcs-docs", _fixture("gcs_finalize.json"))
    assert r.status_code == 202 and r.json()["duplicates"] == 1 and r.json()["accepted"] == 0
    # Only the ACL sidecar was looked for (for each upsert; a delete needs no groups).
    assert hook.fs.patterns == ["gs://acme-docs/docs/.ragsync-acl.json"] * 2
    assert hook.dead_letters("gcs-docs") == []


def test_s3_through_sns_queues_the_records_and_leaves_confirmation_to_the_operator(
    hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    sns = {"x-amz-sns-message-type": "Notification", "content-type": "text/plain; charset=UTF-8"}
    r = hook.post("s3-docs", _fixture("sns_s3_notification.json"), **sns)
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 2
    assert hook.queued("s3-docs") == [
        (
            "handbook/travel policy.pdf",
            "upsert",
            "1796119200.250000",
            "s3://acme-docs/docs/handbook/travel policy.pdf",
            ("staff",),
        ),
        ("old/expenses.docx", "delete", "1796119202.000000", "", ()),
    ]
    confirm = _fixture("sns_subscription_confirmation.json")
    with caplog.at_level("WARNING"):
        r = hook.post("s3-docs", confirm, **{**sns, "x-amz-sns-message-type": "SubscriptionConfirmation"})
    assert r.status_code == 202 and r.json()["accepted"] == 0 and "confirmation" in r.json()["note"]
    assert confirm["SubscribeURL"] in caplog.text  # logged for the operator, never fetched
    # The S3 test event (sent when notifications are configured) queues nothing.
    r = hook.post("s3-docs", _fixture("s3_test_event.json"))
    assert r.status_code == 202 and r.json()["accepted"] == 0
    # Another topic than the pinned one is refused.
    r = hook.post("s3-docs", {**_fixture("sns_s3_notification.json"), "TopicArn": TOPIC + "-x"}, **sns)
    assert r.status_code == 422
    assert len(hook.dead_letters("s3-docs")) == 1
    assert len(hook.queued("s3-docs")) == 2


def test_jira_webhooks_queue_the_issue_its_attachments_and_deletes(hook: Hook) -> None:
    r = hook.post("jira", _fixture("jira_issue_updated.json"))
    assert r.status_code == 202, r.text
    r = hook.post("jira", _fixture("jira_issue_deleted.json"))
    assert r.status_code == 202, r.text
    fields = "summary%2Cdescription%2Ccomment%2Cissuetype%2Cstatus%2Cpriority%2Cresolution%2Creporter%2C"
    fields += (
        "assignee%2Ccomponents%2Clabels%2CfixVersions%2Ccreated%2Cresolutiondate%2Cupdated%2Csecurity%2C"
    )
    fields += "attachment%2Cproject"
    assert hook.queued("jira") == [
        ("10002", "upsert", "1796119200000", f"{JIRA}/rest/api/2/issue/10002?fields={fields}", ("everyone",)),
        (
            "10002/attachments/10100",
            "upsert",
            "1796119140000",
            f"{JIRA}/secure/attachment/10100/trace.log",
            ("everyone",),
        ),
        ("10003", "delete", "1796122800000", "", ()),
    ]


def test_drive_channel_notifications_request_a_sync(hook: Hook) -> None:
    # developers.google.com/drive/api/guides/push: the headers are the notification.
    headers = {
        "X-Goog-Channel-ID": "01234567-89ab-cdef-0123456789ab",
        "X-Goog-Channel-Token": TOKEN,
        "X-Goog-Channel-Expiration": "Tue, 08 Dec 2026 10:00:00 GMT",
        "X-Goog-Resource-ID": "ret08u3rv24htgh289g",
        "X-Goog-Resource-URI": "https://www.googleapis.com/drive/v3/changes?alt=json&pageToken=7",
        "X-Goog-Message-Number": "1",
        "X-Goog-Resource-State": "sync",
    }
    r = hook.post("drive", b"", token=None, **headers)
    assert r.status_code == 202 and r.json()["sync_requested"] is False
    r = hook.post("drive", b"", token=None, **{**headers, "X-Goog-Resource-State": "change"})
    assert r.status_code == 202 and r.json()["sync_requested"] is True
    runs = hook.catalog.syncs.pending_sync_sources()
    assert ("tenant-a", "drive") in runs or ("drive", "tenant-a") in runs
    assert hook.queued("drive") == []


@pytest.mark.parametrize(
    ("source_id", "token"),
    [("gcs-docs", "wrong"), ("gcs-docs", None), ("no-such-source", TOKEN), ("gcs-docs", TOKEN + "x")],
)
def test_bad_secret_or_unknown_source_is_401_and_queues_nothing(
    hook: Hook, source_id: str, token: str | None
) -> None:
    r = hook.post(source_id, _fixture("gcs_finalize.json"), token=token)
    assert r.status_code == 401
    assert r.json()["error"]["message"] == "unknown source or wrong webhook secret"
    assert hook.queued("gcs-docs") == [] and hook.dead_letters("gcs-docs") == []


def test_drive_with_a_wrong_channel_token_is_401(hook: Hook) -> None:
    headers = {"X-Goog-Channel-ID": "c1", "X-Goog-Channel-Token": "guess", "X-Goog-Resource-State": "change"}
    assert hook.post("drive", b"", token=None, **headers).status_code == 401
    assert hook.catalog.syncs.pending_sync_sources() == set()


def test_the_secret_picks_the_tenant_of_a_shared_source_id(hook: Hook) -> None:
    hook.catalog.sources.create_source(
        "tenant-b",
        source_id="gcs-docs",
        type="object_store",
        credentials_ref=None,
        sync="webhook",
        poll_interval_s=None,
        uri="gs://acme-docs/docs",
    )
    hook.catalog.syncs.configure_source(
        "gcs-docs", tenant_id="tenant-b", options={"webhook_secret_sha256": secret_hash("b-token")}
    )
    r = hook.post("gcs-docs", _fixture("gcs_finalize.json"), token="b-token")
    assert r.status_code == 202, r.text
    tenants = {r["tenant_id"] for r in hook.catalog.queue.pending_events(limit=10)}
    assert tenants == {"tenant-b"}


@pytest.mark.parametrize(
    ("source_id", "body", "status"),
    [
        ("gcs-docs", b"not json at all", 422),
        ("gcs-docs", b'{"message": {"attributes": {"eventType": "OBJECT_FINALIZE"}, "data": "!!"}}', 422),
        ("gcs-docs", "gcs_other_bucket.json", 422),  # another bucket
        ("s3-docs", "s3_outside_prefix.json", 422),  # a key climbing out of the prefix
        ("jira", "jira_attachment_elsewhere.json", 422),  # an attachment link to another host
        ("jira", b'{"webhookEvent": "jira:issue_updated"}', 422),
        ("gcs-docs", b"{" + b" " * MAX_BODY + b"}", 413),  # over the app's body limit
    ],
)
def test_hostile_payloads_are_4xx_with_one_dead_letter_and_nothing_queued(
    hook: Hook, source_id: str, body: bytes | str, status: int
) -> None:
    content = (FIXTURES / body).read_bytes() if isinstance(body, str) else body
    r = hook.post(source_id, content)
    assert r.status_code == status, r.text
    assert hook.queued(source_id) == []
    (letter,) = hook.dead_letters(source_id)
    assert (letter.stage, letter.error_class, letter.tenant_id) == ("webhook", "invalid_event", "tenant-a")
    assert letter.message
    # A redelivery (Pub/Sub, SNS) is refused again but kept once.
    assert hook.post(source_id, content).status_code == status
    assert len(hook.dead_letters(source_id)) == 1
    # An unauthenticated caller leaves no dead letter (nobody can fill the table).
    assert hook.post(source_id, content, token="nope").status_code in (401, 413)
    assert len(hook.dead_letters(source_id)) == 1


def test_a_name_outside_the_location_is_refused_and_never_read(hook: Hook) -> None:
    r = hook.post("gcs-docs", _fixture("gcs_other_bucket.json"))
    assert r.status_code == 422 and "outside" in r.json()["error"]["message"]
    assert "other-bucket" not in "".join(hook.fs.patterns)
    assert hook.queued("gcs-docs") == []


def test_the_tenant_event_budget_applies_to_webhooks(tmp_path: Path) -> None:
    app = create_app(str(tmp_path / "c.db"), events_per_s=0.001, events_burst=1)
    catalog: Catalog = app.state.catalog
    app.state.keys.create_tenant("tenant-a")
    _add(catalog, "tenant-a", "s3-docs", "object_store", "s3://acme-docs/docs")
    fs = _NoSidecar()
    app.state.webhook_connector = lambda spec: open_connector(spec, fs=fs)
    with TestClient(app) as client:

        def post() -> Any:
            body = (FIXTURES / "sns_s3_notification.json").read_bytes()
            return client.post("/v1/sources/s3-docs/webhook", params={"token": TOKEN}, content=body)

        assert post().status_code == 202  # the burst
        r = post()
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert len(catalog.queue.pending_events(limit=10)) == 2  # the first call's events only


def test_the_tenant_sees_its_webhook_dead_letters_with_the_reason(hook: Hook) -> None:
    assert hook.post("jira", _fixture("jira_attachment_elsewhere.json")).status_code == 422
    r = hook.client.get("/v1/dead-letters", params={"source_id": "jira"}, headers={"X-API-Key": hook.key_a})
    assert r.status_code == 200, r.text
    (letter,) = r.json()
    assert letter["stage"] == "webhook" and "169.254.169.254" in letter["error"]
    assert TOKEN not in r.text


def test_a_source_whose_connector_cannot_be_opened_is_503_with_a_configuration_dead_letter(
    hook: Hook,
) -> None:
    hook.catalog.sources.create_source(
        "tenant-a",
        source_id="jira-locked",
        type="tickets",
        credentials_ref="env://RAGSYNC_NOT_GRANTED",  # a tenant's source may not name the server's env
        sync="webhook",
        poll_interval_s=None,
        uri=JIRA,
    )
    hook.catalog.syncs.configure_source(
        "jira-locked", tenant_id="tenant-a", options={"webhook_secret_sha256": secret_hash(TOKEN)}
    )
    r = hook.post("jira-locked", _fixture("jira_issue_updated.json"))
    assert r.status_code == 503
    (letter,) = hook.dead_letters("jira-locked")
    assert letter.error_class == "configuration" and hook.queued("jira-locked") == []


def test_the_cli_makes_a_token_the_endpoint_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    home = str(tmp_path / "home")
    add = ["sources", "add", "gcs-docs", "--tenant", "acme", "--type", "object_store"]
    assert main([*add, "--uri", "gs://acme-docs/docs", "--acl-groups", "staff", "--home", home]) == 0
    capsys.readouterr()
    assert main(["sources", "webhook-secret", "gcs-docs", "--tenant", "acme", "--home", home, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["path"] == "/v1/sources/gcs-docs/webhook" and len(made["token"]) >= 40
    app = create_app(f"sqlite:///{home}/catalog.db")
    fs = _NoSidecar()
    app.state.webhook_connector = lambda spec: open_connector(spec, fs=fs)
    state = app.state.catalog.sources.get_source("gcs-docs", tenant_id="acme")
    assert made["token"] not in json.dumps(state.options)  # only its hash is stored
    assert state.options["acl_groups"] == ["staff"]  # the other options are kept
    with TestClient(app) as client:
        body = (FIXTURES / "gcs_finalize.json").read_bytes()
        r = client.post(made["path"], params={"token": made["token"]}, content=body)
        assert r.status_code == 202 and r.json()["accepted"] == 1, r.text
        assert (
            client.post(made["path"], params={"token": "x" + made["token"]}, content=body).status_code == 401
        )


def _google_signer() -> tuple[Any, dict[str, str]]:
    """A key pair standing in for Google's: the signer and its certificate by key id."""
    from cryptography.hazmat.primitives import serialization
    from google.auth import crypt

    key, cert = _rsa_pair()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return crypt.RSASigner.from_string(pem, key_id="kid-1"), {"kid-1": cert.decode()}


def test_pubsub_oidc_tokens_are_verified_when_the_source_asks_for_them(hook: Hook) -> None:
    import time

    from google.auth import jwt

    signer, certs = _google_signer()
    other_signer, _ = _google_signer()
    hook.client.app.state.google_certs = lambda: certs
    audience = "https://ragsync.example.org/v1/sources/gcs-docs/webhook"
    account = "push@acme-prod.iam.gserviceaccount.com"
    options = hook.catalog.sources.get_source("gcs-docs", tenant_id="tenant-a").options
    hook.catalog.syncs.configure_source(
        "gcs-docs",
        tenant_id="tenant-a",
        options={**options, "pubsub_audience": audience, "pubsub_service_account": account},
    )
    now = int(time.time())
    # The claims of Pub/Sub's push token (cloud.google.com/pubsub/docs/authenticate-push-subscriptions).
    claims = {
        "aud": audience,
        "azp": "113774264463038321964",
        "email": account,
        "email_verified": True,
        "exp": now + 3600,
        "iat": now,
        "iss": "https://accounts.google.com",
        "sub": "113774264463038321964",
    }

    def bearer(s: Any = signer, **changes: Any) -> str:
        return "Bearer " + jwt.encode(s, {**claims, **changes}).decode()

    body = _fixture("gcs_finalize.json")
    for bad in (
        None,
        bearer(aud="https://elsewhere.example/"),
        bearer(email="intruder@evil.iam.gserviceaccount.com"),
        bearer(exp=now - 600, iat=now - 4200),
        bearer(iss="https://evil.example"),
        bearer(other_signer),
    ):
        headers = {"Authorization": bad} if bad else {}
        assert hook.post("gcs-docs", body, **headers).status_code == 401, bad
    assert hook.queued("gcs-docs") == []
    r = hook.post("gcs-docs", body, Authorization=bearer())
    assert r.status_code == 202 and r.json()["accepted"] == 1, r.text


def test_sns_signatures_are_verified_when_the_source_asks_for_them(hook: Hook) -> None:
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    from control_plane.routers.webhooks import verify_sns_signature

    signer_key, cert = _rsa_pair()  # standing in for SNS's
    asked: list[str] = []

    def certificate(url: str) -> bytes:
        asked.append(url)
        return cert

    hook.client.app.state.sns_certificates = certificate
    options = hook.catalog.sources.get_source("s3-docs", tenant_id="tenant-a").options
    hook.catalog.syncs.configure_source(
        "s3-docs", tenant_id="tenant-a", options={**options, "sns_verify": True}
    )

    def signed(message: dict[str, Any], version: str = "1") -> dict[str, Any]:
        fields = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
        text = "".join(f"{f}\n{message[f]}\n" for f in fields if f in message)
        digest = hashes.SHA1() if version == "1" else hashes.SHA256()
        signature = signer_key.sign(text.encode(), padding.PKCS1v15(), digest)
        return {**message, "SignatureVersion": version, "Signature": base64.b64encode(signature).decode()}

    sns = {"x-amz-sns-message-type": "Notification"}
    recorded = _fixture("sns_s3_notification.json")
    assert hook.post("s3-docs", recorded, **sns).status_code == 401  # the recorded signature is not our key's
    tampered = {**signed(recorded), "Message": recorded["Message"].replace("travel", "payroll")}
    assert hook.post("s3-docs", tampered, **sns).status_code == 401
    elsewhere = signed({**recorded, "SigningCertURL": "https://evil.example/cert.pem"})
    assert hook.post("s3-docs", elsewhere, **sns).status_code == 401
    assert "https://evil.example/cert.pem" not in asked  # never fetched
    assert hook.queued("s3-docs") == []
    assert hook.post("s3-docs", signed(recorded, "2"), **sns).status_code == 202
    assert len(hook.queued("s3-docs")) == 2
    assert verify_sns_signature(signed(recorded, "1"), certificate)
    assert set(asked) == {recorded["SigningCertURL"]}


def _rsa_pair() -> tuple[Any, bytes]:
    """An RSA private key and a self-signed certificate (PEM) for it."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-sns")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


class _Sidecar(_NoSidecar):
    """An object store that has an ACL sidecar: unreadable (opening it fails
    the way Beam's file systems fail) or holding ``text``."""

    def __init__(self, text: bytes | None) -> None:
        super().__init__()
        self.text = text

    def match(self, pattern: str) -> list[FileInfo]:
        self.patterns.append(pattern)
        return [FileInfo(path=pattern, size=100, mtime=1796119000.0)]

    def open(self, path: str) -> Any:
        import io

        from apache_beam.io.filesystem import BeamIOError

        if self.text is None:
            cause = OSError('Could not connect to the endpoint URL: "http://10.0.0.7:9000/acme-docs"')
            raise BeamIOError("Open operation failed with exceptions", {path: cause})
        return io.BytesIO(self.text)


@pytest.mark.parametrize(
    ("sidecar", "code", "leaked"),
    [
        (None, "source_unavailable", ("BeamIOError", "10.0.0.7", "Open operation", "endpoint")),
        (b"{'default': ['staff']}", "source_unusable", ("Expecting", "double quotes", "char 1")),
    ],
    ids=["unreadable", "malformed"],
)
def test_an_acl_sidecar_that_cannot_be_read_answers_a_problem_type_without_library_text(
    hook: Hook, sidecar: bytes | None, code: str, leaked: tuple[str, ...]
) -> None:
    """The red team's LOW: the 503 carried the raw ``BeamIOError`` (with the
    store's internal address) or ``ValueError`` text."""
    from control_plane.errors import SOURCE_UNAVAILABLE_MESSAGE, SOURCE_UNUSABLE_MESSAGE

    fs = _Sidecar(sidecar)
    hook.client.app.state.webhook_connector = lambda spec: open_connector(spec, fs=fs)
    r = hook.post("gcs-docs", _fixture("gcs_finalize.json"))
    assert r.status_code == 503, r.text
    message = SOURCE_UNAVAILABLE_MESSAGE if sidecar is None else SOURCE_UNUSABLE_MESSAGE
    assert r.json() == {"error": {"code": code, "message": message, "details": []}}
    for text in leaked:
        assert text not in r.text
    assert set(fs.patterns) == {"gs://acme-docs/docs/.ragsync-acl.json"}  # nothing else is read
    assert hook.queued("gcs-docs") == []
    letters = hook.dead_letters("gcs-docs")
    if sidecar is None:
        assert letters == []  # a passing failure: the sender redelivers
    else:
        assert [(d.error_class, d.message) for d in letters] == [("configuration", SOURCE_UNUSABLE_MESSAGE)]
        listed = hook.client.get(
            "/v1/dead-letters", params={"source_id": "gcs-docs"}, headers={"X-API-Key": hook.key_a}
        )
        assert all(text not in listed.text for text in leaked), listed.text
