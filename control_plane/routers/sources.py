"""``POST /v1/sources`` and ``POST /v1/sources/{source_id}/sync``."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from control_plane.deps import CatalogDep, Tenant, path_id, view
from control_plane.errors import ERRORS, ApiError, ErrorOut, not_found
from ragsync.catalog import ID_PATTERN, ConflictError, new_id

_CREDENTIALS_REF = r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$"

router = APIRouter()


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


@router.post(
    "/v1/sources",
    status_code=201,
    response_model=SourceOut,
    tags=["sources"],
    responses={**ERRORS, 409: {"model": ErrorOut, "description": "source_id taken"}},
)
def create_source(body: SourceIn, tenant_id: Tenant, catalog: CatalogDep) -> SourceOut:
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
    return view(SourceOut, row)


@router.post(
    "/v1/sources/{source_id}/sync",
    status_code=202,
    response_model=SyncOut,
    tags=["sources"],
    responses=ERRORS,
)
def request_sync(source_id: str, body: SyncIn, tenant_id: Tenant, catalog: CatalogDep) -> SyncOut:
    """Record a sync request for one of the caller's sources (404 for others')."""
    sid = path_id(source_id)
    req = catalog.request_sync(tenant_id, sid, body.mode) if sid else None
    if req is None:
        raise not_found(f"source {source_id!r}")
    return view(SyncOut, req)
