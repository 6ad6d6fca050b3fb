"""OCR entry points: image files and scanned PDF pages to elements.

Image files (PNG, JPEG, TIFF including multi-page, BMP, WebP) are checked for
decompression bombs from their headers, decoded one frame at a time and
OCR'd (``ragsync.parsing.ocr_engine``); scanned PDF pages are found (little
text layer, images over the page) and rendered at 300 dpi for the same
engine. Page results become paragraph and table elements; pages below the
bar are listed for review, with what they read at the region bar emitted.
The modules behind it: ``ocr_engine`` (Tesseract, the bar, parallel pages),
``ocr_layout`` (TSV words to paragraphs, prose columns), ``ocr_regions``
(tables and second readings), ``ocr_tables`` and ``ocr_rules`` (tables and
rules on a page), ``ocr_second`` (RapidOCR) and ``ocr_quality`` (ink,
coverage, denoising, character error rate). See docs/ocr.md.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ragsync.errors import CorruptDocumentError, TooLargeError, UnsupportedFormatError
from ragsync.model import Box, ElementType
from ragsync.parsing._common import RawElement, RawParse, page_box, table_to_markdown
from ragsync.parsing._pdfium import PDFIUM_LOCK
from ragsync.parsing.ocr_engine import ocr_page, ocr_pages
from ragsync.parsing.ocr_layout import join_lines
from ragsync.parsing.ocr_model import (
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_CONFIDENCE,
    DEFAULT_MIN_COVERAGE,
    RENDER_DPI,
    OcrOptions,
    PageImage,
    PageOcr,
)
from ragsync.parsing.ocr_quality import GrayImage, char_error_rate, ink_mask
from ragsync.parsing.tesseract import check_languages

if TYPE_CHECKING:  # pragma: no cover
    from PIL import Image as PILImage

# A PDF page with fewer non-blank characters than this in its text layer, and an image, is OCR'd.
MIN_TEXT_LAYER_CHARS = 50
# ... when its images cover at least this fraction of the page.
_MIN_IMAGE_AREA = 0.05
_MAX_OBJECTS_SCANNED = 2000

_WS = re.compile(r"\s+")


@dataclass
class OcrRawParse(RawParse):
    """A ``RawParse`` with the OCR outcome; ``parse`` copies both into ``ParseResult``.

    Attributes:
        pages_for_review: 1-based pages below the OCR bar (their paragraphs
            read at the region bar are emitted).
        ocr_confidence: mean word confidence over the non-blank OCR'd pages,
            ``None`` when no page was OCR'd.
    """

    pages_for_review: tuple[int, ...] = ()
    ocr_confidence: float | None = None


def assemble(results: Sequence[PageOcr]) -> tuple[list[RawElement], tuple[int, ...], float | None]:
    """Turn page results into paragraph elements, review pages and a mean confidence.

    Args:
        results: page results (any order).

    Returns:
        ``(elements, pages_for_review, ocr_confidence)``: a paragraph element
        per paragraph of each page (a page below the bar holds only what it
        read at the region bar: ``ocr_engine.readable_part``) and a table element per table
        (where ``table_positions`` puts it), in page order, carrying the mean
        confidence of its words; sorted pages below the bar; the mean
        confidence over non-blank pages (``None`` if all blank).
    """
    elements: list[RawElement] = []
    review: list[int] = []
    confs: list[float] = []
    for r in sorted(results, key=lambda r: r.page):
        if r.blank:
            continue
        confs.append(r.confidence)
        if not r.passed:  # listed for review; what it read at the region bar is indexed
            review.append(r.page)
        positions = r.table_positions or (0,) * len(r.tables)
        for i, lines in enumerate([*r.paragraphs, ()]):
            for rows, at in zip(r.tables, positions, strict=True):
                if at == i or (i == len(r.paragraphs) and at > i):
                    table = table_to_markdown(rows)
                    elements.append(RawElement(ElementType.TABLE, table, 0, r.page, round(r.confidence, 1)))
            conf = r.paragraph_confidences[i] if i < len(r.paragraph_confidences) else r.confidence
            boxes = _page_boxes(r, i)
            for text in join_lines([lines]):
                elements.append(RawElement(ElementType.PARAGRAPH, text, 0, r.page, round(conf, 1), boxes))
    return elements, tuple(review), (float(np.mean(confs)) if confs else None)


def _page_boxes(r: PageOcr, paragraph: int) -> tuple[Box, ...]:
    """The line boxes of a page's ``paragraph`` as fractions of the page;
    none when the page was read turned (its boxes are in the turned image)."""
    if r.rotation or paragraph >= len(r.line_boxes) or not all(r.image_size):
        return ()
    width, height = r.image_size
    return tuple(
        page_box(r.page, left, top, right, bottom, width, height)
        for left, top, right, bottom in r.line_boxes[paragraph]
    )


# --------------------------------------------------------------------------- image files


def _to_gray(frame: PILImage.Image) -> GrayImage:
    from PIL import Image

    if frame.mode in ("RGBA", "LA", "PA") or (frame.mode == "P" and "transparency" in frame.info):
        rgba = frame.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        frame = Image.alpha_composite(white, rgba)
    if frame.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(frame, dtype=np.float64)
        hi = float(arr.max()) or 1.0
        return np.asarray(arr * (255.0 / hi), dtype=np.uint8)
    return np.asarray(frame if frame.mode == "L" else frame.convert("L"), dtype=np.uint8)


# Pillow formats whose single-frame gray (L) or bilevel (1) images leptonica, Tesseract's image
# library, decodes to the same pixels as Pillow (lossless; JPEG is not: two libjpeg builds).
_SOURCE_FORMATS = ("PNG", "TIFF")
_TIFF_PHOTOMETRIC = 262
_EXIF_ORIENTATION = 0x0112


def _tesseract_reads_as_is(im: PILImage.Image, frames: int, dpi: int) -> bool:
    """Whether Tesseract, given the file's own bytes, sees exactly the pixels ``_to_gray`` gives.

    True for a single-frame PNG or TIFF in mode L or 1, without transparency,
    EXIF rotation or an inverted 8-bit TIFF (min-is-white), with a credible
    dpi (so Tesseract uses the resolution we tell it, as with our encoding).
    """
    if frames != 1 or dpi <= 0 or im.format not in _SOURCE_FORMATS or im.mode not in ("L", "1"):
        return False
    if "transparency" in im.info or im.getexif().get(_EXIF_ORIENTATION, 1) != 1:
        return False
    if im.format == "TIFF" and im.mode == "L":
        tags = getattr(im, "tag_v2", {})
        return tags.get(_TIFF_PHOTOMETRIC) == 1  # min-is-black
    return True


def _dpi(frame: PILImage.Image) -> int:
    dpi = frame.info.get("dpi")
    try:
        value = int(round(float(dpi[0]))) if dpi else 0
    except (TypeError, ValueError, IndexError):
        value = 0
    return value if 70 <= value <= 2400 else 0


def image_frame_count(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> int:
    """Open an image file's header and check every frame's size without decoding pixels.

    Args:
        data: PNG/JPEG/TIFF/... bytes.
        max_pixels: pixel limit per frame.

    Returns:
        The number of frames (pages).

    Raises:
        TooLargeError: a frame above ``max_pixels`` (a decompression bomb).
        UnsupportedFormatError: Pillow does not recognise the bytes.
        CorruptDocumentError: the header is unreadable.
    """
    with _open_image(data) as im:
        n = int(getattr(im, "n_frames", 1) or 1)
        for i in range(n):
            try:
                im.seek(i)
            except (EOFError, OSError, ValueError) as exc:
                raise CorruptDocumentError(f"image frame {i + 1} unreadable: {exc}") from exc
            w, h = im.size
            if w * h > max_pixels:
                raise TooLargeError(
                    f"image frame {i + 1} is {w}x{h} = {w * h} pixels, above the limit of {max_pixels}"
                )
    return n


@contextlib.contextmanager
def _open_image(data: bytes) -> Iterator[Any]:
    """The open Pillow image of ``data`` (closed on exit), with Pillow's
    decompression-bomb warning silenced while it is used.

    Raises:
        TooLargeError: Pillow's own pixel limit refused it.
        UnsupportedFormatError: Pillow does not recognise the bytes.
        CorruptDocumentError: the header is unreadable.
    """
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            raise TooLargeError(f"image above the pixel limit: {exc}") from exc
        except UnidentifiedImageError as exc:
            raise UnsupportedFormatError(f"not an image format Pillow can read (or corrupt): {exc}") from exc
        except (OSError, ValueError, SyntaxError) as exc:
            raise CorruptDocumentError(f"unreadable image header: {exc}") from exc
        with im:
            yield im


def iter_image_pages(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Iterator[PageImage]:
    """Decode an image file's frames one at a time as grayscale pages.

    Call ``image_frame_count`` first: it refuses oversized frames before any
    pixel is decoded. EXIF orientation is applied; transparency is flattened
    onto white. A single-frame gray or bilevel PNG/TIFF page carries the file
    bytes as ``source`` (Tesseract decodes them to the same pixels; see
    ``_tesseract_reads_as_is``), so it is not encoded again for Tesseract.

    Args:
        data: PNG/JPEG/TIFF/... bytes (a multi-page TIFF yields every page).
        max_pixels: pixel limit per frame (checked again per frame).

    Yields:
        ``PageImage`` with pages numbered from 1 and the file's dpi (0 if unknown).

    Raises:
        TooLargeError: a frame above ``max_pixels``.
        CorruptDocumentError: truncated or undecodable pixel data.
    """
    from PIL import ImageOps

    with _open_image(data) as im:
        n = int(getattr(im, "n_frames", 1) or 1)
        for i in range(n):
            try:
                im.seek(i)
                w, h = im.size
                if w * h > max_pixels:
                    raise TooLargeError(f"image frame {i + 1} is {w}x{h} pixels, above {max_pixels}")
                im.load()
                upright = i > 0 or im.getexif().get(_EXIF_ORIENTATION, 1) == 1
                frame = im if upright else ImageOps.exif_transpose(im)
                gray = _to_gray(frame)
                dpi = _dpi(im)
                source = data if _tesseract_reads_as_is(im, n, dpi) else None
            except TooLargeError:
                raise
            except (OSError, ValueError, SyntaxError, EOFError) as exc:
                raise CorruptDocumentError(f"image frame {i + 1} undecodable: {exc}") from exc
            yield PageImage(i + 1, gray, dpi, source)


def parse_image(data: bytes, *, max_pages: int = 2000, ocr_options: OcrOptions | None = None) -> OcrRawParse:
    """OCR an image file (PNG, JPEG, TIFF including multi-page, BMP, WebP).

    Args:
        data: the image bytes.
        max_pages: frame limit.
        ocr_options: OCR bar, limits and languages (defaults when None).

    Returns:
        Paragraph elements of the pages that pass the bar, page numbers from
        1, ``pages_for_review`` and ``ocr_confidence``.

    Raises:
        TooLargeError: a frame above ``options.max_pixels`` (refused before
            decoding), or more than ``max_pages`` frames.
        UnsupportedFormatError: Pillow does not recognise the bytes.
        CorruptDocumentError: truncated or undecodable image data.
        OcrBelowBarError: every non-blank page is below the bar.
        NoTextError: every page is blank.
        ConfigurationError: Tesseract, or one of ``ocr_options.lang``, is not installed.
    """
    from ragsync.errors import NoTextError, OcrBelowBarError

    opts = ocr_options or OcrOptions()
    check_languages(opts.lang)
    n = image_frame_count(data, max_pixels=opts.max_pixels)
    if n > max_pages:
        raise TooLargeError(f"image has {n} pages, above the limit of {max_pages}")
    results = ocr_pages(iter_image_pages(data, max_pixels=opts.max_pixels), n, opts)
    elements, review, conf = assemble(results)
    if not elements:
        if review:
            raise OcrBelowBarError(
                f"all {len(review)} non-blank page(s) below the OCR bar "
                f"(confidence >= {opts.min_confidence:g}, coverage >= {opts.min_coverage:g})"
            )
        raise NoTextError(f"image holds no legible text ({n} blank page(s))")
    return OcrRawParse(elements, n, {}, ("ocr",) * n, pages_for_review=review, ocr_confidence=conf)


# --------------------------------------------------------------------------- PDF pages


def page_image_area(page: Any, page_area: float) -> float:
    """Fraction of a PDF page's area covered by image objects (forms searched 2 levels deep).

    Call under ``PDFIUM_LOCK``.

    Args:
        page: a ``pypdfium2.PdfPage``.
        page_area: the page's area in points squared.

    Returns:
        0-1 (boxes are summed, so overlaps count twice, capped at 1).
    """
    import pypdfium2.raw as pdfium_c

    if page_area <= 0:
        return 0.0
    area = 0.0
    for i, obj in enumerate(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
        if i >= _MAX_OBJECTS_SCANNED:
            break
        try:
            left, bottom, right, top = obj.get_bounds()
        except Exception:  # noqa: BLE001 - an object without bounds adds nothing
            continue
        area += max(right - left, 0.0) * max(top - bottom, 0.0)
        if area >= page_area:
            return 1.0
    return area / page_area


def page_needs_ocr(page: Any, text_chars: int) -> bool:
    """Whether a PDF page should be OCR'd: little text layer and images over >= 5% of the page.

    Call under ``PDFIUM_LOCK``.

    Args:
        page: a ``pypdfium2.PdfPage``.
        text_chars: non-blank characters in the page's text layer.

    Returns:
        True when ``text_chars < MIN_TEXT_LAYER_CHARS`` and images cover at
        least 5% of the page.
    """
    if text_chars >= MIN_TEXT_LAYER_CHARS:
        return False
    w, h = page.get_size()
    return page_image_area(page, w * h) >= _MIN_IMAGE_AREA


def _check_images(page: Any, index: int, max_pixels: int) -> None:
    import pypdfium2.raw as pdfium_c

    for i, obj in enumerate(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
        if i >= _MAX_OBJECTS_SCANNED:
            return
        try:
            w, h = obj.get_px_size()
        except Exception:  # noqa: BLE001
            continue
        if w * h > max_pixels:
            raise TooLargeError(
                f"PDF page {index + 1} holds a {w}x{h} image "
                f"({w * h} pixels, above the limit of {max_pixels})"
            )


def render_pdf_page(doc: Any, index: int, options: OcrOptions) -> PageImage:
    """Render one PDF page to grayscale at 300 dpi (less for huge pages).

    Takes ``PDFIUM_LOCK`` itself.

    Args:
        doc: an open ``pypdfium2.PdfDocument``.
        index: 0-based page index.
        options: ``max_pixels`` (image objects) and ``max_render_pixels``.

    Returns:
        The page image, numbered ``index + 1``, with the dpi it was rendered at.

    Raises:
        TooLargeError: an image object above ``options.max_pixels`` (refused
            before PDFium decodes it).
    """
    with PDFIUM_LOCK:
        page = doc[index]
        try:
            _check_images(page, index, options.max_pixels)
            w, h = page.get_size()
            scale = RENDER_DPI / 72.0
            if w * h * scale * scale > options.max_render_pixels:
                scale = (options.max_render_pixels / max(w * h, 1.0)) ** 0.5
            bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=True)
            try:
                arr = bitmap.to_numpy()
                gray = np.array(arr[:, :, 0] if arr.ndim == 3 else arr, dtype=np.uint8, copy=True)
            finally:
                bitmap.close()
        finally:
            page.close()
    return PageImage(index + 1, gray, int(round(scale * 72)))


def ocr_pdf_pages(data: bytes, indices: Sequence[int], options: OcrOptions | None = None) -> list[PageOcr]:
    """Render and OCR the given pages of a PDF (rendering is serial, OCR parallel).

    Args:
        data: the PDF bytes (already known to open).
        indices: 0-based page indices.
        options: OCR bar and limits.

    Returns:
        One ``PageOcr`` per index, sorted by page.

    Raises:
        TooLargeError: a page holds an image above ``options.max_pixels``.
        CorruptDocumentError: PDFium cannot reopen the file.
        ConfigurationError: Tesseract, or one of ``options.lang``, is not installed.
    """
    import pypdfium2 as pdfium

    opts = options or OcrOptions()
    if not indices:
        return []
    check_languages(opts.lang)
    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            raise CorruptDocumentError(f"PDFium cannot open the file: {exc}") from exc
    try:
        return ocr_pages((render_pdf_page(doc, i, opts) for i in indices), len(indices), opts)
    finally:
        with PDFIUM_LOCK:
            doc.close()


def pdf_needs_ocr(data: bytes, *, pages: int = 3) -> bool:
    """Quick look: does one of the first pages of a PDF need OCR (see ``page_needs_ocr``)?

    Args:
        data: PDF bytes.
        pages: how many leading pages to look at.

    Returns:
        True when one of them has under 50 characters of text layer and
        images covering >= 5% of it; False otherwise, and for files PDFium
        cannot open (the parser reports those).
    """
    import pypdfium2 as pdfium

    with PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except Exception:  # noqa: BLE001 - encrypted/corrupt: the parser says why
            return False
        try:
            for index in range(min(len(doc), pages)):
                try:
                    page = doc[index]
                except Exception:  # noqa: BLE001
                    continue
                try:
                    textpage = page.get_textpage()
                    n = textpage.count_chars()
                    # pdfium counts spaces and line breaks too: only short pages need a closer look
                    small = n < 2 * MIN_TEXT_LAYER_CHARS
                    text = textpage.get_text_range(0, n) if small and n > 0 else ""
                    textpage.close()
                    if small and page_needs_ocr(page, len(_WS.sub("", text))):
                        return True
                finally:
                    page.close()
        finally:
            doc.close()
    return False


__all__ = [
    "DEFAULT_MIN_CONFIDENCE",
    "DEFAULT_MIN_COVERAGE",
    "OcrOptions",
    "OcrRawParse",
    "PageImage",
    "PageOcr",
    "assemble",
    "char_error_rate",
    "image_frame_count",
    "ink_mask",
    "iter_image_pages",
    "ocr_page",
    "ocr_pages",
    "ocr_pdf_pages",
    "page_needs_ocr",
    "parse_image",
    "pdf_needs_ocr",
    "render_pdf_page",
]
