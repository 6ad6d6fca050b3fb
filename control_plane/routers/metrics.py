"""``GET /metrics``: the operator's series in Prometheus text format
(:mod:`ragsync.ops.metrics`), not in the OpenAPI document.

Access: the series name every tenant's sources, so they are not tenant data
to hand out with an API key. With a metrics token configured (``ragsync
serve --metrics-token`` or ``RAGSYNC_METRICS_TOKEN``) a scrape must send
``Authorization: Bearer <token>``; without one only loopback clients are
answered (403 otherwise).
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import APIRouter, Request, Response

from control_plane.deps import CatalogDep
from control_plane.errors import ApiError
from ragsync.ops.metrics import CONTENT_TYPE, render

router = APIRouter()


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request, catalog: CatalogDep) -> Response:
    """Every ragsync series, built from the catalog at this scrape."""
    token: str = getattr(request.app.state, "metrics_token", "") or ""
    if token:
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            raise ApiError(401, "metrics need Authorization: Bearer <metrics token>")
    elif not _loopback(request.client.host if request.client else None):
        raise ApiError(403, "metrics are served to loopback clients only unless a metrics token is set")
    return Response(content=render(catalog), media_type=CONTENT_TYPE)
