"""Parsing: bytes + detected mime type -> elements in reading order.

``parse`` dispatches to one pure function per format (``text``, ``markdown``,
``html``, ``docx``, ``pdf``) and turns every failure into one of the error
classes of ``ragsync.errors``. Nothing here imports Apache Beam.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragsync.errors import (
    ConfigurationError,
    CorruptDocumentError,
    EmptyDocumentError,
    EncryptedDocumentError,
    NoTextError,
    RagsyncError,
    TooLargeError,
    UnsupportedFormatError,
)
from ragsync.model import Attachment, Element
from ragsync.parsing._common import RawParse
from ragsync.parsing.archive import ARCHIVE_MIMES, ArchiveLimits
from ragsync.parsing.bundle import MIME_TICKET_BUNDLE

# Change whenever any parser's output changes (it is part of cache keys).
PARSER_VERSION = "p8"  # p8: PDF and OCR elements carry their line boxes

DEFAULT_OCR_LANGUAGES = "eng"
"""Tesseract's languages when none are set (``Settings.ocr_languages``)."""

_OCR_LANGUAGES = re.compile(r"[a-z][a-z0-9_]{1,31}(\+[a-z][a-z0-9_]{1,31}){0,7}")


def checked_ocr_languages(value: str) -> str:
    """Check a Tesseract language list such as ``eng`` or ``eng+deu+fra``.

    Only its form is checked here (one to eight traineddata names joined by
    ``+``, each lower-case letters, digits and ``_``: ``chi_sim``); whether
    each is installed is checked where Tesseract runs
    (``tesseract.check_languages``).

    Args:
        value: the list as given (blanks around it ignored).

    Returns:
        The list, stripped.

    Raises:
        ConfigurationError: not of that form.
    """
    langs = value.strip()
    if not _OCR_LANGUAGES.fullmatch(langs):
        raise ConfigurationError(
            "ocr_languages must be Tesseract language names joined by '+' "
            f"(e.g. eng or eng+deu), got {value!r}"
        )
    return langs


def parser_version(ocr_languages: str = DEFAULT_OCR_LANGUAGES) -> str:
    """The parser version a document is parsed under: ``PARSER_VERSION``,
    with the OCR languages after it when they are not the default
    (``p7+ocr.eng+deu``). It keys the stored parses and decides whether an
    unchanged document is read again, so changing the languages makes the
    next run parse every document again (scans are read with the new
    languages; chunks whose text did not change are not embedded again).

    Args:
        ocr_languages: the checked language list (``checked_ocr_languages``).
    """
    if ocr_languages == DEFAULT_OCR_LANGUAGES:
        return PARSER_VERSION
    return f"{PARSER_VERSION}+ocr.{ocr_languages}"


MIME_PDF = "application/pdf"
MIME_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


