"""``POST /v1/backfills`` and ``GET /v1/backfills/{backfill_id}``: re-parsing
and re-chunking backfills of the caller's documents.

A ``parser`` or ``chunker`` request is run by the control plane's worker
(``ragsync reindex``, ``beam_pipelines.reindex``): the caller's indexed
documents whose live version another parser or chunker made are parsed or
chunked again from their stored raw copies or elements (nothing is fetched
from the source), each written through the index writer and flipped on its
own, so queries see the old version or the new one; nothing of another tenant
is read or written. ``total`` counts the caller's indexed documents, ``done``
those at the current parser or chunker, ``failed`` those left behind;
``error`` says why a request failed or left documents behind.
``target_index`` is kept as the caller's label: the documents are written in
the live index (an index version is every tenant's).

Re-embedding (reason ``embedding_model``) is the operator's, not a tenant's:
an index version (``ragsync.index.versions``) is one collection holding every
tenant's chunks behind one alias, and its flip moves every tenant's queries to
the new model at once. A tenant-scoped version cannot exist without a second
alias per tenant and per-tenant query routing, so the API answers ``403`` and
the operator runs ``ragsync reembed`` (or queues an operator backfill).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from control_plane.deps import CatalogDep, Tenant, path_id, view
from control_plane.errors import ERRORS, ApiError, not_found
from ragsync.catalog import ID_PATTERN, BackfillRow

router = APIRouter()

OPERATOR_ONLY = (
    "an embedding_model backfill builds a new index version shared by every tenant; "
    "ask the operator (`ragsync reembed --model TARGET_INDEX`)"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    error: str | None = Field(description="why it failed or left documents behind; null while nothing did")


def _backfill_out(row: BackfillRow) -> BackfillOut:
    return view(BackfillOut, row, eta_s=row.eta_s())


@router.post(
    "/v1/backfills", status_code=201, response_model=BackfillOut, tags=["backfills"], responses=ERRORS
)
def create_backfill(body: BackfillIn, tenant_id: Tenant, catalog: CatalogDep) -> BackfillOut:
    """Request a re-parsing/re-chunking backfill of the caller's documents
    (the module's docstring says what it does; ``target_index`` is a label);
    ``embedding_model`` is refused (``403``): re-embedding builds an index
    version every tenant shares, so only the operator starts it."""
    if body.reason == "embedding_model":
        raise ApiError(403, OPERATOR_ONLY)
    row = catalog.backfills.create_backfill(
        reason=body.reason,
        target_index=body.target_index,
        max_docs_per_s=body.max_docs_per_s,
        tenant_id=tenant_id,
    )
    return _backfill_out(row)


@router.get("/v1/backfills/{backfill_id}", response_model=BackfillOut, tags=["backfills"], responses=ERRORS)
def get_backfill(backfill_id: str, tenant_id: Tenant, catalog: CatalogDep) -> BackfillOut:
    """A backfill's progress; ``eta_s`` from the rate so far, null when unknown."""
    bid = path_id(backfill_id)
    row = catalog.backfills.get_backfill(bid, tenant_id=tenant_id) if bid else None
    if row is None:
        raise not_found(f"backfill {backfill_id!r}")
    return _backfill_out(row)
