"""PDF parser: a fallback chain per page (PDFium, pdfminer, OCR), tables, reading order.

Each page is read by the first parser of the chain that can:

1. **PDFium** (pypdfium2): text and character boxes, fast. A page it cannot
   load, or whose text layer is mostly unmapped glyphs (control characters),
   goes on to
2. **pdfminer** (through pdfplumber), which reads some files and fonts PDFium
   rejects; a page without usable text there goes on to
3. **OCR** (``ragsync.parsing.ocr``): the page rendered at 300 dpi through
   Tesseract. Scanned pages (under 50 characters of text layer and images
   covering 5%+ of the page) go to OCR directly.

A file PDFium cannot open at all is read by pdfminer alone; it is
``corrupt`` (or ``encrypted``) only when pdfminer cannot read it either. The
parser of each page is returned in ``page_parsers``.

Pages are processed one at a time (PDFium page objects are closed before the
next page loads); only the light text runs of each page are kept until the
end, where running headers/footers are found across pages. Tables
(``pdf_tables``) are searched only on pages whose rulings or text alignment
suggest one. Reading order, paragraphs and headings: ``pdf_layout``.

PDFium is not thread-safe: all PDFium calls run under ``PDFIUM_LOCK``.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Callable
from typing import Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from ragsync.errors import (
    ArchiveBombError,
    CorruptDocumentError,
    EncryptedDocumentError,
    NoTextError,
    OcrBelowBarError,
    TooLargeError,
)
from ragsync.parsing._common import RawElement, RawParse
from ragsync.parsing._pdfium import PDFIUM_LOCK
from ragsync.parsing.archive import ArchiveLimits
from ragsync.parsing.ocr import (
    MIN_TEXT_LAYER_CHARS,
    OcrOptions,
    OcrRawParse,
    assemble,
    ocr_pdf_pages,
    page_needs_ocr,
)
from ragsync.parsing.pdf_layout import Para, drop_running_lines, flows, paragraphs, to_elements
from ragsync.parsing.pdf_rulings import Rulings, page_rulings, turned
from ragsync.parsing.pdf_tables import Table, aligned_tables, ruled_tables, table_hint
from ragsync.parsing.pdf_text import (
    Item,
    cell_runs,
    drop_line_numbers,
    garbage_ratio,
    merge_runs,
    page_text_chars,
    page_turn,
    pdfium_items,
    pdfminer_words,
)

PDFIUM, PDFMINER, OCR, NONE = "pdfium", "pdfminer", "ocr", "none"
# A text layer with more than this share of unmapped glyphs is not used.
_MAX_GARBAGE = 0.3
_SEPARATOR = re.compile(r"\|(\s*-{3,}\s*\|)+")


# --------------------------------------------------------------------------- one page


def page_items(
    runs: list[Item], rulings: Rulings, words: Callable[[], list[Item]] | None = None
) -> list[Item]:
    """A page's runs with line numbers dropped and tables turned into Markdown blocks.

    Args:
        runs: the page's text runs.
        rulings: the page's ``Rulings``.
        words: returns the page's words, asked only when the page draws a
            grid (None: the runs stand in for the words).

    Returns:
        Text runs not inside a table, plus one table ``Item`` per table.
    """
    runs = drop_line_numbers(runs)
    if not runs or not table_hint(runs, rulings):
        return runs
    tables: list[Table] = []
    if len(rulings.horizontal) >= 2 and len(rulings.vertical) >= 2:
        tables = ruled_tables(words() if words is not None else runs, rulings)
        runs = [r for r in runs if not any(t.covers(r) for t in tables)]
    # Borderless tables are searched in cell runs (words split at gaps wider than a space):
    # cells of such tables are often set less than one em apart, and a run crossing a column
    # (a figure and the next column's currency sign) would merge two cells.
    cells = cell_runs(drop_line_numbers(words())) if words is not None else runs
    cells = [c for c in cells if not any(t.covers(c) for t in tables)]
    # The whole page first (a wide table must not be cut at a column gutter), then each column
    # of a multi-column page (a table inside one column, next to prose).
    page_wide = aligned_tables(cells)
    tables.extend(page_wide)
    if page_wide:
        runs = [r for r in runs if not any(t.covers(r) for t in page_wide)]
        cells = [c for c in cells if not any(t.covers(c) for t in page_wide)]
    for flow in flows(cells):
        tables.extend(aligned_tables(flow))
    if not tables:
        return runs
    return [r for r in runs if not any(t.covers(r) for t in tables)] + [t.item() for t in tables]


class _Miner:
    """pdfminer (through pdfplumber) on demand: opened once, for the pages PDFium could not read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pdf: Any = None
        self.error = ""

    def open(self) -> Any:
        if self.pdf is None and not self.error:
            import pdfplumber

            try:
                self.pdf = pdfplumber.open(io.BytesIO(self.data))
            except Exception as exc:  # noqa: BLE001 - pdfminer raises anything on bad bytes
                self.error = f"{type(exc).__name__}: {exc}"
        return self.pdf

    def runs(self, index: int) -> list[Item] | None:
        """Runs of page ``index`` (0-based), or None when pdfminer cannot read usable text there."""
        pdf = self.open()
        if pdf is None or index >= len(pdf.pages):
            return None
        page = pdf.pages[index]
        try:
            words = pdfminer_words(page)
        except Exception:  # noqa: BLE001 - a page pdfminer cannot read goes on down the chain
            return None
        finally:
            page.close()
        runs = merge_runs(words)
        text = " ".join(r.text for r in runs)
        if not runs or garbage_ratio(text) > _MAX_GARBAGE:
            return None
        return runs

    def close(self) -> None:
        if self.pdf is not None:
            self.pdf.close()


