"""OCR engine: page images through the Tesseract command-line tool, judged against the bar.

Each page is one Tesseract process (``ragsync.parsing.tesseract.run_tesseract``)
reading the image file's own bytes when Tesseract decodes them to the same
pixels (``PageImage.source``: what the raw CLI reads), else an encoding of
the pixels, under a per-page time limit. Pages run in
parallel: a thread pool of ``min(pages, cpus)`` threads drives one
single-threaded Tesseract process per page (the threads only wait on pipes
and run numpy, so the GIL is not a bottleneck, no page image is pickled,
and nothing is forked from a possibly multi-threaded worker).

Quality bar (``ragsync.parsing.ocr_quality``): a page passes when
``confidence >= min_confidence`` and ``coverage >= min_coverage``; a failing
page is retried once on a denoised, binarised copy with ``--psm 6`` and the
better of the two results is kept.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ragsync.parsing.ocr_layout import TsvWord, group_words, join_lines, line_boxes, parse_tsv
from ragsync.parsing.ocr_quality import (
    BLANK_INK,
    SMALL_GLYPH_CONFIDENCE,
    SPECK_INK,
    GrayImage,
    coverage,
    denoise,
    despeckle,
    flatten,
    glyph_height,
    ink_threshold,
    page_text_ink,
    paper_spread,
    preprocessing,
    speck_density,
    upscale_factor,
)
from ragsync.parsing.tesseract import DEFAULT_PAGE_TIMEOUT_S, run_tesseract, tesseract_path

if TYPE_CHECKING:
    from ragsync.parsing import ocr_second

DEFAULT_MIN_CONFIDENCE = 60.0
# Coverage counts only text-like ink (see ``text_ink``). Measured on 27 corpus pages
# (tesseract-test images, ocrmypdf-resources scans rendered at 300 dpi): text pages 0.91-1.00
# (0.91: c02-22.pdf with a photo; the magazine pages with photos 0.995), a chart (graph.pdf)
# 0.29, a photo with a few words (baiona.png) 0.62, noise pages 0 (no words). A page where
# Tesseract misses half the text scores ~0.5 (tests/test_ocr.py). 0.7 keeps a margin of 0.2
# below the worst real text page and flags a third or more of the text missing.
DEFAULT_MIN_COVERAGE = 0.7
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
        normalise_resolution: scale a page with small glyphs (a low
            resolution scan) up before Tesseract reads it
            (``ocr_quality.upscale_factor``). Off by default: on 150 and
            100 dpi rescans of the transcribed pages it raised word recall
            (0.929 -> 0.958 at 100 dpi) but not CER on most pages (reading
            order of captions moved), and table crops it scaled up passed
            Tesseract's bar, so the second engine, which reads them far
            better, no longer ran (cell recall 0.829 -> 0.339;
            benchmarks/README.md).
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
        unruled_tables: also take runs of lines with aligned columns and no
            rules as tables (``ocr_tables.aligned_runs``). On by default
            (``RAGSYNC_OCR_UNRULED_TABLES=0`` turns it off): runs end at wide
            vertical gaps, columns of prose are refused (``ocr_tables.is_prose``,
            long cells), and a table read with whole segments as cells needs
            digits in a quarter of them; on the corpus's 37 scanned prose
            pages it finds no table, on the 13 full pages with tables it
            raised cell recall (benchmarks/README.md, fourth stop).
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


def _small_print_words(
    image: GrayImage, box: tuple[float, float, float, float], dpi: int, options: OcrOptions
) -> list[ocr_second.Word]:
    """Tesseract's words (``ocr_second.Word``, page pixels, centres inside
    ``box``) of the crop ``box`` of ``image`` scaled up
    ``ocr_tables.SMALL_PRINT_SCALE`` times (bicubic), read with ``--psm 3``
    at the page's ``dpi``; ``[]`` when Tesseract fails or times out."""
    import cv2

    from ragsync.parsing import ocr_second
    from ragsync.parsing.ocr_tables import SMALL_PRINT_SCALE, inside, scaled_back

    x0, y0, x1, y1 = (int(v) for v in box)
    crop = cv2.resize(
        image[y0:y1, x0:x1], None, fx=SMALL_PRINT_SCALE, fy=SMALL_PRINT_SCALE, interpolation=cv2.INTER_CUBIC
    )
    try:
        tsv = parse_tsv(
            run_tesseract(np.ascontiguousarray(crop), 3, dpi, lang=options.lang, timeout_s=options.timeout_s)
        )
    except (TimeoutError, RuntimeError, OSError):
        return []
    read = [ocr_second.Word(*w.box, w.text, w.conf) for w in tsv.words]
    return [w for w in scaled_back(read, SMALL_PRINT_SCALE, x0, y0) if inside(w, box)]


