"""``POST /v1/sources/{source_id}/webhook``: change notifications sent by the
sources themselves, turned into queued events.

A webhook cannot carry a tenant's API key, so the source is found by its id
and the caller proves itself with the source's **webhook secret**: the
SHA-256 (hex) of a random token, stored in the source's option
``webhook_secret_sha256`` (``ragsync sources add --option
webhook_secret_sha256=HEX`` or ``options`` of ``POST /v1/sources``, or
``ragsync sources webhook-secret ID``, which makes one; the token itself is
never stored). The token is accepted from, per service:

- **GCS through Pub/Sub push**: the push endpoint's query parameter
  ``?token=TOKEN``. Production should also turn on Pub/Sub's authenticated
  push: with option ``pubsub_audience`` (and ``pubsub_service_account``, the
  push subscription's service account) every call must also carry Google's
  OIDC JWT in ``Authorization``, verified against Google's certificates
  (signature, ``exp``, ``aud``, ``iss``, ``email`` and ``email_verified``);
  a call without a valid one gets the same 401.
- **S3 event notifications**, through an SNS HTTPS subscription (the SNS
  envelope is unwrapped; option ``sns_topic_arn`` pins the topic) or an
  EventBridge API destination: ``?token=TOKEN`` or the header
  ``X-Ragsync-Webhook-Token``. With option ``sns_verify: true`` an SNS
  message must also carry a valid SNS signature (``SignatureVersion`` 1 or 2,
  the certificate read only from ``https://sns.REGION.amazonaws.com/...pem``),
  else the same 401. A
  ``SubscriptionConfirmation`` is never fetched by the server: its
  ``SubscribeURL`` is logged for the operator to open (or ``aws sns
  confirm-subscription --token``).
- **Jira webhooks**: ``?token=TOKEN`` in the webhook's URL.
- **Drive change channels** (``changes.watch``): the channel's ``token``,
  which Google sends back as ``X-Goog-Channel-Token``.

Tokens are compared by their hashes with ``hmac.compare_digest``. An unknown
source and a wrong token get the same 401. Source ids are unique per tenant
only: the token decides which tenant's source is meant.

The body (at most the app's ``max_body_bytes``, else 413) goes to the source's
connector (``Connector.webhook_events``); the events it returns are checked
and queued by the code of ``POST /internal/events`` (the tenant's event
budget, the event schema and its limits, the source's location, event ids'
idempotency), and the answer is 202 at once: the work is done by the queue's
consumers. A notification that only says "something changed" (Drive)
requests an incremental sync of the source instead. A payload that is not
what the service sends (not JSON, malformed, an object of another bucket or
outside the source's prefix, a link outside the source's location, too large)
is answered 4xx, nothing of it is queued, and it is kept as one dead letter
(stage ``webhook``, class ``invalid_event``) with the reason and its first
bytes, listed by ``GET /v1/dead-letters`` (not retried: the sender
redelivers; a redelivery of the same payload adds no second one, so give
the Pub/Sub subscription a dead-letter topic and SNS a redrive policy). A
source whose connector cannot be opened (options, credentials, a malformed
ACL sidecar) is answered 503 ``source_unusable`` with a dead letter of class
``configuration``; one whose ACL sidecar cannot be read now, 503
``source_unavailable`` (send again later). Neither answer carries the error
text of the layers below (a library's message, an internal address): that
goes to the server's log.
Nothing is ever read at an address a notification names.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from connectors.base import Connector, FileInfo
from connectors.credentials import WEBHOOK_SECRET_OPTION
from connectors.credentials import webhook_secret_hash as secret_hash
from connectors.events import parse_event
from connectors.location import Location
from control_plane.deps import CatalogDep, path_id
from control_plane.errors import (
    ERRORS,
    SOURCE_UNAVAILABLE,
    SOURCE_UNAVAILABLE_MESSAGE,
    SOURCE_UNUSABLE,
    SOURCE_UNUSABLE_MESSAGE,
    ApiError,
    ErrorOut,
)
from control_plane.routers.events import RejectedEvent, admit_events, spend_event_budget
from ragsync.catalog import Catalog, LimitReachedError, SourceState
from ragsync.errors import ConfigurationError, FetchError, InvalidEventError
from ragsync.model import EVENT_LIMITS, DeadLetter, Event
from ragsync.source_types import SourceSpec

log = logging.getLogger(__name__)

router = APIRouter()

SECRET_OPTION = WEBHOOK_SECRET_OPTION
TOKEN_HEADERS = ("x-goog-channel-token", "x-ragsync-webhook-token")
STAGE = "webhook"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_MAX_TOKEN = 1024
_PATH = re.compile(r"^/v1/sources/([^/]+)/webhook$")
#: Headers kept in a dead letter (never the tokens).
_KEPT_HEADERS = ("content-type", "x-goog-resource-state", "x-goog-channel-id", "x-amz-sns-message-type")
_UNAUTHORIZED = "unknown source or wrong webhook secret"
_NO_SECRET = "0" * 64


class WebhookOut(BaseModel):
    """Outcome of a webhook call: events queued (or found already queued), or
    a sync requested."""

    accepted: int
    duplicates: int
    sync_requested: bool = False
    note: str = ""


def _tokens(query: Mapping[str, list[str]], headers: Mapping[str, str]) -> list[str]:
    found = [*query.get("token", []), *(headers.get(h, "") for h in TOKEN_HEADERS)]
    return [t for t in found if t and len(t) <= _MAX_TOKEN][:4]


def authenticate(catalog: Catalog, source_id: str, tokens: list[str]) -> SourceState | None:
    """The source whose webhook secret one of ``tokens`` is, or None (unknown
    source, no secret set, or no token matches: the caller cannot tell which)."""
    given = [secret_hash(t) for t in tokens]
    sid = path_id(source_id)
    candidates = catalog.syncs.sources_with_id(sid) if sid else []
    if not candidates:  # the same comparisons as for a known source
        any(hmac.compare_digest(g, _NO_SECRET) for g in given)
    for state in candidates:
        expected = state.options.get(SECRET_OPTION)
        if not isinstance(expected, str) or not _HEX64.match(expected):
            continue
        if any(hmac.compare_digest(g, expected.lower()) for g in given):
            return state
    return None


def _dead_letter(
    catalog: Catalog,
    state: SourceState,
    reason: str,
    body: bytes,
    headers: Mapping[str, str],
    error_class: str = "invalid_event",
) -> None:
    # One open dead letter per distinct payload: Pub/Sub and SNS redeliver a
    # refused message until it expires, and each redelivery is the same.
    digest = hashlib.sha256(body + b"\x1f" + reason.encode()).hexdigest()[:32]
    uri = f"webhook:{state.source_id}#{digest}"
    if catalog.dead_letters.open_dead_letter_at(state.tenant_id, state.source_id, uri) is not None:
        return
    kept = body[: EVENT_LIMITS.event_bytes]
    payload = {
        "webhook": state.source_id,
        "bytes": len(body),
        "raw_base64": base64.b64encode(kept).decode("ascii"),
        "truncated": len(kept) < len(body),
        "headers": {h: headers[h][:200] for h in _KEPT_HEADERS if h in headers},
    }
    catalog.dead_letters.add_dead_letter(
        DeadLetter(
            stage=STAGE,
            doc_id="",
            uri=uri,
            error_class=error_class,
            message=reason[:1000],
            payload=json.dumps(payload, sort_keys=True),
            tenant_id=state.tenant_id,
        ),
        source_id=state.source_id,
    )


GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
_GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")


class GoogleCerts:
    """Google's OAuth2 signing certificates (PEM by key id), fetched from
    :data:`GOOGLE_CERTS_URL` and kept for ``ttl_s``."""

    def __init__(self, *, transport: Any = None, ttl_s: float = 3600.0) -> None:
        self.transport = transport
        self.ttl_s = ttl_s
        self._certs: dict[str, str] = {}
        self._fetched = -1e18
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, str]:
        import httpx

        with self._lock:
            if time.monotonic() - self._fetched > self.ttl_s:
                with httpx.Client(transport=self.transport, timeout=10.0, follow_redirects=False) as client:
                    answer = client.get(GOOGLE_CERTS_URL)
                answer.raise_for_status()
                data = answer.json()
                self._certs = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
                self._fetched = time.monotonic()
            return dict(self._certs)


def verify_google_oidc(
    authorization: str, *, audience: str, email: str, certs: Mapping[str, str], now_skew_s: int = 10
) -> bool:
    """True when ``authorization`` is ``Bearer <JWT>`` signed by Google for
    ``audience`` (and, when ``email`` is given, for that verified account)."""
    from google.auth import exceptions, jwt

    if not authorization.startswith("Bearer ") or not certs:
        return False
    try:
        claims = jwt.decode(
            authorization[len("Bearer ") :],
            certs=dict(certs),
            audience=audience,
            clock_skew_in_seconds=now_skew_s,
        )
    except (exceptions.GoogleAuthError, ValueError, TypeError, KeyError):
        return False
    if claims.get("iss") not in _GOOGLE_ISSUERS:
        return False
    return not email or (claims.get("email") == email and claims.get("email_verified") is True)


def _oidc_ok(request: Request, state: SourceState, headers: Mapping[str, str]) -> bool:
    """The source's Pub/Sub OIDC requirement (options ``pubsub_audience``,
    ``pubsub_service_account``) is met, or it has none."""
    audience = str(state.options.get("pubsub_audience") or "")
    if not audience:
        return True
    certs: Callable[[], Mapping[str, str]] = getattr(request.app.state, "google_certs", None) or _GOOGLE_CERTS
    try:
        known = certs()
    except Exception:  # noqa: BLE001 - certificates unreachable: refuse, the sender retries
        log.warning("Google's certificates could not be read: a Pub/Sub push to %s refused", state.source_id)
        return False
    email = str(state.options.get("pubsub_service_account") or "")
    return verify_google_oidc(headers.get("authorization", ""), audience=audience, email=email, certs=known)


_GOOGLE_CERTS = GoogleCerts()

_SNS_CERT_URL = re.compile(
    r"^https://sns\.[a-z0-9-]{1,30}\.amazonaws\.com(\.cn)?/[A-Za-z0-9_.-]{1,200}\.pem$"
)
_SNS_CONFIRMATION = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type")
_SNS_SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": _SNS_CONFIRMATION,
    "UnsubscribeConfirmation": _SNS_CONFIRMATION,
}


class SnsCertificates:
    """SNS signing certificates, read only from SNS's own hosts and kept."""

    def __init__(self, *, transport: Any = None) -> None:
        self.transport = transport
        self._pem: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __call__(self, url: str) -> bytes:
        import httpx

        if not _SNS_CERT_URL.match(url):
            raise ValueError("a SigningCertURL that is not SNS's")
        with self._lock:
            if url not in self._pem:
                with httpx.Client(transport=self.transport, timeout=10.0, follow_redirects=False) as client:
                    answer = client.get(url)
                answer.raise_for_status()
                self._pem = {**dict(list(self._pem.items())[-15:]), url: answer.content}
            return self._pem[url]


