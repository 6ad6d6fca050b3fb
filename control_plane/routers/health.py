"""``GET /healthz``: liveness and catalog reachability (no authentication)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from control_plane.deps import CatalogDep
from control_plane.errors import ErrorOut, error_response

log = logging.getLogger(__name__)
router = APIRouter()


class HealthOut(BaseModel):
    """Liveness and catalog reachability."""

    status: str


@router.get("/healthz", response_model=HealthOut, tags=["ops"], responses={503: {"model": ErrorOut}})
def healthz(catalog: CatalogDep) -> Any:
    """Liveness: 200 ``{"status": "ok"}`` when the catalog answers, else 503."""
    try:
        catalog.ping()
    except Exception:
        log.exception("catalog unreachable")
        return error_response(503, "unavailable", "catalog unreachable")
    return HealthOut(status="ok")
