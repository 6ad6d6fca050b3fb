"""The one reader of source content: bounded, and confined to the source's location.

Every byte of a source's content enters ragsync through :class:`ContentReader`
(folders, ``gs://``/``s3://`` prefixes through a ``FileSystem``) or
:class:`LocatedHttpClient` (API connectors). Nothing else opens a source's
content; ``tests/test_trust_boundary.py`` checks that.

Local files are opened so that what is read is what was checked:

1. the address is normalised and must lie under the location
   (``Location.resolve``: pure string work, no existence oracle);
2. symlinks are resolved; the real path must lie under the real root (a link
   that stays inside is fine, one that leaves is refused, whether or not its
   target exists);
3. the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot block
   the open, a last-moment symlink cannot be followed), then the *open file*
   is checked: a regular file (no devices, FIFOs, sockets, directories), not on
   a pseudo file system (``/proc``, ``/sys``), and its path as the kernel sees
   it (``/proc/self/fd/N``) still under the root: a directory swapped for a
   symlink between the check and the open is caught here;
4. bytes are read in blocks up to the byte limit (never past it) and within
   the time limit.

Every refusal raises ``OutsideLocationError`` with the same message for every
reason; over a limit raises ``TooLargeError`` or ``FetchTimeoutError``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.base import FileSystem
from connectors.location import LOCAL, Location, _refuse
from ragsync.errors import FetchError, FetchTimeoutError, OutsideLocationError, TooLargeError

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_FETCH_TIMEOUT_S = 300.0
_BLOCK = 1024 * 1024

# statfs magic numbers of pseudo file systems whose "regular files" are not
# content (linux/magic.h).
_PSEUDO_FS = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x1373: "devfs",
    0x1CD1: "devpts",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0xCAFE4A11: "bpf",
    0x6E736673: "nsfs",
}


@dataclass(frozen=True)
class FetchLimits:
    """Limits on reading one document.

    Attributes:
        max_bytes: never read more than this many bytes of one document.
        timeout_s: wall-clock limit for reading one document.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_FETCH_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.timeout_s <= 0:
            raise ValueError("fetch limits must be positive")