def _carry_headers(pages: list[list[Item]]) -> None:
    """A table at the top of a page continuing the previous page's last table gets its header row.

    Same column count, no header of its own (its first row differs), and the
    previous page ends with the table: the header row and separator of the
    earlier part are put first (in place).
    """
    for prev, cur in zip(pages, pages[1:], strict=False):
        if not prev or not cur:
            continue
        last = min(prev, key=lambda it: it.bottom)
        first = max(cur, key=lambda it: it.top)
        if not (last.table and first.table):
            continue
        head = last.text.split("\n")[:2]
        body = first.text.split("\n")
        if len(head) < 2 or head[0].count(" | ") != body[0].count(" | ") or body[0] == head[0]:
            continue
        rows = body[2:] if len(body) > 1 and _SEPARATOR.fullmatch(body[1].strip()) else body[1:]
        first.text = "\n".join(head + [body[0], *rows])


# --------------------------------------------------------------------------- entry point


_STREAM = re.compile(rb"(?<!end)stream\r?\n")
_RATIO_FLOOR = 64 * 1024 * 1024  # a page's blank Flate image alone may decode to tens of MiB


def check_stream_expansion(data: bytes, limits: ArchiveLimits | None = None) -> int:
    """The bytes a PDF's Flate streams decode to, counted without holding them.

    Each ``/FlateDecode`` stream is inflated in bounded steps (64 KiB in, at
    most 1 MiB out, then dropped), so a flate bomb costs bounded memory and
    stops at the limit. Streams that do not inflate are left to the parsers.

    Args:
        data: the PDF bytes.
        limits: ``max_bytes`` caps the total decoded; ``max_ratio`` the
            decoded / file size once past 64 MiB. Image streams are not
            inflated (a scanned page's Flate image alone decodes to ~35 MiB
            at ratios near 400; inflating every one would cost ~0.1 s per
            PDF, and pdfium decodes an image only to render its page for OCR,
            which the OCR limits bound).

    Returns:
        Total decoded bytes of the Flate streams.

    Raises:
        ArchiveBombError: the streams decode past either limit.
    """
    limits = limits or ArchiveLimits()
    ratio_cap = max(_RATIO_FLOOR, int(limits.max_ratio * len(data)))
    total = 0
    view = memoryview(data)
    for match in _STREAM.finditer(data):
        head = data[max(0, match.start() - 4096) : match.start()]
        head = head[head.rfind(b" obj") + 1 :]
        if b"/FlateDecode" not in head or b"/Image" in head:
            continue
        inflate = zlib.decompressobj()
        pos = match.end()
        try:
            while not inflate.eof and pos < len(data):
                pending = bytes(view[pos : pos + 65536])
                pos += len(pending)
                while pending and not inflate.eof:
                    total += len(inflate.decompress(pending, 1 << 20))
                    pending = inflate.unconsumed_tail
                    if total > min(limits.max_bytes, ratio_cap):
                        raise ArchiveBombError(
                            f"PDF streams decode past the expansion limits ({limits.max_bytes} bytes, "
                            f"ratio {limits.max_ratio:g}; {len(data)} bytes on disk): not read"
                        )
        except zlib.error:
            continue  # a damaged stream: the parsers decide what it is
    return total


