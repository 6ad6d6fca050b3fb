"""XLSX (openpyxl) and PPTX (python-pptx) parsers.

XLSX: one heading (the sheet name) and one Markdown table per non-empty
worksheet, ``page`` being the sheet's 1-based position. PPTX: slides in
presentation order, ``page`` being the slide number; Tika is not used for pptx
because it orders slides as sorted text.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterable, Iterator
from typing import Any

from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, table_to_markdown

#: Rows kept per worksheet; the rest is dropped and noted in metadata.
MAX_SHEET_ROWS = 20_000
#: Columns kept per row (spreadsheets may declare 16k columns).
MAX_SHEET_COLUMNS = 512


def _cell_text(value: Any) -> str:
    """Render one cell value: integral floats without ``.0``, dates in ISO format."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0, 0):
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def _sheet_rows(rows: Iterable[tuple[Any, ...]], max_rows: int) -> tuple[list[list[str]], bool]:
    """Collect non-empty rows as text, trailing empty cells trimmed.

    Returns:
        The rows and whether ``max_rows`` cut the sheet short.
    """
    out: list[list[str]] = []
    for values in rows:
        row = [_cell_text(v) for v in values[:MAX_SHEET_COLUMNS]]
        while row and not row[-1].strip():
            row.pop()
        if not row:
            continue
        if len(out) >= max_rows:
            return out, True
        out.append(row)
    return out, False


