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
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragsync.parsing.ocr_layout import group_words, line_boxes, parse_tsv
from ragsync.parsing.ocr_model import (
    OcrOptions,
    PageImage,
    PageOcr,
)
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
from ragsync.parsing.ocr_regions import (
    read_tables,
    reads_lines_again,
    reread_lines,
    second_engine_page,
    table_positions,
)
from ragsync.parsing.tesseract import orientation, run_tesseract, tesseract_path


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
        tables, used, choices = read_tables(image, tsv.words, letter, options, page.dpi)
        if tables:
            tsv = group_words([w for i, w in enumerate(tsv.words) if i not in used])
            positions = table_positions([top for top, _ in tables], tsv.words)
    if options.second_engine and passed and reads_lines_again(options.lang):
        lines, line_choices = reread_lines(image, tsv.words)
        if line_choices:
            tsv = group_words(lines)
            choices.extend(line_choices)
    paragraphs = tuple(tuple(p) for p in tsv.paragraphs)
    para_confs = tuple(float(np.mean(c)) for c in tsv.paragraph_confs)
    line_confs = tuple(tuple(round(float(np.mean(c)), 1) for c in p) for p in tsv.line_confs)
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
        line_confidences=line_confs,
        tables=tuple(tuple(tuple(r) for r in rows) for _, rows in tables),
        table_positions=positions,
        region_engines=tuple(choices),
        line_boxes=line_boxes(tsv.words),
        image_size=(int(image.shape[1]), int(image.shape[0])),
    )


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
    again by RapidOCR's recogniser (``ocr_regions.reread_lines``).

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
    threshold, ink_frac = ink_threshold(page.gray)
    if ink_frac < BLANK_INK:
        return PageOcr(page.page, (), 0.0, 1.0, 0, ink_frac, True, blank=True, psm=0)
    tesseract_path()
    state = _prepare(page, threshold, opts)
    first = state.page
    best = _attempt(first, first.gray, state.ink, state.text, 3, opts, first.source, state.letter)
    state.upright, state.upright_text = state.page.gray, state.text
    best, rescaled = _small_glyphs_again(state, best, opts)
    if not best.passed and opts.retry and not best.error.startswith("tesseract ran past"):
        best = _retry(state, best, opts)
    if (
        (not best.passed or rescaled)
        and opts.second_engine
        and not best.error.startswith("tesseract ran past")
    ):
        best = second_engine_page(best, state.upright, state.upright_text, tables_only=best.passed)
    if not best.passed:
        best = readable_part(best, opts.min_region_confidence)
    return _replace(
        best, seconds=time.monotonic() - started, scale=round(state.scale, 3), preprocessed=state.steps
    )


@dataclass
class _Reading:
    """What ``ocr_page`` reads a page as: the page (cleaned, scaled), its ink
    threshold and share, its text ink (``page_text_ink``), glyph height, the
    pre-processing steps and scale it got, and the upright page and text ink
    the second engine reads (the page as it came, turned upright)."""

    page: PageImage
    threshold: int
    ink: float
    text: tuple[NDArray[np.bool_], int]
    letter: float
    steps: tuple[str, ...]
    scale: float
    upright: GrayImage
    upright_text: tuple[NDArray[np.bool_], int]


def _prepare(page: PageImage, threshold: int, opts: OcrOptions) -> _Reading:
    """The page as Tesseract first reads it: cleaned as its measured
    properties call for (``preprocessing``, with ``opts.preprocess``), then
    scaled up when its glyphs are small and ``opts.normalise_resolution`` is on."""
    gray = page.gray
    ink_frac = ink_threshold(gray)[1]
    letter = glyph_height(gray < threshold)
    steps = preprocessing(speck_density(gray, threshold), paper_spread(gray)) if opts.preprocess else ()
    if steps:
        page = prepared(page, steps, letter)
        threshold, ink_frac = ink_threshold(page.gray)
        letter = glyph_height(page.gray < threshold)
    scale = upscale_factor(letter) if opts.normalise_resolution else 1.0
    if scale > 1.0:
        page = normalised(page, scale)
        letter *= scale
    text = page_text_ink(page.gray, threshold, page.dpi)
    return _Reading(page, threshold, ink_frac, text, letter, steps, scale, page.gray, text)


