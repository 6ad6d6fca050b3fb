"""``GET /v1/docs/{doc_id}/status``: where one of the caller's documents stands."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from control_plane.deps import CatalogDep, Tenant, path_id
from control_plane.errors import ERRORS, not_found

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
    status = catalog.document_status(tenant_id, did, source_id=sid)
    if status is None:
        raise not_found(f"document {doc_id!r}")
    error = (
        DocError(error_class=status.error_class, message=status.error_message) if status.error_class else None
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
