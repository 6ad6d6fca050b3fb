"""A source's ``credentials_ref`` turned into the HTTP headers its API client sends.

The catalog stores only a reference, never the secret. Who stored the
reference decides what it may name (``SourceSpec.credentials_by``):

- the **operator** (``ragsync sources add --credentials-ref``): any of
  ``env://NAME`` (an environment variable of the process that syncs),
  ``file:///path`` (a file's content: surrounding blanks stripped, at most
  64 KiB) and ``secretmanager://projects/P/secrets/NAME[/versions/V]``;
- a **tenant** (``POST /v1/sources``): only a secret under a grant the
  operator made for that tenant (``ragsync serve --tenant-secret PATTERN``
  or ``RAGSYNC_TENANT_SECRETS``, comma-separated; ``{tenant}`` in a pattern
  stands for the tenant id): a ``secretmanager://projects/P/secrets/PREFIX``
  pattern grants the secrets whose name starts with ``PREFIX``, a folder
  pattern (``/etc/ragsync/secrets/{tenant}``) grants the regular files under
  it, compared by their real paths (a link out of the folder is refused).
  Never the server's environment, never another file. The grant is checked
  when the source is created and again each time the secret is read.

Every failure to use a reference (unknown scheme, a variable or file that is
missing or unreadable, a secret that is not one printable line, a reference
outside the tenant's grants, Secret Manager refusing) raises the same
``ConfigurationError`` text, :data:`UNUSABLE`: the answer says nothing about
what exists on the server. The reason is logged for the operator.

The secret is the whole ``Authorization`` header value (``Bearer ...`` for
Google Drive access tokens and MediaWiki OAuth, ``Basic ...`` for a Jira
e-mail + API token). A secret that is not one line of printable text is
refused (a newline would let it add headers). The API clients send it only
to the source's own location (``connectors.reader.LocatedHttpClient`` refuses
a redirect that leaves it).
"""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

from ragsync.errors import ConfigurationError

log = logging.getLogger(__name__)

MAX_SECRET_BYTES = 64 * 1024
OPERATOR = "operator"
TENANT = "tenant"
GRANTS_ENV = "RAGSYNC_TENANT_SECRETS"
UNUSABLE = (
    "credentials_ref cannot be used: it must name a secret the server grants this source "
    "(a tenant: a secret under the grants the operator made for the tenant; the operator: "
    "env://NAME, file:///path or secretmanager://projects/P/secrets/NAME through `ragsync sources add`)"
)
_SECRET_MANAGER = re.compile(
    r"^secretmanager://(projects/[a-z0-9][a-z0-9-]{0,62}/secrets/[A-Za-z0-9_-]{1,255})"
    r"(?:/versions/(latest|[0-9]{1,20}))?$"
)
SECRET_MANAGER_API = "https://secretmanager.googleapis.com/v1"
# The metadata server of a GCE/GKE/Dataflow worker gives its service account's token.
METADATA_TOKEN_URL = (
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
)


class _Unusable(Exception):
    """Why a reference cannot be used (logged, never shown)."""


