"""RFC 822 e-mail (``.eml``) parser (stdlib ``email``, ``policy.default``).

Output: the subject as a level-1 heading, one paragraph with the From/To/Cc/
Date/Subject headers (so they are searchable), the body (``text/plain``
preferred, else HTML through the HTML parser), then each attachment parsed
through ``ragsync.parsing.parse`` under a level-2 heading
``Attachment: NAME``. Attachments that fail are listed in
``metadata["attachment_errors"]``; nested e-mails stop at ``MAX_DEPTH``.
"""

from __future__ import annotations

import contextvars
import email
from email import policy
from email.message import EmailMessage, Message
from typing import Any

from ragsync.errors import CorruptDocumentError, RagsyncError
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, split_paragraphs

#: E-mails nested deeper than this (an e-mail attached to an attached e-mail...) are not opened.
MAX_DEPTH = 3
_HEADERS = ("from", "to", "cc", "date", "subject")
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("ragsync_email_depth", default=0)


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text without a byte order mark: every other byte of the ASCII head is NUL."""
    head = data[:400]
    if len(head) < 40:
        return None
    even = head[0::2].count(0)
    odd = head[1::2].count(0)
    half = len(head) // 2
    if odd >= 0.9 * half and even < 0.1 * half:
        encoding = "utf-16-le"
    elif even >= 0.9 * half and odd < 0.1 * half:
        encoding = "utf-16-be"
    else:
        return None
    return data[: len(data) // 2 * 2].decode(encoding, errors="replace")


def _load(data: bytes) -> EmailMessage:
    text: str | None = None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    elif b"\x00" in data[:400]:
        text = _utf16_without_bom(data)
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

        return list(parse_html(text.encode("utf-8")).elements)
    return [RawElement(ElementType.PARAGRAPH, p) for p in split_paragraphs(text.replace("\r\n", "\n"))]


def _attachment_bytes(part: Any) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        if isinstance(inner, list) and inner:
            inner = inner[0]
        if isinstance(inner, Message):
            return inner.as_bytes(policy=policy.default)
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _attachments(msg: EmailMessage, errors: list[str]) -> tuple[list[RawElement], int]:
    from ragsync.detect import detect_mime
    from ragsync.parsing import parse

    out: list[RawElement] = []
    count = 0
    for index, part in enumerate(msg.iter_attachments(), start=1):
        name = clean_text(part.get_filename() or "") or f"attachment-{index}"
        try:
            data = _attachment_bytes(part)
            mime = detect_mime(data, name)
            if _depth.get() >= MAX_DEPTH and mime in ("message/rfc822", "application/vnd.ms-outlook"):
                errors.append(f"{name}: too_large: e-mails nested deeper than {MAX_DEPTH} are not opened")
                continue
            result = parse(data, mime, filename=name)
        except RagsyncError as exc:
            errors.append(f"{name}: {exc.error_class}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one bad attachment must not fail the e-mail
            errors.append(f"{name}: corrupt: {type(exc).__name__}: {exc}")
            continue
        count += 1
        out.append(RawElement(ElementType.HEADING, f"Attachment: {name}", 2))
        for e in result.elements:
            level = min(6, e.level + 2) if e.type is ElementType.HEADING else e.level
            out.append(RawElement(e.type, e.text, level, e.page))
    return out, count


def parse_email(data: bytes) -> RawParse:
    """Parse an RFC 822 message (``.eml``; UTF-16 with or without BOM accepted).

    Args:
        data: the message bytes (an mbox-style ``From`` first line is allowed).

    Returns:
        Elements: subject heading (level 1), a header paragraph
        (``From: ...\\nTo: ...``), body paragraphs/list items/tables, then per
        attachment a level-2 heading ``Attachment: NAME`` followed by the
        attachment's elements (their headings shifted two levels down, their
        pages kept). Metadata: ``from``, ``to``, ``cc``, ``date``, ``subject``
        (those present), ``title`` (= subject), ``attachments`` (count parsed)
        and ``attachment_errors`` (``NAME: error_class: message`` lines) when
        some failed.

    Raises:
        CorruptDocumentError: the bytes cannot be read as a message.
    """
    token = _depth.set(_depth.get() + 1)
    try:
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
        errors: list[str] = []
        attached, count = _attachments(msg, errors)
        out.extend(attached)
        if count:
            meta["attachments"] = str(count)
        if errors:
            meta["attachment_errors"] = "\n".join(errors)
        return RawParse(out, 0, meta)
    finally:
        _depth.reset(token)
