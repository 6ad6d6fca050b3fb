"""The control-plane HTTP API (FastAPI) over the catalog.

``create_app(catalog_url)`` opens the catalog (applying migrations) and
returns the app. Endpoints (JSON in and out; OpenAPI at ``/openapi.json``,
Swagger UI at ``/docs``)::

    POST /v1/sources                         -> 201 source
    POST /v1/sources/{source_id}/sync        -> 202 sync request
    POST /internal/events                    -> 202 {accepted, duplicates, rejected}
    GET  /v1/docs/{doc_id}/status[?source_id=]
    POST /v1/backfills                       -> 201 backfill
    GET  /v1/backfills/{backfill_id}
    GET  /v1/dead-letters[?source_id=&limit=]
    POST /v1/dead-letters/{event_id}/retry   -> 202
    GET  /healthz                            (no authentication)

Security: every ``/v1`` and ``/internal`` request needs ``Authorization:
Bearer <key>`` or ``X-API-Key: <key>`` (see :mod:`control_plane.keys`);
the key decides the tenant. Another tenant's ids answer 404 exactly like
unknown ids. ``/healthz`` and the OpenAPI document and UI are public: they
hold no tenant data.

Errors: every 4xx/5xx body is ``{"error": {"code", "message", "details"}}``.
Bodies over ``max_body_bytes`` (by ``Content-Length`` or while streaming) are
refused with 413 before anything parses them. Request bodies are validated by
pydantic models (422 with one entry per problem in ``details``; the rejected
input is never echoed, so a credentials reference cannot leak back).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from connectors.events import Event, parse_event
from control_plane.keys import ApiKeys
from ragsync.catalog import ID_PATTERN, Catalog, ConflictError, DeadLetterRow, event_of_payload, new_id
from ragsync.errors import InvalidEventError

log = logging.getLogger(__name__)

MAX_EVENTS_PER_REQUEST = 1000
# Column widths of the events table (ids are VARCHAR(255) on PostgreSQL).
_MAX_EVENT_ID_FIELD = 255
_MAX_PATH_ID = 1024
_CREDENTIALS_REF = r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$"
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
_DEAD_LETTER_ROW = re.compile(r"^[0-9]{1,18}$")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    500: "internal_error",
    503: "unavailable",
}


# ------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An error answered in the common error shape.

    Attributes:
        status: HTTP status code.
        code: stable machine-readable code.
        message: human-readable message.
        details: extra entries (field errors).
        headers: response headers (``WWW-Authenticate`` for 401).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _STATUS_CODES.get(status, "error")
        self.message = message
        self.details = details or []
        self.headers = headers


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one error shape: ``{"error": {"code", "message", "details"}}``."""
    return {"error": {"code": code, "message": message, "details": details or []}}


def _error_response(
    status: int, code: str, message: str, details: list[dict[str, Any]] | None = None, **kw: Any
) -> JSONResponse:
    return JSONResponse(error_body(code, message, details), status_code=status, **kw)


def _not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


# ----------------------------------------------------------------- body size limit


class BodySizeLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413 before the app sees them.

    A ``Content-Length`` above the limit is refused without reading; otherwise
    the body is buffered (at most ``max_bytes``) and replayed to the app, so a
    chunked body that grows past the limit is refused too.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        """Wrap ``app``; ``max_bytes`` must be positive."""
        if max_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send: Send) -> None:
        body = json.dumps(
            error_body("payload_too_large", f"request body is larger than {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._too_large(send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# ------------------------------------------------------------------------- models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceIn(_Model):
    """``POST /v1/sources`` body."""

    type: Literal["drive", "wiki", "tickets", "object_store"]
    credentials_ref: str = Field(
        min_length=4,
        max_length=2048,
        pattern=_CREDENTIALS_REF,
        description="reference to a secret, e.g. secretmanager://projects/p/secrets/s; never returned",
    )
    sync: Literal["webhook", "poll"]
    poll_interval_s: int | None = Field(
        default=None, ge=60, le=86_400, description="seconds between polls; sync=poll only (default 300)"
    )
    source_id: str | None = Field(default=None, pattern=ID_PATTERN, description="default: a new random id")
    tenant_id: str | None = Field(default=None, description="optional; must be the API key's tenant")

    @field_validator("credentials_ref")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("must be a printable URI such as secretmanager://...")
        return value

    @model_validator(mode="after")
    def _poll_interval(self) -> SourceIn:
        if self.sync == "webhook" and self.poll_interval_s is not None:
            raise ValueError("poll_interval_s applies only to sync=poll")
        return self


class SourceOut(BaseModel):
    """A registered source (the credentials reference is never included)."""

    source_id: str
    tenant_id: str
    type: str
    sync: str | None
    poll_interval_s: int | None
    credentials_ref_set: bool


class SyncIn(_Model):
    """``POST /v1/sources/{source_id}/sync`` body."""

    mode: Literal["incremental", "full"]


class SyncOut(BaseModel):
    """A recorded sync request."""

    sync_id: str
    source_id: str
    mode: str
    state: str


class EventIn(_Model):
    """One change event (documentation of the wire format; validated by ``connectors.events``)."""

    source_id: str = Field(min_length=1, max_length=_MAX_EVENT_ID_FIELD)
    doc_id: str = Field(min_length=1, max_length=_MAX_EVENT_ID_FIELD, description="the source's object id")
    op: Literal["upsert", "delete", "acl"]
    source_version: str | int
    acl_groups: list[str] = Field(default_factory=list, max_length=256)
    content_uri: str | None = Field(default=None, description="required for upsert")
    event_time: str | float = Field(description="ISO 8601 or epoch seconds")
    event_id: str | None = Field(default=None, max_length=_MAX_EVENT_ID_FIELD)


class EventBatchIn(_Model):
    """Several events in one request."""

    events: list[EventIn] = Field(max_length=MAX_EVENTS_PER_REQUEST)


class RejectedEvent(BaseModel):
    """An event that was not queued: its position in the request and why."""

    index: int
    error: str


class EventsOut(BaseModel):
    """Outcome of ``POST /internal/events``."""

    accepted: int
    duplicates: int
    rejected: list[RejectedEvent]


class DocError(BaseModel):
    """Why a document is not indexed."""

    error_class: str
    message: str | None


class DocStatusOut(BaseModel):
    """Where a document stands."""

    doc_id: str
    source_id: str
    source_object_id: str
    stage: str
    source_version: str | None
    indexed_version: str | None
    chunks: int
    indexed_at: float | None
    error: DocError | None


class BackfillIn(_Model):
    """``POST /v1/backfills`` body."""

    reason: Literal["embedding_model", "parser", "chunker"]
    target_index: str = Field(pattern=ID_PATTERN, description="the new index version, e.g. chunks_v2")
    max_docs_per_s: float = Field(gt=0, le=1_000_000, allow_inf_nan=False)


class BackfillOut(BaseModel):
    """A backfill and its progress."""

    backfill_id: str
    reason: str
    target_index: str
    max_docs_per_s: float | None
    state: str
    total: int
    done: int
    failed: int
    eta_s: float | None
    created_at: float


class DeadLetterOut(BaseModel):
    """An open dead letter of the caller's tenant."""

    event_id: str = Field(description="the event id, or the dead letter's row id for backfill files")
    doc_id: str
    source_id: str
    stage: str
    error: str
    error_class: str
    attempts: int
    created_at: float


class RetryOut(BaseModel):
    """A recorded dead-letter retry."""

    event_id: str
    retry_id: str
    kind: Literal["event", "file"]
    state: Literal["requeued", "requested"]


class HealthOut(BaseModel):
    """Liveness and catalog reachability."""

    status: str


class ErrorDetail(BaseModel):
    """Error body content."""

    code: str
    message: str
    details: list[dict[str, Any]]


class ErrorOut(BaseModel):
    """The one error shape of every 4xx/5xx answer."""

    error: ErrorDetail


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": name}
    for code, name in ((401, "unauthorized"), (404, "not found"), (413, "body too large"), (422, "invalid"))
}


def _event_openapi_body() -> dict[str, Any]:
    event = EventIn.model_json_schema()
    batch = {
        "type": "object",
        "properties": {"events": {"type": "array", "items": event, "maxItems": MAX_EVENTS_PER_REQUEST}},
        "required": ["events"],
        "additionalProperties": False,
    }
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"oneOf": [event, batch]}}},
        }
    }