def _small_glyphs_again(state: _Reading, best: PageOcr, opts: OcrOptions) -> tuple[PageOcr, bool]:
    """With ``opts.preprocess``, a page of small glyphs read under
    ``SMALL_GLYPH_CONFIDENCE`` read again scaled up; that reading (and its
    page, in ``state``) is kept when it meets the bar and scores better.
    Returns the kept result and whether only the scaled-up reading met the
    bar (the second engine's table of the page as it came may still win)."""
    small = upscale_factor(state.letter) if state.scale == 1.0 and opts.preprocess else 1.0
    if small <= 1.0 or best.error or best.confidence >= SMALL_GLYPH_CONFIDENCE:
        return best, False
    larger = normalised(state.page, small)
    larger_text = page_text_ink(larger.gray, state.threshold, larger.dpi)
    again = _attempt(larger, larger.gray, state.ink, larger_text, 3, opts, letter=state.letter * small)
    if not (again.passed and _score(again) > _score(best)):  # a page failing both ways goes on as it came
        return best, False
    rescaled = not best.passed
    state.page, state.text, state.letter, state.scale = larger, larger_text, state.letter * small, small
    return again, rescaled


def _retry(state: _Reading, best: PageOcr, opts: OcrOptions) -> PageOcr:
    """A page below the bar read again on ``denoise`` of it with ``--psm 6``
    (``--psm 3`` when the first reading found under 20 words), turned
    upright first when orientation detection is sure (5+ words read); the
    better of the two readings. Turns ``state``'s text ink and upright page
    with it."""
    gray, text = state.page.gray, state.text
    cleaned = denoise(gray)
    angle = orientation(gray, state.page.dpi, opts.timeout_s) if best.words >= 5 else 0
    if angle:  # np.rot90 turns counter-clockwise
        cleaned = np.ascontiguousarray(np.rot90(cleaned, -angle // 90))
        text = (np.rot90(text[0], -angle // 90), text[1])
        state.upright, state.upright_text = np.ascontiguousarray(np.rot90(gray, -angle // 90)), text
    # --psm 6 reads the whole page as one block: it rescues pages where layout analysis
    # dropped regions, but turns a page with no text found at all (noise, a photo) into
    # ~1000 garbage words at 5-10x the cost. Pages with under 20 words are retried with --psm 3.
    psm = 6 if best.words >= 20 else 3
    second = _attempt(state.page, cleaned, state.ink, text, psm, opts, letter=state.letter)
    second = _replace(second, retried=True, rotation=angle)
    return second if _score(second) > _score(best) else _replace(best, retried=True)


def readable_part(result: PageOcr, bar: float) -> PageOcr:
    """A page below the bar with only its lines read at ``bar`` or more
    (pure): low confidence is recorded, not a reason to drop readable text
    (the page stays ``passed=False``: listed for review, what it read at
    ``bar`` indexed with its confidence). The bar applies to lines (to whole
    paragraphs when line confidences are not known): a page read as one
    block mixes lines of text with lines of marks read as letters, and the
    mean of them all would drop both. A paragraph's confidence becomes the
    mean of its kept lines'. Tables it holds (the second engine's reading)
    are kept.

    Args:
        result: the page's kept result, below the page bar.
        bar: the least mean word confidence (0-100) a line needs.

    Returns:
        ``result`` with the lines under ``bar`` left out, paragraphs left
        empty gone (table positions moved with them).
    """
    paragraphs: list[tuple[str, ...]] = []
    confs: list[float] = []
    lines_kept: list[tuple[float, ...]] = []
    kept: list[int] = []  # the indices of the paragraphs that keep a line
    confidences = result.paragraph_confidences
    for i, lines in enumerate(result.paragraphs):
        whole = confidences[i] if i < len(confidences) else result.confidence
        per_line = result.line_confidences[i] if i < len(result.line_confidences) else (whole,) * len(lines)
        keep = [(text, c) for text, c in zip(lines, per_line, strict=False) if c >= bar]
        if keep:
            kept.append(i)
            paragraphs.append(tuple(text for text, _ in keep))
            lines_kept.append(tuple(c for _, c in keep))
            confs.append(whole if len(keep) == len(lines) else float(np.mean([c for _, c in keep])))
    return _replace(
        result,
        paragraphs=tuple(paragraphs),
        paragraph_confidences=tuple(confs),
        line_confidences=tuple(lines_kept),
        table_positions=tuple(sum(1 for i in kept if i < at) for at in result.table_positions),
    )


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