def verify_sns_signature(message: Mapping[str, Any], certificate: Callable[[str], bytes]) -> bool:
    """True when an SNS message's ``Signature`` is valid for its fields
    (docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    fields = _SNS_SIGNED.get(str(message.get("Type", "")))
    version = str(message.get("SignatureVersion", ""))
    url = str(message.get("SigningCertURL", ""))
    if fields is None or version not in ("1", "2") or not _SNS_CERT_URL.match(url):
        return False
    text = "".join(f"{f}\n{message[f]}\n" for f in fields if f in message and isinstance(message[f], str))
    try:
        signature = base64.b64decode(str(message.get("Signature", "")), validate=True)
        key = x509.load_pem_x509_certificate(certificate(url)).public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            return False
        digest = hashes.SHA1() if version == "1" else hashes.SHA256()  # noqa: S303 - SNS's version 1 is SHA1
        key.verify(signature, text.encode("utf-8"), padding.PKCS1v15(), digest)
    except (InvalidSignature, ValueError, TypeError, OSError):
        return False
    except Exception:  # noqa: BLE001 - the certificate could not be read: not verified
        log.warning("an SNS signing certificate could not be read")
        return False
    return True


def _sns_ok(request: Request, state: SourceState, body: bytes, headers: Mapping[str, str]) -> bool:
    """The source's SNS signature requirement (option ``sns_verify``) is met,
    or it has none, or the call is not an SNS message."""
    if state.options.get("sns_verify") is not True:
        return True
    data = _json_object(body)
    if data is None or not ("x-amz-sns-message-type" in headers or ("TopicArn" in data and "Type" in data)):
        return True
    certificates: Callable[[str], bytes] = getattr(request.app.state, "sns_certificates", None) or _SNS_CERTS
    return verify_sns_signature(data, certificates)


_SNS_CERTS = SnsCertificates()


class _NoFileSystem:
    """A local folder's connector reads its sidecar itself; nothing else is read."""

    def match(self, pattern: str) -> list[FileInfo]:
        raise FetchError("a local folder source receives no notifications")

    def open(self, path: str) -> Any:
        raise FetchError("a local folder source receives no notifications")

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])


