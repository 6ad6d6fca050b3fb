"""PDF text-layer parser.

pypdfium2 gives the text and character boxes (fast); this module rebuilds
reading order (columns), drops running headers/footers, finds headings from
font size and asks pdfplumber for tables only on pages that draw ruling
lines or boxes (pdfplumber is about 100x slower than pdfium).

PDFium is not thread-safe: all PDFium calls run under one process-wide lock.
"""

from __future__ import annotations

import ctypes
import io
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from ragsync.errors import (
    CorruptDocumentError,
    EncryptedDocumentError,
    NoTextError,
    OcrBelowBarError,
    TooLargeError,
)
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, table_to_markdown
from ragsync.parsing._pdfium import PDFIUM_LOCK
from ragsync.parsing.ocr import (
    MIN_TEXT_LAYER_CHARS,
    OcrOptions,
    OcrRawParse,
    assemble,
    ocr_pdf_pages,
    page_needs_ocr,
)

_WORD = re.compile(r"\S+")
_DIGITS = re.compile(r"\d+")
_WS = re.compile(r"\s+")
# A page is a table candidate when it draws at least this many ruling lines / boxes.
_TABLE_MIN_RULINGS = 4
_MAX_OBJECTS_SCANNED = 4000
# pdfplumber costs ~0.2 s per page: at most this many candidate pages per document are searched.
_MAX_TABLE_PAGES = 40
# pdfplumber takes 0.2-2.6 s a candidate page: the table search of one
# document stops after this many seconds so a table-heavy file never runs
# into the parse time limit (pages past the budget keep their text).
_TABLE_BUDGET_S = 15.0
_EDGE_LINES = 2  # lines at the top and at the bottom of a page checked for running headers/footers


@dataclass
class _Item:
    """A run of text on one line (or a table block) with its box (PDF points, y up)."""

    x0: float
    x1: float
    bottom: float
    top: float
    size: float
    text: str
    table: bool = False

    @property
    def cy(self) -> float:
        return (self.top + self.bottom) / 2


@dataclass
class _Para:
    page: int
    size: float
    lines: list[str] = field(default_factory=list)
    table: bool = False
    n_lines: int = 1

    @property
    def text(self) -> str:
        return " ".join(self.lines) if not self.table else self.lines[0]


# --------------------------------------------------------------------------- extraction


def _page_segments(textpage: Any) -> list[_Item]:
    """Text runs of one page: pdfium lines split at wide horizontal gaps."""
    n = textpage.count_chars()
    if n <= 0:
        return []
    text = textpage.get_text_range(0, n)
    if len(text) != n:
        return _rect_segments(textpage)
    raw = textpage.raw
    rect = pdfium_c.FS_RECTF()
    rect_p = ctypes.byref(rect)
    get_box = pdfium_c.FPDFText_GetLooseCharBox

    def box(i: int) -> tuple[float, float, float, float]:
        get_box(raw, i, rect_p)
        return rect.left, rect.right, rect.bottom, rect.top

    out: list[_Item] = []
    pos = 0
    for line in text.split("\r\n"):
        start = pos
        pos += len(line) + 2
        cur: _Item | None = None
        cur_words: list[str] = []
        for m in _WORD.finditer(line):
            a = start + m.start()
            b = start + m.end() - 1
            l0, r0, b0, t0 = box(a)
            l1, r1, b1, t1 = (l0, r0, b0, t0) if b == a else box(b)
            size = max(t0 - b0, t1 - b1, 0.1)
            left, right = min(l0, l1), max(r0, r1)
            if cur is not None:
                gap = left - cur.x1
                same_line = cur.bottom - 0.3 * size <= (b0 + t0) / 2 <= cur.top + 0.3 * size
                if same_line and -0.5 * size <= gap <= 1.0 * max(cur.size, size):
                    cur.x1 = max(cur.x1, right)
                    cur.bottom = min(cur.bottom, b0, b1)
                    cur.top = max(cur.top, t0, t1)
                    cur.size = max(cur.size, size)
                    cur_words.append(m.group())
                    continue
                cur.text = " ".join(cur_words)
                out.append(cur)
            cur = _Item(left, right, min(b0, b1), max(t0, t1), size, "")
            cur_words = [m.group()]
        if cur is not None:
            cur.text = " ".join(cur_words)
            out.append(cur)
    return out