def _tables(
    image: GrayImage, words: list[TsvWord], letter: float, options: OcrOptions, dpi: int = 0
) -> tuple[list[tuple[float, list[list[str]]]], set[int], list[tuple[str, tuple[tuple[str, float], ...]]]]:
    """The tables among the words of ``image`` (``ocr_tables.page_tables``,
    ruled regions found on ``image``), the indices of Tesseract's words they
    took, and the engine choice of each ruled region Tesseract read below
    ``ocr_second.MIN_REGION_CONFIDENCE``: with ``options.second_engine`` on,
    RapidOCR reads that region's crop and its words replace Tesseract's
    there when ``ocr_second.choose_region`` picks them. A region that keeps
    Tesseract's words and is small print (``ocr_tables.small_print``) is
    read again by Tesseract scaled up (``_small_print_words``, at the page's
    ``dpi``), whose words replace the first reading's when
    ``ocr_tables.better_reading``."""
    from ragsync.parsing import ocr_second
    from ragsync.parsing.ocr_tables import (
        better_reading,
        inside,
        page_tables,
        rule_positions,
        ruled_regions,
        scaled_back,
        small_print,
        vertical_rules,
    )

    ink = image < ink_threshold(image)[0]
    regions = ruled_regions(ink, letter)
    verticals = vertical_rules(ink, letter)
    columns = [rule_positions(verticals, letter, box) for box in regions]
    page = [ocr_second.Word(*w.box, w.text, w.conf) for w in words]
    replaced: set[int] = set()
    extra: list[ocr_second.Word] = []
    choices: list[tuple[str, tuple[tuple[str, float], ...]]] = []
    for box, rules in zip(regions, columns, strict=True):
        mine = [i for i, w in enumerate(page) if i not in replaced and inside(w, box)]
        read = [page[i] for i in mine]
        new: list[ocr_second.Word] | None = None  # words that replace Tesseract's first reading
        if options.second_engine and ocr_second.needs_second_read(read):
            x0, y0, x1, y1 = (int(v) for v in box)
            crop_words = ocr_second.read_words(np.ascontiguousarray(image[y0:y1, x0:x1]))
            second = [w for w in scaled_back(crop_words, 1, x0, y0) if inside(w, box)]
            choice = ocr_second.choose_region(read, second, rules)
            choices.append((choice.engine, choice.confidences))
            if choice.engine == "rapidocr":
                new = second
        if (
            new is None
            and small_print(read)
            and better_reading(read, again := _small_print_words(image, box, dpi, options))
        ):
            new = again
        if new is not None:
            replaced.update(mine)
            extra.extend(new)
    kept = [i for i in range(len(page)) if i not in replaced]
    tables, used = page_tables(
        [*(page[i] for i in kept), *extra],
        regions,
        unruled=options.unruled_tables,
        columns=columns,
        verticals=verticals,
    )
    return tables, replaced | {kept[i] for i in used if i < len(kept)}, choices


