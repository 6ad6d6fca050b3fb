"""A source's ``credentials_ref`` turned into the HTTP headers its API client sends.

The catalog stores only a reference, never the secret. References:

- ``''``: a public source; requests are anonymous;
- ``env://NAME``: the secret is the value of environment variable ``NAME``
  (operator only);
- ``file:///path``: the secret is the file's content (surrounding blanks
  stripped; at most 64 KiB); a tenant may name only a file under a folder the
  operator granted it;
- ``secretmanager://projects/P/secrets/NAME[/versions/V]``: a Google Secret
  Manager secret version (``latest`` by default), read with the documented
  REST call ``GET v1/projects/P/secrets/NAME/versions/V:access``.

Who may name what (:func:`tenant_may_use`): the operator's own tools may name
any reference; an API tenant only a secret in a store the operator configured
for it (``ragsync serve --tenant-secrets PATTERN``, ``{tenant}`` standing for
the tenant id): ``secretmanager://projects/P/secrets/{tenant}`` grants the
secrets ``<tenant>_<suffix>`` of project P (the suffix has no ``_``, so one
tenant's names never fall under another's), ``file:///srv/secrets/{tenant}``
the regular files under that folder, compared as real paths (a symlink leaving
the folder is refused). ``env://`` is never a tenant's: the server's
environment holds the server's own secrets.

Who stored a reference is kept with the source (``credentials_by``:
:data:`OPERATOR` for ``ragsync sources add``, :data:`TENANT` for
``POST /v1/sources``), and a tenant's reference is checked against the grants
again each time a sync reads it (:func:`auth_headers`): a grant the operator
withdrew, or a file replaced by a link, stops working at the next sync.
``ragsync serve`` passes its grants to the syncs it starts through
``RAGSYNC_TENANT_SECRETS`` (:func:`tenant_grants`).

Every failure to resolve a reference has one wording
(:data:`CREDENTIALS_REFUSED`), whatever the cause (missing, unreadable,
forbidden, not one line): the answer says nothing about what exists on the
host.

The secret is the whole ``Authorization`` header value (``Bearer ...`` for
Google Drive access tokens and MediaWiki OAuth, ``Basic ...`` for a Jira
e-mail + API token), or for Drive Google's authorized-user JSON, refreshed
into access tokens (``connectors.oauth``; a JSON file is read as one line). A
secret that is not one line of printable text is refused (a newline would let
it add headers). ``connectors.reader``'s located
client sends it only to the source's own origin.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from connectors.location import Location
from ragsync.errors import ConfigurationError, RagsyncError

log = logging.getLogger(__name__)

MAX_SECRET_BYTES = 64 * 1024
OPERATOR = "operator"
TENANT = "tenant"
GRANTS_ENV = "RAGSYNC_TENANT_SECRETS"
SECRET_MANAGER_API = "https://secretmanager.googleapis.com/v1"
CREDENTIALS_REFUSED = "cannot be used: no readable secret of this tenant is there"

_SECRET_MANAGER = re.compile(
    r"^secretmanager://projects/(?P<project>[a-z0-9][a-z0-9-]{0,62})/secrets/(?P<name>[A-Za-z0-9_-]{1,255})"
    r"(?:/versions/(?P<version>latest|[1-9][0-9]{0,18}))?$"
)
_SUFFIX = re.compile(r"^[A-Za-z0-9-]+$")


#: The source option holding the SHA-256 (hex) of its webhook token
#: (``control_plane.routers.webhooks``); the token itself is never stored.
WEBHOOK_SECRET_OPTION = "webhook_secret_sha256"


def webhook_secret_hash(token: str) -> str:
    """What a source stores of its webhook token: SHA-256, hex."""
    import hashlib

    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def tenant_grants(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The operator's secret stores for tenants: ``extra`` (``serve
    --tenant-secrets``), then the comma-separated ``RAGSYNC_TENANT_SECRETS``."""
    env = [p.strip() for p in os.environ.get(GRANTS_ENV, "").split(",") if p.strip()]
    return tuple(dict.fromkeys([*extra, *env]))