def _rect_segments(textpage: Any) -> list[_Item]:
    """Fallback when text indices do not line up with characters: pdfium's text rects."""
    out: list[_Item] = []
    for i in range(textpage.count_rects()):
        left, bottom, right, top = textpage.get_rect(i)
        text = clean_text(textpage.get_text_bounded(left, bottom, right, top))
        if text:
            out.append(_Item(left, right, bottom, top, max(top - bottom, 0.1), text))
    return out


def _ruling_count(page: Any) -> int:
    """How table-like the page's vector drawing is: thin lines and boxes drawn by path objects.

    Returns 0 unless the page draws at least 3 horizontal and 2 vertical
    rulings, or 6 boxes (cell borders); otherwise the number of such shapes.
    """
    raw = page.raw
    n = min(pdfium_c.FPDFPage_CountObjects(raw), _MAX_OBJECTS_SCANNED)
    left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    horizontal = vertical = boxes = 0
    for i in range(n):
        obj = pdfium_c.FPDFPage_GetObject(raw, i)
        if pdfium_c.FPDFPageObj_GetType(obj) != pdfium_c.FPDF_PAGEOBJ_PATH:
            continue
        if not pdfium_c.FPDFPageObj_GetBounds(
            obj, ctypes.byref(left), ctypes.byref(bottom), ctypes.byref(right), ctypes.byref(top)
        ):
            continue
        w = right.value - left.value
        h = top.value - bottom.value
        if w < 3 and h > 8:
            vertical += 1
        elif h < 3 and w > 8:
            horizontal += 1
        elif w > 8 and h > 8:
            boxes += 1
        if horizontal + vertical + boxes >= 60:
            break
    if (horizontal >= 3 and vertical >= 2) or boxes >= 6 or (horizontal >= 3 and boxes >= 2):
        return horizontal + vertical + boxes
    return 0


# --------------------------------------------------------------------------- tables