def open_webhook_connector(spec: SourceSpec) -> Connector:
    """The connector that translates ``spec``'s notifications. An object
    store's reads its ACL sidecar through Beam's file systems (imported here
    only, when such a notification arrives).

    Raises:
        ConfigurationError: no usable location, options or credentials.
    """
    from connectors.registry import open_connector

    fs: Any = _NoFileSystem()
    if spec.uri and Location.parse(spec.uri).scheme in ("gs", "s3"):
        from transforms.io import BeamFileSystem

        fs = BeamFileSystem()
    return open_connector(spec, fs=fs)


async def _raw_body(request: Request) -> bytes:
    return await request.body()


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _unwrap(state: SourceState, body: bytes, headers: Mapping[str, str]) -> tuple[bytes | None, str]:
    """The notification inside an SNS envelope, or a note when the call
    carries no change (SNS subscription messages, the S3 test event).

    Raises:
        InvalidEventError: an SNS envelope of another topic, or without a message.
    """
    data = _json_object(body)
    if data is None:
        return body, ""
    if "x-amz-sns-message-type" in headers or ("TopicArn" in data and "Type" in data):
        topic = str(data.get("TopicArn", ""))
        pinned = state.options.get("sns_topic_arn")
        if pinned and not hmac.compare_digest(topic.encode(), str(pinned).encode()):
            raise InvalidEventError("an SNS message of another topic than option 'sns_topic_arn'")
        kind = str(data.get("Type", ""))
        if kind == "SubscriptionConfirmation":
            # Never fetched here (the server makes no call a request names):
            # the operator confirms it.
            log.warning(
                "source %s: SNS subscription to %s awaits confirmation: open %s",
                state.source_id,
                topic,
                str(data.get("SubscribeURL", ""))[:2000],
            )
            return None, "SNS subscription confirmation logged for the operator; not confirmed by ragsync"
        if kind == "UnsubscribeConfirmation":
            return None, "SNS unsubscribe confirmation: nothing to do"
        message = data.get("Message")
        if kind != "Notification" or not isinstance(message, str):
            raise InvalidEventError("an SNS message that is not a Notification with a Message")
        body = message.encode("utf-8", "surrogatepass")
        data = _json_object(body)
        if data is None:
            return body, ""
    if data.get("Event") == "s3:TestEvent":
        return None, "S3 test event: nothing to do"
    pinned_sub = str(state.options.get("pubsub_subscription") or "").encode()
    given = str(data.get("subscription", "")).encode()
    if pinned_sub and isinstance(data.get("message"), dict) and not hmac.compare_digest(given, pinned_sub):
        raise InvalidEventError("a Pub/Sub push of another subscription than option 'pubsub_subscription'")
    return body, ""


