"""Tika-backed parser (``iscc-tika``: Apache Tika compiled to native code).

Used for the formats without a good pure-Python reader: OpenDocument
(ODT/ODS/ODP), RTF, EPUB, legacy Office (DOC/XLS/PPT), XLSB, MS Works and
Outlook MSG. Tika's XHTML output is walked with the HTML parser's element
walker, so headings, paragraphs, list items and tables come out the same way
as for HTML. Sheets (``div.page``) and slides (``div.slide``) get their
1-based number in ``page``.

Tika reports failures in three ways, all mapped here: an exception (corrupt,
or encrypted when the message says so), empty text with an
``EncryptedDocumentException`` warning or ``pdf:encrypted`` (encrypted), or a
stack trace under ``X-TIKA:EXCEPTION:*`` in metadata (corrupt when no text
came out, otherwise recorded in ``metadata["tika_warning"]``).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, TypeGuard

from bs4 import BeautifulSoup
from bs4.element import Tag

from ragsync.errors import CorruptDocumentError, EncryptedDocumentError, ParserCrashError
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text
from ragsync.parsing.html import _Walker

#: Characters of XHTML Tika may write (its default of 500,000 silently truncates).
DEFAULT_MAX_CHARS = 50_000_000

MIME_MSG = "application/vnd.ms-outlook"
MIME_PPT = "application/vnd.ms-powerpoint"

_ENCRYPTED = re.compile(r"encrypt|password", re.I)
_BENIGN_EXCEPTIONS = ("X-TIKA:EXCEPTION:embedded_exception", "X-TIKA:EXCEPTION:warn")
_WRITE_LIMIT = "X-TIKA:EXCEPTION:write_limit_reached"
_BULLET = re.compile(
    r"^\s*(?:[\u00b7\u2022\u25aa\u25cf\u25e6\u2013\uf0b7\uf0a7o-]|\d{1,3}[.)]|[a-zA-Z][.)])\s+"
)
_PAGE_CLASSES = ("page", "slide")

_local = threading.local()


def _extractor(max_chars: int) -> Any:
    """One configured extractor per thread and limit (setters return copies)."""
    cache: dict[int, Any] | None = getattr(_local, "extractors", None)
    if cache is None:
        cache = {}
        _local.extractors = cache
    if max_chars not in cache:
        from iscc_tika import Extractor, OfficeParserConfig

        office = OfficeParserConfig().set_include_slide_master_content(False)
        cache[max_chars] = (
            Extractor()
            .set_xml_output(True)
            .set_extract_string_max_length(max_chars)
            .set_office_config(office)
        )
    return cache[max_chars]


def _flat_meta(meta: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (meta or {}).items():
        if isinstance(value, (list, tuple)):
            out[str(key)] = "\n".join(str(v) for v in value)
        else:
            out[str(key)] = str(value)
    return out


def _has_classes(tag: Tag, names: tuple[str, ...]) -> bool:
    value: Any = tag.get("class") or []
    classes: list[str] = value.split() if isinstance(value, str) else [str(c) for c in value]
    return any(c in names for c in classes)


def _is_page(node: Any) -> TypeGuard[Tag]:
    return isinstance(node, Tag) and node.name == "div" and _has_classes(node, _PAGE_CLASSES)


def _prepare(soup: BeautifulSoup, mime: str, embedded: bool = True) -> None:
    """Rewrite Tika-specific markup into plain HTML the walker understands;
    without ``embedded``, drop embedded documents (their text) altogether."""
    label = "Attachment" if mime == MIME_MSG else "Embedded"
    for entry in soup.find_all("div", class_="package-entry"):
        if not isinstance(entry, Tag) or entry.decomposed:
            continue
        if not embedded:
            entry.decompose()
            continue
        head = entry.find("h1")
        name = clean_text(head.get_text(" ")) if isinstance(head, Tag) else ""
        if isinstance(head, Tag):
            head.decompose()
        if not clean_text(entry.get_text(" ")):
            entry.decompose()  # an image or an empty embedded object
            continue
        heading = soup.new_tag("h2")
        heading.string = f"{label}: {name}" if name else label
        entry.insert(0, heading)
    for para in soup.find_all("p"):
        # Word lists come out as <p class="list_Paragraph">· item</p>
        if isinstance(para, Tag) and _has_classes(para, ("list_Paragraph", "list_paragraph")):
            text = para.get_text(" ")
            para.name = "li"
            para.string = _BULLET.sub("", text, count=1)
    for img in soup.find_all("img"):
        if isinstance(img, Tag):
            img.decompose()


def _walk(node: Tag) -> list[RawElement]:
    walker = _Walker()
    walker.walk(node, 0)
    walker.flush()
    return walker.out


def _slide_title(elements: list[RawElement], slide: Tag, page: int) -> list[RawElement]:
    """Legacy PPT has no title markup: the slide content's first short paragraph is its title."""
    content = slide.find("div", class_="slide-content")
    if not elements or not isinstance(content, Tag):
        return elements
    first = content.find(["p", "li", "h1", "h2", "h3"])
    head = elements[0]
    if (
        isinstance(first, Tag)
        and first.name == "p"
        and head.type is ElementType.PARAGRAPH
        and head.text == clean_text(first.get_text(" "))
        and len(head.text) <= 200
    ):
        elements = [RawElement(ElementType.HEADING, head.text, 1, page), *elements[1:]]
    return elements


