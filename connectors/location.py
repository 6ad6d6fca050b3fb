"""A source's location, and the one rule that decides whether an address lies under it.

Every source declares where its content lives (``ragsync sources add --uri``,
``POST /v1/sources`` with ``uri``, or the folder a backfill is given): a
local folder, a ``gs://`` or ``s3://`` prefix, or an HTTP(S) API base URL.
Events and listings name documents by address; an address is accepted only if,
after normalisation, it lies under the location. This module is pure string
work (it never touches the file system; :func:`real_location` alone resolves
a root's symlinks, for the allow-list and reserved checks), so the answer for an address outside
the location is the same whether or not something exists there: there is no
existence oracle. ``connectors.reader`` then re-checks the real path
(symlinks) when it opens the file.

Normalisation:
- scheme case (``FILE:///x`` is ``file:///x``); ``file://localhost/x`` and
  ``file:///x`` are the local path ``/x``; ``file://otherhost/x`` is refused;
- percent-encoding is decoded once in ``file://`` and ``http(s)://`` URIs (a
  plain path is literal: ``/a/%2e%2e`` names a file called ``%2e%2e``);
- ``.``, ``..`` and duplicate slashes are collapsed for local paths and URL
  paths; object-store keys are literal, so a key with a ``.`` or ``..``
  segment or an empty segment is refused rather than reinterpreted;
- a relative path is taken relative to the location's root.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ragsync.errors import ConfigurationError, InvalidEventError, OutsideLocationError

LOCAL = "file"
OBJECT_SCHEMES = ("gs", "s3")
HTTP_SCHEMES = ("http", "https")

MAX_URI_CHARS = 4096
"""Longer addresses are refused before any other work (PATH_MAX is 4096)."""

# Local roots that are never a source's location: pseudo file systems and the
# whole host. The operator may still declare any other folder.
_FORBIDDEN_LOCAL_ROOTS = ("/", "/proc", "/sys", "/dev", "/run", "/boot")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_REFUSED = "is outside the source's location"


def _refuse(uri: str) -> OutsideLocationError:
    # One message for every refusal, whatever the reason, so the answer says
    # nothing about what exists outside the location.
    return OutsideLocationError(f"content_uri {_shown(uri)!r} {_REFUSED}")


def _shown(uri: str) -> str:
    return uri if len(uri) <= 200 else uri[:200] + "..."


def _clean_local(path: str) -> str:
    """Collapse ``//``, ``.`` and ``..`` of an absolute POSIX path."""
    path = re.sub(r"/+", "/", path)
    out = posixpath.normpath(path)
    return "/" if out in ("", ".") else out


def _split_scheme(uri: str) -> tuple[str, str]:
    match = _SCHEME.match(uri)
    if match is None or len(match.group(1)) == 1:  # "C:" is not a scheme
        return "", uri
    return match.group(1).lower(), uri[match.end() :]


# A host name, or a host and port, where a location starts (an address given
# without its scheme: ``wiki.example.com/w/api.php``, ``localhost:8931/api.php``).
_HOST = re.compile(r"^(localhost|\d{1,3}(\.\d{1,3}){3}|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)(:\d+)?$")
_LOOPBACK = ("localhost", "127.")


def _refuse_schemeless_host(uri: str, scheme: str, rest: str) -> None:
    """Refuse an API address given without ``http(s)://``, saying so (it was
    taken for a relative folder, or ``localhost`` for a scheme).

    Raises:
        ConfigurationError: ``uri`` starts with a host name (or host:port).
    """
    head = uri.split("/", 1)[0]
    looks_like_host = (scheme == "" and _HOST.match(head)) or (
        scheme not in ("", LOCAL, *OBJECT_SCHEMES, *HTTP_SCHEMES) and re.match(r"^\d+(/|$)", rest)
    )
    if looks_like_host:
        guess = ("http://" if head.startswith(_LOOPBACK) else "https://") + uri
        raise ConfigurationError(
            f"{uri!r} has no scheme: an API's location (a wiki's api.php, Jira's base URL) starts with "
            f"http:// or https:// (did you mean {guess!r}?)"
        )