@dataclass(frozen=True)
class ParseResult:
    """What ``parse`` returns.

    Attributes:
        elements: elements numbered 0..n-1 in reading order (never empty).
        pages: page count (0 when the format has none).
        pages_for_review: 1-based pages whose OCR fell below the bar
            (confidence or coverage), listed for review: their paragraphs
            read at the region bar are among ``elements``, with their confidence.
        metadata: format metadata such as ``title`` or front-matter keys.
        ocr_confidence: mean Tesseract word confidence (0-100) over the
            non-blank OCR'd pages, ``None`` when nothing was OCR'd.
        page_parsers: which parser read each page (``pdfium``,
            ``pdfminer``, ``ocr``, ``none``), for PDFs and images; empty for
            formats without pages.
        attachments: files the document carries (e-mail attachments, archive
            members), unparsed, to become child documents
            (``ragsync.ids.child_object_id``; parse each with its ``depth``).
    """

    elements: tuple[Element, ...]
    pages: int = 0
    pages_for_review: tuple[int, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    ocr_confidence: float | None = None
    page_parsers: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()


Parser = Callable[[bytes, int, str, ArchiveLimits], RawParse]
"""A format's parser: ``(data, max_pages, ocr_languages, limits) -> RawParse``."""


def _lazy(module: str, name: str, *, paged: bool = False, expands: bool = False, **options: Any) -> Parser:
    """The parser ``name`` of ``ragsync.parsing.<module>``, imported on first
    use (parsers pull heavy libraries). Called ``name(data, **options)``, with
    ``max_pages=`` and ``ocr_options=`` (Tesseract's languages) too when
    ``paged`` (formats with pages: the ones that may be scans), and
    ``limits=`` (the expansion limits) when ``expands`` (compressed streams
    inside: PDF)."""

    def run(data: bytes, max_pages: int, ocr_languages: str, limits: ArchiveLimits) -> RawParse:
        parser = getattr(importlib.import_module(f"ragsync.parsing.{module}"), name)
        kwargs = {**options, **({"limits": limits} if expands else {})}
        if not paged:
            return parser(data, **kwargs)
        from ragsync.parsing.ocr_model import OcrOptions

        return parser(data, max_pages=max_pages, ocr_options=OcrOptions(lang=ocr_languages), **kwargs)

    return run


def _tika(mime: str) -> Parser:
    def run(data: bytes, max_pages: int, ocr_languages: str, limits: ArchiveLimits) -> RawParse:
        from ragsync.parsing.tika import parse_tika

        if mime in _ZIP_CONTAINERS and not data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            # A file named like an OpenDocument/EPUB that is not a ZIP: say so
            # without starting the Tika VM.
            raise CorruptDocumentError(f"document: not a valid {mime} file (not a ZIP container)")
        return parse_tika(data, mime)

    return run


_TIKA_MIMES = (
    "application/msword",
    "application/vnd.ms-excel",
    "application/vnd.ms-powerpoint",
    "application/vnd.ms-excel.sheet.binary.macroenabled.12",
    "application/vnd.ms-works",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.presentation",
    "application/vnd.oasis.opendocument.text-template",
    "application/vnd.oasis.opendocument.spreadsheet-template",
    "application/vnd.oasis.opendocument.presentation-template",
    "application/rtf",
    "text/rtf",
    "application/epub+zip",
)

# Tika formats stored as ZIP containers.
_ZIP_CONTAINERS = frozenset(m for m in _TIKA_MIMES if "opendocument" in m or m == "application/epub+zip")

_html = _lazy("html", "parse_html")
_markdown = _lazy("markdown", "parse_markdown")
_csv = _lazy("text", "parse_csv")
_xlsx = _lazy("office", "parse_xlsx")
_pptx = _lazy("office", "parse_pptx")
_xml = _lazy("html", "parse_html", main_only=False)
_json = _lazy("tickets", "parse_json")
_image = _lazy("ocr", "parse_image", paged=True)

_PARSERS: dict[str, Parser] = {
    MIME_PDF: _lazy("pdf", "parse_pdf", paged=True, expands=True),
    MIME_DOCX: _lazy("docx", "parse_docx"),
    "text/html": _html,
    "application/xhtml+xml": _html,
    "text/markdown": _markdown,
    "text/x-markdown": _markdown,
    "text/plain": _lazy("text", "parse_text"),
    "text/csv": _csv,
    "text/tab-separated-values": _csv,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": _xlsx,
    "application/vnd.ms-excel.sheet.macroenabled.12": _xlsx,
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": _pptx,
    "application/vnd.ms-powerpoint.presentation.macroenabled.12": _pptx,
    "application/vnd.openxmlformats-officedocument.presentationml.slideshow": _pptx,
    "text/xml": _xml,
    "application/xml": _xml,
    "application/json": _json,
    "application/x-ndjson": _json,
    **{mime: _tika(mime) for mime in _TIKA_MIMES},
    **{mime: _image for mime in ("image/png", "image/jpeg", "image/tiff", "image/bmp", "image/webp")},
}


Container = Callable[[bytes, str, str, ArchiveLimits, int], RawParse]


def _email(data: bytes, mime: str, filename: str, limits: ArchiveLimits, depth: int) -> RawParse:
    from ragsync.parsing.email import parse_email

    return parse_email(data, depth=depth, limits=limits)


def _msg(data: bytes, mime: str, filename: str, limits: ArchiveLimits, depth: int) -> RawParse:
    from ragsync.parsing.email import parse_msg

    return parse_msg(data, filename=filename, depth=depth, limits=limits)


def _ticket_bundle(data: bytes, mime: str, filename: str, limits: ArchiveLimits, depth: int) -> RawParse:
    from ragsync.parsing.tickets import parse_bundle

    return parse_bundle(data, depth=depth, limits=limits)


def _archive(data: bytes, mime: str, filename: str, limits: ArchiveLimits, depth: int) -> RawParse:
    from ragsync.parsing.archive import parse_archive

    return parse_archive(data, mime, filename=filename, limits=limits, depth=depth)


# Formats that carry other files: they return attachments (child documents) and need the limits.
_CONTAINERS: dict[str, Container] = {
    "message/rfc822": _email,
    "application/vnd.ms-outlook": _msg,
    MIME_TICKET_BUNDLE: _ticket_bundle,
    **{mime: _archive for mime in ARCHIVE_MIMES},
}


def is_container(mime: str) -> bool:
    """True for formats that carry other files (e-mails, archives): their
    attachments become child documents, so their parse is never read back
    from a stored element list (it holds no attachments).

    Args:
        mime: a detected content type (parameters ignored).
    """
    return mime.split(";", 1)[0].strip().lower() in _CONTAINERS


def supported_mimes() -> tuple[str, ...]:
    """The mime types ``parse`` has a parser for.

    Returns:
        Sorted mime strings.
    """
    return tuple(sorted({*_PARSERS, *_CONTAINERS}))


def _is_encrypted_ole(data: bytes) -> bool:
    """An OLE container holding an ``EncryptedPackage`` stream (password-protected OOXML)."""
    return data.startswith(_OLE_MAGIC) and "EncryptedPackage".encode("utf-16-le") in data


def parse(
    data: bytes,
    mime: str,
    *,
    filename: str = "",
    max_bytes: int = 200_000_000,
    max_pages: int = 2000,
    limits: ArchiveLimits | None = None,
    depth: int = 0,
    ocr_languages: str = DEFAULT_OCR_LANGUAGES,
) -> ParseResult:
    """Parse a document into elements in reading order.

    Args:
        data: the document bytes.
        mime: content type from ``ragsync.ingest.detect.detect_mime`` (parameters
            such as ``; charset=`` are ignored).
        filename: the original name, used in error messages (and as the
            member name of a bare ``.gz``).
        max_bytes: size limit in bytes.
        max_pages: page limit (PDF pages, image frames); a longer document
            is refused with ``TooLargeError``, never cut.
        limits: expansion limits of archives and PDF streams, container
            nesting (``Settings.archive_limits()``; default ``ArchiveLimits()``).
        depth: how many containers (archives, e-mails) enclose this
            document: 0 for a top-level document, ``Attachment.depth`` for a
            child.
        ocr_languages: Tesseract's languages for scanned pages and images
            (``Settings.ocr_languages``, checked by ``checked_ocr_languages``).

    Returns:
        A ``ParseResult`` with at least one element, each with non-empty text,
        ``order`` running 0..n-1; e-mails and archives also return their
        ``attachments`` (unparsed).

    Raises:
        EmptyDocumentError: zero bytes (or only whitespace for text formats).
        EncryptedDocumentError: a password is needed (PDF user password, or an
            OLE ``EncryptedPackage`` office file).
        CorruptDocumentError: truncated or unreadable bytes.
        UnsupportedFormatError: no parser for ``mime`` (or image bytes
            Pillow does not recognise).
        TooLargeError: above ``max_bytes`` or ``max_pages``, or an image (or
            PDF image object) above 100 megapixels.
        ArchiveBombError: an archive expands past ``limits`` (bytes,
            members, nesting depth, compression ratio).
        NoTextError: the file parsed but holds no text (a PDF whose pages
            have neither text nor images says OCR is needed).
        OcrBelowBarError: scanned PDF / image whose every non-blank page is
            below the OCR bar (``ragsync.parsing.ocr``).
        ConfigurationError: a scan or image but Tesseract (or one of
            ``ocr_languages``) is not installed.
    """
    name = filename or "document"
    base, parser, container = _parser_for(data, mime, name, max_bytes)
    try:
        if container is not None:
            raw = container(data, base, filename, limits or ArchiveLimits(), depth)
        else:
            assert parser is not None
            raw = parser(data, max_pages, ocr_languages, limits or ArchiveLimits())
    except RagsyncError:
        raise
    except (RecursionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - third-party parsers raise anything on bad bytes
        raise CorruptDocumentError(f"{name}: {type(exc).__name__}: {exc}") from exc
    return _result(raw, name, base)


def _parser_for(data: bytes, mime: str, name: str, max_bytes: int) -> tuple[str, Any, Any]:
    """The content type (``mime`` without parameters) and its parser or
    container reader (one of the two is None), once the bytes pass the
    checks every format shares.

    Raises:
        EmptyDocumentError, TooLargeError, EncryptedDocumentError,
        UnsupportedFormatError: as ``parse`` documents.
    """
    if not data:
        raise EmptyDocumentError(f"{name}: zero bytes")
    if len(data) > max_bytes:
        raise TooLargeError(f"{name}: {len(data)} bytes, above the limit of {max_bytes}")
    if _is_encrypted_ole(data):
        raise EncryptedDocumentError(f"{name}: password-protected office file (OLE EncryptedPackage)")
    base = mime.split(";", 1)[0].strip().lower()
    parser = _PARSERS.get(base)
    container = _CONTAINERS.get(base)
    if parser is None and container is None:
        raise UnsupportedFormatError(f"{name}: no parser for content type {base or '(none)'}")
    if base.startswith("text/") and not data.strip():
        raise EmptyDocumentError(f"{name}: only whitespace")
    return base, parser, container


def _result(raw: Any, name: str, base: str) -> ParseResult:
    """A parser's raw output as the ``ParseResult``: elements with text,
    numbered in reading order.

    Raises:
        NoTextError: no element holds text.
    """
    kept = [e for e in raw.elements if e.text.strip()]
    if not kept:
        raise NoTextError(f"{name}: parsed as {base} but holds no text")
    elements = tuple(
        Element(
            type=e.type,
            text=e.text,
            level=e.level,
            page=e.page,
            order=i,
            confidence=e.confidence,
            boxes=e.boxes,
        )
        for i, e in enumerate(kept)
    )
    return ParseResult(
        elements=elements,
        pages=raw.pages,
        metadata=dict(raw.metadata or {}),
        pages_for_review=tuple(getattr(raw, "pages_for_review", ())),
        ocr_confidence=getattr(raw, "ocr_confidence", None),
        page_parsers=tuple(raw.page_parsers),
        attachments=tuple(raw.attachments),
    )


def route(data: bytes, filename: str = "", limits: ArchiveLimits | None = None) -> tuple[str, str]:
    """A document's type and lane from its bytes (``ragsync.ingest.detect``:
    ``detect_mime``, then ``choose_lane`` with ``needs_ocr``), a PDF's streams
    checked against ``limits`` before PDFium opens it to look for scans
    (PDFium would hold a stream's whole decoded content). Untrusted bytes:
    call it where the parse child's memory and time limits hold
    (``transforms.parse.RouteByType``'s isolated step, ``ragsync parse``'s
    bounded child).

    Args:
        data: the document bytes.
        filename: the original name (breaks ties between text flavours).
        limits: the expansion limits (``Settings.archive_limits()``; default
            ``ArchiveLimits()``).

    Returns:
        (mime, lane).

    Raises:
        ArchiveBombError: a PDF whose streams decode past ``limits``.
    """
    from ragsync.ingest.detect import choose_lane, detect_mime, needs_ocr

    mime = detect_mime(data, filename)
    if mime == MIME_PDF:
        from ragsync.parsing.pdf import check_stream_expansion

        check_stream_expansion(data, limits)
    return mime, choose_lane(mime, len(data), needs_ocr=needs_ocr(data, mime))


__all__ = [
    "DEFAULT_OCR_LANGUAGES",
    "PARSER_VERSION",
    "ArchiveLimits",
    "checked_ocr_languages",
    "parser_version",
    "ParseResult",
    "is_container",
    "parse",
    "route",
    "supported_mimes",
]
