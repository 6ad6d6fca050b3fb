"""Helpers shared by the format parsers (no I/O, no Beam)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragsync.model import ElementType

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
    """

    type: ElementType
    text: str
    level: int = 0
    page: int = 0
    confidence: float | None = None


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


def decode_text(data: bytes) -> str:
    """Decode bytes as text: BOM-aware UTF-8/UTF-16, then cp1252, then latin-1.

    Args:
        data: raw bytes.

    Returns:
        The decoded text with ``\\r\\n``/``\\r`` normalised to ``\\n``.
    """
    text: str
    if data.startswith(b"\xef\xbb\xbf"):
        text = data[3:].decode("utf-8", errors="replace")
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    else:
        for enc in ("utf-8", "cp1252"):
            try:
                text = data.decode(enc)
                break
            except UnicodeDecodeError:
                continue
        else:
            text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def non_empty(elements: Iterable[RawElement]) -> list[RawElement]:
    """Drop elements whose text is blank.

    Args:
        elements: raw elements.

    Returns:
        The elements with non-blank text, in the same order.
    """
    return [e for e in elements if e.text.strip()]


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
    """

    elements: list[RawElement]
    pages: int = 0
    metadata: dict[str, str] | None = None
    page_parsers: tuple[str, ...] = ()