def _fs_type(fd: int) -> int | None:
    """The statfs ``f_type`` of an open file, None when unknown (not Linux)."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:  # pragma: no cover - not Linux
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on x86_64
    if libc.fstatfs(fd, buf) != 0:  # pragma: no cover - fd is open
        return None
    return int(ctypes.c_long.from_buffer(buf).value)


def _read_bounded(blocks: Iterator[bytes], uri: str, limits: FetchLimits, started: float) -> bytes:
    """Join ``blocks`` but stop with an error past the byte or time limit
    (at most one block beyond ``max_bytes`` is ever held)."""
    parts: list[bytes] = []
    total = 0
    for block in blocks:
        total += len(block)
        if total > limits.max_bytes:
            raise TooLargeError(f"{uri} is larger than the {limits.max_bytes}-byte limit (not read further)")
        if time.monotonic() - started > limits.timeout_s:
            raise FetchTimeoutError(f"reading {uri} took longer than {limits.timeout_s:g} s")
        parts.append(block)
    return b"".join(parts)


def _too_large(uri: str, size: int, limits: FetchLimits) -> TooLargeError:
    return TooLargeError(f"{uri} is {size} bytes, above the {limits.max_bytes}-byte limit (not read)")


class ContentReader:
    """Reads documents of one source, under its location, within limits.

    Args:
        location: the source's declared location.
        limits: byte and time limits per document.
        fs: the file system for ``gs://``/``s3://`` locations (transforms pass
            Beam's FileSystems through ``transforms.io.BeamFileSystem``);
            unused for local folders.
    """

    def __init__(self, location: Location, limits: FetchLimits | None = None, fs: FileSystem | None = None):
        self.location = location
        self.limits = limits or FetchLimits()
        self.fs = fs
        self._real_root: str | None = None

    @property
    def real_root(self) -> str:
        """The location's root with its own symlinks resolved."""
        if self._real_root is None:
            self._real_root = os.path.realpath(self.location.root)
        return self._real_root

    def resolve(self, uri: str) -> str:
        """The checked address of ``uri`` (see ``Location.resolve``); for local
        locations the real path, symlinks resolved. Raises OutsideLocationError."""
        address = self.location.resolve(uri)
        if self.location.scheme != LOCAL:
            return address
        real = os.path.realpath(address)
        if not self._under_real_root(real):
            raise _refuse(uri)
        return real

    def _under_real_root(self, path: str) -> bool:
        root = self.real_root
        return path == root or path.startswith(root.rstrip("/") + "/")

    def read(self, uri: str) -> bytes:
        """All bytes of the document at ``uri``.

        Raises:
            OutsideLocationError: not under the location, or not a regular file.
            TooLargeError: more than ``limits.max_bytes`` bytes.
            FetchTimeoutError: reading took longer than ``limits.timeout_s``.
            FetchError: the object cannot be read (missing, no access):
                retried with backoff for events.
        """
        started = time.monotonic()
        if self.location.scheme == LOCAL:
            return self._read_local(uri, started)
        if self.location.scheme in ("gs", "s3"):
            return self._read_object(uri, started)
        raise _refuse(uri)  # HTTP content is read by LocatedHttpClient

    # -- local folders ------------------------------------------------------------

    def _read_local(self, uri: str, started: float) -> bytes:
        real = self.resolve(uri)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(real, flags)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _refuse(uri) from None  # a symlink swapped in, a socket, a directory
            raise FetchError(f"cannot read {uri}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or _fs_type(fd) in _PSEUDO_FS:
                raise _refuse(uri)
            try:
                seen = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # pragma: no cover - no /proc: the realpath check stands
                seen = real
            if not self._under_real_root(seen):
                raise _refuse(uri)
            if st.st_size > self.limits.max_bytes:
                raise _too_large(uri, st.st_size, self.limits)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return _read_bounded(iter(lambda: os.read(fd, _BLOCK), b""), uri, self.limits, started)
        finally:
            os.close(fd)

    # -- object stores ------------------------------------------------------------

    def _read_object(self, uri: str, started: float) -> bytes:
        address = self.resolve(uri)
        if self.fs is None:
            raise FetchError(f"no file system configured to read {self.location.scheme}:// objects")
        infos = self.fs.match(address)
        exact = [i for i in infos if i.path == address]
        if exact and exact[0].size > self.limits.max_bytes:
            raise _too_large(uri, exact[0].size, self.limits)
        try:
            fh = self.fs.open(address)
        except Exception as exc:  # noqa: BLE001 - every client error means "cannot read"
            raise FetchError(f"cannot read {uri}: {exc}") from None
        with fh:
            return _read_bounded(iter(lambda: fh.read(_BLOCK), b""), uri, self.limits, started)

    # -- listing --------------------------------------------------------------------

    def walk(self, *, include_refused: bool = False) -> Iterator[tuple[str, os.stat_result | None]]:
        """Every regular file under a local location, as (path, stat).

        Symlinks are followed only when their target is inside the root (files
        and directories alike); a directory is visited once (loops end).
        Devices, FIFOs, sockets and links leaving the root (dangling or not:
        a link is judged by where it leads, so the listing tells nothing
        about what exists outside) are never read: with ``include_refused``
        they are yielded as (path, None) so the caller can report each one,
        else skipped; a dangling link inside the root is skipped. Paths keep undecodable
        bytes as surrogate escapes (``os.fsdecode``). Order: sorted by path.

        Raises:
            FetchError: the root cannot be listed (missing, no access): a
                listing that fails must never be taken as complete.
        """
        if self.location.scheme != LOCAL:
            raise ValueError("walk() lists local folders; object stores are listed by their FileSystem")
        root = self.real_root
        try:
            root_stat = os.stat(root)
        except OSError as exc:
            raise FetchError(f"cannot list {self.location.root}: {exc.strerror}") from None
        if not stat.S_ISDIR(root_stat.st_mode):
            raise FetchError(f"{self.location.root} is not a folder")
        seen_dirs = {(root_stat.st_dev, root_stat.st_ino)}
        yield from self._walk_dir(root, seen_dirs, include_refused)

    def _walk_dir(
        self, directory: str, seen_dirs: set[tuple[int, int]], include_refused: bool
    ) -> Iterator[tuple[str, os.stat_result | None]]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise FetchError(f"cannot list {directory}: {exc.strerror}") from None
        for entry in entries:
            path = os.path.join(directory, entry.name)
            # A link is judged by where it leads before anything is looked up
            # there: one leaving the root is refused whether or not its target
            # exists (skipping only the dangling ones would tell a tenant which
            # outside paths exist).
            if entry.is_symlink() and not self._under_real_root(os.path.realpath(path)):
                if include_refused:
                    yield path, None
                continue
            try:
                st = os.stat(path) if entry.is_symlink() else entry.stat(follow_symlinks=False)
            except OSError:
                continue  # a dangling link inside the root, or a file removed meanwhile
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in seen_dirs:
                    continue
                seen_dirs.add(key)
                yield from self._walk_dir(path, seen_dirs, include_refused)
            elif stat.S_ISREG(st.st_mode):
                yield path, st
            elif include_refused:
                yield path, None  # a device, FIFO or socket


class LocatedHttpClient:
    """HTTP GETs confined to an API location, bounded in bytes and time.

    Used by API connectors (wiki, drive, tickets) for both API calls and
    content. Redirects are followed by hand, at most five, and only while they
    stay under the location; credentials never travel to another host.

    Args:
        location: an ``http``/``https`` location (the API base URL).
        limits: byte and time limits per response.
        headers: sent with every request (authentication, user agent).
        transport: an ``httpx`` transport (tests may pass a mock transport
            replaying recorded responses).
    """

    def __init__(
        self,
        location: Location,
        limits: FetchLimits | None = None,
        headers: Mapping[str, str] | None = None,
        transport: Any = None,
    ) -> None:
        import httpx

        if location.scheme not in ("http", "https"):
            raise ValueError("LocatedHttpClient needs an http(s) location")
        self.location = location
        self.limits = limits or FetchLimits()
        self._client = httpx.Client(
            headers=dict(headers or {}),
            timeout=httpx.Timeout(min(60.0, self.limits.timeout_s)),
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def set_header(self, name: str, value: str) -> None:
        """Send ``name: value`` with every later request (a refreshed token)."""
        self._client.headers[name] = value

    def get(self, uri: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET ``uri`` (absolute, or relative to the base URL) and return the
        ``httpx.Response`` with its body read (bounded).

        Raises:
            OutsideLocationError: the address or a redirect leaves the location.
            TooLargeError / FetchTimeoutError: over a limit.
            FetchError: the server could not be reached.
        """
        import httpx

        started = time.monotonic()
        url = self.location.resolve(uri)
        for _ in range(6):
            try:
                with self._client.stream("GET", url, params=params) as response:
                    if response.is_redirect:
                        target = str(response.url.join(response.headers.get("location", "")))
                        url = self.location.resolve(target)
                        params = None
                        continue
                    declared = response.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > self.limits.max_bytes:
                        raise _too_large(uri, int(declared), self.limits)
                    raw = _read_bounded(response.iter_raw(_BLOCK), uri, self.limits, started)
                    response._content = _decode_body(response, raw, self.limits.max_bytes)
                    return response
            except httpx.TimeoutException as exc:
                raise FetchTimeoutError(f"{uri}: no answer within the time limit ({exc})") from None
            except httpx.TransportError as exc:
                raise FetchError(f"cannot reach {self.location.base_url}: {exc}") from None
        raise FetchError(f"{uri}: too many redirects")

    def get_json(self, uri: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET and decode JSON; non-2xx raises ``HttpStatusError``."""
        response = self.get(uri, params)
        if response.status_code >= 400:
            raise HttpStatusError(response.status_code, response.headers.get("retry-after", ""), uri)
        try:
            return response.json()
        except ValueError as exc:
            raise FetchError(f"{uri} did not answer JSON: {exc}") from None


def _decode_body(response: Any, raw: bytes, max_bytes: int) -> bytes:
    """Undo the content encoding of a body read with ``iter_raw``, never
    expanding past ``max_bytes`` (a compressed bomb is refused)."""
    encoding = response.headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "deflate"):
        import zlib

        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        d = zlib.decompressobj(wbits)
        out = d.decompress(raw, max_bytes + 1)
        if d.unconsumed_tail or len(out) > max_bytes:
            raise TooLargeError("a compressed response expands past the byte limit")
        return out
    return raw


class HttpStatusError(FetchError):
    """An API answered with an error status.

    Attributes:
        status: the HTTP status code.
        retry_after: the ``Retry-After`` header ('' when absent).
    """

    def __init__(self, status: int, retry_after: str, uri: str) -> None:
        super().__init__(f"{uri} answered HTTP {status}")
        self.status = status
        self.retry_after = retry_after


__all__ = ["ContentReader", "FetchLimits", "HttpStatusError", "LocatedHttpClient", "OutsideLocationError"]
