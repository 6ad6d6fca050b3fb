"""``POST /internal/events``: connectors queue change events (one or a batch).

Each event is validated on its own by ``connectors.events.parse_event``, the
wire format's one schema (``connectors.events.EventIn``, whose limits are the
catalog's column widths: ``ragsync.model.EVENT_LIMITS``), which is also the
request body this endpoint publishes; bad events are listed with their index
(a single bad event is a 422), good ones are queued (idempotent on
``(tenant, event_id)``). See ``post_events`` for the tenant rules.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel

from connectors.events import Event, EventIn, check_content_uri, parse_event
from control_plane.deps import CatalogDep, Tenant
from control_plane.errors import ERRORS, ApiError, ErrorOut
from control_plane.limits import TenantBudget
from ragsync.catalog import Catalog
from ragsync.errors import InvalidEventError

MAX_EVENTS_PER_REQUEST = 1000
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

router = APIRouter()


class RejectedEvent(BaseModel):
    """An event that was not queued: its position in the request and why."""

    index: int
    error: str


class EventsOut(BaseModel):
    """Outcome of ``POST /internal/events``."""

    accepted: int
    duplicates: int
    rejected: list[RejectedEvent]


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


def _idempotent_event_id(tenant_id: str, key: str) -> str:
    digest = hashlib.blake2b(f"{tenant_id}\x1f{key}".encode(), digest_size=16).hexdigest()
    return "ik" + digest


def _differs(queued: Event, event: Event) -> bool:
    """True when two events with one id say different things: any field
    differs (``deny_groups`` included; the tenant is the caller's in both)."""
    return dataclasses.replace(queued, tenant_id=event.tenant_id) != event


def _conflicts(stored: dict[str, Any], event: Event) -> bool:
    """True when a queued event with the same id says something else (the
    same id reused for another change: refused, never dropped silently)."""
    try:
        queued = Event.from_json(str(stored.get("payload") or "{}"))
    except (ValueError, TypeError):
        return True
    return _differs(queued, event)


def spend_event_budget(request: Request, tenant_id: str, n: int) -> None:
    """Spend ``n`` events of the tenant's budget, or raise 429 with Retry-After
    (nothing is spent then, and nothing may be queued)."""
    wait = request.app.state.event_budget.take(tenant_id, n)
    if wait > 0:
        raise ApiError(
            429,
            f"event budget of this tenant spent: retry after {wait:.1f} s",
            headers={"Retry-After": TenantBudget.retry_after(wait)},
        )


def admit_events(
    catalog: Catalog,
    tenant_id: str,
    parsed: list[tuple[int, Event]],
    rejected: list[RejectedEvent],
    fields: dict[int, str],
) -> tuple[list[Event], list[int]]:
    """The events of ``tenant_id`` that may be queued, in order: each must name
    one of the tenant's sources, an upsert's ``content_uri`` must lie under its
    location, and an ``event_id`` already queued or used earlier in the batch
    must carry the same change. Refusals are appended to ``rejected`` (and the
    field to blame to ``fields``).

    Returns:
        (events to queue, indexes refused because their id was reused).
    """
    sources = {
        sid: catalog.sources.get_source(sid, tenant_id=tenant_id) for sid in {e.source_id for _, e in parsed}
    }
    known = catalog.queue.event_sources(tenant_id, (e.event_id for _, e in parsed))
    queue: list[Event] = []
    conflicts: list[int] = []
    in_batch: dict[str, Event] = {}
    for index, event in parsed:
        first = in_batch.setdefault(event.event_id, event)
        if first is not event and _differs(first, event):
            conflicts.append(index)
            rejected.append(
                RejectedEvent(
                    index=index,
                    error=f"event_id {event.event_id!r} is used by an earlier, different event of this batch",
                )
            )
            continue
        source = sources[event.source_id]
        if source is None:
            fields[index] = "source_id"
            rejected.append(RejectedEvent(index=index, error=f"unknown source {event.source_id!r}"))
            continue
        try:
            check_content_uri(event, source.uri)
        except InvalidEventError as exc:
            fields[index] = "content_uri"
            rejected.append(RejectedEvent(index=index, error=str(exc)))
            continue
        if event.event_id in known:
            stored = catalog.queue.tenant_event(tenant_id, event.event_id)
            if stored is not None and _conflicts(stored, event):
                conflicts.append(index)
                rejected.append(
                    RejectedEvent(
                        index=index, error=f"event_id {event.event_id!r} was used for another change"
                    )
                )
                continue
        queue.append(event)
    return queue, conflicts


@router.post(
    "/internal/events",
    status_code=202,
    response_model=EventsOut,
    tags=["events"],
    responses={
        **ERRORS,
        400: {"model": ErrorOut, "description": "bad Idempotency-Key"},
        409: {"model": ErrorOut, "description": "Idempotency-Key or event_id reused for another change"},
        429: {"model": ErrorOut, "description": "the tenant's event budget is spent; see Retry-After"},
    },
    openapi_extra=_event_openapi_body(),
)
def post_events(
    request: Request,
    tenant_id: Tenant,
    catalog: CatalogDep,
    payload: Annotated[Any, Depends(_json_body)],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> EventsOut:
    """Queue change events from connectors (at-least-once senders).

    The body is one event or ``{"events": [...]}`` (at most 1000). Each
    event is validated on its own: in a batch a bad one is listed in
    ``rejected`` with its index and reason and the others are queued; a
    single bad event is answered 422 naming the field. Queuing is idempotent
    on ``event_id`` within the caller's tenant (given, or derived from the
    content; for a single event an ``Idempotency-Key`` header stands in for a
    missing ``event_id``); the same id with a different change is a 409 (a
    batch lists it). Event ids, sources and their locations are the tenant's
    own: another tenant's source is answered exactly like an unknown one, and
    an upsert's ``content_uri`` must lie under its source's location (the
    answer is the same whether anything exists there). Each tenant has an
    event budget (429 with Retry-After when spent, nothing queued).
    """
    items, batch = _event_items(payload)
    spend_event_budget(request, tenant_id, len(items))
    if idempotency_key is not None:
        if batch:
            raise ApiError(400, "Idempotency-Key applies to single-event posts; give each event an event_id")
        if not _IDEMPOTENCY_KEY.match(idempotency_key):
            raise ApiError(400, "Idempotency-Key must be 1-255 visible ASCII characters")
        if isinstance(items[0], dict) and not items[0].get("event_id"):
            items[0] = {**items[0], "event_id": _idempotent_event_id(tenant_id, idempotency_key)}
    rejected: list[RejectedEvent] = []
    fields: dict[int, str] = {}
    parsed: list[tuple[int, Event]] = []
    for index, item in enumerate(items):
        try:
            event = parse_event(item)
            if event.tenant_id and event.tenant_id != tenant_id:
                fields[index] = "tenant_id"
                raise InvalidEventError("'tenant_id' must be the API key's tenant (or omitted)")
            parsed.append((index, dataclasses.replace(event, tenant_id=tenant_id)))
        except (InvalidEventError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            rejected.append(RejectedEvent(index=index, error=str(exc) or type(exc).__name__))
    queue, conflicts = admit_events(catalog, tenant_id, parsed, rejected, fields)
    if not batch and conflicts:
        raise ApiError(409, "this Idempotency-Key or event_id was already used for a different event")
    if not batch and rejected:
        field = fields.get(0, "body")
        raise ApiError(
            422,
            rejected[0].error,
            details=[{"loc": ["body", field], "msg": rejected[0].error, "type": "value_error"}],
        )
    accepted, duplicates = catalog.queue.enqueue_events(queue) if queue else (0, 0)
    rejected.sort(key=lambda r: r.index)
    return EventsOut(accepted=accepted, duplicates=duplicates, rejected=rejected)


class StaleEventOut(BaseModel):
    """An event the version gate dropped, with the reason naming both versions."""

    event_id: str
    source_id: str
    doc_id: str
    op: str
    source_version: str
    note: str


class StaleEventsOut(BaseModel):
    """How many of the caller's events were stale, and the newest of them."""

    count: int
    recent: list[StaleEventOut]


@router.get("/v1/events/stale", response_model=StaleEventsOut, tags=["events"], responses=ERRORS)
def stale_events(tenant_id: Tenant, catalog: CatalogDep, limit: int = 20) -> StaleEventsOut:
    """Events of the caller's tenant dropped as older than what a document
    holds (each logged, counted and kept with both versions)."""
    found = catalog.queue_views.stale_events(tenant_id=tenant_id, limit=max(1, min(limit, 200)))
    return StaleEventsOut(
        count=found["count"],
        recent=[StaleEventOut(**{k: str(r[k]) for k in StaleEventOut.model_fields}) for r in found["recent"]],
    )
