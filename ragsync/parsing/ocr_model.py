"""The OCR path's settings and results: ``OcrOptions`` (the bars and
switches), ``PageImage`` (one page to read) and ``PageOcr`` (what was read
on it), with the defaults they take. Shared by the engine
(``ocr_engine``) and the region re-reads (``ocr_regions``), which import
this module and never each other.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ragsync.parsing.ocr_layout import join_lines
from ragsync.parsing.ocr_quality import GrayImage
from ragsync.parsing.tesseract import DEFAULT_PAGE_TIMEOUT_S

DEFAULT_MIN_CONFIDENCE = 60.0
# Coverage counts only text-like ink (see ``text_ink``). Measured on 27 corpus pages
# (tesseract-test images, ocrmypdf-resources scans rendered at 300 dpi): text pages 0.91-1.00
# (0.91: c02-22.pdf with a photo; the magazine pages with photos 0.995), a chart (graph.pdf)
# 0.29, a photo with a few words (baiona.png) 0.62, noise pages 0 (no words). A page where
# Tesseract misses half the text scores ~0.5 (tests/test_ocr.py). 0.7 keeps a margin of 0.2
# below the worst real text page and flags a third or more of the text missing.
DEFAULT_MIN_COVERAGE = 0.7
# A page below the bar keeps its lines read at the page bar's confidence or more (readable_part): the
# bar applies to lines, not the page. At 50 a line of a noise page ("Ae", 51.4) was kept; the text
# lines of the chart page of tests/test_ocr_layout.py clear 60. Not tuned on benchmarks/eval_scans.py:
# no page of its samples fell below the page bar.
DEFAULT_MIN_REGION_CONFIDENCE = DEFAULT_MIN_CONFIDENCE
DEFAULT_MAX_PIXELS = 100_000_000
# PDF pages are rendered at 300 dpi, scaled down so that one page stays under this many pixels.
DEFAULT_MAX_RENDER_PIXELS = 25_000_000
RENDER_DPI = 300.0


UNRULED_TABLES_ENV = "RAGSYNC_OCR_UNRULED_TABLES"
"""Set to ``0`` to stop reading unruled (aligned-column) tables on scanned pages (on by default)."""


@dataclass(frozen=True)
class OcrOptions:
    """Settings of the OCR path.

    Attributes:
        min_confidence: mean word confidence (0-100) a page needs to pass.
        min_coverage: fraction of the page's ink inside recognised word
            boxes a page needs to pass (0-1).
        lang: Tesseract language(s), e.g. ``"eng"`` or ``"eng+deu"``.
        timeout_s: limit for one Tesseract run on one page; a page that runs
            past it fails the bar.
        max_pixels: images (or PDF image objects) above this many pixels are
            refused with ``TooLargeError`` before they are decoded.
        max_render_pixels: PDF pages are rendered at 300 dpi, or lower so
            that a page stays under this many pixels.
        workers: parallel Tesseract processes; ``None`` means
            ``min(pages, usable cpus)``.
        retry: retry a failing page once on a denoised, binarised copy with
            ``--psm 6``.
        second_engine: read a page Tesseract leaves below the bar with the
            second engine (``ragsync.parsing.ocr_second``) and keep its text
            when it meets that engine's bar; on a page Tesseract read, read
            again the ruled table regions and the text lines it read with low
            confidence (``choose_region``, ``choose_line``).
        normalise_resolution: scale a page with small glyphs up before
            Tesseract reads it (``ocr_quality.upscale_factor``). Off by
            default: it moved captions in the reading order, and table crops
            it scaled up passed Tesseract's bar, so the second engine no
            longer read them (cell recall 0.829 -> 0.339; benchmarks/README.md).
        preprocess: clean a degraded page before Tesseract reads it, as its
            measured properties call for (``ocr_quality.preprocessing``): a
            median filter for speckle, the background divided out for
            uneven light; and a page of small glyphs Tesseract reads at a
            mean confidence under ``ocr_quality.SMALL_GLYPH_CONFIDENCE``
            read again scaled up (``upscale_factor``), the better reading
            kept. On by default: on the degraded sets of
            benchmarks/eval_second_ocr.py (sixth stop) raw Tesseract's CER
            0.435 -> 0.053 (speckle), 0.227 -> 0.046 (shadowed photo) and
            0.230 -> 0.058 (75 dpi), with the line re-read; no clean set's
            CER rose.
        tables: find ruled tables on a page Tesseract read
            (``ocr_tables``) and emit them as tables, not text.
        min_region_confidence: the region bar: a page below the page bar
            keeps its lines read at this mean word confidence or more
            (``readable_part``), indexed, the page listed for review.
        unruled_tables: also take runs of aligned lines without rules as
            tables (``ocr_tables.aligned_runs``; ``RAGSYNC_OCR_UNRULED_TABLES=0``
            turns it off): never a column's prose (``ocr_layout.prose_paragraphs``),
            and only with figures in a quarter of the cells or a form's fields.
    """

    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    min_coverage: float = DEFAULT_MIN_COVERAGE
    lang: str = "eng"
    timeout_s: float = DEFAULT_PAGE_TIMEOUT_S
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_render_pixels: int = DEFAULT_MAX_RENDER_PIXELS
    workers: int | None = None
    retry: bool = True
    second_engine: bool = True
    normalise_resolution: bool = False
    preprocess: bool = True
    tables: bool = True
    min_region_confidence: float = DEFAULT_MIN_REGION_CONFIDENCE
    unruled_tables: bool = field(default_factory=lambda: os.environ.get(UNRULED_TABLES_ENV, "") != "0")


@dataclass(frozen=True)
class PageImage:
    """One page to OCR.

    Attributes:
        page: 1-based page number reported back in ``PageOcr.page``.
        gray: 8-bit grayscale pixels, shape ``(height, width)``, 0 = black.
        dpi: resolution told to Tesseract (0 lets Tesseract estimate it).
        source: the image file's bytes when Tesseract decodes them to exactly
            ``gray`` (see ``ragsync.parsing.ocr.iter_image_pages``): sent to
            Tesseract as they are, so the page is not encoded again and
            Tesseract reads what the raw CLI reads. ``None``: ``gray`` is
            encoded (``tesseract_input``).
    """

    page: int
    gray: GrayImage
    dpi: int = 300
    source: bytes | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class PageOcr:
    """OCR result of one page.

    Attributes:
        page: 1-based page number.
        paragraphs: paragraphs in reading order, each a tuple of its lines
            as Tesseract recognised them (hyphens kept).
        confidence: mean word confidence 0-100 (0 when no word).
        coverage: fraction of ink pixels inside recognised word boxes (0-1;
            1 for a blank page).
        words: number of recognised words.
        ink: fraction of the page's pixels that are ink.
        passed: whether the page met the bar (a blank page passes, with no text).
        blank: nothing legible on the page.
        psm: Tesseract page segmentation mode of the kept result.
        retried: whether the denoise + ``--psm 6`` retry ran.
        error: why Tesseract gave no result (timeout, crash), else ``""``.
        seconds: wall time spent on the page.
        rotation: clockwise degrees the kept result's image was turned
            (orientation detection in the retry), 0 otherwise.
        paragraph_confidences: mean word confidence of each paragraph.
        line_confidences: for each paragraph, the mean word confidence of
            each of its lines (a page below the bar keeps the lines read at
            the region bar: ``readable_part``); empty when not known.
        engine: whose text was kept: ``tesseract``, ``rapidocr`` (the second
            engine, when Tesseract failed the bar) or ``none``.
        confidences: each engine that read the page and its mean confidence,
            e.g. ``(("tesseract", 41.7), ("rapidocr", 98.5))``.
        tables: the tables found on the page, top to bottom, each its rows
            of cell strings (emitted as Markdown tables; their words are not
            in ``paragraphs``): from Tesseract's words (``ocr_tables``), or
            the second engine's reading of a page Tesseract failed.
        table_positions: for each table, how many of ``paragraphs`` come
            before it in reading order (none given: the tables come first).
        region_engines: for each ruled table region Tesseract read below
            ``ocr_second.MIN_REGION_CONFIDENCE`` (top to bottom), the engine
            whose words it took and each engine's mean confidence
            (``ocr_second.choose_region``); regions read well are not listed.
            After them, in reading order, each text line outside tables that
            Tesseract read below ``ocr_second.MIN_LINE_CONFIDENCE`` on a page
            that met the bar: the engine whose reading the line kept and
            both confidences (``ocr_second.choose_line``).
        scale: how much the page was scaled up before OCR (resolution
            normalisation, or the re-read of a page of small glyphs), 1.0
            when it was read as it came.
        preprocessed: the pre-processing steps the page got before OCR
            (``ocr_quality.preprocessing``: ``"despeckle"``, ``"flatten"``),
            ``()`` when it was read as it came.
        line_boxes: per paragraph, its lines' pixel boxes in the image read (``ocr_layout.line_boxes``).
        image_size: that image's ``(width, height)``.
    """

    page: int
    paragraphs: tuple[tuple[str, ...], ...]
    confidence: float
    coverage: float
    words: int
    ink: float
    passed: bool
    blank: bool = False
    psm: int = 3
    retried: bool = False
    error: str = ""
    seconds: float = 0.0
    rotation: int = 0
    paragraph_confidences: tuple[float, ...] = ()
    line_confidences: tuple[tuple[float, ...], ...] = ()
    engine: str = "tesseract"
    confidences: tuple[tuple[str, float], ...] = ()
    tables: tuple[tuple[tuple[str, ...], ...], ...] = ()
    table_positions: tuple[int, ...] = ()
    region_engines: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    scale: float = 1.0
    preprocessed: tuple[str, ...] = ()
    line_boxes: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()
    image_size: tuple[int, int] = (0, 0)

    @property
    def text(self) -> str:
        """Lines joined by newlines, paragraphs by blank lines (hyphens kept)."""
        return "\n\n".join("\n".join(lines) for lines in self.paragraphs)

    def paragraph_texts(self) -> list[str]:
        """Each paragraph on one line, words split at line ends rejoined.

        Returns:
            Non-empty paragraph strings in reading order.
        """
        return join_lines(self.paragraphs)

    def paragraph_items(self) -> list[tuple[str, float]]:
        """Each non-empty paragraph on one line with the mean confidence of its words.

        Returns:
            ``(text, confidence)`` pairs in reading order (the page's mean
            confidence stands in when paragraph confidences are missing).
        """
        out: list[tuple[str, float]] = []
        for i, lines in enumerate(self.paragraphs):
            conf = self.paragraph_confidences[i] if i < len(self.paragraph_confidences) else self.confidence
            out.extend((text, conf) for text in join_lines([lines]))
        return out


# --------------------------------------------------------------------------- one page
