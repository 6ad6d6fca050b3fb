"""``GET /v1/dead-letters`` and ``POST /v1/dead-letters/{event_id}/retry``.

A dead letter is named by its one identity, ``DeadLetterRow.key``: the change
event behind it (its payload's event id, read by
``ragsync.catalog.event_id_of_payload`` for every payload shape), or its row
id when it has none (a backfill file). ``ragsync dead-letters`` uses the same
identity, and both re-drive through ``Catalog.redrive_dead_letter``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from connectors.events import event_or_none
from control_plane.deps import CatalogDep, Tenant, path_id, view
from control_plane.errors import ACCEPTED, ERRORS, not_found
from ragsync.catalog import DeadLetterRow

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


def _dead_letter_out(row: DeadLetterRow) -> DeadLetterOut:
    return view(DeadLetterOut, row, event_id=row.key, error=row.message)


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
        if sid is None or catalog.sources.get_source(sid, tenant_id=tenant_id) is None:
            raise not_found(f"source {source_id!r}")
    rows = catalog.dead_letters.list_dead_letters(tenant_id=tenant_id, source_id=source_id, limit=limit)
    return [_dead_letter_out(r) for r in rows]


@router.post(
    "/v1/dead-letters/{event_id:path}/retry", response_model=RetryOut, tags=["dead letters"], **ACCEPTED
)
def retry_dead_letter(event_id: str, tenant_id: Tenant, catalog: CatalogDep) -> RetryOut:
    """Retry a dead letter of the caller's tenant (404 for others' and unknown ids).

    An event-backed dead letter (or a ``dead`` event) is put back in the
    event queue and its dead letters are resolved; a backfill file's dead
    letter (``event_id`` is its row id) is resolved and a retry request
    is recorded for the next backfill run.
    """
    eid = path_id(event_id)
    done = (
        catalog.dead_letters.redrive_dead_letter(eid, parse=event_or_none, tenant_id=tenant_id) if eid else []
    )
    if not done:
        raise not_found(f"dead letter {event_id!r}")
    r = done[0]
    return RetryOut(event_id=r.key, retry_id=r.retry_id, kind=r.kind, state=r.state)  # type: ignore[arg-type]