def _elements(body: Tag, soup: BeautifulSoup, mime: str) -> tuple[list[RawElement], int]:
    """Walk the body; page/slide divs become numbered pages, the rest page 0."""
    pages = [d for d in body.find_all("div") if _is_page(d) and d.find_parent(_is_page) is None]
    if not pages:
        return _walk(body), 0
    out: list[RawElement] = []
    number = 0

    def emit(node: Tag) -> None:
        nonlocal number
        pending: list[Any] = []

        def flush_pending() -> None:
            if not pending:
                return
            wrapper = soup.new_tag("div")
            pending[0].insert_before(wrapper)
            for child in pending:
                wrapper.append(child.extract())
            out.extend(_walk(wrapper))
            pending.clear()

        for child in list(node.children):
            if _is_page(child):
                flush_pending()
                number += 1
                found = [RawElement(e.type, e.text, e.level, number) for e in _walk(child)]
                if mime == MIME_PPT and _has_classes(child, ("slide",)):
                    found = _slide_title(found, child, number)
                out.extend(found)
            elif isinstance(child, Tag) and any(_is_page(d) for d in child.find_all("div")):
                flush_pending()
                emit(child)
            else:
                pending.append(child)
        flush_pending()

    emit(body)
    return out, number


def _email_meta(meta: dict[str, str]) -> dict[str, str]:
    def first(*keys: str) -> str:
        for key in keys:
            value = clean_text(meta.get(key, ""))
            if value:
                return value
        return ""

    found = {
        "from": first("Message:Raw-Header:From", "Message-From", "dc:creator"),
        "to": first("Message:Raw-Header:To", "Message-To"),
        "cc": first("Message:Raw-Header:Cc", "Message-Cc"),
        "date": first("Message:Raw-Header:Date", "mapi:message-delivery-time", "dcterms:created"),
        "subject": first("Message:Raw-Header:Subject", "dc:subject", "dc:title"),
    }
    return {k: v for k, v in found.items() if v}


def _msg(soup: BeautifulSoup, body: Tag, meta: dict[str, str], out_meta: dict[str, str]) -> list[RawElement]:
    """Outlook MSG: subject heading, one header paragraph, body, attachments."""
    headers = _email_meta(meta)
    out_meta.update(headers)
    head = body.find("h1", recursive=False)
    if isinstance(head, Tag):
        head.decompose()
    table = body.find("dl", recursive=False)
    if isinstance(table, Tag):
        table.decompose()
    out: list[RawElement] = []
    if headers.get("subject"):
        out.append(RawElement(ElementType.HEADING, headers["subject"], 1))
    lines = [
        f"{k.capitalize()}: {headers[k]}" for k in ("from", "to", "cc", "date", "subject") if k in headers
    ]
    if lines:
        out.append(RawElement(ElementType.PARAGRAPH, "\n".join(lines)))
    out.extend(_walk(body))
    return out


def _check_failure(text_found: bool, meta: dict[str, str], mime: str, name: str) -> None:
    warnings = " ".join(
        v for k, v in meta.items() if k == "X-TIKA:warning" or k.startswith("X-TIKA:EXCEPTION:")
    )
    if not text_found and (
        "EncryptedDocumentException" in warnings or meta.get("pdf:encrypted", "").lower() == "true"
    ):
        raise EncryptedDocumentError(f"{name}: password-protected {mime} (Tika: {warnings[:200]})")
    detected = meta.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if detected in ("text/plain", "application/octet-stream") and detected != mime:
        raise CorruptDocumentError(f"{name}: not a valid {mime} file (Tika reads it as {detected})")
    fatal = [
        k for k in meta if k.startswith("X-TIKA:EXCEPTION:") and k not in (*_BENIGN_EXCEPTIONS, _WRITE_LIMIT)
    ]
    if fatal and not text_found:
        trace = meta[fatal[0]].splitlines()[0][:300] if meta[fatal[0]] else fatal[0]
        raise CorruptDocumentError(f"{name}: Tika failed: {trace}")


