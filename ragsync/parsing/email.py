"""E-mail parsers: RFC 822 (``.eml``, stdlib ``email`` with ``policy.default``)
and Outlook MSG (text through Tika, attachments read from the OLE file).

Output: the subject as a level-1 heading, one paragraph with the From/To/Cc/
Date/Subject headers (so they are searchable), the body (``text/plain``
preferred, else HTML through the HTML parser's structure walk), and a
paragraph naming the attachments. The attachments themselves are **not**
parsed here: they are returned as ``RawParse.attachments`` to become child
documents (``ragsync.model.Attachment``; a forwarded e-mail is one too).
Inline images referenced from an HTML body (``Content-ID``) are part of the
body, not attachments. Containers nest at most ``ArchiveLimits.max_depth``
deep: past it, attachments are listed in ``metadata["attachments_skipped"]``
and not returned.
"""

from __future__ import annotations

import base64
import email
import quopri
from email import policy
from email.message import EmailMessage, Message
from typing import Any

from ragsync.errors import CorruptDocumentError
from ragsync.model import Attachment, ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, split_paragraphs, utf16_without_bom
from ragsync.parsing.archive import ArchiveLimits, safe_name, unique_label

MIME_EML = "message/rfc822"
MIME_MSG = "application/vnd.ms-outlook"
_HEADERS = ("from", "to", "cc", "date", "subject")