def parse_pdf(
    data: bytes,
    *,
    max_pages: int = 2000,
    ocr_options: OcrOptions | None = None,
    limits: ArchiveLimits | None = None,
) -> RawParse:
    """Parse a PDF through the fallback chain (see the module docstring).

    Running headers/footers (edge lines set apart from the body whose text
    with digits removed repeats on half the pages), line numbers and rotated
    margin text are left out. Tables become one Markdown element each (header
    row first; a table continued on the next page gets the header again) and
    their text is not repeated as paragraphs. OCR'd paragraphs carry their
    word confidence; pages below the OCR bar go to ``pages_for_review`` (the
    result is then an ``OcrRawParse``), as do pages no parser could read.

    Args:
        data: the PDF bytes. Owner-encrypted files open with the empty password.
        max_pages: page limit; a longer document is refused, never cut.
        ocr_options: OCR bar and limits for scanned pages (defaults when None).
        limits: the expansion limits its streams are checked against
            (``check_stream_expansion``; default ``ArchiveLimits()``).

    Returns:
        Elements with 1-based ``page`` numbers, the page count, metadata
        (``title``/``author`` when set) and ``page_parsers``.

    Raises:
        EncryptedDocumentError: a user password is required (no parser opens it).
        CorruptDocumentError: no parser can open the file or read any page.
        TooLargeError: more than ``max_pages`` pages.
        NoTextError: no page has a text layer or legible scanned text.
        OcrBelowBarError: no text and every non-blank scanned page is below the OCR bar.
        ConfigurationError: pages need OCR but Tesseract is not installed.
        ArchiveBombError: its streams decode past the expansion limits (``check_stream_expansion``).
    """
    check_stream_expansion(data, limits)
    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            doc = None
            pdfium_error = exc
    if doc is None:
        return _parse_with_pdfminer(data, pdfium_error, max_pages)
    miner = _Miner(data)
    pages: list[list[Item]] = []
    parsers: list[str] = []
    ocr_indices: list[int] = []
    meta: dict[str, str] = {}
    try:
        with PDFIUM_LOCK:
            n_pages = len(doc)
            if n_pages > max_pages:
                raise TooLargeError(f"PDF has {n_pages} pages, above the limit of {max_pages}")
            if n_pages == 0:
                raise CorruptDocumentError("PDF has no pages")
            meta = _metadata(doc)
            sizes = [_page_size(doc, i) for i in range(n_pages)]
        for index in range(n_pages):
            items, source = _pdfium_page(doc, index)
            if source == OCR:
                ocr_indices.append(index)
            elif source != PDFIUM:  # PDFium could not load the page or its text is unmapped glyphs
                mined = miner.runs(index)
                if mined is not None:
                    items, source = page_items(mined, Rulings()), PDFMINER
                elif source == "garbage":
                    items, source = [], OCR
                    ocr_indices.append(index)
                else:
                    items, source = [], NONE
            pages.append(items)
            parsers.append(source)
    finally:
        miner.close()
        with PDFIUM_LOCK:
            doc.close()
    return _assemble(data, pages, parsers, ocr_indices, meta, ocr_options, sizes)


def _page_size(doc: Any, index: int) -> tuple[float, float]:
    """A page's (width, height) in points; (0, 0) when PDFium cannot tell."""
    try:
        width, height = doc.get_page_size(index)
    except Exception:  # noqa: BLE001 - a damaged page: its boxes are then not scaled
        return (0.0, 0.0)
    return (float(width), float(height))


def _metadata(doc: Any) -> dict[str, str]:
    meta: dict[str, str] = {}
    try:
        for key, value in doc.get_metadata_dict(skip_empty=True).items():
            if key in ("Title", "Author", "Subject") and value.strip():
                meta[key.lower()] = value.strip()
    except Exception:  # noqa: BLE001 - metadata is optional (and unreadable in some real files)
        pass
    return meta


