"""Helpers shared by the format parsers (no I/O, no Beam)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragsync.model import Attachment, Box, ElementType

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class RawElement:
    """An element before it is numbered in reading order.

    Attributes:
        type: element kind.
        text: element text (Markdown for tables).
        level: heading level or list nesting depth, 0 otherwise.
        page: 1-based page number, 0 when the format has none.
        confidence: OCR word confidence (0-100) of the element's text, None
            when it comes from a text layer or markup.
        boxes: its lines' boxes on the page (``ragsync.model.Box``: page,
            then corners as fractions of the page, origin top left), for PDFs
            and scans; ``()`` otherwise.
    """

    type: ElementType
    text: str
    level: int = 0
    page: int = 0
    confidence: float | None = None
    boxes: tuple[Box, ...] = ()


def page_box(page: int, x0: float, top: float, x1: float, bottom: float, width: float, height: float) -> Box:
    """A box on a page as ``ragsync.model.Box``: corners divided by the page's
    size (``top`` and ``bottom`` measured down from the page's top edge),
    clamped to 0-1 and rounded to 4 places.

    Args:
        page: 1-based page number.
        x0, top, x1, bottom: the box in the page's own units (points, pixels).
        width, height: the page's size in the same units (a size of 0 gives
            fractions of 1).
    """

    def frac(v: float, size: float) -> float:
        return round(min(max(v / size if size > 0 else v, 0.0), 1.0), 4)

    return (page, frac(x0, width), frac(top, height), frac(x1, width), frac(bottom, height))


def clean_text(text: str) -> str:
    """Collapse runs of whitespace (including newlines) into one space and strip.

    Args:
        text: any text.

    Returns:
        The text on one line with single spaces.
    """
    return _WS.sub(" ", text.replace("\x00", "")).strip()


def _cell(text: str) -> str:
    return clean_text(text).replace("|", "\\|")


def table_to_markdown(rows: Sequence[Sequence[str | None]]) -> str:
    """Render rows as a Markdown table, the first row being the header.

    Rows are padded to the widest row; empty rows are dropped; ``|`` in cells
    is escaped and whitespace collapsed.

    Args:
        rows: table rows, header row first; ``None`` cells count as empty.

    Returns:
        ``| h1 | h2 |\\n| --- | --- |\\n| a | b |``, or ``""`` when the table has
        no non-empty cell.
    """
    cleaned = [[_cell(c or "") for c in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return ""
    width = max(len(row) for row in cleaned)
    cleaned = [row + [""] * (width - len(row)) for row in cleaned]
    lines = ["| " + " | ".join(cleaned[0]) + " |", "| " + " | ".join(["---"] * width) + " |"]
    lines.extend("| " + " | ".join(row) + " |" for row in cleaned[1:])
    return "\n".join(lines)


def split_paragraphs(text: str) -> list[str]:
    """Split text into paragraphs on blank lines; lines inside a paragraph are joined.

    Args:
        text: plain text with ``\\n`` line ends.

    Returns:
        Non-empty paragraphs, whitespace collapsed.
    """
    out: list[str] = []
    for block in re.split(r"\n[ \t\f\v]*\n", text):
        para = clean_text(block)
        if para:
            out.append(para)
    return out


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def utf16_without_bom(head: bytes) -> str:
    """``utf-16-le``/``-be`` when every other byte of an ASCII-heavy head is NUL, else ``""``."""
    head = head[:400]
    if len(head) < 40:
        return ""
    half = len(head) // 2
    even, odd = head[0::2].count(0), head[1::2].count(0)
    if odd >= 0.9 * half and even < 0.1 * half:
        return "utf-16-le"
    if even >= 0.9 * half and odd < 0.1 * half:
        return "utf-16-be"
    return ""


def text_encoding(data: bytes) -> str:
    """The codec to read bytes as text with (the one rule parsers and detection share).

    Order: a byte order mark (UTF-8, UTF-32, UTF-16), UTF-16 without a BOM
    (NUL on every other byte of the first 400 bytes), UTF-8 (a multibyte
    character cut by the end of ``data`` is allowed, so a prefix can be
    sniffed); then, when over 10 % of the first 64 KiB are non-ASCII bytes (a
    non-Latin script in a legacy code page), charset-normalizer's guess;
    else cp1252, and latin-1 when cp1252 leaves bytes undefined.

    Args:
        data: raw bytes (a prefix is enough).

    Returns:
        A Python codec name; decoding with it and ``errors="replace"`` never fails.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec
    wide = utf16_without_bom(data)
    if wide:
        return wide
    try:
        data.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return "utf-8"
    sample = data[:65_536]
    if sum(1 for b in sample if b >= 0x80) > 0.1 * len(sample):
        # Mostly non-ASCII and not UTF-8: a legacy code page of a non-Latin script
        # (cp1251, cp1256, koi8-r...); Western text has a few per cent of such bytes.
        guess = _legacy_codepage(sample)
        if guess:
            return guess
    try:
        data.decode("cp1252")
        return "cp1252"
    except UnicodeDecodeError:
        return "latin-1"


def _legacy_codepage(sample: bytes) -> str:
    """charset-normalizer's best single-byte guess for ``sample``, ``""`` when it has none."""
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - a declared dependency
        return ""
    best = from_bytes(sample).best()
    if best is None or best.encoding in ("utf_8", "ascii"):
        return ""
    return str(best.encoding)


def decode_text(data: bytes) -> str:
    """Decode bytes as text with ``text_encoding`` (BOM-aware UTF-8/16/32, UTF-16
    without BOM, UTF-8, cp1252, latin-1).

    Args:
        data: raw bytes.

    Returns:
        The decoded text without a BOM, ``\\r\\n``/``\\r`` normalised to ``\\n``.
    """
    codec = text_encoding(data)
    if codec.startswith("utf-16-"):
        data = data[: len(data) // 2 * 2]
    text = data.decode(codec, errors="replace").lstrip("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass
class RawParse:
    """What a format parser returns before numbering.

    Attributes:
        elements: elements in reading order.
        pages: page count (0 when the format has none).
        metadata: format metadata (title, front matter keys...).
        page_parsers: for paged formats, which parser read each page
            (``pdfium``, ``pdfminer``, ``ocr``, ``none`` when nothing could);
            empty when not tracked.
        attachments: files the document carries (e-mail attachments, archive
            members), returned unparsed to become child documents.
    """

    elements: list[RawElement]
    pages: int = 0
    metadata: dict[str, str] | None = None
    page_parsers: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()
