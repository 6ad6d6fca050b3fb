"""The control-plane HTTP API (FastAPI) over the catalog.

``create_app(catalog_url)`` opens the catalog (applying migrations) and
returns the app. Endpoints (JSON in and out; OpenAPI at ``/openapi.json``,
Swagger UI at ``/docs``), one router module each under ``control_plane.routers``::

    POST /v1/sources                         -> 201 source                 (sources)
    GET  /v1/sources[/{source_id}]           -> sources, paused or not and why (sources)
    POST /v1/sources/{source_id}/resume      -> the source, resumed        (sources)
    POST /v1/sources/{source_id}/sync        -> 202 sync run               (sources)
    GET  /v1/sources/{source_id}/sync/{sync_id} -> queued|running|succeeded|failed (sources)
    POST /v1/sources/{source_id}/webhook     -> 202 (the source's secret, no API key) (webhooks)
    POST /internal/events                    -> 202 {accepted, duplicates, rejected} (events)
    GET  /v1/docs/{doc_id}/status[?source_id=]                             (docs)
    POST /v1/backfills                       -> 201 backfill               (backfills)
    GET  /v1/backfills/{backfill_id}                                       (backfills)
    GET  /v1/dead-letters[?source_id=&limit=]                              (dead_letters)
    POST /v1/dead-letters/{event_id}/retry   -> 202                        (dead_letters)
    GET  /healthz                            (no authentication)           (health)
    GET  /metrics                            Prometheus text (loopback or metrics token) (metrics)
    GET  /v1/sources/{source_id}/status      coverage, freshness, dead letters (sources)
    POST /v1/query                           hybrid retrieval, permission-filtered (query)

Security: every ``/v1`` and ``/internal`` request needs ``Authorization:
Bearer <key>`` or ``X-API-Key: <key>`` (see :mod:`control_plane.keys` and
:mod:`control_plane.deps`); the key decides the tenant. Webhooks are the
exception: the source's webhook secret authenticates them
(:mod:`control_plane.routers.webhooks`). Another tenant's ids
answer 404 exactly like unknown ids. ``/healthz`` and the OpenAPI document
and UI are public: they hold no tenant data.

Errors: every 4xx/5xx body is ``{"error": {"code", "message", "details"}}``
(:mod:`control_plane.errors`). Bodies over ``max_body_bytes`` (by
``Content-Length`` or while streaming) are refused with 413 before anything
parses them (:mod:`control_plane.middleware`). Request bodies are validated by
pydantic models (422 with one entry per problem in ``details``; the rejected
input is never echoed, so a credentials reference cannot leak back).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from control_plane.errors import install_error_handlers
from control_plane.keys import ApiKeys
from control_plane.limits import DEFAULT_MAX_PENDING_SYNCS, DEFAULT_MAX_SOURCES, TenantBudget
from control_plane.middleware import BodySizeLimitMiddleware
from control_plane.routers import (
    backfills,
    dead_letters,
    docs,
    events,
    health,
    metrics,
    pages,
    query,
    sources,
    webhooks,
)
from control_plane.worker import Worker
from ragsync.catalog import Catalog
from ragsync.config import Settings

#: Routers in the order their paths appear in the OpenAPI document.
ROUTERS = (
    health.router,
    sources.router,
    webhooks.router,
    events.router,
    docs.router,
    backfills.router,
    dead_letters.router,
    query.router,
    pages.router,
    metrics.router,
)


def create_app(
    catalog_url: str,
    *,
    max_body_bytes: int = 1_000_000,
    pepper: str | None = None,
    reserved_locations: tuple[str, ...] = (),
    allowed_locations: tuple[str, ...] = (),
    secret_stores: tuple[str, ...] = (),
    events_per_s: float = 200.0,
    events_burst: int = 2000,
    worker: Callable[[Catalog], Worker] | None = None,
    metrics_token: str = "",
    max_pending_syncs: int = DEFAULT_MAX_PENDING_SYNCS,
    max_sources: int = DEFAULT_MAX_SOURCES,
    settings: Settings | None = None,
    allow_caller_groups: bool = False,
) -> FastAPI:
    """Build the control-plane app over a catalog database.

    Args:
        catalog_url: catalog URL or SQLite path; the catalog is opened (and
            migrated) now and closed when the app shuts down.
        max_body_bytes: largest accepted request body; larger ones get 413.
        pepper: API-key pepper; default ``$RAGSYNC_API_KEY_PEPPER`` or the
            built-in constant (must match the one keys were created with).
        reserved_locations: ragsync's own home and object store: no source
            location may overlap them.
        allowed_locations: where tenants may declare sources
            (``connectors.location.allowed_for_tenant``; ``{tenant}`` stands for
            the caller's tenant id). Empty: no tenant may declare a location.
        secret_stores: the secret stores tenants may name in
            ``credentials_ref`` (``connectors.credentials.tenant_may_use``;
            ``{tenant}`` as above). Empty: tenants' sources are public only.
        events_per_s: each tenant's sustained budget on ``/internal/events``
            (events per second); over it the API answers 429 with Retry-After.
        events_burst: events a tenant may send at once before the budget applies.
        worker: builds the worker that runs accepted syncs and backfills
            (``control_plane.worker``) over the app's catalog; it runs in a
            thread from startup to shutdown. None: requests stay queued for a
            ``ragsync worker``.
        metrics_token: bearer token ``GET /metrics`` requires; empty: loopback clients only.
        max_pending_syncs: syncs a tenant may have queued or running; one more gets 429.
        max_sources: sources a tenant may register; another gets 403.
        settings: the stores ``POST /v1/query`` searches (the catalog of
            ``settings`` should be ``catalog_url``); None: it answers 503.
        allow_caller_groups: ``POST /v1/query`` may name the reader's
            ``groups``; False (default): only a synced ``user``, and a body
            naming groups gets 422.

    Returns:
        The FastAPI app; ``app.state.catalog`` and ``app.state.keys`` are
        the open :class:`~ragsync.catalog.Catalog` and its
        :class:`~control_plane.keys.ApiKeys`.

    Raises:
        ValueError: a size, rate or count limit is not positive.
        sqlalchemy.exc.SQLAlchemyError: the catalog cannot be opened or migrated.
    """
    _check_positive(max_body_bytes, events_per_s, events_burst, max_pending_syncs, max_sources)
    catalog = Catalog.open(catalog_url)
    running = worker(catalog) if worker is not None else None
    app = FastAPI(
        title="ragsync control plane",
        version="1",
        description=(__doc__ or "").split("\n\n")[0],
        lifespan=_lifespan(catalog, running),
    )
    app.state.catalog = catalog
    app.state.keys = ApiKeys(catalog, pepper=pepper)
    app.state.reserved_locations = tuple(reserved_locations)
    app.state.allowed_locations = tuple(allowed_locations)
    app.state.secret_stores = tuple(secret_stores)
    app.state.event_budget = TenantBudget(rate_per_s=events_per_s, burst=events_burst)
    app.state.worker = running
    app.state.metrics_token = metrics_token
    app.state.max_pending_syncs = max_pending_syncs
    app.state.max_sources = max_sources
    app.state.settings = settings
    app.state.allow_caller_groups = allow_caller_groups
    return _routed(app, catalog, max_body_bytes)


def _check_positive(*limits: float) -> None:
    """Raise ValueError unless every limit of ``create_app`` is positive."""
    if min(limits) <= 0:
        raise ValueError(
            "max_body_bytes, events_per_s, events_burst, max_pending_syncs and max_sources must be positive"
        )


def _lifespan(catalog: Catalog, running: Worker | None) -> Callable[[FastAPI], Any]:
    """The app's lifespan: the worker (if any) runs from startup to
    shutdown, then the catalog is closed."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if running is not None:
            running.start()
        yield
        if running is not None:
            running.stop()
        catalog.close()

    return lifespan


def _routed(app: FastAPI, catalog: Catalog, max_body_bytes: int) -> FastAPI:
    """``app`` with its body limit (a body over it is a 413 and, on a
    webhook, a dead letter), its error handlers and every router."""
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=max_body_bytes,
        on_too_large=webhooks.too_large_hook(catalog, max_body_bytes),
    )
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app