@dataclass(frozen=True)
class Location:
    """Where one source's content lives.

    Attributes:
        scheme: ``file``, ``gs``, ``s3``, ``http`` or ``https``.
        root: the normalised root: an absolute path for ``file``;
            ``bucket/prefix`` for object stores; ``host[:port]/path`` for HTTP.
    """

    scheme: str
    root: str

    @classmethod
    def parse(cls, uri: str) -> Location:
        """The location declared by ``uri``.

        Raises:
            ConfigurationError: not a usable location (relative folder, a
                pseudo file system or ``/``, an unknown scheme, a bucket
                without a name, a URL with credentials in it).
        """
        if not uri or len(uri) > MAX_URI_CHARS or "\x00" in uri:
            raise ConfigurationError("a source location must be a folder, gs://, s3:// or http(s):// address")
        scheme, rest = _split_scheme(uri.strip())
        _refuse_schemeless_host(uri.strip(), scheme, rest)
        if scheme in ("", LOCAL):
            path = cls._local_path(uri.strip(), scheme, rest)
            if path is None or not path.startswith("/"):
                raise ConfigurationError(
                    f"{uri!r} is not a location: a folder is an absolute path (/srv/docs); other "
                    "locations start with their scheme (https://host/w/api.php, gs://bucket/prefix, s3://...)"
                )
            path = _clean_local(path)
            for bad in _FORBIDDEN_LOCAL_ROOTS:
                if path == bad or (bad != "/" and path.startswith(bad + "/")):
                    raise ConfigurationError(f"{path!r} cannot be a source location (system folder)")
            return cls(LOCAL, path)
        if scheme in OBJECT_SCHEMES:
            root = rest.lstrip("/").rstrip("/") if rest.startswith("//") else ""
            bucket = root.split("/", 1)[0]
            if not bucket or not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,221}", bucket):
                raise ConfigurationError(f"{uri!r}: give {scheme}://bucket[/prefix]")
            if not cls._key_ok(root):
                raise ConfigurationError(f"{uri!r}: '.', '..' and empty segments are not allowed in a prefix")
            return cls(scheme, root)
        if scheme in HTTP_SCHEMES:
            parts = urlsplit(uri.strip())
            if parts.username or parts.password:
                raise ConfigurationError("put credentials in credentials_ref, not in the source URL")
            if not parts.hostname:
                raise ConfigurationError(f"{uri!r}: an API base URL needs a host")
            return cls(scheme, cls._http_root(parts.hostname, parts.port, scheme, parts.path))
        raise ConfigurationError(
            f"unsupported location scheme {scheme!r}: use a folder, gs://, s3:// or http(s)://"
        )

    # -- address resolution ---------------------------------------------------

    def resolve(self, uri: str) -> str:
        """The normalised address of ``uri`` if it lies under this location.

        Args:
            uri: an address from an event or a listing: a path (absolute, or
                relative to the root), ``file://``, ``gs://``, ``s3://`` or
                ``http(s)://``.

        Returns:
            A plain absolute path for local locations; ``scheme://bucket/key``
            or ``scheme://host/path?query`` otherwise.

        Raises:
            OutsideLocationError: the address is malformed or lies outside
                (the message is the same for every reason).
            InvalidEventError: a URL or object key with raw control
                characters (a local file name may have them: it is read).
        """
        if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS or "\x00" in uri:
            raise _refuse(str(uri)[:200])
        if self.scheme != LOCAL and any(ord(c) < 32 or ord(c) == 127 for c in uri):
            # A true reason (a file name may hold any byte but NUL and '/'; a
            # URL or object key from an event may not hold raw control characters).
            raise InvalidEventError(
                f"content_uri {_shown(uri)!r} has control characters: not a valid address"
            )
        scheme, rest = _split_scheme(uri)
        if self.scheme == LOCAL:
            path = self._local_path(uri, scheme, rest) if scheme in ("", LOCAL) else None
            if path is None:
                raise _refuse(uri)
            if not path.startswith("/"):
                path = self.root + "/" + path
            path = _clean_local(path)
            if "\x00" in path or not self.contains_path(path):
                raise _refuse(uri)
            return path
        if self.scheme in OBJECT_SCHEMES:
            if scheme == "":
                key = self.root + "/" + uri.lstrip("/")
            elif scheme == self.scheme and rest.startswith("//"):
                key = rest[2:]
            else:
                raise _refuse(uri)
            if not self._key_ok(key) or not (key == self.root or key.startswith(self.root + "/")):
                raise _refuse(uri)
            return f"{self.scheme}://{key}"
        # HTTP(S) API locations.
        if scheme == "":
            uri = self.base_url.rstrip("/") + "/" + uri.lstrip("/")
            scheme = self.scheme
        if scheme != self.scheme:
            raise _refuse(uri)
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError as exc:
            raise _refuse(uri) from exc
        if parts.username or parts.password or not parts.hostname:
            raise _refuse(uri)
        root = self._http_root(parts.hostname, port, scheme, parts.path)
        if "\x00" in root or not (root == self.root or root.startswith(self.root.rstrip("/") + "/")):
            raise _refuse(uri)
        return f"{scheme}://{root}" + (f"?{parts.query}" if parts.query else "")

    def contains(self, uri: str) -> bool:
        """True when ``uri`` resolves under this location."""
        try:
            self.resolve(uri)
        except InvalidEventError:  # OutsideLocationError included
            return False
        return True

    def contains_path(self, path: str) -> bool:
        """For local locations: is the normalised absolute ``path`` the root
        or below it?"""
        return path == self.root or path.startswith(self.root.rstrip("/") + "/")

    @property
    def uri(self) -> str:
        """The location as an address: a plain path, or ``scheme://root``."""
        return self.root if self.scheme == LOCAL else f"{self.scheme}://{self.root}"

    @property
    def base_url(self) -> str:
        """``scheme://root`` (HTTP locations)."""
        return f"{self.scheme}://{self.root}"

    def overlaps(self, other: Location) -> bool:
        """True when one location contains the other."""
        if self.scheme != other.scheme:
            return False
        a, b = self.root.rstrip("/"), other.root.rstrip("/")
        return a == b or a.startswith(b + "/") or b.startswith(a + "/")

    # -- helpers ----------------------------------------------------------------

    @staticmethod
    def _local_path(uri: str, scheme: str, rest: str) -> str | None:
        """The path of a plain path or a ``file:`` URI; None when refused."""
        if scheme == "":
            return uri
        if rest.startswith("//"):
            authority, sep, path = rest[2:].partition("/")
            if authority.lower() not in ("", "localhost"):
                return None  # another host's file
            rest = "/" + path if sep else "/"
        elif not rest.startswith("/"):
            return None
        try:
            return unquote(rest, errors="surrogateescape")
        except (UnicodeDecodeError, ValueError):
            return None

    @staticmethod
    def _key_ok(key: str) -> bool:
        segments = key.split("/")
        return all(s not in ("", ".", "..") for s in segments)

    @staticmethod
    def _http_root(host: str, port: int | None, scheme: str, path: str) -> str:
        default = 443 if scheme == "https" else 80
        netloc = host.lower() + (f":{port}" if port and port != default else "")
        decoded = unquote(path or "/")
        clean = _clean_local("/" + decoded)
        return netloc + ("" if clean == "/" else clean)


