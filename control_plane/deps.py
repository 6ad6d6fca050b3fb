"""What every router shares: the caller's tenant (authentication), the
catalog, the check that makes a path id safe to look up, and the mapping of
catalog rows to output models.

Routers declare ``tenant_id: Tenant`` and ``catalog: CatalogDep``; the app
(``create_app``) puts the open catalog and its :class:`ApiKeys` on
``app.state``.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from control_plane.errors import ApiError
from control_plane.keys import ApiKeys
from ragsync.catalog import Catalog

_MAX_PATH_ID = 1024

M = TypeVar("M", bound=BaseModel)

_bearer_scheme = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_header_scheme = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <API key>")


def _tenant(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
    api_key: Annotated[str | None, Depends(_header_scheme)],
) -> str:
    """The caller's tenant, from its API key (Bearer or X-API-Key); 401 otherwise."""
    key = bearer.credentials if bearer is not None else api_key
    if not key:
        raise ApiError(
            401, "missing API key: send Authorization: Bearer <key>", headers={"WWW-Authenticate": "Bearer"}
        )
    keys: ApiKeys = request.app.state.keys
    tenant_id = keys.authenticate(key)
    if tenant_id is None:
        raise ApiError(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return tenant_id


def _catalog(request: Request) -> Catalog:
    """The app's open catalog."""
    catalog: Catalog = request.app.state.catalog
    return catalog


#: The authenticated caller's tenant id (401 before the endpoint runs otherwise).
Tenant = Annotated[str, Depends(_tenant)]
#: The catalog the app serves.
CatalogDep = Annotated[Catalog, Depends(_catalog)]


def view(model: type[M], row: Any, **overrides: Any) -> M:
    """An API model from a catalog row: each field the model declares, read
    from the row's attribute of the same name, then ``overrides`` (fields the
    row names otherwise or derives).

    Args:
        model: the pydantic output model.
        row: a catalog row dataclass (``SourceState``, ``BackfillRow``, ...).
        overrides: values for fields the row does not hold under that name.
    """
    values = {name: getattr(row, name) for name in model.model_fields if name not in overrides}
    return model(**values, **overrides)


def path_id(value: str) -> str | None:
    """A path or query id that can be looked up, or None (answered as 404)."""
    if not value or len(value) > _MAX_PATH_ID or not value.isprintable():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value
