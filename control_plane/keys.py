"""API keys: made, hashed and checked here; stored (as hashes) in the catalog.

Keys are ``rsk_<key_id>_<secret>`` where ``key_id`` is 16 random hex digits
(the public prefix, the primary key of ``api_keys``) and ``secret`` is
``secrets.token_urlsafe(32)``. Only ``HMAC-SHA256(pepper, key)`` is stored;
the pepper is per deployment (``$RAGSYNC_API_KEY_PEPPER``, else a built-in
constant) and must be the same for ``ragsync tenants create`` and
``ragsync serve``. Hashes are compared with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets

from ragsync.catalog import Catalog, TenantRow

_KEY_RE = re.compile(r"^rsk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_DEFAULT_PEPPER = "ragsync-control-plane-pepper-v1"


def default_pepper() -> str:
    """The API-key pepper: ``$RAGSYNC_API_KEY_PEPPER`` or the built-in constant."""
    return os.environ.get("RAGSYNC_API_KEY_PEPPER") or _DEFAULT_PEPPER


def hash_api_key(key: str, pepper: str) -> str:
    """Keyed hash of an API key (hex HMAC-SHA256 with the deployment's pepper)."""
    return hmac.new(pepper.encode("utf-8"), key.encode("utf-8"), hashlib.sha256).hexdigest()


def new_api_key() -> tuple[str, str]:
    """A fresh random API key.

    Returns:
        ``(key_id, key)``: the public prefix and the full key (shown once).
    """
    key_id = secrets.token_hex(8)
    return key_id, f"rsk_{key_id}_{secrets.token_urlsafe(32)}"


def api_key_id(key: str) -> str | None:
    """The public prefix of a well-formed key, or None for anything else."""
    match = _KEY_RE.match(key)
    return match.group(1) if match else None


class ApiKeys:
    """Tenants' API keys over a catalog, with one deployment pepper.

    Args:
        catalog: an open catalog (not closed by this object).
        pepper: API-key pepper; default :func:`default_pepper`.
    """

    def __init__(self, catalog: Catalog, *, pepper: str | None = None) -> None:
        self._catalog = catalog
        self._pepper = default_pepper() if pepper is None else pepper
        self._dummy_hash = hash_api_key("rsk_" + "0" * 16 + "_" + "0" * 43, self._pepper)

    def create_tenant(self, name: str, *, tenant_id: str | None = None) -> tuple[TenantRow, str]:
        """Create a tenant and its first API key.

        Args:
            name: unique name (``ID_PATTERN``).
            tenant_id: id (``ID_PATTERN``); default ``name``, so the tenant owns
                what ``ragsync backfill --tenant NAME`` indexed.

        Returns:
            ``(tenant, api_key)``; the key is not stored and cannot be shown again.

        Raises:
            ValueError: name or id does not match ``ID_PATTERN``.
            ragsync.catalog.ConflictError: the name or id is taken.
        """
        key_id, key = new_api_key()
        row = self._catalog.tenants.create_tenant(
            name,
            tenant_id=name if tenant_id is None else tenant_id,
            key_id=key_id,
            key_hash=hash_api_key(key, self._pepper),
        )
        return row, key

    def create_api_key(self, tenant_id: str) -> tuple[str, str]:
        """Issue another key for a tenant (for rotation).

        Returns:
            ``(key_id, key)``.

        Raises:
            LookupError: the tenant does not exist.
        """
        key_id, key = new_api_key()
        self._catalog.tenants.add_api_key(tenant_id, key_id, hash_api_key(key, self._pepper))
        return key_id, key

    def authenticate(self, key: str) -> str | None:
        """The tenant an API key belongs to.

        Args:
            key: the presented key.

        Returns:
            The tenant id, or None for a malformed, unknown or revoked key. The
            hash comparison is constant-time; an unknown prefix still costs one
            hash and one comparison.
        """
        key_id = api_key_id(key)
        if key_id is None:
            return None
        row = self._catalog.tenants.get_api_key(key_id)
        presented = hash_api_key(key, self._pepper)
        if row is None:
            hmac.compare_digest(presented, self._dummy_hash)
            return None
        if not hmac.compare_digest(presented, row.key_hash) or row.revoked_at is not None:
            return None
        return row.tenant_id
