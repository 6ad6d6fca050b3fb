"""Second readings of a page: its tables and low-confidence lines, or the whole page by RapidOCR.

On a page that met the bar, ``ocr_engine`` asks this module for the page's
tables (:func:`read_tables`: ruled regions from the page's ink, unruled runs
from the words that are not a column's prose; a ruled region read under
``ocr_second.MIN_REGION_CONFIDENCE`` read again by RapidOCR, small print read
again by Tesseract scaled up) and for its lines read under
``ocr_second.MIN_LINE_CONFIDENCE`` read again by RapidOCR's recogniser
(:func:`reread_lines`). Where the tables go among the paragraphs is
:func:`table_positions`. A page Tesseract leaves under the bar is read
whole by RapidOCR (:func:`second_engine_page`).

Nothing here imports Apache Beam.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ragsync.parsing.ocr_layout import TsvWord, parse_tsv, prose_paragraphs
from ragsync.parsing.ocr_quality import GrayImage, coverage, ink_threshold
from ragsync.parsing.tesseract import run_tesseract

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ragsync.parsing import ocr_second
    from ragsync.parsing.ocr_model import OcrOptions, PageOcr


def small_print_words(
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


def read_tables(
    image: GrayImage, words: list[TsvWord], letter: float, options: OcrOptions, dpi: int = 0
) -> tuple[list[tuple[float, list[list[str]]]], set[int], list[tuple[str, tuple[tuple[str, float], ...]]]]:
    """The tables among the words of ``image`` (``ocr_tables.page_tables``,
    ruled regions found on ``image``), the indices of Tesseract's words they
    took, and the engine choice of each ruled region Tesseract read below
    ``ocr_second.MIN_REGION_CONFIDENCE``: with ``options.second_engine`` on,
    RapidOCR reads that region's crop and its words replace Tesseract's
    there when ``ocr_second.choose_region`` picks them. A region that keeps
    Tesseract's words and is small print (``ocr_tables.small_print``) is
    read again by Tesseract scaled up (``small_print_words``, at the page's
    ``dpi``), whose words replace the first reading's when
    ``ocr_tables.better_reading``."""
    from ragsync.parsing import ocr_second
    from ragsync.parsing.ocr_rules import rule_positions, ruled_regions, vertical_rules
    from ragsync.parsing.ocr_tables import better_reading, inside, page_tables, scaled_back, small_print

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
            and better_reading(read, again := small_print_words(image, box, dpi, options))
        ):
            new = again
        if new is not None:
            replaced.update(mine)
            extra.extend(new)
    kept = [i for i in range(len(page)) if i not in replaced]
    prose = prose_paragraphs(words)
    tables, used = page_tables(
        [*(page[i] for i in kept), *extra],
        regions,
        unruled=options.unruled_tables,
        columns=columns,
        verticals=verticals,
        prose=[words[i].paragraph in prose for i in kept],
    )
    return tables, replaced | {kept[i] for i in used if i < len(kept)}, choices


def reads_lines_again(lang: str) -> bool:
    from ragsync.parsing import ocr_second  # imported on first use, as in read_tables

    return ocr_second.rereads_lines(lang)


def reread_lines(
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


def second_engine_page(
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
    import dataclasses

    from ragsync.parsing import ocr_second

    words = ocr_second.read_words(gray)
    read = ocr_second.second_read(words)
    confidences = (("tesseract", round(best.confidence, 1)), ("rapidocr", round(read.confidence, 1)))
    engine = ocr_second.choose(best.passed and not tables_only, read)
    if tables_only and not (engine == "rapidocr" and read.table):
        return dataclasses.replace(best, confidences=confidences)
    if engine != "rapidocr":
        return dataclasses.replace(best, engine="none", confidences=confidences)
    boxes = [(int(w.x0), int(w.y0), int(w.x1) + 1, int(w.y1) + 1) for w in words]
    return dataclasses.replace(
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
