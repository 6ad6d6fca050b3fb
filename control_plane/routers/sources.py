"""Sources and their syncs::

    POST /v1/sources                               -> 201 source
    GET  /v1/sources                               -> the caller's sources
    GET  /v1/sources/{source_id}                   -> one source, paused or not and why
    GET  /v1/sources/{source_id}/status            -> coverage (target 99.5%) and why the rest is not indexed
    POST /v1/sources/{source_id}/resume            -> the source, resumed
    POST /v1/sources/{source_id}/sync              -> 202 sync run (queued)
    GET  /v1/sources/{source_id}/sync/{sync_id}    -> queued | running | succeeded | failed,
                                                      with counts or the error

A sync request is run by the worker that ``ragsync serve`` owns (or a
``ragsync worker``): see ``control_plane.worker``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from connectors.credentials import CREDENTIALS_REFUSED, tenant_may_use
from connectors.location import allowed_for_tenant, real_location, register_location
from connectors.registry import connector_class
from control_plane.deps import CatalogDep, Tenant, path_id
from control_plane.errors import ACCEPTED, ERRORS, ApiError, ErrorOut, not_found
from ragsync.catalog import ID_PATTERN, ConflictError, LimitReachedError, SourceState, SyncRun, new_id
from ragsync.decisions import VERSION_DOMAINS
from ragsync.errors import ConfigurationError
from ragsync.source_types import SYNC_KINDS, SourceSpec, default_uri, source_types

_CREDENTIALS_REF = r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$"
_MAX_OPTIONS_BYTES = 16 * 1024

router = APIRouter()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _type_enum(schema: dict[str, Any]) -> None:
    """The schema of ``type`` offers the types registered when the schema is
    made (``/openapi.json`` is made on its first request, after every plug-in
    the server loaded at start has registered its types)."""
    schema["enum"] = list(source_types())


class SourceIn(_Model):
    """``POST /v1/sources`` body."""

    type: str = Field(json_schema_extra=_type_enum, description="the connector family")
    uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="the source's location: a folder, gs:// or s3:// prefix, or its API URL (a wiki's "
        "api.php, a Jira base URL; Drive defaults to its API). Content is only ever read under it.",
    )
    credentials_ref: str | None = Field(
        default=None,
        min_length=4,
        max_length=2048,
        pattern=_CREDENTIALS_REF,
        description="reference to a secret in a store the operator configured for your tenant "
        "(secretmanager://projects/P/secrets/NAME, or file:///path under a granted folder; `ragsync serve "
        "--tenant-secrets`); omit for a public source; never returned",
    )
    options: dict[str, Any] | None = Field(
        default=None, description='connector options, e.g. {"namespaces": [0], "acl_groups": ["staff"]}'
    )
    sync: str = Field(json_schema_extra={"enum": list(SYNC_KINDS)})
    poll_interval_s: int | None = Field(
        default=None, ge=60, le=86_400, description="seconds between polls; sync=poll only (default 300)"
    )
    source_id: str | None = Field(default=None, pattern=ID_PATTERN, description="default: a new random id")
    tenant_id: str | None = Field(default=None, description="optional; must be the API key's tenant")
    version_domain: str | None = Field(
        default=None,
        json_schema_extra={"enum": list(VERSION_DOMAINS)},
        description="how the source's event versions compare: revision numbers, timestamps or opaque "
        "etags; versions of another domain are ordered by when the source showed them",
    )

    @field_validator("credentials_ref", "uri")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("must be printable text")
        return value

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        known = source_types()  # read now: plug-ins' types included
        if value not in known:
            raise ValueError(f"must be one of {', '.join(known)}")
        return value

    @field_validator("sync")
    @classmethod
    def _known_sync(cls, value: str) -> str:
        if value not in SYNC_KINDS:
            raise ValueError(f"must be one of {', '.join(SYNC_KINDS)}")
        return value

    @field_validator("version_domain")
    @classmethod
    def _known_domain(cls, value: str | None) -> str | None:
        if value is not None and value not in VERSION_DOMAINS:
            raise ValueError(f"must be one of {', '.join(VERSION_DOMAINS)}")
        return value

    @field_validator("options")
    @classmethod
    def _small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > _MAX_OPTIONS_BYTES:
            raise ValueError(f"must be at most {_MAX_OPTIONS_BYTES} bytes of JSON")
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
    uri: str
    sync: str | None
    poll_interval_s: int | None
    credentials_ref_set: bool
    paused: bool
    pause_reason: str
    failures: int
    last_sync_at: float | None
    last_full_at: float | None
    version_domain: str = ""


class SyncIn(_Model):
    """``POST /v1/sources/{source_id}/sync`` body; optional (none: incremental)."""

    mode: Literal["incremental", "full"] = Field(
        default="incremental",
        description="incremental (default): the changes since the source's cursor, or a full listing when "
        "it has no change feed or no cursor yet; full: list everything (objects gone become deletes)",
    )


class SyncOut(BaseModel):
    """A sync run: ``queued``, ``running``, ``succeeded`` or ``failed``."""

    sync_id: str
    source_id: str
    mode: str
    state: str
    requested_at: float
    started_at: float | None
    finished_at: float | None
    counts: dict[str, Any]
    error: str | None


def _source_out(state: SourceState) -> SourceOut:
    data = state.public()
    return SourceOut(**{name: data[name] for name in SourceOut.model_fields})


def _sync_out(run: SyncRun) -> SyncOut:
    return SyncOut(
        sync_id=run.sync_id,
        source_id=run.source_id,
        mode=run.mode,
        state=run.state,
        requested_at=run.requested_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        counts=run.counts,
        error=run.error or None,
    )


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(
        422, f"{field}: {message}", details=[{"loc": ["body", field], "msg": message, "type": "value_error"}]
    )


#: The one answer to every refused ``uri`` (unusable, overlapping ragsync's own
#: state, a link, a type's connector that cannot read it, outside the tenant's
#: grant): which rule refused it is not said, so a tenant cannot find out where
#: ragsync's state lives by trying locations (the input is never echoed either).
REFUSED_URI = (
    "not a location this server lets your tenant declare: give a folder, gs:// or s3:// prefix "
    "(object_store) or an http(s) API URL that lies under a location the operator allows your tenant "
    "(`ragsync serve --allow-location` or RAGSYNC_ALLOWED_LOCATIONS)"
)


def _location(request: Request, body: SourceIn, tenant_id: str) -> str:
    """The checked location of a new source ('' when none applies).

    Raises:
        ApiError: 422 :data:`REFUSED_URI` when it is unusable, overlaps
            ragsync's own state, no connector reads this type there, or it
            lies outside what the operator allows the tenant.
    """
    uri = body.uri or default_uri(body.type)
    if not uri:
        return ""
    reserved: tuple[str, ...] = getattr(request.app.state, "reserved_locations", ())
    try:
        location = register_location(uri, reserved=reserved)
        connector_class(SourceSpec(source_id="-", tenant_id="-", type=body.type, uri=location.uri))
    except ConfigurationError:
        raise _invalid("uri", REFUSED_URI) from None
    # A tenant may only declare a location the operator allows it: without
    # this, a tenant could name another tenant's folder, the host's files or
    # an internal address. A type's fixed public API (Drive's) needs no grant.
    allowed: tuple[str, ...] = getattr(request.app.state, "allowed_locations", ())
    if body.uri is not None and not allowed_for_tenant(location, allowed, tenant_id):
        raise _invalid("uri", REFUSED_URI)
    # The real path is stored, so a later read follows no link the check did not judge.
    return real_location(location).uri if body.uri is not None else location.uri


@router.post(
    "/v1/sources",
    status_code=201,
    response_model=SourceOut,
    tags=["sources"],
    responses={**ERRORS, 409: {"model": ErrorOut, "description": "the tenant already has this source_id"}},
)
def create_source(body: SourceIn, request: Request, tenant_id: Tenant, catalog: CatalogDep) -> SourceOut:
    """Register a source of the caller's tenant. Source ids are the tenant's
    own: 409 only when the caller already has one with this id. ``uri`` must
    lie under a location the operator allows this tenant (422 otherwise)."""
    if body.tenant_id is not None and body.tenant_id != tenant_id:
        raise _invalid("tenant_id", "must be the API key's tenant (or omitted)")
    uri = _location(request, body, tenant_id)
    # A tenant names secrets only in its own store: env:// or any host file
    # would make the sync send the server's secret to the tenant's host.
    stores: tuple[str, ...] = getattr(request.app.state, "secret_stores", ())
    if body.credentials_ref and not tenant_may_use(body.credentials_ref, stores, tenant_id):
        raise _invalid("credentials_ref", f"{CREDENTIALS_REFUSED} (the operator lists your secret stores)")
    interval = body.poll_interval_s if body.sync == "poll" else None
    if body.sync == "poll" and interval is None:
        interval = 300
    cap = request.app.state.max_sources
    if catalog.sources.count_sources(tenant_id) >= cap:
        raise ApiError(403, f"the tenant has {cap} sources (its limit); delete one or ask the operator")
    source_id = body.source_id or new_id("src")
    try:
        catalog.sources.create_source(
            tenant_id,
            source_id=source_id,
            type=body.type,
            credentials_ref=body.credentials_ref,
            sync=body.sync,
            poll_interval_s=interval,
            uri=uri,
        )
    except ConflictError as exc:
        raise ApiError(409, str(exc)) from exc
    if body.options is not None or body.version_domain is not None:
        catalog.syncs.configure_source(
            source_id, tenant_id=tenant_id, options=body.options, version_domain=body.version_domain
        )
    state = catalog.sources.get_source(source_id, tenant_id=tenant_id)
    assert state is not None
    return _source_out(state)


@router.get("/v1/sources", response_model=list[SourceOut], tags=["sources"], responses=ERRORS)
def list_sources(tenant_id: Tenant, catalog: CatalogDep) -> list[SourceOut]:
    """The caller's sources, with their sync state."""
    return [_source_out(s) for s in catalog.syncs.source_states(tenant_id)]


