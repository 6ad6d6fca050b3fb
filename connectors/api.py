"""Calling a source's HTTP API politely: rate limits, retries, JSON.

API connectors (wiki, drive, tickets) read through :class:`ApiClient`, a thin
policy over ``connectors.reader.LocatedHttpClient`` (which confines every
request and redirect to the source's location and bounds bytes and time).

Policy:
- ``429 Too Many Requests`` and ``503 Service Unavailable`` are rate-limit
  answers, and so is what a connector's ``is_rate_limited`` recognises
  (Google's ``403`` with reason ``rateLimitExceeded``/``userRateLimitExceeded``):
  ``Retry-After`` (seconds or an HTTP date; else Jira's ``X-RateLimit-Reset``
  time; else exponential backoff) is honoured by sleeping when it is at most
  ``retry_cap_s``; a longer wait, one that would take the request's waits past
  ``max_wait_s`` in total, or one more limited answer after ``max_attempts``,
  raises :class:`RateLimitedError` carrying the wait, so the sync is
  rescheduled instead of holding a worker (nothing is skipped: a listing that
  raises is not complete);
- other 5xx answers and unreachable hosts are retried with exponential
  backoff up to ``max_attempts``, then raise ``FetchError``;
- 401/403 raise :class:`AccessDeniedError` at once (credentials or sharing
  must change: retrying cannot help), except that a client with a refreshing
  OAuth token (``connectors.oauth``) refreshes it once on a 401 and retries.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from connectors.credentials import auth_headers
from connectors.location import Location, _refuse
from connectors.oauth import RefreshingToken, refresh_credentials
from connectors.reader import FetchLimits, HttpStatusError, LocatedHttpClient
from ragsync.decisions import backoff_delay
from ragsync.errors import FetchError
from ragsync.query.identity import Identities

DEFAULT_RETRY_CAP_S = 60.0
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_MAX_WAIT_S = 180.0
RATE_LIMIT_STATUSES = (429, 503)


class RateLimitedError(FetchError):
    """The source asked us to wait longer than we wait in place.

    Attributes:
        retry_after_s: seconds the source asked for (0 when it gave none).
    """

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class AccessDeniedError(FetchError):
    """The source refused the credentials (401) or the caller may not read
    the resource (403)."""

    permanent = True


def parse_reset_time(value: str, *, now: float | None = None) -> float | None:
    """Seconds until an ISO 8601 time (Jira's ``X-RateLimit-Reset``), or None."""
    from datetime import datetime

    text = (value or "").strip()
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def parse_retry_after(value: str, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header.

    Args:
        value: delta-seconds (``"120"``) or an HTTP date.
        now: the current time (epoch seconds), for tests.

    Returns:
        Non-negative seconds, or None when the header is absent or malformed.
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class ApiClient:
    """JSON and bytes from one source's API, with the retry policy above.

    Args:
        http: the located client (confinement and limits live there).
        retry_cap_s: longest ``Retry-After`` honoured by sleeping.
        max_attempts: attempts per request before giving up.
        max_wait_s: most seconds one request may spend sleeping in all.
        sleep: ``time.sleep`` (tests pass a recorder).
        is_rate_limited: tells a rate-limit answer sent with another status
            (Google APIs answer some with 403 and a reason in the body).
        token: an OAuth token refreshed as it expires (its header replaces
            the ``Authorization`` the client was made with).
    """

    def __init__(
        self,
        http: LocatedHttpClient,
        *,
        retry_cap_s: float = DEFAULT_RETRY_CAP_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
        is_rate_limited: Callable[[Any], bool] | None = None,
        token: RefreshingToken | None = None,
    ) -> None:
        if max_attempts < 1 or retry_cap_s < 0 or max_wait_s < 0:
            raise ValueError("max_attempts must be >= 1, retry_cap_s and max_wait_s >= 0")
        self.http = http
        self.retry_cap_s = retry_cap_s
        self.max_attempts = max_attempts
        self.max_wait_s = max_wait_s
        self.sleep = sleep
        self.is_rate_limited = is_rate_limited
        self.token = token

    @property
    def base_url(self) -> str:
        return self.http.location.base_url

    def close(self) -> None:
        self.http.close()

    def get(self, uri: str, params: Mapping[str, Any] | None = None) -> Any:
        """A successful (2xx) ``httpx.Response`` with its body read.

        Raises:
            RateLimitedError: still limited, or asked to wait past the cap.
            AccessDeniedError: 401 or 403.
            HttpStatusError: another 4xx status (404 included).
            FetchError: unreachable or 5xx after every attempt.
            OutsideLocationError / TooLargeError / FetchTimeoutError: from
                the located client (never retried).
        """
        attempt = 0
        waited = 0.0
        refreshed = False
        while True:
            attempt += 1
            if self.token is not None:
                self.http.set_header("Authorization", self.token.header())
            try:
                response = self.http.get(uri, params)
            except FetchError as exc:
                delay = backoff_delay(attempt, base_s=1.0, cap_s=self.retry_cap_s)
                if (
                    type(exc) is not FetchError
                    or attempt >= self.max_attempts
                    or waited + delay > self.max_wait_s
                ):
                    raise  # a limit or a refusal is final; unreachable after retries
                self.sleep(delay)
                waited += delay
                continue
            status = int(response.status_code)
            if status < 400:
                return response
            if status in RATE_LIMIT_STATUSES or (self.is_rate_limited and self.is_rate_limited(response)):
                wait = parse_retry_after(response.headers.get("retry-after", ""))
                if wait is None:
                    wait = parse_reset_time(response.headers.get("x-ratelimit-reset", ""))
                delay = (
                    wait if wait is not None else backoff_delay(attempt, base_s=1.0, cap_s=self.retry_cap_s)
                )
                if (
                    delay > self.retry_cap_s
                    or attempt >= self.max_attempts
                    or waited + delay > self.max_wait_s
                ):
                    raise RateLimitedError(
                        f"{self.base_url} answered HTTP {status}: retry after {delay:.0f} s", delay
                    )
                self.sleep(delay)
                waited += delay
                continue
            if status == 401 and self.token is not None and not refreshed:
                refreshed = True  # the token may have been revoked early: one fresh one
                self.token.header(force=True)
                attempt -= 1
                continue
            if status in (401, 403):
                raise AccessDeniedError(f"{self.base_url} answered HTTP {status} for {_short(uri)}")
            if status >= 500:
                delay = backoff_delay(attempt, base_s=1.0, cap_s=self.retry_cap_s)
                if attempt < self.max_attempts and waited + delay <= self.max_wait_s:
                    self.sleep(delay)
                    waited += delay
                    continue
                raise FetchError(f"{self.base_url} answered HTTP {status} for {_short(uri)}")
            raise HttpStatusError(status, response.headers.get("retry-after", ""), _short(uri))

    def get_json(self, uri: str, params: Mapping[str, Any] | None = None) -> Any:
        """Decoded JSON of a successful answer (errors as for :meth:`get`).

        Raises:
            FetchError: the body is not JSON.
        """
        response = self.get(uri, params)
        try:
            return response.json()
        except ValueError as exc:
            raise FetchError(f"{_short(uri)} did not answer JSON: {exc}") from None

    def get_bytes(self, uri: str, params: Mapping[str, Any] | None = None) -> bytes:
        """The body of a successful answer (bounded by the client's limits)."""
        return bytes(self.get(uri, params).content)


def _short(uri: str) -> str:
    return uri if len(uri) <= 200 else uri[:200] + "..."


ClientFactory = Callable[..., ApiClient]


class ApiConnector:
    """Base of the connectors that read one HTTP API (Jira, MediaWiki, Drive).

    ``from_spec`` builds the clients the same way for each: the source's
    location (``spec.uri``, or ``default_uri`` when empty), the fetch limits,
    the ``User-Agent`` naming the connector and the source's credentials
    (``auth_headers``); a subclass says only how it uses them, in
    :meth:`from_clients`.

    Attributes:
        spec: the source.
        api: the client with the source's credentials.
        location: where every request of ``api`` is confined.
    """

    user_agent: ClassVar[str] = "ragsync"
    default_uri: ClassVar[str] = ""
    #: The secret may be Google's authorized-user JSON, exchanged for access
    #: tokens as they expire (``connectors.oauth``).
    oauth_refresh: ClassVar[bool] = False

    def __init__(self, spec: Any, api: ApiClient) -> None:
        self.spec = spec
        self.api = api
        self.location: Location = api.http.location

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        limits: FetchLimits,
        transport: Any = None,
        sleep: Any = time.sleep,
        **_: Any,
    ) -> Self:
        """The connector of ``spec`` (the registry calls this)."""
        location = Location.parse(spec.uri or cls.default_uri)
        auth = auth_headers(
            spec.credentials_ref,
            credentials_by=getattr(spec, "credentials_by", "tenant"),
            tenant_id=spec.tenant_id,
        )
        refresh = refresh_credentials(auth.get("Authorization", "")) if cls.oauth_refresh else None
        token = RefreshingToken(refresh, transport=transport) if refresh is not None else None

        def client(headers: Mapping[str, str], *, uri: str = "", **options: Any) -> ApiClient:
            sent = {"User-Agent": cls.user_agent, **headers}
            if token is not None:
                sent.pop("Authorization", None)  # set from the token before each request
            where = Location.parse(uri) if uri else location
            http = LocatedHttpClient(where, limits, sent, transport)
            return ApiClient(http, sleep=sleep, token=token, **options)

        return cls.from_clients(spec, client, auth)

    @classmethod
    def from_clients(cls, spec: Any, client: ClientFactory, auth: dict[str, str]) -> Self:
        """The connector, given ``client(headers, *, uri="", **ApiClient options)``
        (which adds the ``User-Agent``; ``uri``, a fixed address of the
        service's other API, confines that client there instead of the
        source's location) and the source's credential headers (empty when
        anonymous)."""
        raise NotImplementedError

    def list_identities(self) -> Identities | None:
        """None: this API's users and groups are not listed (a subclass that
        lists them overrides this; see ``connectors.base.Connector``)."""
        return None

    def close(self) -> None:
        self.api.close()

    def _url(self, path: str) -> str:
        return f"{self.location.base_url}/{path}"

    def _own_numbered(self, item: Any, address: Callable[[int], str]) -> int:
        """The number an item's object id is, when the item's address is the
        one this connector makes for that object (``address(number)``): an
        event naming another object, another call or another host is refused.

        Raises:
            OutsideLocationError: the id is not a number, or the address is another.
        """
        if not item.source_object_id.isdigit():
            raise _refuse(item.uri)
        number = int(item.source_object_id)
        if self.location.resolve(item.uri) != self.location.resolve(address(number)):
            raise _refuse(item.uri)
        return number