def credential_error(ref: str) -> ConfigurationError:
    """The one error for every reference that cannot be used (no oracle)."""
    shown = ref if len(ref) <= 200 else ref[:200] + "..."
    return ConfigurationError(f"credentials_ref {shown!r} {CREDENTIALS_REFUSED}")


def _scheme(ref: str) -> str:
    return ref.split("://", 1)[0].lower() if "://" in ref else ""


def _file_grant(ref: str, pattern: str, tenant_id: str) -> Location | None:
    """The granted folder of ``pattern`` when ``ref`` is a file under it (real
    paths compared), else None."""
    try:
        folder = Location.parse(pattern.replace("{tenant}", tenant_id))
        if folder.scheme != "file" or _scheme(pattern) != "file":
            return None
        address = folder.resolve(ref)
    except RagsyncError:
        return None
    real_root = os.path.realpath(folder.root)
    real = os.path.realpath(address)
    return folder if real.startswith(real_root.rstrip("/") + "/") else None


def _secret_grant(ref: str, pattern: str, tenant_id: str) -> bool:
    """Whether the Secret Manager ``ref`` is ``<granted name>_<suffix>`` in the granted project."""
    got = _SECRET_MANAGER.match(ref)
    grant = _SECRET_MANAGER.match(pattern.replace("{tenant}", tenant_id))
    if got is None or grant is None or "{tenant}" not in pattern:
        return False
    prefix = grant["name"] + "_"
    return (
        got["project"] == grant["project"]
        and got["name"].startswith(prefix)
        and bool(_SUFFIX.match(got["name"][len(prefix) :]))
    )


def tenant_may_use(ref: str, grants: tuple[str, ...], tenant_id: str) -> bool:
    """Whether an API tenant may name ``ref`` (the operator may name any).

    Args:
        ref: the reference the tenant sent ('' is a public source: allowed).
        grants: the operator's secret stores for tenants
            (``secretmanager://projects/P/secrets/{tenant}``,
            ``file:///srv/secrets/{tenant}``).
        tenant_id: the caller's tenant.

    Returns:
        True when ``ref`` lies in one of the tenant's stores. ``env://`` never does.
    """
    if not ref:
        return True
    if not tenant_id or "/" in tenant_id or tenant_id in (".", ".."):
        return False
    for pattern in grants:
        if _scheme(ref) == "secretmanager" and _secret_grant(ref, pattern, tenant_id):
            return True
        if _scheme(ref) == "file" and _file_grant(ref, pattern, tenant_id) is not None:
            return True
    return False


def _one_line(ref: str, raw: bytes) -> str:
    if len(raw) > MAX_SECRET_BYTES:
        raise credential_error(ref)
    secret = raw.decode("utf-8", errors="replace").strip()
    if secret.startswith("{"):  # a JSON credentials file (Google's authorized user): one line
        try:
            secret = json.dumps(json.loads(secret), separators=(",", ":"))
        except (ValueError, RecursionError):
            raise credential_error(ref) from None
    if not secret or not secret.isprintable():
        raise credential_error(ref)
    return secret


def _read_file(ref: str, grants: tuple[str, ...] | None, tenant_id: str) -> bytes:
    """The file's bytes; under a tenant's granted folder, through the one
    content reader (real path, regular file, bounded)."""
    from connectors.reader import ContentReader, FetchLimits

    if grants is None:  # the operator: any file
        try:
            with open(ref[len("file://") :], "rb") as fh:
                return fh.read(MAX_SECRET_BYTES + 1)
        except OSError:
            raise credential_error(ref) from None
    for pattern in grants:
        granted = _file_grant(ref, pattern, tenant_id)
        if granted is not None:
            reader = ContentReader(granted, FetchLimits(max_bytes=MAX_SECRET_BYTES + 1, timeout_s=5.0))
            try:
                return reader.read(ref)
            except RagsyncError:
                raise credential_error(ref) from None
    raise credential_error(ref)


TokenSource = Callable[[], str]


