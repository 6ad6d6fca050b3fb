"""A source's ``credentials_ref`` turned into the HTTP headers its API client sends.

The catalog stores only a reference, never the secret. References:

- ``''``: a public source; requests are anonymous;
- ``env://NAME``: the secret is the value of environment variable ``NAME``;
- ``file:///path``: the secret is the file's content (surrounding blanks
  stripped; at most 64 KiB).

Other schemes (``secretmanager://``, ``vault://``...) are accepted by the
API as references but cannot be resolved by this process: using them raises
``ConfigurationError`` naming the scheme.

The secret is the whole ``Authorization`` header value (``Bearer ...`` for
Google Drive access tokens and MediaWiki OAuth, ``Basic ...`` for a Jira
e-mail + API token). A secret that is not one line of printable text is
refused (a newline would let it add headers).
"""

from __future__ import annotations

import os

from ragsync.errors import ConfigurationError

MAX_SECRET_BYTES = 64 * 1024


def resolve_secret(ref: str) -> str:
    """The secret named by ``ref`` ('' for a public source).

    Raises:
        ConfigurationError: unknown scheme, missing variable or file, or a
            secret that is not a single printable line.
    """
    if not ref:
        return ""
    if ref.startswith("env://"):
        name = ref[len("env://") :]
        if not name or name not in os.environ:
            raise ConfigurationError(f"credentials_ref {ref!r}: environment variable {name!r} is not set")
        secret = os.environ[name].strip()
    elif ref.startswith("file://"):
        path = ref[len("file://") :]
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise ConfigurationError(f"credentials_ref {ref!r}: {exc.strerror}") from None
        if len(raw) > MAX_SECRET_BYTES:
            raise ConfigurationError(f"credentials_ref {ref!r}: larger than {MAX_SECRET_BYTES} bytes")
        secret = raw.decode("utf-8", errors="replace").strip()
    else:
        scheme = ref.split("://", 1)[0] if "://" in ref else ref[:20]
        raise ConfigurationError(
            f"credentials_ref scheme {scheme!r} cannot be resolved here; use env://NAME or file:///path"
        )
    if not secret or not secret.isprintable():
        raise ConfigurationError(f"credentials_ref {ref!r}: the secret must be one line of printable text")
    return secret


def auth_headers(ref: str) -> dict[str, str]:
    """``{"Authorization": secret}``, or ``{}`` for a public source."""
    secret = resolve_secret(ref)
    return {"Authorization": secret} if secret else {}