def _find_tables(
    data: bytes, pages: Sequence[int], boxes: dict[int, tuple[float, float, float, float]]
) -> dict[int, list[_Item]]:
    """Run pdfplumber on the given 0-based pages; return table blocks per page in pdfium coordinates."""
    import pdfplumber

    found: dict[int, list[_Item]] = {}
    try:
        pdf = pdfplumber.open(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - tables are best effort; text still parses
        return found
    deadline = time.monotonic() + _TABLE_BUDGET_S
    with pdf:
        for index in pages:
            if time.monotonic() > deadline:
                break
            try:
                page = pdf.pages[index]
                tables = page.find_tables()
                left, _bottom, _right, top = boxes[index]
                blocks: list[_Item] = []
                for table in tables:
                    rows = table.extract()
                    if len(rows) < 2 or max((len(r) for r in rows), default=0) < 2:
                        continue
                    md = table_to_markdown(rows)
                    if not md or sum(1 for r in rows for c in r if c and c.strip()) < 3:
                        continue
                    x0, t0, x1, b0 = table.bbox
                    blocks.append(_Item(x0 + left, x1 + left, top - b0, top - t0, 0.0, md, table=True))
                if blocks:
                    found[index] = blocks
            except Exception:  # noqa: BLE001 - a page pdfplumber cannot read keeps its text
                continue
    return found


def _inside(item: _Item, block: _Item) -> bool:
    cx = (item.x0 + item.x1) / 2
    return block.x0 - 1 <= cx <= block.x1 + 1 and block.bottom - 1 <= item.cy <= block.top + 1


# --------------------------------------------------------------------------- reading order


def _gutter(items: list[_Item]) -> float | None:
    """x of a column gutter crossed by few text runs, or None for one column."""
    texts = [it for it in items if not it.table]
    if len(texts) < 8:
        return None
    lo = min(it.x0 for it in texts)
    hi = max(it.x1 for it in texts)
    width = hi - lo
    if width < 100:
        return None
    bins = max(int(width / 2), 1)
    diff = [0] * (bins + 2)
    for it in texts:
        b0 = int((it.x0 - lo) / width * bins)
        b1 = int((it.x1 - lo) / width * bins)
        diff[max(b0, 0)] += 1
        diff[min(b1, bins) + 1] -= 1
    cover: list[int] = []
    run = 0
    for d in diff[: bins + 1]:
        run += d
        cover.append(run)
    start, end = int(bins * 0.3), int(bins * 0.7)
    best = min(range(start, end + 1), key=lambda b: (cover[b], abs(b - bins / 2)))
    if cover[best] > max(1, len(texts) * 0.15):
        return None
    x = lo + (best + 0.5) * width / bins
    left_chars = sum(len(it.text) for it in texts if it.x1 <= x)
    right_chars = sum(len(it.text) for it in texts if it.x0 >= x)
    left_n = sum(1 for it in texts if it.x1 <= x)
    right_n = sum(1 for it in texts if it.x0 >= x)
    total = sum(len(it.text) for it in texts)
    if min(left_chars, right_chars) < 0.2 * total or min(left_n, right_n) < 4:
        return None
    return x


def _columns(items: list[_Item]) -> list[list[_Item]]:
    """Split a page into flows read in order: spanning blocks, then left column, then right."""
    x = _gutter(items)
    ordered = sorted(items, key=lambda it: (-it.cy, it.x0))
    if x is None:
        return [ordered]
    flows: list[list[_Item]] = []
    left: list[_Item] = []
    right: list[_Item] = []
    for it in ordered:
        if it.x0 < x - 1 and it.x1 > x + 1:
            if left or right:
                flows.extend(f for f in (left, right) if f)
                left, right = [], []
            flows.append([it])
        elif it.x1 <= x + 1:
            left.append(it)
        else:
            right.append(it)
    flows.extend(f for f in (left, right) if f)
    return flows


def _lines(flow: list[_Item]) -> list[list[_Item]]:
    lines: list[list[_Item]] = []
    for it in flow:  # flow is sorted by top descending
        if lines and not it.table and not lines[-1][0].table:
            head = lines[-1][0]
            if abs(head.cy - it.cy) <= 0.4 * min(head.size, it.size):
                lines[-1].append(it)
                continue
        lines.append([it])
    for line in lines:
        line.sort(key=lambda it: it.x0)
    return lines


_SOFT_HYPHENS = ("\ufffe", "\xad", "\x02")


def _join(a: str, b: str) -> str:
    if a.endswith(_SOFT_HYPHENS):
        return a[:-1] + b
    if len(a) > 1 and a.endswith("-") and a[-2].isalpha() and b[:1].islower():
        return a[:-1] + b
    return a + " " + b


def _paragraphs(flow: list[_Item], page: int) -> list[_Para]:
    paras: list[_Para] = []
    prev: list[_Item] | None = None
    right_edge = max((it.x1 for it in flow), default=0.0)
    for line in _lines(flow):
        first = line[0]
        if first.table:
            paras.append(_Para(page, 0.0, [first.text], table=True))
            prev = None
            continue
        text = " ".join(it.text for it in line)
        size = max(it.size for it in line)
        x0 = first.x0
        top = max(it.top for it in line)
        new = prev is None or not paras or paras[-1].table
        if not new and prev is not None:
            p_size = max(it.size for it in prev)
            p_bottom = min(it.bottom for it in prev)
            p_x0 = prev[0].x0
            p_x1 = max(it.x1 for it in prev)
            p_text = prev[-1].text
            gap = p_bottom - top
            ref = max(size, p_size)
            if (
                abs(size - p_size) > 0.15 * ref
                or gap > 0.6 * ref
                or gap < -1.5 * ref
                or (x0 > p_x0 + 0.8 * ref and p_x1 < right_edge - 0.5 * ref and p_text[-1:] in ".:!?")
                or (p_x1 < right_edge - 4 * ref and p_text[-1:] in ".:!?")
            ):
                new = True
        if new:
            paras.append(_Para(page, size, [text]))
        else:
            last = paras[-1]
            last.lines[-1:] = [_join(last.lines[-1], text)]
            last.size = max(last.size, size)
            last.n_lines += 1
        prev = line
    return paras


def _edge_keys(items: list[_Item]) -> set[int]:
    """Indexes of text runs on the first/last lines of a page."""
    texts = [(i, it) for i, it in enumerate(items) if not it.table]
    if not texts:
        return set()
    tops = sorted({round(it.cy) for _, it in texts})
    edge = set(tops[:_EDGE_LINES]) | set(tops[-_EDGE_LINES:])
    return {i for i, it in texts if round(it.cy) in edge}


def _norm(text: str) -> str:
    return _WS.sub(" ", _DIGITS.sub("", text.lower())).strip()


# --------------------------------------------------------------------------- entry point


def parse_pdf(data: bytes, *, max_pages: int = 2000, ocr_options: OcrOptions | None = None) -> RawParse:
    """Parse the text layer of a PDF.

    Reading order: columns are detected from the x-distribution of text runs
    (a gutter crossed by few runs between 30% and 70% of the text width); a
    two-column page reads spanning blocks, then the left column, then the
    right one. Lines whose text with digits removed repeats on the first or
    last two lines of at least half the pages (documents of 3+ pages) are
    dropped as running headers/footers/page numbers. Paragraphs whose font
    size is at least 1.15x the body size become headings (largest = 1).
    Tables (pdfplumber, only on pages drawing a grid of rulings or cell boxes,
    at most 40 such pages per document) become one
    Markdown element each and their text is not repeated as paragraphs.
    Scanned pages (under 50 characters of text layer and images covering 5%+
    of the page) are rendered at 300 dpi and OCR'd (``ragsync.parsing.ocr``):
    their paragraphs join the elements with their page number, pages below
    the OCR bar go to ``pages_for_review`` (the result is then an
    ``OcrRawParse`` carrying those and ``ocr_confidence``).

    Args:
        data: the PDF bytes. Owner-encrypted files open with the empty password.
        max_pages: page limit.
        ocr_options: OCR bar and limits for scanned pages (defaults when None).

    Returns:
        Elements with 1-based ``page`` numbers, the page count and metadata
        (``title``/``author`` when set).

    Raises:
        EncryptedDocumentError: a user password is required.
        CorruptDocumentError: PDFium cannot open the file, or no page loads.
        TooLargeError: more than ``max_pages`` pages.
        NoTextError: no page has a text layer or legible scanned text.
        OcrBelowBarError: no text layer and every non-blank scanned page is
            below the OCR bar.
        ConfigurationError: scanned pages but Tesseract is not installed.
    """
    ocr_indices: list[int] = []
    page_items: list[list[_Item]] = []
    candidates: list[int] = []
    boxes: dict[int, tuple[float, float, float, float]] = {}
    meta: dict[str, str] = {}
    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            code = getattr(exc, "err_code", None)
            if code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
                raise EncryptedDocumentError("PDF requires a password") from exc
            raise CorruptDocumentError(f"PDFium cannot open the file: {exc}") from exc
        try:
            n_pages = len(doc)
            if n_pages > max_pages:
                raise TooLargeError(f"PDF has {n_pages} pages, above the limit of {max_pages}")
            if n_pages == 0:
                raise CorruptDocumentError("PDF has no pages")
            try:
                for key, value in doc.get_metadata_dict(skip_empty=True).items():
                    if key in ("Title", "Author", "Subject") and value.strip():
                        meta[key.lower()] = value.strip()
            except Exception:  # noqa: BLE001 - metadata is optional
                pass
            loaded = 0
            for index in range(n_pages):
                try:
                    page = doc[index]
                except pdfium.PdfiumError:
                    page_items.append([])
                    continue
                loaded += 1
                try:
                    textpage = page.get_textpage()
                    items = _page_segments(textpage)
                    textpage.close()
                    chars = sum(len(it.text) - it.text.count(" ") for it in items)
                    if chars < MIN_TEXT_LAYER_CHARS and page_needs_ocr(page, chars):
                        ocr_indices.append(index)
                        items = []  # the OCR text replaces the few characters there
                    if items and _ruling_count(page) >= _TABLE_MIN_RULINGS:
                        candidates.append(index)
                        box = page.get_bbox()
                        boxes[index] = (box[0], box[1], box[2], box[3])
                finally:
                    page.close()
                page_items.append(items)
            if loaded == 0:
                raise CorruptDocumentError("no PDF page could be loaded")
        finally:
            doc.close()
    ocr_out: list[RawElement] = []
    review: tuple[int, ...] = ()
    ocr_conf: float | None = None
    if ocr_indices:
        ocr_out, review, ocr_conf = assemble(ocr_pdf_pages(data, ocr_indices, ocr_options))
        if not ocr_out and review and not any(page_items):
            raise OcrBelowBarError(f"all {len(review)} scanned page(s) of the PDF are below the OCR bar")
    if not any(page_items) and not ocr_out:
        if ocr_indices:
            raise NoTextError(f"PDF has no text layer and its {len(ocr_indices)} scanned page(s) are blank")
        raise NoTextError(f"PDF has no text layer on any of its {n_pages} pages (image-only: OCR needed)")

    if candidates:
        tables = _find_tables(data, candidates[:_MAX_TABLE_PAGES], boxes)
        for index, blocks in tables.items():
            kept = [it for it in page_items[index] if not any(_inside(it, b) for b in blocks)]
            page_items[index] = kept + blocks

    # running headers / footers
    if n_pages >= 3:
        edges = [_edge_keys(items) for items in page_items]
        counts: Counter[str] = Counter()
        for items, edge in zip(page_items, edges, strict=True):
            counts.update({_norm(items[i].text) for i in edge})
        threshold = max(2, (n_pages + 1) // 2)
        repeated = {k for k, c in counts.items() if c >= threshold}
        if repeated:
            page_items = [
                [it for i, it in enumerate(items) if not (i in edge and _norm(it.text) in repeated)]
                for items, edge in zip(page_items, edges, strict=True)
            ]

    paras: list[_Para] = []
    for index, items in enumerate(page_items):
        for flow in _columns(items):
            paras.extend(_paragraphs(flow, index + 1))

    text_paras = [p for p in paras if not p.table]
    weights: Counter[float] = Counter()
    for p in text_paras:
        weights[round(p.size * 2) / 2] += len(p.text)
    body = weights.most_common(1)[0][0] if weights else 0.0
    heading_sizes = sorted(
        {round(p.size) for p in text_paras if _is_heading(p, body)},
        reverse=True,
    )
    levels = {s: min(i + 1, 6) for i, s in enumerate(heading_sizes)}
    out: list[RawElement] = []
    for p in paras:
        if p.table:
            out.append(RawElement(ElementType.TABLE, p.text, 0, p.page))
            continue
        text = clean_text(p.text.replace("\ufffe", "").replace("\x02", ""))
        if not text:
            continue
        if _is_heading(p, body):
            out.append(RawElement(ElementType.HEADING, text, levels[round(p.size)], p.page))
        else:
            out.append(RawElement(ElementType.PARAGRAPH, text, 0, p.page))
    if ocr_indices:
        out = sorted(out + ocr_out, key=lambda e: e.page)  # stable: text-layer order kept
        if not out:
            raise NoTextError("PDF holds only running headers/footers and blank scanned pages")
        return OcrRawParse(out, n_pages, meta, pages_for_review=review, ocr_confidence=ocr_conf)
    if not out:
        raise NoTextError("PDF text layer holds only running headers/footers")
    return RawParse(out, n_pages, meta)


def _is_heading(p: _Para, body: float) -> bool:
    text = p.text
    return (
        body > 0
        and p.size >= 1.15 * body
        and p.n_lines <= 3
        and len(text) <= 200
        and any(c.isalpha() for c in text)
    )