# ------------------------------------------------------------------ authentication

_bearer_scheme = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_header_scheme = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <API key>")


def _tenant(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    api_key: Annotated[str | None, Depends(_header_scheme)],
) -> str:
    """The caller's tenant, from its API key (Bearer or X-API-Key); 401 otherwise."""
    key = bearer.credentials if bearer is not None else api_key
    if not key:
        raise ApiError(
            401, "missing API key: send Authorization: Bearer <key>", headers={"WWW-Authenticate": "Bearer"}
        )
    keys: ApiKeys = request.app.state.keys
    tenant_id = keys.authenticate(key)
    if tenant_id is None:
        raise ApiError(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return tenant_id


Tenant = Annotated[str, Depends(_tenant)]


# ------------------------------------------------------------------------ the app


def _path_id(value: str) -> str | None:
    """A path or query id that can be looked up, or None (answered as 404)."""
    if not value or len(value) > _MAX_PATH_ID or not value.isprintable():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _idempotent_event_id(tenant_id: str, key: str) -> str:
    digest = hashlib.blake2b(f"{tenant_id}\x1f{key}".encode(), digest_size=16).hexdigest()
    return "ik" + digest


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    # Never echo the input: it may be a credentials reference.
    return [
        {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "")), "type": err.get("type")}
        for err in exc.errors()
    ]