def _own_source(source_id: str, tenant_id: str, catalog: Any) -> SourceState:
    sid = path_id(source_id)
    state = catalog.sources.get_source(sid, tenant_id=tenant_id) if sid else None
    if state is None:
        raise not_found(f"source {source_id!r}")
    return state  # type: ignore[no-any-return]


@router.get("/v1/sources/{source_id}", response_model=SourceOut, tags=["sources"], responses=ERRORS)
def get_source(source_id: str, tenant_id: Tenant, catalog: CatalogDep) -> SourceOut:
    """One of the caller's sources: ``paused`` with ``pause_reason`` when it is."""
    return _source_out(_own_source(source_id, tenant_id, catalog))


class CoverageOut(BaseModel):
    """Coverage of a source: indexed / (seen - excluded by rule) (``ragsync.ops.coverage``)."""

    seen: int
    indexed: int
    excluded: dict[str, int] = Field(description="documents excluded by a rule, by dead-letter class")
    not_indexed: dict[str, int] = Field(description="the rest, by dead-letter class or 'pending'")
    coverage: float
    target: float
    meets_target: bool


class SourceStatusOut(BaseModel):
    """``GET /v1/sources/{source_id}/status``."""

    source: SourceOut
    coverage: CoverageOut


@router.get(
    "/v1/sources/{source_id}/status", response_model=SourceStatusOut, tags=["sources"], responses=ERRORS
)
def source_status(source_id: str, tenant_id: Tenant, catalog: CatalogDep) -> SourceStatusOut:
    """One of the caller's sources with its coverage against the 99.5% target
    and the dead-letter reasons for the documents not indexed."""
    from ragsync.ops.coverage import COVERAGE_TARGET, coverage_by_source

    state = _own_source(source_id, tenant_id, catalog)
    rows = coverage_by_source(catalog.runs.document_outcomes(tenant_id=tenant_id, source_id=state.source_id))
    found: dict[str, Any] = rows[0] if rows else {}
    coverage = CoverageOut(
        seen=found.get("seen", 0),
        indexed=found.get("indexed", 0),
        excluded=found.get("excluded", {}),
        not_indexed=found.get("not_indexed", {}),
        coverage=found.get("coverage", 1.0),
        target=found.get("target", COVERAGE_TARGET),
        meets_target=found.get("meets_target", True),
    )
    return SourceStatusOut(source=_source_out(state), coverage=coverage)