def _attempt(
    page: PageImage,
    image: GrayImage,
    ink_frac: float,
    text: tuple[NDArray[np.bool_], int],
    psm: int,
    options: OcrOptions,
    source: bytes | None = None,
    letter: float = 0.0,
) -> PageOcr:
    try:
        tsv = parse_tsv(
            run_tesseract(image, psm, page.dpi, lang=options.lang, timeout_s=options.timeout_s, source=source)
        )
    except (TimeoutError, RuntimeError, OSError) as exc:
        return PageOcr(page.page, (), 0.0, 0.0, 0, ink_frac, False, psm=psm, error=str(exc))
    words = len(tsv.confs)
    if words == 0 and ink_frac < SPECK_INK:
        return PageOcr(page.page, (), 0.0, 1.0, 0, ink_frac, True, blank=True, psm=psm)
    conf = float(np.mean(tsv.confs)) if words else 0.0
    cov = coverage(text[0], tsv.boxes, text[1])
    passed = words > 0 and conf >= options.min_confidence and cov >= options.min_coverage
    tables: list[tuple[float, list[list[str]]]] = []
    positions: tuple[int, ...] = ()
    choices: list[tuple[str, tuple[tuple[str, float], ...]]] = []
    if options.tables and passed and letter > 0:
        tables, used, choices = _tables(image, tsv.words, letter, options, page.dpi)
        if tables:
            tsv = group_words([w for i, w in enumerate(tsv.words) if i not in used])
            positions = table_positions([top for top, _ in tables], tsv.words)
    if options.second_engine and passed and _reads_lines_again(options.lang):
        lines, line_choices = _reread_lines(image, tsv.words)
        if line_choices:
            tsv = group_words(lines)
            choices.extend(line_choices)
    paragraphs = tuple(tuple(p) for p in tsv.paragraphs)
    para_confs = tuple(float(np.mean(c)) for c in tsv.paragraph_confs)
    return PageOcr(
        page.page,
        paragraphs,
        conf,
        cov,
        words,
        ink_frac,
        passed,
        psm=psm,
        paragraph_confidences=para_confs,
        tables=tuple(tuple(tuple(r) for r in rows) for _, rows in tables),
        table_positions=positions,
        region_engines=tuple(choices),
        line_boxes=line_boxes(tsv.words),
        image_size=(int(image.shape[1]), int(image.shape[0])),
    )


def _reads_lines_again(lang: str) -> bool:
    from ragsync.parsing import ocr_second  # imported on first use, as in _tables

    return ocr_second.rereads_lines(lang)


def _reread_lines(
    image: GrayImage, words: list[TsvWord]
) -> tuple[list[TsvWord], list[tuple[str, tuple[tuple[str, float], ...]]]]:
    """Each line of ``words`` (Tesseract's, reading order) whose mean word
    confidence is under ``ocr_second.MIN_LINE_CONFIDENCE``, read again by
    RapidOCR's recogniser on its crop of ``image`` (the words' boxes padded
    by ``ocr_second.LINE_PAD`` line heights); the line keeps the reading
    ``ocr_second.choose_line`` picks. A line RapidOCR takes becomes its words,
    each at RapidOCR's score, boxes cut from the line's box by character count.

    Returns:
        The words (lines in place, same paragraph and line indices), and the
        engine choice of each line read again (reading order).
    """
    from ragsync.parsing import ocr_second

    lines: dict[int, list[TsvWord]] = {}
    for w in words:
        lines.setdefault(w.line, []).append(w)
    taken: dict[int, list[TsvWord]] = {}
    choices: list[tuple[str, tuple[tuple[str, float], ...]]] = []
    for index, line in lines.items():
        conf = float(np.mean([w.conf for w in line]))
        if conf >= ocr_second.MIN_LINE_CONFIDENCE:
            continue
        x0, y0 = min(w.box[0] for w in line), min(w.box[1] for w in line)
        x1, y1 = max(w.box[2] for w in line), max(w.box[3] for w in line)
        pad = int(ocr_second.LINE_PAD * (y1 - y0)) + 1
        crop = image[max(y0 - pad, 0) : y1 + pad, max(x0 - pad, 0) : x1 + pad]
        text, score = ocr_second.read_line(np.ascontiguousarray(crop))
        choice = ocr_second.choose_line((" ".join(w.text for w in line), conf), (text, score))
        choices.append((choice.engine, choice.confidences))
        if choice.engine == "rapidocr":
            taken[index] = _line_words(text, score, (x0, y0, x1, y1), line[0].paragraph, index)
    if not taken:
        return words, choices
    out: list[TsvWord] = []
    for w in words:
        if w.line not in taken:
            out.append(w)
        elif w is lines[w.line][0]:
            out.extend(taken[w.line])
    return out, choices


