"""``GET /v1/dead-letters`` and ``POST /v1/dead-letters/{event_id}/retry``.

A dead letter is named by the change event behind it (its payload's event id,
read by ``ragsync.catalog.event_id_of_payload`` for every payload shape), or
by its row id when it has none (a backfill file).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from connectors.events import Event, parse_event
from control_plane.deps import CatalogDep, Tenant, path_id, view
from control_plane.errors import ERRORS, not_found
from ragsync.catalog import DeadLetterRow, event_of_payload
from ragsync.errors import InvalidEventError

_DEAD_LETTER_ROW = re.compile(r"^[0-9]{1,18}$")

router = APIRouter()


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


def _event_from_payload(payload: str) -> Event | None:
    """The validated change event behind a dead letter's payload, or None."""
    data = event_of_payload(payload)
    if data is None:
        return None
    try:
        return parse_event(data)
    except (ValueError, InvalidEventError, TypeError, OverflowError, RecursionError):
        return None


def _dead_letter_out(row: DeadLetterRow) -> DeadLetterOut:
    return view(DeadLetterOut, row, event_id=row.event_id or str(row.id), error=row.message)


@router.get("/v1/dead-letters", response_model=list[DeadLetterOut], tags=["dead letters"], responses=ERRORS)
def list_dead_letters(
    tenant_id: Tenant,
    catalog: CatalogDep,
    source_id: Annotated[str | None, Query(description="only this source's")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[DeadLetterOut]:
    """The caller's open dead letters, oldest first (404 for a source that is not the caller's)."""
    if source_id is not None:
        sid = path_id(source_id)
        if sid is None or catalog.get_source(sid, tenant_id=tenant_id) is None:
            raise not_found(f"source {source_id!r}")
    rows = catalog.list_dead_letters(tenant_id=tenant_id, source_id=source_id, limit=limit)
    return [_dead_letter_out(r) for r in rows]


@router.post(
    "/v1/dead-letters/{event_id:path}/retry",
    status_code=202,
    response_model=RetryOut,
    tags=["dead letters"],
    responses=ERRORS,
)
def retry_dead_letter(event_id: str, tenant_id: Tenant, catalog: CatalogDep) -> RetryOut:
    """Retry a dead letter of the caller's tenant (404 for others' and unknown ids).

    An event-backed dead letter (or a ``dead`` event) is put back in the
    event queue and its dead letters are resolved; a backfill file's dead
    letter (``event_id`` is its row id) is resolved and a retry request
    is recorded for the next backfill run.
    """
    eid = path_id(event_id)
    if eid is None:
        raise not_found(f"dead letter {event_id!r}")
    event = catalog.tenant_event(tenant_id, eid)
    letters = catalog.open_dead_letters_for_event(tenant_id, eid)
    if event is not None and (letters or event["state"] == "dead"):
        catalog.requeue_event(tenant_id, eid)
        catalog.resolve_dead_letters(tenant_id, [i for i, _ in letters])
        retry_id = catalog.record_retry(
            tenant_id, kind="event", state="requeued", event_id=eid, dead_letter_id=None
        )
        return RetryOut(event_id=eid, retry_id=retry_id, kind="event", state="requeued")
    if event is None and letters:
        # An event-backed dead letter whose event is not in the local queue
        # (say it arrived through Pub/Sub): queue it again from its payload.
        replay = _event_from_payload(letters[-1][1])
        if replay is not None and replay.source_id in catalog.owned_source_ids(tenant_id, [replay.source_id]):
            if not catalog.event_sources(tenant_id, [replay.event_id]):
                catalog.enqueue_events([dataclasses.replace(replay, tenant_id=tenant_id)])
            else:
                catalog.requeue_event(tenant_id, replay.event_id)
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
    raise not_found(f"dead letter {event_id!r}")
