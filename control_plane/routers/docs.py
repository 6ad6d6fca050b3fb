"""``GET /v1/docs/{doc_id}/status``: where one of the caller's documents stands."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from control_plane.deps import CatalogDep, Tenant, path_id, view
from control_plane.errors import ERRORS, not_found
from ragsync import ids
from ragsync.catalog import Catalog

router = APIRouter()


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


@router.get(
    "/v1/docs/{doc_id:path}/status",
    response_model=DocStatusOut,
    tags=["documents"],
    responses=ERRORS,
)
def doc_status(
    doc_id: str,
    tenant_id: Tenant,
    catalog: CatalogDep,
    source_id: Annotated[
        str | None,
        Query(description="with it, doc_id is the source's object id; without, the internal id"),
    ] = None,
) -> DocStatusOut:
    """A document's stage, versions, chunk count and last error (404 for others' documents)."""
    did = path_id(doc_id)
    sid = path_id(source_id) if source_id is not None else None
    if did is None or (source_id is not None and sid is None):
        raise not_found(f"document {doc_id!r}")
    status = _status(catalog, tenant_id, did, sid)
    if status is None:
        raise not_found(f"document {doc_id!r}")
    return status


def _status(catalog: Catalog, tenant_id: str, doc_id: str, source_id: str | None) -> DocStatusOut | None:
    """Where one of the tenant's documents stands.

    Args:
        catalog: the catalog.
        tenant_id: caller's tenant.
        doc_id: with ``source_id``, the source's object id; without, the
            internal document id.
        source_id: the tenant's source, or None.

    Returns:
        The status; None when the source or document is unknown or another
        tenant's. A document the pipeline has not written yet but with a
        queued event gets stage ``queued`` (or the event's state).
    """
    if source_id is not None and catalog.sources.get_source(source_id, tenant_id=tenant_id) is None:
        return None
    internal = ids.doc_id(tenant_id, source_id, doc_id) if source_id is not None else doc_id
    row = catalog.documents.get_document(internal, tenant_id=tenant_id)
    if row is not None:
        message = (
            catalog.dead_letters.last_dead_letter_message(internal, tenant_id=tenant_id)
            if row.error_class
            else None
        )
        error = DocError(error_class=row.error_class, message=message) if row.error_class else None
        return view(DocStatusOut, row, stage=row.status, chunks=row.chunk_count, error=error)
    event = catalog.queue_views.latest_event(tenant_id, source_id, doc_id) if source_id is not None else None
    if event is None or source_id is None:
        return None
    return DocStatusOut(
        doc_id=internal,
        source_id=source_id,
        source_object_id=doc_id,
        stage="queued" if event["state"] == "pending" else str(event["state"]),
        source_version=event["source_version"],
        indexed_version=None,
        chunks=0,
        indexed_at=None,
        error=None,
    )
