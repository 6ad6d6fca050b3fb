"""Google OAuth access tokens refreshed from a refresh token.

A Drive source's secret (``credentials_ref``) is either the ``Authorization``
header value (``Bearer ya29...``: an access token, which expires within an
hour) or Google's *authorized user* JSON, the shape ``gcloud auth
application-default login`` writes::

    {"type": "authorized_user", "client_id": "...apps.googleusercontent.com",
     "client_secret": "...", "refresh_token": "1//..."}

With the JSON, :class:`RefreshingToken` exchanges the refresh token at
Google's documented token endpoint (``POST https://oauth2.googleapis.com/token``,
``grant_type=refresh_token``; developers.google.com/identity/protocols/oauth2/web-server#offline)
for an access token, keeps it until a minute before ``expires_in`` runs out,
and refreshes it again then, or at once when the API answers 401. Only that
endpoint is ever called: a ``token_uri`` naming another one is refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragsync.errors import ConfigurationError, FetchError

GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"
EARLY_S = 60.0


@dataclass(frozen=True)
class RefreshCredentials:
    """An OAuth client and a user's refresh token."""

    client_id: str
    client_secret: str
    refresh_token: str

    def __repr__(self) -> str:  # never print the secrets
        return f"RefreshCredentials(client_id={self.client_id!r})"


def refresh_credentials(secret: str) -> RefreshCredentials | None:
    """The refresh credentials in a secret, or None when the secret is a
    header value (not a JSON object).

    Raises:
        ConfigurationError: a JSON object without the three fields, or with
            another token endpoint than Google's.
    """
    if not secret.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(secret)
    except ValueError:
        raise ConfigurationError("the OAuth credentials are not valid JSON") from None
    fields = ("client_id", "client_secret", "refresh_token")
    if not isinstance(data, dict) or not all(isinstance(data.get(f), str) and data[f] for f in fields):
        raise ConfigurationError("OAuth credentials need client_id, client_secret and refresh_token")
    if data.get("type", "authorized_user") != "authorized_user":
        raise ConfigurationError("only 'authorized_user' OAuth credentials are supported")
    if data.get("token_uri", GOOGLE_TOKEN_URL) != GOOGLE_TOKEN_URL:
        raise ConfigurationError(f"OAuth credentials may only name {GOOGLE_TOKEN_URL}")
    return RefreshCredentials(data["client_id"], data["client_secret"], data["refresh_token"])


class RefreshingToken:
    """An access token kept fresh from :class:`RefreshCredentials`.

    Args:
        credentials: the client and refresh token.
        transport: ``httpx`` transport (tests replay recorded answers).
        clock: epoch seconds.
    """

    def __init__(
        self,
        credentials: RefreshCredentials,
        *,
        transport: Any = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
    ) -> None:
        self.credentials = credentials
        self.transport = transport
        self.clock = clock
        self.timeout_s = timeout_s
        self.access_token = ""
        self.expires_at = 0.0
        self.refreshes = 0
        self._lock = threading.Lock()

    def header(self, *, force: bool = False) -> str:
        """``Bearer <access token>``, refreshed first when it is missing, about
        to expire, or ``force`` (the API refused it).

        Raises:
            ConfigurationError: Google refused the refresh token or client
                (``invalid_grant``, ``invalid_client``): the credentials must change.
            FetchError: the token endpoint is unreachable or failing (transient).
        """
        with self._lock:
            if force or not self.access_token or self.clock() >= self.expires_at - EARLY_S:
                self._refresh()
            return f"Bearer {self.access_token}"

    def _refresh(self) -> None:
        import httpx

        form = {
            "grant_type": "refresh_token",
            "client_id": self.credentials.client_id,
            "client_secret": self.credentials.client_secret,
            "refresh_token": self.credentials.refresh_token,
        }
        try:
            with httpx.Client(transport=self.transport, timeout=self.timeout_s, follow_redirects=False) as c:
                answer = c.post(GOOGLE_TOKEN_URL, data=form, headers={"Accept": "application/json"})
                answer.read()
        except httpx.HTTPError as exc:
            raise FetchError(f"Google's token endpoint is unreachable: {type(exc).__name__}") from None
        if answer.status_code in (400, 401):
            try:
                reason = str(answer.json().get("error", "refused"))
            except (ValueError, AttributeError):
                reason = "refused"
            raise ConfigurationError(f"Google refused the Drive source's OAuth refresh token: {reason}")
        if answer.status_code != 200:
            raise FetchError(f"Google's token endpoint answered HTTP {answer.status_code}")
        try:
            data = answer.json()
            token = str(data["access_token"])
            lifetime = float(data.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise FetchError("Google's token endpoint answered no access_token") from None
        if not token or not token.isprintable() or " " in token:
            raise FetchError("Google's token endpoint answered an unusable access_token")
        self.access_token = token
        self.expires_at = self.clock() + lifetime
        self.refreshes += 1