def tenant_grants(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The operator's secret grants: ``extra`` then ``RAGSYNC_TENANT_SECRETS``."""
    env = [p.strip() for p in os.environ.get(GRANTS_ENV, "").split(",") if p.strip()]
    return tuple(dict.fromkeys([*extra, *env]))


def _local_path(ref: str) -> str:
    path = ref[len("file://") :]
    if path.startswith("localhost/"):
        path = path[len("localhost") :]
    if not path.startswith("/") or "\x00" in path:
        raise _Unusable("not an absolute file:/// path")
    return path


def _under(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real.startswith(root.rstrip("/") + "/")


def tenant_may_name(ref: str, tenant_id: str, grants: Sequence[str]) -> bool:
    """Whether a tenant may name ``ref``: it lies under one of ``grants``
    (``{tenant}`` replaced by ``tenant_id``).

    A ``secretmanager://`` reference must be well formed and its secret name
    start with a granted prefix; a ``file://`` reference must resolve (links
    followed) under a granted folder. ``env://`` never is a tenant's.
    """
    if not tenant_id or "/" in tenant_id or tenant_id in (".", "..") or not ref:
        return False
    for pattern in grants:
        grant = pattern.replace("{tenant}", tenant_id)
        if ref.startswith("secretmanager://") and grant.startswith("secretmanager://"):
            if _SECRET_MANAGER.match(ref) and ref.startswith(grant):
                return True
        elif ref.startswith("file://") and not re.match(r"^[a-z][a-z0-9+.-]*://", grant):
            try:
                if grant.startswith("/") and _under(_local_path(ref), grant):
                    return True
            except _Unusable:
                return False
    return False


def _read_file(ref: str) -> str:
    path = _local_path(ref)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise _Unusable(f"file: {exc.strerror}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise _Unusable(f"file larger than {MAX_SECRET_BYTES} bytes")
    return raw.decode("utf-8", errors="replace")


def _read_secret_manager(ref: str, transport: Any = None) -> str:
    """The payload of a Secret Manager secret version (REST ``:access``),
    authenticated with the worker's service-account token from the metadata
    server."""
    import httpx

    match = _SECRET_MANAGER.match(ref)
    if match is None:
        raise _Unusable("malformed secretmanager:// reference")
    name, version = match.group(1), match.group(2) or "latest"
    with httpx.Client(transport=transport, timeout=10.0, follow_redirects=False) as client:
        try:
            token = client.get(METADATA_TOKEN_URL, headers={"Metadata-Flavor": "Google"})
            token.raise_for_status()
            access = client.get(
                f"{SECRET_MANAGER_API}/{name}/versions/{version}:access",
                headers={"Authorization": f"Bearer {token.json()['access_token']}"},
            )
            access.raise_for_status()
            data = access.json()["payload"]["data"]
            return base64.b64decode(data, validate=True).decode("utf-8", errors="replace")
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise _Unusable(f"secret manager: {type(exc).__name__}") from None


def _read(ref: str, transport: Any) -> str:
    if ref.startswith("env://"):
        name = ref[len("env://") :]
        if not name or name not in os.environ:
            raise _Unusable("environment variable not set")
        return os.environ[name]
    if ref.startswith("file://"):
        return _read_file(ref)
    if ref.startswith("secretmanager://"):
        return _read_secret_manager(ref, transport)
    raise _Unusable("unknown scheme")


def resolve_secret(
    ref: str,
    *,
    credentials_by: str = OPERATOR,
    tenant_id: str = "",
    grants: Sequence[str] | None = None,
    transport: Any = None,
) -> str:
    """The secret named by ``ref`` ('' for a public source).

    Args:
        ref: the stored reference.
        credentials_by: who stored it: :data:`OPERATOR` or :data:`TENANT`
            (anything else is treated as a tenant's).
        tenant_id: the source's tenant (for a tenant's reference).
        grants: the operator's grants (default: :func:`tenant_grants`).
        transport: an ``httpx`` transport for Secret Manager (tests).

    Raises:
        ConfigurationError: :data:`UNUSABLE`, whatever the reason.
    """
    if not ref:
        return ""
    try:
        granted = tenant_grants() if grants is None else grants
        if credentials_by != OPERATOR and not tenant_may_name(ref, tenant_id, granted):
            raise _Unusable(f"not under a grant of tenant {tenant_id!r}")
        secret = _read(ref, transport).strip()
        if not secret or not secret.isprintable():
            raise _Unusable("the secret is not one line of printable text")
    except _Unusable as exc:
        log.warning("credentials_ref of a %s source of tenant %r refused: %s", credentials_by, tenant_id, exc)
        raise ConfigurationError(UNUSABLE) from None
    return secret


def auth_headers(
    ref: str, *, credentials_by: str = OPERATOR, tenant_id: str = "", transport: Any = None
) -> dict[str, str]:
    """``{"Authorization": secret}``, or ``{}`` for a public source
    (:func:`resolve_secret`)."""
    secret = resolve_secret(ref, credentials_by=credentials_by, tenant_id=tenant_id, transport=transport)
    return {"Authorization": secret} if secret else {}