def real_location(location: Location) -> Location:
    """``location`` with a local root's symlinks resolved (what reads will
    really open); other schemes are already normalised strings.

    Every allow-list, reserved-location and ownership check compares these:
    a symlink inside a tenant's grant that points at another tenant's folder
    or at ragsync's own store is judged by where it leads, not by its name.
    """
    if location.scheme != LOCAL:
        return location
    return Location(LOCAL, _clean_local(os.path.realpath(location.root)))


REFUSED_LOCATION = (
    "is refused as a source location: give an absolute folder, gs:// or s3:// prefix or http(s) URL "
    "that is its own real path (no symbolic link on the way) and lies apart from ragsync's own home "
    "and object store"
)
"""The one wording of every refused source location (an overlap with ragsync's
own state, a link, an unusable address): the answer tells nobody which rule
refused it, so a tenant cannot probe where ragsync's state lives."""


def refused_location(uri: str) -> ConfigurationError:
    """The error for a refused source location ``uri`` (:data:`REFUSED_LOCATION`)."""
    return ConfigurationError(f"source location {_shown(uri)!r} {REFUSED_LOCATION}")


def source_location(uri: str, *, reserved: tuple[str, ...] = ()) -> Location:
    """The location a source declares, checked against ragsync's own state.

    Called when a source is registered (with its real path: see
    :func:`real_location`) and again before each read of its content.

    Args:
        uri: the declared location.
        reserved: ragsync's own folders and prefixes (its home and object
            store: raw copies and parsed elements of every tenant); a source
            location may neither lie inside one nor contain one, compared by
            real paths (a link does not hide an overlap).

    Raises:
        ConfigurationError: not a usable location, it overlaps ``reserved``,
            or a local root that is not its own real path (a link was put in
            its place or on its way since it was registered); the overlap and
            the link are refused in one wording (:func:`refused_location`).
    """
    location = Location.parse(uri)
    real = real_location(location)
    for own in reserved:
        try:
            other = Location.parse(own)
        except ConfigurationError:
            continue
        if any(
            mine.overlaps(theirs) for mine in (location, real) for theirs in (other, real_location(other))
        ):
            raise refused_location(location.uri)
    if real != location:
        raise refused_location(location.uri)
    return location


def register_location(uri: str, *, reserved: tuple[str, ...] = ()) -> Location:
    """The location to store for a source that declares ``uri``: its real
    path for a folder (links resolved), checked by :func:`source_location`.

    Raises:
        ConfigurationError: as :func:`source_location`.
    """
    return source_location(real_location(Location.parse(uri)).uri, reserved=reserved)


def allowed_for_tenant(location: Location, patterns: tuple[str, ...], tenant_id: str) -> bool:
    """Whether a tenant may declare ``location`` (the API's rule; the operator's
    own tools may declare any location).

    Local locations compare by real paths: give ``location`` as
    :func:`real_location` made it; a granted folder's own links are resolved.

    Args:
        location: the declared location (already parsed); a local one is
            judged by its real path, against the grants' real paths.
        patterns: the operator's allowed locations; ``{tenant}`` in one
            stands for the caller's tenant id (``/srv/docs/{tenant}``,
            ``s3://corp-docs/{tenant}``, ``https://wiki.example.com/w``).
        tenant_id: the caller's tenant.

    Returns:
        True when the location lies under one of the patterns.
    """
    if not tenant_id or "/" in tenant_id or tenant_id in (".", ".."):
        return False
    location = real_location(location)
    for pattern in patterns:
        try:
            allowed = real_location(Location.parse(pattern.replace("{tenant}", tenant_id)))
        except ConfigurationError:
            continue
        if allowed.scheme == location.scheme and (
            location.root == allowed.root or location.root.startswith(allowed.root.rstrip("/") + "/")
        ):
            return True
    return False