def _translate(
    request: Request, state: SourceState, body: bytes, headers: Mapping[str, str]
) -> list[Event] | None:
    opener: Callable[[SourceSpec], Connector] = getattr(
        request.app.state, "webhook_connector", open_webhook_connector
    )
    spec = state.spec()
    connector = opener(spec)
    try:
        return connector.webhook_events(body, headers)
    finally:
        connector.close()


@router.post(
    "/v1/sources/{source_id}/webhook",
    status_code=202,
    response_model=WebhookOut,
    tags=["sources"],
    responses={
        **ERRORS,
        429: {"model": ErrorOut, "description": "the tenant's event budget is spent; see Retry-After"},
        503: {"model": ErrorOut, "description": "the source cannot be read now; send again later"},
    },
)
def receive_webhook(
    source_id: str,
    request: Request,
    catalog: CatalogDep,
    body: Annotated[bytes, Depends(_raw_body)],
    token: Annotated[str | None, Query(description="the source's webhook token (Pub/Sub, SNS, Jira)")] = None,
) -> WebhookOut:
    """A notification from the source itself (GCS through Pub/Sub push, S3
    through SNS, Jira, Drive channels), authenticated by the source's webhook
    secret instead of an API key; its events are queued, not applied (202)."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    state = authenticate(catalog, source_id, _tokens({"token": [token] if token else []}, headers))
    if state is None or not _oidc_ok(request, state, headers) or not _sns_ok(request, state, body, headers):
        raise ApiError(401, _UNAUTHORIZED)

    def refuse(
        status: int, reason: str, error_class: str = "invalid_event", code: str | None = None
    ) -> ApiError:
        _dead_letter(catalog, state, reason, body, headers, error_class)
        return ApiError(status, reason, code=code)

    try:
        inner, note = _unwrap(state, body, headers)
        if inner is None:
            return WebhookOut(accepted=0, duplicates=0, note=note)
        found = _translate(request, state, inner, headers)
    except InvalidEventError as exc:
        raise refuse(422, f"not a notification of this source: {exc}") from None
    except ConfigurationError as exc:
        # What failed below (a library's error text, an address) is the
        # operator's to read in the log; the sender and the tenant get the
        # problem type and what to do.
        log.warning("source %s of tenant %s: connector unusable: %s", source_id, state.tenant_id, exc)
        raise refuse(503, SOURCE_UNUSABLE_MESSAGE, "configuration", SOURCE_UNUSABLE) from None
    except FetchError as exc:
        log.warning("source %s of tenant %s: cannot be read: %s", source_id, state.tenant_id, exc)
        raise ApiError(
            503, SOURCE_UNAVAILABLE_MESSAGE, code=SOURCE_UNAVAILABLE, headers={"Retry-After": "30"}
        ) from None
    if found is None:
        try:
            catalog.syncs.request_sync(
                state.tenant_id,
                state.source_id,
                "incremental",
                origin="webhook",
                max_pending=request.app.state.max_pending_syncs,
            )
        except LimitReachedError as exc:
            raise ApiError(429, str(exc), headers={"Retry-After": "60"}) from exc
        return WebhookOut(accepted=0, duplicates=0, sync_requested=True)
    # The wire schema's checks (limits, text), as for events posted to /internal/events.
    parsed: list[tuple[int, Event]] = []
    for index, event in enumerate(found):
        try:
            parsed.append((index, parse_event(json.loads(event.to_json()))))
        except (InvalidEventError, ValueError, TypeError) as exc:
            raise refuse(422, f"notification event {index}: {exc}") from None
    spend_event_budget(request, state.tenant_id, max(1, len(parsed)))
    rejected: list[RejectedEvent] = []
    queue, conflicts = admit_events(catalog, state.tenant_id, parsed, rejected, {})
    if rejected:
        first = min(rejected, key=lambda r: r.index)
        raise refuse(409 if conflicts else 422, f"notification event {first.index}: {first.error}")
    accepted, duplicates = catalog.queue.enqueue_events(queue) if queue else (0, 0)
    return WebhookOut(accepted=accepted, duplicates=duplicates)


def too_large_hook(catalog: Catalog, max_bytes: int) -> Callable[[Any], Awaitable[None]]:
    """What the body limit does when a webhook's body is too large: an
    authentic caller's notification is kept as a dead letter (an unknown
    caller's is only refused)."""
    import anyio.to_thread

    def record(scope: Any) -> None:
        match = _PATH.match(str(scope.get("path", "")))
        if match is None or scope.get("method") != "POST":
            return
        query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        state = authenticate(catalog, match.group(1), _tokens(query, headers))
        if state is not None:
            _dead_letter(catalog, state, f"webhook body larger than {max_bytes} bytes", b"", headers)

    async def hook(scope: Any) -> None:
        await anyio.to_thread.run_sync(record, scope)

    return hook