def _line_words(
    text: str, score: float, box: tuple[int, int, int, int], paragraph: int, line: int
) -> list[TsvWord]:
    """``text``'s words as ``TsvWord`` at ``score``, the line's ``box`` cut
    between them in proportion to their characters (spaces counted) (pure)."""
    x0, y0, x1, y1 = box
    per_char = (x1 - x0) / max(len(text), 1)
    out: list[TsvWord] = []
    start = 0
    for word in text.split():
        at = text.index(word, start)
        start = at + len(word)
        left, right = x0 + int(at * per_char), x0 + int(start * per_char)
        out.append(TsvWord((left, y0, max(right, left + 1), y1), word, score, paragraph, line))
    return out


def table_positions(tops: list[float], words: list[TsvWord]) -> tuple[int, ...]:
    """Where each table goes among the page's paragraphs (pure): the number
    of paragraphs (of ``words``, by their ``paragraph`` index in reading
    order) whose first line starts above the table's top edge."""
    starts: dict[int, float] = {}
    for w in words:
        starts[w.paragraph] = min(starts.get(w.paragraph, w.box[1]), w.box[1])
    return tuple(sum(1 for y in starts.values() if y < top) for top in tops)


def _orientation(gray: GrayImage, dpi: int, options: OcrOptions) -> int:
    """Clockwise rotation (0/90/180/270) that makes the page upright, by Tesseract's OSD.

    Returns 0 when OSD is unsure (orientation confidence < 2) or fails.
    """
    try:
        out = run_tesseract(gray, 0, dpi, timeout_s=options.timeout_s, tsv=False, with_stderr=True)
    except (TimeoutError, RuntimeError, OSError):
        return 0
    rotate = re.search(r"^Rotate:\s*(\d+)", out, re.M)
    conf = re.search(r"^Orientation confidence:\s*([\d.]+)", out, re.M)
    if not rotate or not conf or float(conf.group(1)) < 2.0:
        return 0
    angle = int(rotate.group(1)) % 360
    return angle if angle in (90, 180, 270) else 0


def _score(r: PageOcr) -> tuple[bool, float]:
    return (r.passed, r.confidence * r.coverage)


