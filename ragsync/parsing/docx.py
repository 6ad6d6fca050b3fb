"""DOCX parser (python-docx): body paragraphs and tables in document order."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from typing import Any

from docx import Document
from docx.oxml.ns import qn
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph

from ragsync.errors import CorruptDocumentError
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, table_to_markdown

_HEADING = re.compile(r"^(?:heading|überschrift|titre|título|titolo)\s*(\d)$", re.IGNORECASE)


def _style_name(par: Paragraph) -> str:
    try:
        style = par.style
        return (style.name or "") if style is not None else ""
    except Exception:  # noqa: BLE001 - broken style references are common
        return ""


def _list_level(par: Paragraph, style: str) -> int:
    ppr = par._p.pPr
    if ppr is not None:
        numpr = ppr.find(qn("w:numPr"))
        if numpr is not None:
            ilvl = numpr.find(qn("w:ilvl"))
            try:
                return int(ilvl.get(qn("w:val"), "0")) + 1 if ilvl is not None else 1
            except ValueError:
                return 1
    if "list" in style.lower():
        digits = re.findall(r"\d", style)
        return int(digits[-1]) if digits else 1
    return 0


def _paragraph(par: Paragraph) -> RawElement | None:
    text = clean_text(par.text)
    if not text:
        return None
    style = _style_name(par)
    if style == "Title":
        return RawElement(ElementType.HEADING, text, 1)
    match = _HEADING.match(style.strip())
    if match:
        return RawElement(ElementType.HEADING, text, max(1, min(int(match.group(1)), 6)))
    ppr = par._p.pPr
    if ppr is not None:
        outline = ppr.find(qn("w:outlineLvl"))
        if outline is not None:
            try:
                level = int(outline.get(qn("w:val"), "9"))
            except ValueError:
                level = 9
            if level < 6:
                return RawElement(ElementType.HEADING, text, level + 1)
    level = _list_level(par, style)
    if level:
        return RawElement(ElementType.LIST_ITEM, text, level)
    return RawElement(ElementType.PARAGRAPH, text)


def _table(table: Table) -> str:
    rows: list[list[str]] = []
    for tr in table._tbl.tr_lst:
        row: list[str] = []
        for tc in tr.tc_lst:
            row.append(_Cell(tc, table).text)
            span = tc.grid_span if hasattr(tc, "grid_span") else 1
            row.extend([""] * max(0, span - 1))
        rows.append(row)
    return table_to_markdown(rows)


def _body_items(parent: Any, doc_part: Any) -> Iterator[Paragraph | Table]:
    for child in parent.iterchildren():
        if child.tag == qn("w:p"):
            yield Paragraph(child, doc_part)
        elif child.tag == qn("w:tbl"):
            yield Table(child, doc_part)
        elif child.tag == qn("w:sdt"):
            content = child.find(qn("w:sdtContent"))
            if content is not None:
                yield from _body_items(content, doc_part)


def parse_docx(data: bytes) -> RawParse:
    """Parse a DOCX body: headings (Title / Heading N styles or outline level),
    list paragraphs (numbering or List styles; level = ilvl + 1), paragraphs
    and tables (Markdown, first row as header), in body order.

    Headers, footers, comments and footnotes are not read.

    Args:
        data: the bytes of a .docx file.

    Returns:
        Elements in body order plus ``title``/``author`` metadata when set.

    Raises:
        CorruptDocumentError: not a readable OOXML word-processing package.
    """
    try:
        document = Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise CorruptDocumentError(f"unreadable docx: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - python-docx / lxml raise many types
        raise CorruptDocumentError(f"unreadable docx: {type(exc).__name__}: {exc}") from exc
    out: list[RawElement] = []
    body = document.element.body
    for item in _body_items(body, document.part):
        if isinstance(item, Paragraph):
            el = _paragraph(item)
            if el is not None:
                out.append(el)
        else:
            md = _table(item)
            if md:
                out.append(RawElement(ElementType.TABLE, md))
    meta: dict[str, str] = {}
    try:
        props = document.core_properties
        if props.title:
            meta["title"] = props.title
        if props.author:
            meta["author"] = props.author
    except Exception:  # noqa: BLE001 - metadata is optional
        pass
    return RawParse(out, 0, meta)
