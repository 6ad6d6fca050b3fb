"""Archives (.zip, .tar, .tar.gz/.tgz, .gz): members become attachments, the listing is the text.

Nothing is written to disk: members are read into memory under limits that
hold for the whole expansion, nested archives included (``ArchiveLimits``):

* total expanded bytes (``max_bytes``), counted while reading, never from the
  sizes an archive declares (those can lie);
* member count (``max_members``);
* nesting depth (``max_depth``): an archive inside an archive is expanded in
  the same pass, its members named ``outer/inner.zip/member``; containers that
  would put members deeper than the limit refuse;
* compression ratio (``max_ratio``): a member (or a whole ``.gz``) that
  expands past 1 MiB may be at most this many times its compressed size.

Any limit crossed raises ``ArchiveBombError`` (permanent, ``archive_bomb``).

Member names are hostile: they are only labels. Non-UTF-8 names are decoded
as cp437 (ZIP without the UTF-8 flag) or cp1252/latin-1, control characters
are dropped, ``\\`` becomes ``/`` and empty, ``.`` and ``..`` segments and
leading slashes are removed, so ``../../etc/passwd`` is the label
``etc/passwd``; duplicates get ``~2``, ``~3``... Directories, links and
special files are skipped.

The archive's own elements are its listing (a heading and one list item per
member with its size), so an archive is indexed (and findable by member
names) even when no member parses; each member then succeeds or dead-letters
as its own child document. An archive without members is ``no_text``.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from ragsync.errors import ArchiveBombError, CorruptDocumentError, NoTextError
from ragsync.model import Attachment, ElementType
from ragsync.parsing._common import RawElement, RawParse

MIME_ZIP = "application/zip"
MIME_TAR = "application/x-tar"
MIME_GZIP = "application/gzip"
#: Types this module expands (``ragsync.ingest.detect`` reports the first three; the rest are aliases).
ARCHIVE_MIMES = (MIME_ZIP, MIME_TAR, MIME_GZIP, "application/x-gzip", "application/x-zip-compressed")
_RATIO_FLOOR = 1 << 20  # ratios are only judged past 1 MiB expanded
_CHUNK = 1 << 16


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on one archive's expansion (``ragsync.config.Settings.archive_limits``).

    Attributes:
        max_bytes: total bytes all members may expand to.
        max_members: number of members (files) over all nesting levels.
        max_depth: deepest container nesting a member may sit at (1 = a member
            of the top-level document).
        max_ratio: largest expanded / compressed size of a member (or a
            ``.gz``) that expands past 1 MiB.
        max_attachments: attachments one message may carry as child
            documents; past it none is (each would be a document of its own:
            5,000 took 25 minutes), and the message says why.
        max_children_s: wall-clock seconds the children of one top-level
            document (attachments, members, at every nesting level) may
            spend being parsed; past it the parent stops expanding and each
            remaining child is a ``too_large`` dead letter saying so
            (``ragsync.ingest.children.expand_children``). Keep it below the
            parse timeout, which would otherwise fail the parent whole.
    """

    max_bytes: int = 512 * 1024 * 1024
    max_members: int = 10_000
    max_depth: int = 3
    max_ratio: float = 200.0
    max_attachments: int = 500
    max_children_s: float = 60.0


@dataclass
class _Budget:
    limits: ArchiveLimits
    name: str
    bytes_used: int = 0
    members: int = 0
    out: list[Attachment] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    listing: list[tuple[str, int]] = field(default_factory=list)

    def take_member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ArchiveBombError(f"{self.name}: more than {self.limits.max_members} members")

    def take_bytes(self, count: int) -> None:
        self.bytes_used += count
        if self.bytes_used > self.limits.max_bytes:
            raise ArchiveBombError(f"{self.name}: expands past {self.limits.max_bytes} bytes")

    def check_ratio(self, label: str, expanded: int, compressed: int) -> None:
        if expanded > _RATIO_FLOOR and expanded > self.limits.max_ratio * max(1, compressed):
            raise ArchiveBombError(
                f"{self.name}: {label} expands {expanded / max(1, compressed):.0f} times its compressed size "
                f"(limit {self.limits.max_ratio:g})"
            )


