"""``POST /internal/events``: connectors queue change events (one or a batch).

Each event is validated on its own by ``connectors.events.parse_event``, the
wire format's one schema (``connectors.events.EventIn``, whose limits are the
catalog's column widths: ``ragsync.model.EVENT_LIMITS``), which is also the
request body this endpoint publishes; bad events are listed with their index,
good ones are queued (idempotent on ``event_id``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel

from connectors.events import Event, EventIn, parse_event
from control_plane.deps import CatalogDep, Tenant
from control_plane.errors import ERRORS, ApiError, ErrorOut
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


@router.post(
    "/internal/events",
    status_code=202,
    response_model=EventsOut,
    tags=["events"],
    responses={**ERRORS, 400: {"model": ErrorOut, "description": "bad Idempotency-Key"}},
    openapi_extra=_event_openapi_body(),
)
def post_events(
    tenant_id: Tenant,
    catalog: CatalogDep,
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
            raise ApiError(400, "Idempotency-Key applies to single-event posts; give each event an event_id")
        if not _IDEMPOTENCY_KEY.match(idempotency_key):
            raise ApiError(400, "Idempotency-Key must be 1-255 visible ASCII characters")
        if isinstance(items[0], dict) and not items[0].get("event_id"):
            items[0] = {**items[0], "event_id": _idempotent_event_id(tenant_id, idempotency_key)}
    rejected: list[RejectedEvent] = []
    parsed: list[tuple[int, Event]] = []
    for index, item in enumerate(items):
        try:
            event = parse_event(item)
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