def parse_xlsx(data: bytes, *, max_rows: int = MAX_SHEET_ROWS) -> RawParse:
    """Parse an XLSX workbook: per worksheet a heading and one Markdown table.

    Cached formula values are read (``data_only``), never the formulas. The
    first non-empty row of a sheet is the table's header row. Empty sheets are
    skipped. Chart sheets hold no cells and are ignored.

    Args:
        data: the bytes of an ``.xlsx``/``.xlsm`` file.
        max_rows: rows kept per sheet; a longer sheet is cut and listed in
            ``metadata["truncated_sheets"]`` (comma separated sheet names).

    Returns:
        Elements (heading level 1 with the sheet name, then a table), with
        ``page`` = 1-based worksheet position; ``pages`` = worksheet count;
        metadata ``title`` (document property, when set), ``sheets`` (count).

    Raises:
        Whatever openpyxl raises on bad bytes (``parse`` maps it to
        ``CorruptDocumentError``).
    """
    from openpyxl import load_workbook

    wb = load_workbook(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
    try:
        out: list[RawElement] = []
        truncated: list[str] = []
        worksheets = wb.worksheets
        for number, ws in enumerate(worksheets, start=1):
            rows, cut = _sheet_rows(ws.iter_rows(values_only=True), max_rows)
            table = table_to_markdown(rows)
            if not table:
                continue
            if cut:
                truncated.append(ws.title)
            out.append(RawElement(ElementType.HEADING, clean_text(ws.title) or f"Sheet {number}", 1, number))
            out.append(RawElement(ElementType.TABLE, table, 0, number))
        meta: dict[str, str] = {"sheets": str(len(worksheets))}
        title = clean_text(wb.properties.title or "") if wb.properties is not None else ""
        if title:
            meta["title"] = title
        if truncated:
            meta["truncated_sheets"] = ",".join(truncated)
            meta["max_rows"] = str(max_rows)
        return RawParse(out, len(worksheets), meta)
    finally:
        wb.close()


# --------------------------------------------------------------------------- pptx


def _shape_key(shape: Any) -> tuple[int, int]:
    top = shape.top if shape.top is not None else 0
    left = shape.left if shape.left is not None else 0
    return int(top), int(left)


def _flatten(shapes: Iterable[Any]) -> Iterator[Any]:
    """Shapes in reading order (top to bottom, then left to right), groups expanded."""
    from pptx.shapes.group import GroupShape

    for shape in sorted(shapes, key=_shape_key):
        if isinstance(shape, GroupShape):
            yield from _flatten(shape.shapes)
        else:
            yield shape


def _is_body_placeholder(shape: Any) -> bool:
    """Body/object placeholders render their paragraphs as bullets by default."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    if not shape.is_placeholder:
        return False
    try:
        kind = shape.placeholder_format.type
    except Exception:  # noqa: BLE001 - placeholder without a type
        return False
    return kind in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)


def _has_bullet(paragraph: Any) -> bool:
    ppr = paragraph._p.pPr
    if ppr is None:
        return False
    tags = {child.tag.rsplit("}", 1)[-1] for child in ppr}
    return bool(tags & {"buChar", "buAutoNum", "buBlip"})


def _text_frame(shape: Any, page: int, out: list[RawElement]) -> None:
    bullets = _is_body_placeholder(shape)
    for paragraph in shape.text_frame.paragraphs:
        text = clean_text("".join(run.text for run in paragraph.runs) or paragraph.text)
        if not text:
            continue
        level = int(paragraph.level or 0)
        if bullets or level > 0 or _has_bullet(paragraph):
            out.append(RawElement(ElementType.LIST_ITEM, text, level + 1, page))
        else:
            out.append(RawElement(ElementType.PARAGRAPH, text, 0, page))


def _table(shape: Any, page: int, out: list[RawElement]) -> None:
    rows: list[list[str]] = []
    for row in shape.table.rows:
        rows.append([cell.text for cell in row.cells])
    md = table_to_markdown(rows)
    if md:
        out.append(RawElement(ElementType.TABLE, md, 0, page))


def _slide(slide: Any, page: int) -> list[RawElement]:
    out: list[RawElement] = []
    title_shape = None
    try:
        title_shape = slide.shapes.title
    except Exception:  # noqa: BLE001 - broken placeholder references
        title_shape = None
    title_id = title_shape.shape_id if title_shape is not None else None
    if title_shape is not None and title_shape.has_text_frame:
        title = clean_text(title_shape.text_frame.text)
        if title:
            out.append(RawElement(ElementType.HEADING, title, 1, page))
    for shape in _flatten(slide.shapes):
        if title_id is not None and shape.shape_id == title_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            _table(shape, page, out)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            _text_frame(shape, page, out)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        if frame is not None:
            for paragraph in frame.paragraphs:
                text = clean_text(paragraph.text)
                if text:
                    out.append(RawElement(ElementType.PARAGRAPH, text, 0, page))
    return out


_SLIDESHOW_CT = b"presentationml.slideshow.main+xml"
_PRESENTATION_CT = b"presentationml.presentation.main+xml"


def _as_presentation(data: bytes) -> bytes:
    """A slide show (``.ppsx``) with its main part relabelled so python-pptx opens it."""
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as src:
        types = src.read("[Content_Types].xml")
        if _SLIDESHOW_CT not in types:
            return data
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                body = src.read(item.filename)
                if item.filename == "[Content_Types].xml":
                    body = body.replace(_SLIDESHOW_CT, _PRESENTATION_CT)
                dst.writestr(item, body)
    return buf.getvalue()


def parse_pptx(data: bytes) -> RawParse:
    """Parse a PPTX presentation slide by slide, in presentation order.

    Per slide: the title placeholder as a level-1 heading, then the other
    shapes top to bottom and left to right (groups expanded): text frames as
    paragraphs, or list items when they sit in a body placeholder, are
    indented or carry an explicit bullet (level = indent + 1); tables as
    Markdown, first row as header; then the speaker notes as paragraphs.
    Pictures and charts are skipped.

    Args:
        data: the bytes of a ``.pptx``/``.pptm``/``.ppsx`` file (a slide show's
            main part is relabelled as a presentation first).

    Returns:
        Elements with ``page`` = 1-based slide number; ``pages`` = slide
        count; metadata ``slides`` and ``title`` (core property, when set).

    Raises:
        Whatever python-pptx raises on bad bytes (``parse`` maps it to
        ``CorruptDocumentError``).
    """
    from pptx import Presentation

    prs = Presentation(io.BytesIO(_as_presentation(data)))
    out: list[RawElement] = []
    slides = list(prs.slides)
    for number, slide in enumerate(slides, start=1):
        out.extend(_slide(slide, number))
    meta: dict[str, str] = {"slides": str(len(slides))}
    try:
        title = clean_text(prs.core_properties.title or "")
    except Exception:  # noqa: BLE001 - missing or broken core properties part
        title = ""
    if title:
        meta["title"] = title
    return RawParse(out, len(slides), meta)