def safe_name(raw: str | bytes, *, legacy: str = "cp1252") -> str:
    """A member name as a harmless label.

    Bytes are decoded as UTF-8, else ``legacy`` (cp437 for ZIP), else
    latin-1; surrogate escapes in text are re-read the same way. Control
    characters are dropped, ``\\`` becomes ``/``, and empty, ``.`` and ``..``
    segments (so leading slashes and traversal) are removed.

    Args:
        raw: the name as the archive stores it.
        legacy: the 8-bit codec to try when the bytes are not UTF-8.

    Returns:
        The cleaned name, ``""`` when nothing is left.
    """
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    text = ""
    for codec in ("utf-8", legacy, "latin-1"):
        try:
            text = raw.decode(codec)
            break
        except UnicodeDecodeError:
            continue
    text = "".join(c for c in text if c >= " " and c != "\x7f").replace("\\", "/")
    return "/".join(p for p in text.split("/") if p.strip() and p not in (".", ".."))


def unique_label(name: str, seen: set[str]) -> str:
    """``name``, or ``name~N`` with the first N from 2 not in ``seen``; added to ``seen``."""
    candidate, n = name, 1
    while candidate in seen:
        n += 1
        candidate = f"{name}~{n}"
    seen.add(candidate)
    return candidate


def _read_limited(stream: IO[bytes], budget: _Budget, label: str, compressed: int) -> bytes:
    """Read a member stream chunk by chunk, charging the budget and checking the ratio as it grows."""
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        budget.take_bytes(len(chunk))
        budget.check_ratio(label, size, compressed)
        parts.append(chunk)
    return b"".join(parts)