def ocr_page(page: PageImage, options: OcrOptions | None = None) -> PageOcr:
    """OCR one page image and judge it against the bar.

    Runs ``--psm 3`` (automatic layout) first; a page below the bar is retried
    once on ``denoise(gray)`` with ``--psm 6`` (one uniform block; ``--psm 3``
    again when the first pass found under 20 words), turned
    upright first when Tesseract's orientation detection (``--psm 0``, only
    when the first pass found 5+ words) is sure the page is rotated, and the
    better result is kept (a passing one first, then the higher
    confidence x coverage). A page with (almost) no ink is blank: it passes
    with no text and Tesseract is not run. A page that meets the bar costs
    exactly one Tesseract run (on ``page.source`` when set), as the raw CLI.
    A page whose letters are small (a scan at 150 dpi or less) is first
    scaled up when ``options.normalise_resolution`` is on (see ``normalised``).
    With ``options.preprocess`` on, a speckled or unevenly lit page is
    cleaned first (``prepared``), and a page of small glyphs that Tesseract
    reads under ``SMALL_GLYPH_CONFIDENCE`` is read again scaled up, and that
    reading is kept when it meets the bar and scores better (when only it
    meets the bar, the second engine's reading of the page as it came still
    replaces it if it is a table); a page failing both ways goes on as it
    came (retry, second engine). With
    ``options.second_engine`` on, each line of a page that met the bar and
    that Tesseract read under ``ocr_second.MIN_LINE_CONFIDENCE`` is read
    again by RapidOCR's recogniser (``_reread_lines``).

    Args:
        page: the page image.
        options: bar and limits; defaults when ``None``.

    Returns:
        The page's ``PageOcr``. Never raises for a bad page: a Tesseract
        crash or timeout gives a failing result with ``error`` set.

    Raises:
        ConfigurationError: Tesseract is not installed.
    """
    import time

    opts = options or OcrOptions()
    started = time.monotonic()
    gray = page.gray
    threshold, ink_frac = ink_threshold(gray)
    if ink_frac < BLANK_INK:
        return PageOcr(page.page, (), 0.0, 1.0, 0, ink_frac, True, blank=True, psm=0)
    tesseract_path()
    letter = glyph_height(gray < threshold)
    steps = preprocessing(speck_density(gray, threshold), paper_spread(gray)) if opts.preprocess else ()
    if steps:
        page = prepared(page, steps, letter)
        gray = page.gray
        threshold, ink_frac = ink_threshold(gray)
        letter = glyph_height(gray < threshold)
    scale = upscale_factor(letter) if opts.normalise_resolution else 1.0
    if scale > 1.0:
        page = normalised(page, scale)
        gray = page.gray
        letter *= scale
    text = page_text_ink(gray, threshold, page.dpi)
    best = _attempt(page, gray, ink_frac, text, 3, opts, page.source, letter)
    upright, upright_text = gray, text  # what the second engine reads: the page as it came, upright
    rescaled = False
    small = upscale_factor(letter) if scale == 1.0 and opts.preprocess else 1.0
    if small > 1.0 and not best.error and best.confidence < SMALL_GLYPH_CONFIDENCE:
        larger = normalised(page, small)
        larger_text = page_text_ink(larger.gray, threshold, larger.dpi)
        again = _attempt(larger, larger.gray, ink_frac, larger_text, 3, opts, letter=letter * small)
        if again.passed and _score(again) > _score(best):  # a page failing both ways goes on as it came
            rescaled = not best.passed
            best, page, gray, text, letter, scale = (
                again,
                larger,
                larger.gray,
                larger_text,
                letter * small,
                small,
            )
    if not best.passed and opts.retry and not best.error.startswith("tesseract ran past"):
        cleaned = denoise(gray)
        angle = _orientation(gray, page.dpi, opts) if best.words >= 5 else 0
        if angle:  # np.rot90 turns counter-clockwise
            cleaned = np.ascontiguousarray(np.rot90(cleaned, -angle // 90))
            text = (np.rot90(text[0], -angle // 90), text[1])
            upright, upright_text = np.ascontiguousarray(np.rot90(gray, -angle // 90)), text
        # --psm 6 reads the whole page as one block: it rescues pages where layout analysis
        # dropped regions, but turns a page with no text found at all (noise, a photo) into
        # ~1000 garbage words at 5-10x the cost. Pages with under 20 words are retried with --psm 3.
        psm = 6 if best.words >= 20 else 3
        second = _attempt(page, cleaned, ink_frac, text, psm, opts, letter=letter)
        second = _replace(second, retried=True, rotation=angle)
        best = second if _score(second) > _score(best) else _replace(best, retried=True)
    if (
        (not best.passed or rescaled)
        and opts.second_engine
        and not best.error.startswith("tesseract ran past")
    ):
        best = _second_engine(best, upright, upright_text, tables_only=best.passed)
    return _replace(best, seconds=time.monotonic() - started, scale=round(scale, 3), preprocessed=steps)


def prepared(page: PageImage, steps: tuple[str, ...], letter: float) -> PageImage:
    """``page`` after the pre-processing ``steps`` (``ocr_quality.preprocessing``)
    in order: ``despeckle`` (median filter), ``flatten`` (background divided
    out; ``letter`` is the page's glyph height). No ``source``: the file's
    bytes are no longer the pixels read."""
    gray = page.gray
    for step in steps:
        gray = despeckle(gray) if step == "despeckle" else flatten(gray, letter)
    return PageImage(page.page, gray, page.dpi)


def normalised(page: PageImage, scale: float) -> PageImage:
    """``page`` scaled up by ``scale`` (bicubic), its dpi scaled with it (0
    stays 0: Tesseract estimates it) and no ``source`` (the file's bytes are
    no longer the pixels read)."""
    import cv2

    gray = cv2.resize(page.gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    return PageImage(page.page, np.ascontiguousarray(gray), int(round(page.dpi * scale)))


def _second_engine(
    best: PageOcr, gray: GrayImage, text: tuple[NDArray[np.bool_], int], tables_only: bool = False
) -> PageOcr:
    """``best`` (Tesseract's failing result) or the second engine's reading of
    the page when it meets that engine's bar (``ocr_second.choose``); both
    confidences are kept either way. ``gray`` is the page turned upright when
    Tesseract's orientation detection found it rotated (the second engine
    runs without its per-box angle classifier). ``tables_only``: Tesseract
    met the bar only on the page scaled up (it failed it as the page came):
    the second engine's reading replaces it only when it is a table (on
    table crops RapidOCR's tables are far better than Tesseract's text)."""
    from ragsync.parsing import ocr_second

    words = ocr_second.read_words(gray)
    read = ocr_second.second_read(words)
    confidences = (("tesseract", round(best.confidence, 1)), ("rapidocr", round(read.confidence, 1)))
    engine = ocr_second.choose(best.passed and not tables_only, read)
    if tables_only and not (engine == "rapidocr" and read.table):
        return _replace(best, confidences=confidences)
    if engine != "rapidocr":
        return _replace(best, engine="none", confidences=confidences)
    boxes = [(int(w.x0), int(w.y0), int(w.x1) + 1, int(w.y1) + 1) for w in words]
    return _replace(
        best,
        paragraphs=() if read.table else (tuple(" ".join(line) for line in read.lines),),
        confidence=read.confidence,
        coverage=coverage(text[0], boxes, text[1]),
        words=len(words),
        passed=True,
        paragraph_confidences=(read.confidence,),
        engine="rapidocr",
        confidences=confidences,
        tables=(read.table,) if read.table else (),
    )


def _replace(r: PageOcr, **changes: Any) -> PageOcr:
    import dataclasses

    return dataclasses.replace(r, **changes)


def usable_cpus() -> int:
    """CPUs this process may run on (affinity-aware).

    Returns:
        At least 1.
    """
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        return max(os.cpu_count() or 1, 1)


def ocr_pages(pages: Iterable[PageImage], count: int, options: OcrOptions | None = None) -> list[PageOcr]:
    """OCR many pages in parallel, one single-threaded Tesseract process per page.

    ``pages`` is consumed lazily: at most twice the number of workers page
    images are held at once (rendering a 300 dpi page is ~8 MB).

    Args:
        pages: page images, in any order.
        count: how many pages ``pages`` yields (sizes the pool).
        options: bar and limits; ``options.workers`` or ``min(count, cpus)``.

    Returns:
        One ``PageOcr`` per page, sorted by page number.

    Raises:
        ConfigurationError: Tesseract is not installed.
        Whatever ``pages`` raises while it is iterated (e.g. ``TooLargeError``).
    """
    opts = options or OcrOptions()
    if count <= 0:
        return []
    tesseract_path()
    workers = max(1, min(count, opts.workers or usable_cpus()))
    results: list[PageOcr] = []
    if workers == 1:
        results = [ocr_page(p, opts) for p in pages]
    else:
        inflight: deque[Future[PageOcr]] = deque()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ocr") as pool:
            try:
                for p in pages:
                    while len(inflight) >= 2 * workers:
                        done, _ = wait(list(inflight), return_when="FIRST_COMPLETED")
                        for fut in done:
                            inflight.remove(fut)
                            results.append(fut.result())
                    inflight.append(pool.submit(ocr_page, p, opts))
            finally:
                for fut in inflight:
                    if not fut.cancel():
                        results.append(fut.result())
    return sorted(results, key=lambda r: r.page)