def metadata_token(transport: Any = None) -> str:
    """An OAuth access token of the host's service account, from the GCE/GKE
    metadata server (``GOOGLE_OAUTH_ACCESS_TOKEN`` wins when set)."""
    import httpx

    token = os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN", "")
    if token:
        return token
    url = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
    with httpx.Client(transport=transport, timeout=5.0) as client:
        answer = client.get(url, headers={"Metadata-Flavor": "Google"})
        answer.raise_for_status()
        return str(answer.json()["access_token"])


def access_secret_version(ref: str, *, transport: Any = None, token: TokenSource | None = None) -> bytes:
    """The payload of a Secret Manager secret version (REST ``versions/V:access``).

    Args:
        ref: ``secretmanager://projects/P/secrets/NAME[/versions/V]``.
        transport: an ``httpx`` transport (tests replay recorded answers).
        token: returns an OAuth access token (default: the metadata server).

    Raises:
        ConfigurationError: the one credential error, for any failure (bad
            reference, no token, 403, 404, an undecodable payload).
    """
    import httpx

    match = _SECRET_MANAGER.match(ref)
    if match is None:
        raise credential_error(ref)
    name = f"projects/{match['project']}/secrets/{match['name']}/versions/{match['version'] or 'latest'}"
    try:
        bearer = (token or (lambda: metadata_token(transport)))()
        with httpx.Client(transport=transport, timeout=10.0, follow_redirects=False) as client:
            answer = client.get(
                f"{SECRET_MANAGER_API}/{name}:access", headers={"Authorization": f"Bearer {bearer}"}
            )
        if answer.status_code != 200:
            raise credential_error(ref)
        data = answer.json()["payload"]["data"]
        return base64.b64decode(data, validate=True)
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        raise credential_error(ref) from None


def resolve_secret(
    ref: str,
    *,
    tenant_grants: tuple[str, ...] | None = None,
    tenant_id: str = "",
    transport: Any = None,
    token: TokenSource | None = None,
) -> str:
    """The secret named by ``ref`` ('' for a public source).

    Args:
        ref: the source's reference.
        tenant_grants: None for the operator (any reference); for a tenant,
            its secret stores (see :func:`tenant_may_use`).
        tenant_id: the tenant, with ``tenant_grants``.
        transport, token: for Secret Manager (tests).

    Raises:
        ConfigurationError: :func:`credential_error` for every failure: an
            unknown scheme, a reference the tenant may not name, a missing or
            unreadable variable, file or secret, or one that is not a single
            printable line.
    """
    if not ref:
        return ""
    if tenant_grants is not None and not tenant_may_use(ref, tenant_grants, tenant_id):
        raise credential_error(ref)
    scheme = _scheme(ref)
    if scheme == "env":
        name = ref[len("env://") :]
        if not name or name not in os.environ:
            raise credential_error(ref)
        raw = os.environ[name].encode("utf-8", errors="replace")
    elif scheme == "file":
        raw = _read_file(ref, tenant_grants, tenant_id)
    elif scheme == "secretmanager":
        raw = access_secret_version(ref, transport=transport, token=token)
    else:
        raise credential_error(ref)
    return _one_line(ref, raw)


def auth_headers(
    ref: str, *, credentials_by: str = OPERATOR, tenant_id: str = "", **kwargs: Any
) -> dict[str, str]:
    """``{"Authorization": secret}``, or ``{}`` for a public source.

    Args:
        ref: the source's reference.
        credentials_by: who stored it; anything but :data:`OPERATOR` is held
            to the tenant's grants (:func:`tenant_grants`, read now: the
            check runs at every sync, not only when the source was made).
        tenant_id: the source's tenant.
        kwargs: ``transport`` / ``token`` for :func:`resolve_secret`.

    Raises:
        ConfigurationError: :func:`credential_error`; the reason is logged
            for the operator, never shown to the tenant.
    """
    grants = None if credentials_by == OPERATOR else tenant_grants()
    try:
        secret = resolve_secret(ref, tenant_grants=grants, tenant_id=tenant_id, **kwargs)
    except ConfigurationError:
        log.warning(
            "credentials_ref of a source of tenant %r (stored by the %s) refused: not usable or not granted",
            tenant_id,
            credentials_by,
        )
        raise
    return {"Authorization": secret} if secret else {}