@router.post("/v1/sources/{source_id}/resume", response_model=SourceOut, tags=["sources"], responses=ERRORS)
def resume_source(source_id: str, tenant_id: Tenant, catalog: CatalogDep) -> SourceOut:
    """Clear a pause (and the failure count): the next scheduled or requested sync runs."""
    state = _own_source(source_id, tenant_id, catalog)
    catalog.syncs.resume_source(state.source_id, tenant_id)
    return _source_out(_own_source(source_id, tenant_id, catalog))


@router.post("/v1/sources/{source_id}/sync", response_model=SyncOut, tags=["sources"], **ACCEPTED)
def request_sync(
    source_id: str,
    request: Request,
    tenant_id: Tenant,
    catalog: CatalogDep,
    body: Annotated[SyncIn | None, Body()] = None,
) -> SyncOut:
    """Queue a sync of one of the caller's sources (404 for others'); while one
    is queued or running, that one is answered instead of a second. A tenant
    with ``--max-pending-syncs-per-tenant`` syncs queued or running gets 429.
    The body is optional: without one (or with ``{}``) the sync is incremental."""
    sid = path_id(source_id)
    cap = request.app.state.max_pending_syncs
    mode = (body or SyncIn()).mode
    try:
        run = catalog.syncs.request_sync(tenant_id, sid, mode, origin="api", max_pending=cap) if sid else None
    except LimitReachedError as exc:
        raise ApiError(429, str(exc), headers={"Retry-After": "60"}) from exc
    if run is None:
        raise not_found(f"source {source_id!r}")
    return _sync_out(run)


@router.get(
    "/v1/sources/{source_id}/sync/{sync_id}", response_model=SyncOut, tags=["sources"], responses=ERRORS
)
def get_sync(source_id: str, sync_id: str, tenant_id: Tenant, catalog: CatalogDep) -> SyncOut:
    """A sync run: its state, and its counts once it succeeded or its error once it failed."""
    sid, rid = path_id(source_id), path_id(sync_id)
    run = catalog.syncs.get_sync_run(rid, tenant_id) if sid and rid else None
    if run is None or run.source_id != sid:
        raise not_found(f"sync {sync_id!r}")
    return _sync_out(run)