def _is_panic(exc: BaseException) -> bool:
    """pyo3 panics derive from BaseException: the native Tika VM itself
    failed (e.g. it could not reserve memory under load), not the file."""
    return type(exc).__name__ == "PanicException"


def _extract(data: bytes, max_chars: int) -> tuple[str, Any]:
    """Tika's XHTML and metadata; a VM failure is tried once more (it is the
    machine's state, not the document, and usually passes a second time)."""
    try:
        return _extractor(max_chars).extract_bytes_to_string(bytearray(data))  # type: ignore[no-any-return]
    except BaseException as exc:  # noqa: BLE001
        if not _is_panic(exc):
            raise
        time.sleep(0.5)
        return _extractor(max_chars).extract_bytes_to_string(bytearray(data))  # type: ignore[no-any-return]


def parse_tika(
    data: bytes, mime: str, *, max_chars: int = DEFAULT_MAX_CHARS, filename: str = "", embedded: bool = True
) -> RawParse:
    """Parse a document through Tika's XHTML output.

    Args:
        data: the document bytes.
        mime: detected content type (one of ``ragsync.parsing._TIKA_MIMES``); selects the
            Outlook handling (headers, attachments) and the legacy-PPT slide
            title rule.
        max_chars: Tika write limit in characters of XHTML. When reached the
            text is cut there and ``metadata["truncated"] == "true"``.
        filename: used only in error messages.
        embedded: keep the text of embedded documents (``Embedded: NAME``
            sections); ``False`` drops it (MSG attachments become child
            documents instead, ``ragsync.parsing.email.parse_msg``).

    Returns:
        Elements in reading order; sheets and slides numbered in ``page``
        (``pages`` = their count, 0 for flowing text). Metadata: ``title``,
        ``tika_content_type``; for MSG also ``from``/``to``/``cc``/``date``/
        ``subject``; ``tika_warning`` when an embedded object failed.

    Raises:
        EncryptedDocumentError: Tika reports the document as encrypted.
        CorruptDocumentError: Tika raised, reported a stack trace and no
            text, or read the bytes as plain text/unknown binary instead of
            ``mime``.
    """
    name = filename or "document"
    try:
        xhtml, raw_meta = _extract(data, max_chars)
    except BaseException as exc:  # noqa: BLE001 - the native binding raises TypeError/RuntimeError/...
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        if _is_panic(exc):
            raise ParserCrashError(f"{name}: the Tika native VM failed twice: {str(exc)[:300]}") from exc
        message = str(exc)
        if _ENCRYPTED.search(message):
            raise EncryptedDocumentError(f"{name}: {message[:300]}") from exc
        raise CorruptDocumentError(f"{name}: Tika could not parse {mime}: {message[:300]}") from exc
    meta = _flat_meta(raw_meta)
    soup = BeautifulSoup(xhtml or "", "lxml")
    body = soup.body
    text_found = body is not None and bool(clean_text(body.get_text(" ")))
    _check_failure(text_found, meta, mime, name)
    out_meta: dict[str, str] = {}
    detected = meta.get("Content-Type", "").split(";", 1)[0].strip()
    if detected:
        out_meta["tika_content_type"] = detected
    title = clean_text(meta.get("dc:title", ""))
    if title:
        out_meta["title"] = title
    stripped = (xhtml or "").rstrip()
    if _WRITE_LIMIT in meta or (stripped and not stripped.endswith("</html>")):
        out_meta["truncated"] = "true"
        out_meta["max_chars"] = str(max_chars)
    embedded_error = meta.get("X-TIKA:EXCEPTION:embedded_exception", "")
    if embedded_error:
        out_meta["tika_warning"] = embedded_error.splitlines()[0][:300]
    if body is None:
        return RawParse([], 0, out_meta)
    _prepare(soup, mime, embedded)
    if mime == MIME_MSG:
        return RawParse(_msg(soup, body, meta, out_meta), 0, out_meta)
    elements, pages = _elements(body, soup, mime)
    return RawParse(elements, pages, out_meta)
