"""Plain-text and CSV parsers."""

from __future__ import annotations

import csv
import io

from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, decode_text, split_paragraphs, table_to_markdown


def parse_text(data: bytes) -> RawParse:
    """Parse plain text: one paragraph per blank-line separated block.

    Args:
        data: the bytes (UTF-8/UTF-16 with BOM/cp1252/latin-1).

    Returns:
        Paragraph elements (possibly none; the caller raises ``NoTextError``).
    """
    text = decode_text(data)
    return RawParse([RawElement(ElementType.PARAGRAPH, p) for p in split_paragraphs(text)])


def parse_csv(data: bytes) -> RawParse:
    """Parse CSV/TSV as one Markdown table whose header is the first row.

    The delimiter is sniffed among ``,``, ``;``, tab and ``|``.

    Args:
        data: the bytes.

    Returns:
        One table element, or none when the file holds no cell text.
    """
    text = decode_text(data)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:20_000], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(io.StringIO(text), dialect))
    md = table_to_markdown(rows)
    return RawParse([RawElement(ElementType.TABLE, md)] if md else [])