def _load(data: bytes) -> EmailMessage:
    text: str | None = None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    elif b"\x00" in data[:400] and utf16_without_bom(data):
        codec = utf16_without_bom(data)
        text = data[: len(data) // 2 * 2].decode(codec, errors="replace")
    if text is not None:
        msg: Message = email.message_from_string(text.lstrip("\ufeff"), policy=policy.default)
    else:
        msg = email.message_from_bytes(data, policy=policy.default)
    if not isinstance(msg, EmailMessage):  # pragma: no cover - policy.default always builds EmailMessage
        raise CorruptDocumentError("not an e-mail message")
    return msg


def _header(msg: EmailMessage, name: str) -> str:
    try:
        values = msg.get_all(name) or []
        return clean_text(", ".join(str(v) for v in values))
    except Exception:  # noqa: BLE001 - malformed header encodings raise from the header registry
        raw = msg.get(name, failobj="")
        return clean_text(str(raw))


def _part_text(part: Any) -> str:
    try:
        content = part.get_content()
    except Exception:  # noqa: BLE001 - unknown charset or broken transfer encoding
        payload = part.get_payload(decode=True) or b""
        content = payload.decode("utf-8", errors="replace") if isinstance(payload, bytes) else str(payload)
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace")
    return str(content)


def _body(msg: EmailMessage) -> list[RawElement]:
    part = msg.get_body(preferencelist=("plain", "html"))
    if part is None:
        if msg.is_multipart() or msg.get_content_maintype() != "text":
            return []
        part = msg
    text = _part_text(part)
    if part.get_content_subtype() == "html":
        from ragsync.parsing.html import parse_html

        return list(parse_html(text.encode("utf-8"), main_only=False).elements)
    return [RawElement(ElementType.PARAGRAPH, p) for p in split_paragraphs(text.replace("\r\n", "\n"))]


def _attachment_bytes(part: Any) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        if isinstance(inner, list) and inner:
            inner = inner[0]
        if isinstance(inner, Message):
            raw = inner.as_bytes(policy=policy.default)
            # RFC 2046 forbids encoding a message/rfc822 part, but some clients (GroupWise) do.
            encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
            if encoding == "base64":
                return base64.b64decode(raw)
            if encoding == "quoted-printable":
                return quopri.decodestring(raw)
            return raw
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _is_inline_image(part: Any) -> bool:
    """An image the HTML body shows (``cid:``), not a file the sender attached."""
    return (
        part.get_content_maintype() == "image"
        and bool(part.get("Content-ID"))
        and part.get_content_disposition() != "attachment"
    )


def unique_name(name: str, seen: set[str], fallback: str) -> str:
    """A cleaned attachment name (``archive.safe_name``), ``fallback`` when empty, made unique with ``~N``."""
    return unique_label(safe_name(name) or fallback, seen)


def _attachments(msg: EmailMessage, depth: int, limits: ArchiveLimits) -> list[Attachment]:
    """The message's attached files; past ``limits.max_attachments`` only
    their names (nothing decoded: ``finish`` returns none of them then)."""
    out: list[Attachment] = []
    seen: set[str] = set()
    parts = [
        (i, part) for i, part in enumerate(msg.iter_attachments(), start=1) if not _is_inline_image(part)
    ]
    names_only = len(parts) > limits.max_attachments
    for index, part in parts:
        media_type = part.get_content_type()
        fallback = f"attachment-{index}" + (".eml" if media_type == "message/rfc822" else "")
        try:
            raw_name = part.get_filename() or ""
        except Exception:  # noqa: BLE001 - a malformed RFC 2231 name: use the fallback
            raw_name = ""
        try:
            data = b"" if names_only else _attachment_bytes(part)
        except Exception:  # noqa: BLE001 - a broken transfer encoding: keep what can be read
            data = b""
        out.append(Attachment(unique_name(raw_name, seen, fallback), data, media_type, depth + 1))
    return out


def finish(
    out: list[RawElement],
    meta: dict[str, str],
    attachments: list[Attachment],
    depth: int,
    limits: ArchiveLimits,
) -> RawParse:
    """Name the attachments in the text and metadata; drop them past the
    nesting limit or past ``max_attachments`` per message.

    Args:
        out: the message's elements so far (headers, body).
        meta: its metadata.
        attachments: what it carries.
        depth: containers around the message.
        limits: the archive limits (``max_depth``, ``max_attachments``).

    Returns:
        The ``RawParse``: a paragraph ``Attachments: a.pdf, b.docx`` appended
        when there are any, ``metadata["attachments"]`` (count) and, past
        the nesting or count limit, ``metadata["attachments_skipped"]`` (the
        reason and the names) instead of returned attachments.
    """
    if not attachments:
        return RawParse(out, 0, meta)
    names = [a.name for a in attachments]
    out.append(RawElement(ElementType.PARAGRAPH, "Attachments: " + ", ".join(names)))
    meta["attachments"] = str(len(attachments))
    if depth + 1 > limits.max_depth:
        meta["attachments_skipped"] = f"nested deeper than {limits.max_depth} containers: " + ", ".join(names)
        return RawParse(out, 0, meta)
    if len(attachments) > limits.max_attachments:
        meta["attachments_skipped"] = (
            f"{len(attachments)} attachments, above the limit of {limits.max_attachments} per message: "
            + ", ".join(names)
        )
        return RawParse(out, 0, meta)
    return RawParse(out, 0, meta, attachments=tuple(a for a in attachments if a.data))


def parse_email(data: bytes, *, depth: int = 0, limits: ArchiveLimits | None = None) -> RawParse:
    """Parse an RFC 822 message (``.eml``; UTF-16 with or without BOM accepted).

    Args:
        data: the message bytes (an mbox-style ``From`` first line is allowed).
        depth: how many containers enclose this message (0 at top level).
        limits: nesting and count limits (``max_depth``, ``max_attachments``;
            defaults: ``ArchiveLimits()``).

    Returns:
        Elements: subject heading (level 1), a header paragraph
        (``From: ...\\nTo: ...``), body paragraphs/list items/tables, and
        ``Attachments: NAMES`` when it has any. ``attachments``: each
        attached file (forwarded messages included, inline ``cid:`` images
        not) with its ``Content-Type`` as ``media_type``; empty ones are
        named but not returned. Metadata: ``from``, ``to``, ``cc``, ``date``,
        ``subject`` (those present), ``title`` (= subject), ``attachments``
        (count), ``attachments_skipped`` (past the nesting or count limit).

    Raises:
        CorruptDocumentError: the bytes cannot be read as a message.
    """
    msg = _load(data)
    meta: dict[str, str] = {}
    for name in _HEADERS:
        value = _header(msg, name)
        if value:
            meta[name] = value
    out: list[RawElement] = []
    if meta.get("subject"):
        out.append(RawElement(ElementType.HEADING, meta["subject"], 1))
        meta["title"] = meta["subject"]
    lines = [f"{name.capitalize()}: {meta[name]}" for name in _HEADERS if name in meta]
    if lines:
        out.append(RawElement(ElementType.PARAGRAPH, "\n".join(lines)))
    out.extend(_body(msg))
    limits = limits or ArchiveLimits()
    return finish(out, meta, _attachments(msg, depth, limits), depth, limits)


# --------------------------------------------------------------------------- Outlook MSG

_ATTACH_PREFIX = "__attach_version1.0_#"
_NAME_STREAMS = ("__substg1.0_3707001F", "__substg1.0_3704001F", "__substg1.0_3001001F")
_NAME_STREAMS_ANSI = ("__substg1.0_3707001E", "__substg1.0_3704001E", "__substg1.0_3001001E")
_DATA_STREAM = "__substg1.0_37010102"
_MIME_STREAM = "__substg1.0_370E001F"
_EMBEDDED_MSG = "__substg1.0_3701000D"


def msg_attachments(data: bytes, depth: int) -> tuple[list[Attachment], list[str]]:
    """The attached files of an Outlook MSG, read from its OLE storages (``olefile``).

    Each ``__attach_version1.0_#N`` storage gives a name (long name, short
    name, display name; UTF-16 or ANSI) and its data stream. Attached Outlook
    items (an embedded message storage) cannot be cut out as a file of their
    own: they are named in the second list instead.

    Args:
        data: the MSG bytes.
        depth: containers around the message.

    Returns:
        ``(attachments, not_extracted)``: attachments at ``depth + 1``, and
        the names of embedded items left out.

    Raises:
        CorruptDocumentError: the bytes are not an OLE file.
    """
    import olefile

    try:
        ole = olefile.OleFileIO(data)
    except Exception as exc:  # noqa: BLE001 - olefile raises OSError/struct errors on bad bytes
        raise CorruptDocumentError(f"not an Outlook MSG: {exc}") from exc
    out: list[Attachment] = []
    skipped: list[str] = []
    seen: set[str] = set()
    with ole:
        entries = ole.listdir(streams=True, storages=True)
        storages = sorted({entry[0] for entry in entries if entry[0].startswith(_ATTACH_PREFIX)})
        for index, storage in enumerate(storages, start=1):

            def read(stream: str, storage: str = storage) -> bytes:
                path = f"{storage}/{stream}"
                return bytes(ole.openstream(path).read()) if ole.exists(path) else b""

            raw_name = ""
            for stream in _NAME_STREAMS:
                raw_name = read(stream).decode("utf-16-le", "replace").rstrip("\x00")
                if raw_name:
                    break
            for stream in _NAME_STREAMS_ANSI if not raw_name else ():
                raw_name = read(stream).decode("cp1252", "replace").rstrip("\x00")
                if raw_name:
                    break
            if ole.exists(f"{storage}/{_EMBEDDED_MSG}"):
                skipped.append(safe_name(raw_name) or f"attachment-{index}")
                continue
            body = read(_DATA_STREAM)
            media_type = read(_MIME_STREAM).decode("utf-16-le", "replace").rstrip("\x00").strip()
            name = unique_name(raw_name, seen, f"attachment-{index}")
            out.append(Attachment(name, body, media_type, depth + 1))
    return out, skipped


def parse_msg(
    data: bytes, *, filename: str = "", depth: int = 0, limits: ArchiveLimits | None = None
) -> RawParse:
    """Parse an Outlook MSG: Tika reads the headers and body (without the
    attachments' text), ``msg_attachments`` returns the attached files.

    Args:
        data: the MSG bytes.
        filename: used only in error messages.
        depth: how many containers enclose this message (0 at top level).
        limits: nesting and count limits (``max_depth``, ``max_attachments``;
            defaults: ``ArchiveLimits()``).

    Returns:
        The same shape as ``parse_email``; attached Outlook items that cannot
        be cut out are listed in ``metadata["attachments_not_extracted"]``.

    Raises:
        CorruptDocumentError, EncryptedDocumentError: from Tika or olefile.
    """
    from ragsync.parsing.tika import parse_tika

    raw = parse_tika(data, MIME_MSG, filename=filename, embedded=False)
    meta = dict(raw.metadata or {})
    attachments, skipped = msg_attachments(data, depth)
    if skipped:
        meta["attachments_not_extracted"] = ", ".join(skipped)
    return finish(list(raw.elements), meta, attachments, depth, limits or ArchiveLimits())