def _pdfium_page(doc: Any, index: int) -> tuple[list[Item], str]:
    """One page through PDFium: ``(items, PDFIUM)``, ``([], OCR)`` for a scan, or ``([], 'garbage'/NONE)``."""
    with PDFIUM_LOCK:
        try:
            page = doc[index]
        except pdfium.PdfiumError:
            return [], NONE
        try:
            textpage = page.get_textpage()
            try:
                runs = pdfium_items(textpage)
                chars = page_text_chars(runs)
                if chars and garbage_ratio(" ".join(r.text for r in runs)) > _MAX_GARBAGE:
                    return [], "garbage"
                if chars < MIN_TEXT_LAYER_CHARS and page_needs_ocr(page, chars):
                    return [], OCR  # the OCR text replaces the few characters there
                if not runs:
                    return [], PDFIUM
                rulings = page_rulings(page)
                if rulings:
                    rulings = turned(rulings, page_turn(textpage))
                return page_items(runs, rulings, lambda: pdfium_items(textpage, words=True)), PDFIUM
            finally:
                textpage.close()
        finally:
            page.close()


def _parse_with_pdfminer(data: bytes, pdfium_error: Exception, max_pages: int) -> RawParse:
    """The whole file through pdfminer, when PDFium cannot open it."""
    code = getattr(pdfium_error, "err_code", None)
    password = code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)
    miner = _Miner(data)
    try:
        pdf = miner.open()
        if pdf is None:
            if password or "password" in miner.error.lower() or "encrypt" in miner.error.lower():
                raise EncryptedDocumentError("PDF requires a password")
            raise CorruptDocumentError(
                f"neither PDFium ({pdfium_error}) nor pdfminer ({miner.error}) can open the file"
            )
        n_pages = len(pdf.pages)
        if n_pages > max_pages:
            raise TooLargeError(f"PDF has {n_pages} pages, above the limit of {max_pages}")
        pages: list[list[Item]] = []
        parsers: list[str] = []
        sizes = [(float(pg.width), float(pg.height)) for pg in pdf.pages]
        for index in range(n_pages):
            runs = miner.runs(index)
            pages.append(page_items(runs, Rulings()) if runs else [])
            parsers.append(PDFMINER if runs is not None else NONE)
    finally:
        miner.close()
    if not any(pages):
        if password:
            raise EncryptedDocumentError("PDF requires a password (pdfminer reads no text either)")
        raise CorruptDocumentError(f"PDFium cannot open the file ({pdfium_error}) and pdfminer reads no text")
    return _assemble(data, pages, parsers, [], {}, None, sizes)


def _assemble(
    data: bytes,
    pages: list[list[Item]],
    parsers: list[str],
    ocr_indices: list[int],
    meta: dict[str, str],
    ocr_options: OcrOptions | None,
    sizes: list[tuple[float, float]],
) -> RawParse:
    n_pages = len(pages)
    unreadable = tuple(i + 1 for i, p in enumerate(parsers) if p == NONE)
    if len(unreadable) == n_pages:
        raise CorruptDocumentError(f"no parser could read any of the {n_pages} pages")
    ocr_out: list[RawElement] = []
    review: tuple[int, ...] = ()
    ocr_conf: float | None = None
    if ocr_indices:
        ocr_out, review, ocr_conf = assemble(ocr_pdf_pages(data, ocr_indices, ocr_options))
        if not ocr_out and review and not any(pages):
            raise OcrBelowBarError(f"all {len(review)} scanned page(s) of the PDF are below the OCR bar")
    if not any(pages) and not ocr_out:
        if ocr_indices:
            raise NoTextError(f"PDF has no text layer and its {len(ocr_indices)} scanned page(s) are blank")
        raise NoTextError(
            f"PDF has no text on any of its {n_pages} pages (no text layer and no scanned image to OCR)"
        )
    pages = drop_running_lines(pages)
    _carry_headers(pages)
    paras: list[Para] = []
    for index, items in enumerate(pages):
        for flow in flows(items):
            paras.extend(paragraphs(flow, index + 1))
    out = to_elements(paras, sizes)
    if ocr_indices or unreadable:
        out = sorted(out + ocr_out, key=lambda e: e.page)  # stable: text-layer order kept
        if not out:
            raise NoTextError("PDF holds only running headers/footers and blank scanned pages")
        review = tuple(sorted(set(review) | set(unreadable)))
        return OcrRawParse(
            out, n_pages, meta, tuple(parsers), pages_for_review=review, ocr_confidence=ocr_conf
        )
    if not out:
        raise NoTextError("PDF text layer holds only running headers/footers")
    return RawParse(out, n_pages, meta, tuple(parsers))