def create_app(catalog_url: str, *, max_body_bytes: int = 1_000_000, pepper: str | None = None) -> FastAPI:
    """Build the control-plane app over a catalog database.

    Args:
        catalog_url: catalog URL or SQLite path; the catalog is opened (and
            migrated) now and closed when the app shuts down.
        max_body_bytes: largest accepted request body; larger ones get 413.
        pepper: API-key pepper; default ``$RAGSYNC_API_KEY_PEPPER`` or the
            built-in constant (must match the one keys were created with).

    Returns:
        The FastAPI app; ``app.state.catalog`` and ``app.state.keys`` are
        the open :class:`~ragsync.catalog.Catalog` and its
        :class:`~control_plane.keys.ApiKeys`.

    Raises:
        ValueError: ``max_body_bytes`` is not positive.
        sqlalchemy.exc.SQLAlchemyError: the catalog cannot be opened or migrated.
    """
    if max_body_bytes <= 0:
        raise ValueError("max_body_bytes must be positive")
    catalog = Catalog.open(catalog_url)
    keys = ApiKeys(catalog, pepper=pepper)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        catalog.close()

    app = FastAPI(
        title="ragsync control plane",
        version="1",
        description=(__doc__ or "").split("\n\n")[0],
        lifespan=lifespan,
    )
    app.state.catalog = catalog
    app.state.keys = keys
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_body_bytes)

    # -- errors --------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.code, exc.message, exc.details, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return _error_response(422, "validation_error", f"{where}: {first['msg']}", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return _error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the control plane", exc_info=exc)
        return _error_response(500, "internal_error", "internal error")

    # -- endpoints -----------------------------------------------------------------

    @app.get("/healthz", response_model=HealthOut, tags=["ops"], responses={503: {"model": ErrorOut}})
    def healthz() -> Any:
        """Liveness: 200 ``{"status": "ok"}`` when the catalog answers, else 503."""
        try:
            catalog.ping()
        except Exception:
            log.exception("catalog unreachable")
            return _error_response(503, "unavailable", "catalog unreachable")
        return HealthOut(status="ok")

    @app.post(
        "/v1/sources",
        status_code=201,
        response_model=SourceOut,
        tags=["sources"],
        responses={**_ERRORS, 409: {"model": ErrorOut, "description": "source_id taken"}},
    )
    def create_source(body: SourceIn, tenant_id: Tenant) -> SourceOut:
        """Register a source of the caller's tenant. 409 when ``source_id`` is taken (by anyone)."""
        if body.tenant_id is not None and body.tenant_id != tenant_id:
            raise ApiError(
                422,
                "tenant_id: must be the API key's tenant (or omitted)",
                details=[
                    {"loc": ["body", "tenant_id"], "msg": "not the API key's tenant", "type": "value_error"}
                ],
            )
        interval = body.poll_interval_s if body.sync == "poll" else None
        if body.sync == "poll" and interval is None:
            interval = 300
        try:
            row = catalog.create_source(
                tenant_id,
                source_id=body.source_id or new_id("src"),
                type=body.type,
                credentials_ref=body.credentials_ref,
                sync=body.sync,
                poll_interval_s=interval,
            )
        except ConflictError as exc:
            raise ApiError(409, str(exc)) from exc
        return SourceOut(
            source_id=row.source_id,
            tenant_id=row.tenant_id,
            type=row.type,
            sync=row.sync,
            poll_interval_s=row.poll_interval_s,
            credentials_ref_set=row.credentials_ref_set,
        )

    @app.post(
        "/v1/sources/{source_id}/sync",
        status_code=202,
        response_model=SyncOut,
        tags=["sources"],
        responses=_ERRORS,
    )
    def request_sync(source_id: str, body: SyncIn, tenant_id: Tenant) -> SyncOut:
        """Record a sync request for one of the caller's sources (404 for others')."""
        sid = _path_id(source_id)
        req = catalog.create_sync_request(tenant_id, sid, body.mode) if sid else None
        if req is None:
            raise _not_found(f"source {source_id!r}")
        return SyncOut(sync_id=req.sync_id, source_id=req.source_id, mode=req.mode, state=req.state)

    @app.post(
        "/internal/events",
        status_code=202,
        response_model=EventsOut,
        tags=["events"],
        responses={**_ERRORS, 400: {"model": ErrorOut, "description": "bad Idempotency-Key"}},
        openapi_extra=_event_openapi_body(),
    )
    def post_events(
        tenant_id: Tenant,
        payload: Annotated[Any, Depends(_json_body)],
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> EventsOut:
        """Queue change events from connectors (at-least-once senders).

        The body is one event or ``{"events": [...]}`` (at most 1000). Each
        event is validated on its own: a bad one is listed in ``rejected``
        with its index and reason, the others are queued. Queuing is
        idempotent on ``event_id`` (given, or derived from the content); for
        a single event, an ``Idempotency-Key`` header stands in for a missing
        ``event_id``. Events for sources that are unknown or another tenant's
        are rejected with the same reason.
        """
        items, batch = _event_items(payload)
        if idempotency_key is not None:
            if batch:
                raise ApiError(
                    400, "Idempotency-Key applies to single-event posts; give each event an event_id"
                )
            if not _IDEMPOTENCY_KEY.match(idempotency_key):
                raise ApiError(400, "Idempotency-Key must be 1-255 visible ASCII characters")
            if isinstance(items[0], dict) and not items[0].get("event_id"):
                items[0] = {**items[0], "event_id": _idempotent_event_id(tenant_id, idempotency_key)}
        rejected: list[RejectedEvent] = []
        parsed: list[tuple[int, Event]] = []
        for index, item in enumerate(items):
            try:
                event = parse_event(item)
                _check_event_limits(event)
            except (InvalidEventError, ValueError, TypeError, OverflowError, RecursionError) as exc:
                rejected.append(RejectedEvent(index=index, error=str(exc) or type(exc).__name__))
                continue
            parsed.append((index, event))
        owned = catalog.owned_source_ids(tenant_id, {e.source_id for _, e in parsed})
        known = catalog.event_sources(e.event_id for _, e in parsed if e.source_id in owned)
        queue: list[Event] = []
        for index, event in parsed:
            if event.source_id not in owned:
                rejected.append(RejectedEvent(index=index, error=f"unknown source {event.source_id!r}"))
                continue
            if known.setdefault(event.event_id, event.source_id) != event.source_id:
                rejected.append(
                    RejectedEvent(index=index, error=f"event_id {event.event_id!r} is used by another source")
                )
                continue
            queue.append(event)
        accepted, duplicates = catalog.enqueue_events(queue) if queue else (0, 0)
        rejected.sort(key=lambda r: r.index)
        return EventsOut(accepted=accepted, duplicates=duplicates, rejected=rejected)

    @app.get(
        "/v1/docs/{doc_id:path}/status",
        response_model=DocStatusOut,
        tags=["documents"],
        responses=_ERRORS,
    )
    def doc_status(
        doc_id: str,
        tenant_id: Tenant,
        source_id: Annotated[
            str | None,
            Query(description="with it, doc_id is the source's object id; without, the internal id"),
        ] = None,
    ) -> DocStatusOut:
        """A document's stage, versions, chunk count and last error (404 for others' documents)."""
        did = _path_id(doc_id)
        sid = _path_id(source_id) if source_id is not None else None
        if did is None or (source_id is not None and sid is None):
            raise _not_found(f"document {doc_id!r}")
        status = catalog.document_status(tenant_id, did, source_id=sid)
        if status is None:
            raise _not_found(f"document {doc_id!r}")
        error = (
            DocError(error_class=status.error_class, message=status.error_message)
            if status.error_class
            else None
        )
        return DocStatusOut(
            doc_id=status.doc_id,
            source_id=status.source_id,
            source_object_id=status.source_object_id,
            stage=status.stage,
            source_version=status.source_version,
            indexed_version=status.indexed_version,
            chunks=status.chunks,
            indexed_at=status.indexed_at,
            error=error,
        )

    def _backfill_out(row: Any) -> BackfillOut:
        return BackfillOut(
            backfill_id=row.backfill_id,
            reason=row.reason,
            target_index=row.target_index,
            max_docs_per_s=row.max_docs_per_s,
            state=row.state,
            total=row.total,
            done=row.done,
            failed=row.failed,
            eta_s=row.eta_s(),
            created_at=row.created_at,
        )

    @app.post(
        "/v1/backfills", status_code=201, response_model=BackfillOut, tags=["backfills"], responses=_ERRORS
    )
    def create_backfill(body: BackfillIn, tenant_id: Tenant) -> BackfillOut:
        """Request a re-embedding/re-parsing backfill of the caller's documents into ``target_index``."""
        row = catalog.create_backfill(
            reason=body.reason,
            target_index=body.target_index,
            max_docs_per_s=body.max_docs_per_s,
            tenant_id=tenant_id,
        )
        return _backfill_out(row)

    @app.get("/v1/backfills/{backfill_id}", response_model=BackfillOut, tags=["backfills"], responses=_ERRORS)
    def get_backfill(backfill_id: str, tenant_id: Tenant) -> BackfillOut:
        """A backfill's progress; ``eta_s`` from the rate so far, null when unknown."""
        bid = _path_id(backfill_id)
        row = catalog.get_backfill(bid, tenant_id=tenant_id) if bid else None
        if row is None:
            raise _not_found(f"backfill {backfill_id!r}")
        return _backfill_out(row)

    def _dead_letter_out(row: DeadLetterRow) -> DeadLetterOut:
        return DeadLetterOut(
            event_id=row.event_id or str(row.id),
            doc_id=row.doc_id,
            source_id=row.source_id,
            stage=row.stage,
            error=row.message,
            error_class=row.error_class,
            attempts=row.attempts,
            created_at=row.created_at,
        )

    @app.get("/v1/dead-letters", response_model=list[DeadLetterOut], tags=["dead letters"], responses=_ERRORS)
    def list_dead_letters(
        tenant_id: Tenant,
        source_id: Annotated[str | None, Query(description="only this source's")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[DeadLetterOut]:
        """The caller's open dead letters, oldest first (404 for a source that is not the caller's)."""
        if source_id is not None:
            sid = _path_id(source_id)
            if sid is None or catalog.get_source(sid, tenant_id=tenant_id) is None:
                raise _not_found(f"source {source_id!r}")
        rows = catalog.list_dead_letters(tenant_id=tenant_id, source_id=source_id, limit=limit)
        return [_dead_letter_out(r) for r in rows]

    @app.post(
        "/v1/dead-letters/{event_id:path}/retry",
        status_code=202,
        response_model=RetryOut,
        tags=["dead letters"],
        responses=_ERRORS,
    )
    def retry_dead_letter(event_id: str, tenant_id: Tenant) -> RetryOut:
        """Retry a dead letter of the caller's tenant (404 for others' and unknown ids).

        An event-backed dead letter (or a ``dead`` event) is put back in the
        event queue and its dead letters are resolved; a backfill file's dead
        letter (``event_id`` is its row id) is resolved and a retry request
        is recorded for the next backfill run.
        """
        eid = _path_id(event_id)
        if eid is None:
            raise _not_found(f"dead letter {event_id!r}")
        event = catalog.tenant_event(tenant_id, eid)
        letters = catalog.open_dead_letters_for_event(tenant_id, eid)
        if event is not None and (letters or event["state"] == "dead"):
            catalog.requeue_event(eid)
            catalog.resolve_dead_letters(tenant_id, [i for i, _ in letters])
            retry_id = catalog.record_retry(
                tenant_id, kind="event", state="requeued", event_id=eid, dead_letter_id=None
            )
            return RetryOut(event_id=eid, retry_id=retry_id, kind="event", state="requeued")
        if event is None and letters:
            # An event-backed dead letter whose event is not in the local queue
            # (say it arrived through Pub/Sub): queue it again from its payload.
            replay = _event_from_payload(letters[-1][1])
            if replay is not None and replay.source_id in catalog.owned_source_ids(
                tenant_id, [replay.source_id]
            ):
                if not catalog.event_sources([replay.event_id]):
                    catalog.enqueue_events([replay])
                else:
                    catalog.requeue_event(replay.event_id)
                catalog.resolve_dead_letters(tenant_id, [i for i, _ in letters])
                retry_id = catalog.record_retry(
                    tenant_id, kind="event", state="requeued", event_id=eid, dead_letter_id=letters[-1][0]
                )
                return RetryOut(event_id=eid, retry_id=retry_id, kind="event", state="requeued")
        if _DEAD_LETTER_ROW.match(eid) and catalog.open_file_dead_letter(tenant_id, int(eid)):
            catalog.resolve_dead_letters(tenant_id, [int(eid)])
            retry_id = catalog.record_retry(
                tenant_id, kind="file", state="requested", event_id=None, dead_letter_id=int(eid)
            )
            return RetryOut(event_id=eid, retry_id=retry_id, kind="file", state="requested")
        raise _not_found(f"dead letter {event_id!r}")

    return app


async def _json_body(request: Request) -> Any:
    """The request body decoded as JSON; 422 in the common shape when it is not JSON."""
    raw = await request.body()
    if not raw:
        raise ApiError(
            422, 'body: a JSON event or {"events": [...]} is required', details=[{"loc": ["body"]}]
        )
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(422, f"body is not valid JSON: {exc}", details=[{"loc": ["body"]}]) from exc


def _event_items(payload: Any) -> tuple[list[Any], bool]:
    """Split a body into event items; returns (items, is_batch). Raises ApiError 422."""
    if isinstance(payload, dict) and "events" in payload:
        extra = sorted(set(payload) - {"events"})
        if extra:
            raise ApiError(422, f"unknown fields beside 'events': {', '.join(map(str, extra))}")
        items = payload["events"]
        if not isinstance(items, list):
            raise ApiError(422, "'events' must be a list of events")
        if len(items) > MAX_EVENTS_PER_REQUEST:
            raise ApiError(422, f"at most {MAX_EVENTS_PER_REQUEST} events per request, got {len(items)}")
        return list(items), True
    if isinstance(payload, dict):
        return [payload], False
    raise ApiError(422, 'the body must be one event object or {"events": [...]}')


def _check_event_limits(event: Event) -> None:
    """Refuse what the catalog cannot store: over-long ids, text that is not valid UTF-8."""
    for name in ("event_id", "source_id", "doc_id"):
        if len(getattr(event, name)) > _MAX_EVENT_ID_FIELD:
            raise InvalidEventError(f"'{name}' is longer than {_MAX_EVENT_ID_FIELD} characters")
    try:
        event.to_json().encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError("the event contains text that is not valid Unicode") from exc


def _event_from_payload(payload: str) -> Event | None:
    """The validated change event behind a dead letter's payload, or None."""
    data = event_of_payload(payload)
    if data is None:
        return None
    try:
        return parse_event(data)
    except (ValueError, InvalidEventError, TypeError, OverflowError, RecursionError):
        return None