def _zip_members(data: bytes, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise CorruptDocumentError(f"{budget.name}: not a readable ZIP: {exc}") from exc
    if len(infos) > budget.limits.max_members:
        raise ArchiveBombError(f"{budget.name}: {len(infos)} members, above {budget.limits.max_members}")
    with zf:
        for info in infos:
            if info.is_dir():
                continue
            if info.flag_bits & 0x1:
                yield safe_name(info.filename) + " (encrypted)", b""
                continue
            utf8 = bool(info.flag_bits & 0x800)
            raw = info.filename if utf8 else info.filename.encode("cp437", "replace")
            name = safe_name(raw, legacy="cp437")
            try:
                with zf.open(info) as stream:
                    body = _read_limited(stream, budget, name or "member", info.compress_size)
            except ArchiveBombError:
                raise
            except (
                zipfile.BadZipFile,
                OSError,
                ValueError,
                EOFError,
                zlib.error,
                NotImplementedError,
            ) as exc:  # noqa: E501
                raise CorruptDocumentError(f"{budget.name}: member {name!r} unreadable: {exc}") from exc
            yield name, body


def _tar_members(data: bytes, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    try:
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:", errorlevel=1)  # noqa: SIM115 - closed below
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CorruptDocumentError(f"{budget.name}: not a readable tar: {exc}") from exc
    with tf:
        try:
            for info in tf:
                if not info.isreg():
                    continue  # directories, links, devices: no bytes of their own
                name = safe_name(info.name)
                stream = tf.extractfile(info)
                if stream is None:
                    continue
                yield name, _read_limited(stream, budget, name or "member", max(1, info.size))
        except ArchiveBombError:
            raise
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise CorruptDocumentError(f"{budget.name}: tar unreadable: {exc}") from exc


def _gunzip(data: bytes, budget: _Budget) -> tuple[str, bytes]:
    """Decompress every gzip member of ``data`` under the budget; the stored file name, if any."""
    name = ""
    if len(data) >= 10 and data[3] & 0x08:  # FNAME: NUL-terminated original name
        start = 10 + (2 + struct.unpack("<H", data[10:12])[0] if data[3] & 0x04 else 0)
        end = data.find(b"\x00", start, start + 1024)
        if end > start:
            name = safe_name(data[start:end])
    parts: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest and (not parts or rest[:2] == b"\x1f\x8b"):  # later members; trailing junk is ignored
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = rest
            while pending:
                chunk = inflater.decompress(pending, _CHUNK)
                pending = inflater.unconsumed_tail
                size += len(chunk)
                budget.take_bytes(len(chunk))
                budget.check_ratio("the gzip stream", size, len(data))
                parts.append(chunk)
                if inflater.eof:
                    break
            if not inflater.eof:
                raise CorruptDocumentError(f"{budget.name}: gzip stream is truncated")
            rest = inflater.unused_data.lstrip(b"\x00")
    except zlib.error as exc:
        raise CorruptDocumentError(f"{budget.name}: not a readable gzip stream: {exc}") from exc
    return name, b"".join(parts)


def _kind(data: bytes, name: str) -> str:
    """``MIME_GZIP``/``MIME_TAR``/``MIME_ZIP`` for a member that is itself an archive, else ``""``.

    Signatures only (cheap for thousands of members); a ZIP is asked of
    ``detect_mime`` so DOCX/XLSX/ODF/EPUB members stay documents.
    """
    if data[:2] == b"\x1f\x8b":
        return MIME_GZIP
    if data[257:262] == b"ustar":
        return MIME_TAR
    if data[:4] == b"PK\x03\x04":
        from ragsync.ingest.detect import detect_mime

        return MIME_ZIP if detect_mime(data, name.rsplit("/", 1)[-1]) == MIME_ZIP else ""
    return ""


def _expand(data: bytes, mime: str, prefix: str, depth: int, budget: _Budget, filename: str) -> None:
    """Add the members of one archive (and, recursively, of archives inside it) to the budget."""
    if depth > budget.limits.max_depth:
        where = prefix or filename
        raise ArchiveBombError(
            f"{budget.name}: archives nested deeper than {budget.limits.max_depth} at {where!r}"
        )
    if mime == MIME_GZIP:
        stored, body = _gunzip(data, budget)
        inner = stored or filename.rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".tgz") or "member"
        if body[257:262] == b"ustar" or filename.endswith((".tgz", ".tar.gz")):
            try:
                _expand(body, MIME_TAR, prefix, depth, budget, inner)
                return
            except CorruptDocumentError:
                pass  # a .gz of something that only looked like a tar: one member
        members: Iterator[tuple[str, bytes]] = iter([(inner, body)])
    elif mime == MIME_TAR:
        members = _tar_members(data, budget)
    else:
        members = _zip_members(data, budget)
    for name, body in members:
        budget.take_member()
        label = f"{prefix}{name or 'member'}"
        kind = _kind(body, label)
        if kind:
            budget.listing.append((label, len(body)))
            _expand(body, kind, f"{label}/", depth + 1, budget, name)
            continue
        unique = unique_label(label, budget.seen)
        budget.listing.append((unique, len(body)))
        if body:
            budget.out.append(Attachment(name=unique, data=body, depth=depth))


def parse_archive(
    data: bytes, mime: str, *, filename: str = "", limits: ArchiveLimits | None = None, depth: int = 0
) -> RawParse:
    """List an archive and return its members as attachments.

    Args:
        data: the archive bytes (ZIP, tar, gzip; a ``.tar.gz`` is expanded as a tar).
        mime: its detected type (one of ``ARCHIVE_MIMES``).
        filename: its name (messages, and the member name of a bare ``.gz``).
        limits: expansion limits (defaults: ``ArchiveLimits()``).
        depth: how many containers enclose this archive (0 at top level); its
            members sit at ``depth + 1``.

    Returns:
        Elements: a level-1 heading ``Archive: NAME (N files)`` and one list
        item ``member (SIZE bytes)`` per member in archive order (nested
        archives' members under ``outer/inner.zip/``). ``attachments``: every
        non-empty member as an ``Attachment`` (unique names, ``depth`` set).
        Metadata: ``members``, ``expanded_bytes``.

    Raises:
        ArchiveBombError: a limit of ``limits`` is crossed (nothing is returned).
        CorruptDocumentError: the archive (or a member's stream) is unreadable.
        NoTextError: the archive has no members.
    """
    limits = limits or ArchiveLimits()
    name = filename or "archive"
    base = mime.split(";", 1)[0].strip().lower()
    kind = MIME_GZIP if "gzip" in base else (MIME_TAR if base == MIME_TAR else MIME_ZIP)
    budget = _Budget(limits=limits, name=name)
    _expand(data, kind, "", depth + 1, budget, name)
    if not budget.listing:
        raise NoTextError(f"{name}: the archive has no members")
    elements = [RawElement(ElementType.HEADING, f"Archive: {name} ({len(budget.listing)} files)", 1)]
    elements += [
        RawElement(ElementType.LIST_ITEM, f"{lbl} ({size} bytes)", 1) for lbl, size in budget.listing
    ]
    meta = {"members": str(len(budget.listing)), "expanded_bytes": str(budget.bytes_used)}
    return RawParse(elements, 0, meta, attachments=tuple(budget.out))
