"""The second OCR engine: RapidOCR (PaddleOCR's models in ONNX, shipped inside
the ``rapidocr-onnxruntime`` wheel; nothing is downloaded).

Tesseract stays the first engine: it is fast and accurate on clean, dense
pages, where RapidOCR (which scales a page down to ~960 px before detecting
text) loses small print. RapidOCR reads what Tesseract cannot: small or
low-resolution crops and table images (PubTabNet table crops: token recall
0.61-0.97 where Tesseract found 0.00-0.08). ``ocr_engine.ocr_page`` asks it
for a page only when Tesseract's best result is below the bar
(:func:`choose`), and keeps both engines' confidences; on a page Tesseract
read, it reads again a ruled table region whose Tesseract words fall under
``MIN_REGION_CONFIDENCE``, and the region takes the engine
:func:`choose_region` picks (both confidences kept per region).

Its boxes are grouped into lines (:func:`group_lines`) and, when the lines'
words fall into aligned columns of short cells, into a table
(:func:`table_rows`), emitted as Markdown like a text-layer PDF's table.

Pure functions take ``Word`` boxes; only :func:`read_words` runs the model.
"""

from __future__ import annotations

import functools
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragsync.errors import ConfigurationError

# Mean RapidOCR score (0-100) a page needs before its text replaces a failing
# Tesseract result. Its scores run high (~90-99 on text it reads), so the bar
# is higher than Tesseract's.
MIN_CONFIDENCE = 85.0
# A table: at least this many rows and columns, and short cells (a median of at
# most MAX_MEDIAN_CELL_WORDS words; prose in two columns is not a table).
MIN_TABLE_ROWS = 2
MIN_TABLE_COLUMNS = 2
MAX_TABLE_COLUMNS = 16
# A ruled table's columns are drawn, not guessed from word gaps: it may have up
# to this many (the NICS background-check grid has 25).
MAX_RULED_COLUMNS = 64
MAX_MEDIAN_CELL_WORDS = 4.0
# A line continues the row above (its cells wrapped) when the gap between them
# is under this many line heights; under TEXT_WRAP_GAP when neither holds a
# digit and the row has two or more cells (a header's two-line labels,
# "Annual / percentage rate"; a label column's wrapped name; not two one-cell
# section headings), where it may also fill as many cells as the row.
WRAP_GAP = 0.25
TEXT_WRAP_GAP = 0.5
# A ruled table region whose Tesseract words have a mean confidence under this
# is read again by RapidOCR (choose_region). On the 13 pdfplumber pages
# (benchmarks/README.md) the regions Tesseract read at 73-85 had more cells
# right from RapidOCR (0.37 -> 0.41, 0.0 -> 0.14, 0.41 -> 0.49), the ones at
# 92-96 fewer or as many (the NICS grid of small print: 0.92 -> 0.72).
MIN_REGION_CONFIDENCE = 90.0

# A text line of a page Tesseract read (it met the bar) whose words have a mean confidence under this
# is read again by RapidOCR's recogniser alone on the line's crop (read_line), and the line keeps the
# reading with the higher confidence when RapidOCR's meets its own bar and splits the line into as many
# words (choose_line). Measured in benchmarks/README.md (sixth stop).
MIN_LINE_CONFIDENCE = 75.0
# A line's crop reaches this many line heights past its words' boxes on every side.
LINE_PAD = 0.25
# The Tesseract languages whose letters the shipped recogniser (PP-OCR's Chinese and English model)
# writes: lines of a page read in any other language keep Tesseract's reading (the recogniser has no
# accented letters: "über" would come back "uber" at a high score). See ``rereads_lines``.
LINE_LANGUAGES = frozenset({"eng", "chi_sim", "chi_tra"})


@dataclass(frozen=True)
class Word:
    """One text box found by the engine.

    Attributes:
        x0, y0, x1, y1: the box's bounds in pixels (top-left origin).
        text: the recognised text.
        score: recognition confidence 0-100.
    """

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    score: float

    @property
    def cy(self) -> float:
        return (self.y0 + self.y1) / 2

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 1.0)


@dataclass(frozen=True)
class SecondRead:
    """What the second engine made of a page.

    Attributes:
        lines: the page's lines in reading order, each its words left to right.
        confidence: mean word score 0-100 (0 when nothing was read).
        table: the rows of a table when the words form one (else empty).
    """

    lines: tuple[tuple[str, ...], ...]
    confidence: float
    table: tuple[tuple[str, ...], ...] = ()


# RapidOCR's options (measured on the 20 PubTabNet crops, benchmarks/README.md):
# one ONNX thread per engine (the pipeline runs one OCR worker per core, and
# idle-spinning pool threads only burn CPU); detection at the image's own size
# ("max": only images past 960/1500/2000 px are scaled down) instead of the
# default "min 736", which scaled a 59 x 238 crop up to 736 x 2969.
ENGINE_OPTIONS: dict[str, Any] = {
    "intra_op_num_threads": 1,
    "inter_op_num_threads": 1,
    "det_limit_type": "max",
}
# Small images are scaled up (cubic) to this many times their size, at most to
# MAX_SIDE pixels, before reading: the recogniser reads small print better.
UPSCALE = 2.0
MAX_SIDE = 2000
# A box is cut where the gap between two of its words is wider than this many
# times its height (split_at_gaps).
SPLIT_GAP = 1.0


@functools.lru_cache(maxsize=1)
def _engine() -> Any:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:  # pragma: no cover - a runtime requirement
        raise ConfigurationError(
            "the second OCR engine needs rapidocr-onnxruntime (in requirements.txt)"
        ) from exc
    return RapidOCR(**ENGINE_OPTIONS)


def read_words(gray: np.ndarray, classify: bool = False) -> list[Word]:
    """Run RapidOCR on an 8-bit grayscale page.

    Args:
        gray: the page, upright.
        classify: run RapidOCR's per-box 0/180 degree classifier. Off by
            default: on upright table crops it turned right-way-up numbers
            upside down (cell recall 0.745 with it, 0.805 without, same
            words otherwise); an upside-down page is turned by the caller.

    Returns:
        The words, in the coordinates of ``gray``.

    Raises:
        ConfigurationError: the engine is not installed.
    """
    import cv2

    scale = min(UPSCALE, max(1.0, MAX_SIDE / max(gray.shape[:2])))
    image = gray
    if scale > 1.0:
        image = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    result, _ = _engine()(
        np.ascontiguousarray(np.stack([image] * 3, axis=-1)), use_cls=classify, return_word_box=True
    )
    words: list[Word] = []
    for box, text, score, *chars in result or ():
        xs, ys = [float(p[0]) / scale for p in box], [float(p[1]) / scale for p in box]
        whole = Word(min(xs), min(ys), max(xs), max(ys), str(text).strip(), 100.0 * float(score))
        if whole.text:
            char_boxes = [
                [(float(p[0]) / scale, float(p[1]) / scale) for p in c] for c in (chars[0] if chars else [])
            ]
            words.extend(split_at_gaps(whole, str(text), char_boxes))
    return words


def split_at_gaps(word: Word, text: str, char_boxes: Sequence[Sequence[tuple[float, float]]]) -> list[Word]:
    """A box cut where its text jumps a gap wider than ``SPLIT_GAP`` times its
    height: RapidOCR at times reads two neighbouring table cells as one box.

    Args:
        word: the whole box.
        text: its text as recognised (spaces included).
        char_boxes: one box per character, or per non-space character
            (RapidOCR's ``return_word_box``), in the same order; when their
            number matches neither, ``word`` is returned whole.
    """
    glyphs = [i for i, ch in enumerate(text) if not ch.isspace()]
    if len(char_boxes) == len(text):  # a box for every character, spaces too
        char_boxes = [char_boxes[i] for i in glyphs]
    if len(glyphs) != len(char_boxes) or len(glyphs) < 2:
        return [word]
    lefts = [min(p[0] for p in b) for b in char_boxes]
    rights = [max(p[0] for p in b) for b in char_boxes]
    cuts = [
        k
        for k in range(1, len(glyphs))
        if text[glyphs[k - 1] + 1 : glyphs[k]].isspace()
        and lefts[k] - rights[k - 1] > SPLIT_GAP * word.height
    ]
    if not cuts:
        return [word]
    parts: list[Word] = []
    for a, b in zip([0, *cuts], [*cuts, len(glyphs)], strict=True):
        piece = text[glyphs[a] : glyphs[b - 1] + 1].strip()
        parts.append(Word(lefts[a], word.y0, rights[b - 1], word.y1, piece, word.score))
    return parts


def group_lines(words: Sequence[Word]) -> list[list[Word]]:
    """Words grouped into lines, top to bottom, each left to right.

    A word joins the line above it when its vertical centre lies within half
    the line's median word height of the line's centre.
    """
    lines: list[list[Word]] = []
    for word in sorted(words, key=lambda w: (w.cy, w.x0)):
        if lines:
            line = lines[-1]
            centre = statistics.median(w.cy for w in line)
            height = statistics.median(w.height for w in line)
            if abs(word.cy - centre) <= height / 2:
                line.append(word)
                continue
        lines.append([word])
    return [sorted(line, key=lambda w: w.x0) for line in lines]


def _column_bands(lines: Sequence[Sequence[Word]]) -> list[tuple[float, float]]:
    """The table's columns as x-ranges, left to right.

    A column boundary is a run of x that at most a few lines cross with a
    word (``max(1, lines // 8)`` from four lines up, else none): a header
    spanning several columns, or one long cell, does not merge the columns of
    the body below it. A band no word starts in is dropped (it holds only
    the overhang of a wider word)."""
    width = int(max(w.x1 for line in lines for w in line)) + 2
    cover = np.zeros(width, dtype=np.int32)
    for line in lines:
        hit = np.zeros(width, dtype=bool)
        for w in line:
            hit[max(int(w.x0), 0) : int(np.ceil(w.x1)) + 1] = True
        cover += hit
    allowed = max(1, len(lines) // 8) if len(lines) >= 4 else 0
    inside = cover > allowed
    bands: list[tuple[float, float]] = []
    x = 0
    while x < width:
        if inside[x]:
            end = x
            while end + 1 < width and inside[end + 1]:
                end += 1
            bands.append((float(x), float(end)))
            x = end + 1
        else:
            x += 1
    # Words starting in a gap belong to the band on their right (or the last).
    used = {_column_of(w.x0, bands) for line in lines for w in line}
    return [b for i, b in enumerate(bands) if i in used]


def _column_of(x0: float, bands: Sequence[tuple[float, float]]) -> int:
    """The index of the band a word starting at ``x0`` belongs to: the first
    band whose right edge lies at or past ``x0`` (else the last)."""
    return next((i for i, (_, b) in enumerate(bands) if x0 <= b), len(bands) - 1)


def _first_word_width(word: Word) -> float:
    """The width of a box's first word and the space before it, estimated
    from the box's width per character."""
    first = word.text.split()[0]
    return (word.x1 - word.x0) * (len(first) + 1) / max(len(word.text), 1)


def rule_bands(rules: Sequence[float], lines: Sequence[Sequence[Word]]) -> list[tuple[float, float]]:
    """A ruled table's columns as x-ranges, left to right: the spans between
    its vertical rules (``rules``, x positions in pixels, any order), and one
    before the first and after the last. A band no word starts in is dropped
    (a frame's outside, or an empty column)."""
    if not rules:
        return []
    edges = sorted(rules)
    width = max((w.x1 for line in lines for w in line), default=0.0) + 2
    bands = list(zip([-1.0, *edges], [*edges, max(width, edges[-1] + 1)], strict=True))
    used = {_column_of(w.x0, bands) for line in lines for w in line}
    return [b for i, b in enumerate(bands) if i in used]


def table_rows(
    lines: Sequence[Sequence[Word]], rules: Sequence[float] = (), multi_share: float = 0.5
) -> list[list[str]]:
    """The lines as table rows when their words stand in aligned columns.

    Columns come from the vertical ``rules`` of a ruled table
    (:func:`rule_bands`; up to ``MAX_RULED_COLUMNS``) when they give a table;
    else (no rules, only a frame's two sides, or rules that leave fewer than
    two filled cells in most rows) from the words' gaps
    (:func:`_column_bands`). A word goes to the column it starts in. A line
    that follows the previous row closely (a gap under ``WRAP_GAP`` of the
    line height) and fills only cells that row has already
    filled, and at most half as many, continues it: a cell wrapped over two or more
    lines (a long row label, a two-line header) stays one cell. When neither
    the line nor the row holds a digit and the row has two or more cells
    (header labels) the gap may reach
    ``TEXT_WRAP_GAP`` and the line may fill every cell the row filled. Such a line
    also has to be a wrap: its first word would not have fitted after the
    text above it within the column's width.

    A table needs ``MIN_TABLE_ROWS`` rows with two or more cells (and at
    least ``multi_share`` of the rows so; one such row with ruled columns), between ``MIN_TABLE_COLUMNS`` and
    ``MAX_TABLE_COLUMNS`` columns, and short cells (a median of at most
    ``MAX_MEDIAN_CELL_WORDS`` words). Otherwise ``[]``.

    Args:
        lines: the region's lines (``group_lines``).
        rules: x positions of the region's vertical rules (``ocr_rules.rule_positions``).
        multi_share: the share of rows that need two or more cells (word
            gaps' columns only).
    """
    if len(lines) < MIN_TABLE_ROWS:
        return []
    if len(rules) >= 2:
        table = _rows(lines, rule_bands(rules, lines), MAX_RULED_COLUMNS, ruled=True, drawn=True)
        if table:
            return table
    return _rows(lines, _column_bands(lines), MAX_TABLE_COLUMNS, ruled=False, multi_share=multi_share)


def rule_rows(
    lines: Sequence[Sequence[Word]], rules: Sequence[float], multi_share: float = 0.5
) -> list[list[str]]:
    """The lines as rows of the columns between vertical ``rules`` (x
    positions, :func:`rule_bands`; up to ``MAX_RULED_COLUMNS``), held to the
    bar of columns found from word gaps (``MIN_TABLE_ROWS`` rows of two or
    more cells, ``multi_share`` of the rows so): for lines that no
    horizontal rules frame as a table. ``[]`` when they make no table; no
    fallback to the words' gaps."""
    if len(lines) < MIN_TABLE_ROWS or len(rules) < 2:
        return []
    return _rows(
        lines, rule_bands(rules, lines), MAX_RULED_COLUMNS, ruled=False, multi_share=multi_share, drawn=True
    )


def _rows(
    lines: Sequence[Sequence[Word]],
    bands: Sequence[tuple[float, float]],
    max_columns: int,
    ruled: bool,
    multi_share: float = 0.5,
    drawn: bool = False,
) -> list[list[str]]:
    """``table_rows`` with its columns given: the rows, or ``[]`` when they are not a table.
    With ``ruled`` columns (drawn, not guessed) one row of two or more cells
    is enough (a header over an empty table's one-cell "No results" row).
    With ``drawn`` bands (between vertical rules) a column's text ends at its
    rule for the wrap test: a section heading that starts in the column and
    runs past its rule does not widen it."""
    if not MIN_TABLE_COLUMNS <= len(bands) <= max_columns:
        return []
    columns = [[_column_of(w.x0, bands) for w in line] for line in lines]
    right = [0.0] * len(bands)  # the right end of each column's text
    for line, cols in zip(lines, columns, strict=True):
        for w, i in zip(line, cols, strict=True):
            right[i] = max(right[i], w.x1)
    if drawn:  # a ruled column's text ends at its rule, whatever spans past it
        right = [min(r, b[1]) for r, b in zip(right, bands, strict=True)]
    rows: list[list[list[str]]] = []
    ends: list[float] = []  # the right end of the last line of each cell of the row above
    previous_bottom = 0.0
    for line, cols in zip(lines, columns, strict=True):
        cells: list[list[Word]] = [[] for _ in bands]
        for w, i in zip(line, cols, strict=True):
            cells[i].append(w)
        filled = [i for i, c in enumerate(cells) if c]
        top = statistics.median(w.y0 for w in line)
        text_only = (
            bool(rows)
            and sum(1 for c in rows[-1] if c) >= 2
            and not has_digit([t for c in rows[-1] for t in c] + [w.text for w in line])
        )
        gap = statistics.median(w.height for w in line) * (TEXT_WRAP_GAP if text_only else WRAP_GAP)
        if rows and top - previous_bottom < gap:
            above = [i for i, c in enumerate(rows[-1]) if c]
            if (
                set(filled) <= set(above)
                and (2 * len(filled) <= len(above) or text_only)
                and all(ends[i] + _first_word_width(cells[i][0]) > right[i] for i in filled)
            ):
                for i in filled:
                    rows[-1][i].extend(w.text for w in cells[i])
                    ends[i] = cells[i][-1].x1
                previous_bottom = statistics.median(w.y1 for w in line)
                continue
        rows.append([[w.text for w in c] for c in cells])
        ends = [c[-1].x1 if c else 0.0 for c in cells]
        previous_bottom = statistics.median(w.y1 for w in line)
    table = [[" ".join(c) for c in row] for row in rows]
    multi = sum(1 for r in table if sum(1 for c in r if c) >= 2)
    words = [len(c.split()) for r in table for c in r if c]
    enough = multi >= 1 if ruled else multi >= MIN_TABLE_ROWS and multi >= multi_share * len(table)
    if not enough or statistics.median(words) > MAX_MEDIAN_CELL_WORDS:
        return []
    return table


def has_digit(texts: Sequence[str]) -> bool:
    """Whether any of the texts holds a digit."""
    return any(ch.isdigit() for t in texts for ch in t)


def second_read(words: Sequence[Word]) -> SecondRead:
    """Lines, confidence and table of a page's words (pure)."""
    if not words:
        return SecondRead((), 0.0)
    lines = group_lines(words)
    table = table_rows(lines)
    return SecondRead(
        tuple(tuple(w.text for w in line) for line in lines),
        float(np.mean([w.score for w in words])),
        tuple(tuple(r) for r in table),
    )


@dataclass(frozen=True)
class RegionChoice:
    """Whose words a ruled table region takes.

    Attributes:
        engine: ``"tesseract"`` or ``"rapidocr"``.
        confidences: each engine that read the region and its mean word
            confidence, e.g. ``(("tesseract", 76.9), ("rapidocr", 97.6))``.
    """

    engine: str
    confidences: tuple[tuple[str, float], ...]


def needs_second_read(tesseract_words: Sequence[Word]) -> bool:
    """Whether a table region's Tesseract words are read with too little
    confidence (a mean under ``MIN_REGION_CONFIDENCE``) to keep without
    asking RapidOCR (pure)."""
    return bool(tesseract_words) and _mean_score(tesseract_words) < MIN_REGION_CONFIDENCE


def choose_region(
    tesseract_words: Sequence[Word], second_words: Sequence[Word] | None, rules: Sequence[float] = ()
) -> RegionChoice:
    """The engine a ruled table region takes its words from (pure; the page
    level's :func:`choose` applied to the region): Tesseract's when their mean
    confidence meets ``MIN_REGION_CONFIDENCE`` or there is no second reading;
    RapidOCR's when they are under it and its words make a table
    (``table_rows`` with the region's vertical ``rules``) at its own bar
    (``MIN_CONFIDENCE``); else Tesseract's.

    Args:
        tesseract_words: Tesseract's words inside the region.
        second_words: RapidOCR's words of the region (same coordinates), or
            ``None`` when it did not read it.
        rules: x positions of the region's vertical rules.
    """
    confidences: tuple[tuple[str, float], ...] = (("tesseract", round(_mean_score(tesseract_words), 1)),)
    if second_words is None:
        return RegionChoice("tesseract", confidences)
    lines = group_lines(second_words)
    read = SecondRead(
        tuple(tuple(w.text for w in line) for line in lines),
        _mean_score(second_words),
        tuple(tuple(r) for r in table_rows(lines, rules)),
    )
    confidences = (*confidences, ("rapidocr", round(read.confidence, 1)))
    passed = _mean_score(tesseract_words) >= MIN_REGION_CONFIDENCE
    engine = choose(passed, read) if read.table else "tesseract"
    return RegionChoice("rapidocr" if engine == "rapidocr" else "tesseract", confidences)


def read_line(gray: np.ndarray) -> tuple[str, float]:
    """Run RapidOCR's recogniser alone (no detection, no angle classifier) on
    one text line's crop.

    Args:
        gray: 8-bit grayscale crop holding one line of text, upright.

    Returns:
        ``(text, score 0-100)``, the text NFKC-normalised (full-width
        letters as ASCII) with whitespace runs as one space; ``("", 0.0)``
        when nothing was read.

    Raises:
        ConfigurationError: the engine is not installed.
    """
    if gray.size == 0:
        return "", 0.0
    result, _ = _engine()(np.ascontiguousarray(np.stack([gray] * 3, axis=-1)), use_det=False, use_cls=False)
    if not result:
        return "", 0.0
    text, score = result[0][0], result[0][1]
    # NFKC: the recogniser (trained on Chinese and English) at times writes Latin letters and digits
    # in their full-width forms ("ｄａｔｅｌｉｎｅ" for "dateline", 8087_054.3B.tif).
    return " ".join(unicodedata.normalize("NFKC", str(text)).split()), 100.0 * float(score)


def rereads_lines(lang: str) -> bool:
    """Whether lines Tesseract read with ``lang`` (``OcrOptions.lang``:
    languages joined by ``+``) may be read again by the recogniser: only
    when each language is one it writes (``LINE_LANGUAGES``) (pure)."""
    return all(name in LINE_LANGUAGES for name in lang.split("+"))


def choose_line(tesseract: tuple[str, float], second: tuple[str, float] | None) -> RegionChoice:
    """The engine a text line keeps (pure): RapidOCR's reading when
    Tesseract's mean word confidence on the line is under
    ``MIN_LINE_CONFIDENCE`` and RapidOCR read the line at its own bar
    (``MIN_CONFIDENCE``) or more, with a higher confidence than Tesseract's
    and at least as many words (its recogniser drops spaces between small
    words: "andseeif" for "and see if"); else Tesseract's.

    Args:
        tesseract: Tesseract's ``(text, mean word confidence)`` of the line.
        second: RapidOCR's ``(text, score)`` of the line's crop, or ``None``
            when it did not read it.

    Returns:
        The engine and both confidences (only Tesseract's when not read again).
    """
    text, conf = tesseract
    confidences: tuple[tuple[str, float], ...] = (("tesseract", round(conf, 1)),)
    if second is None:
        return RegionChoice("tesseract", confidences)
    other, score = second
    confidences = (*confidences, ("rapidocr", round(score, 1)))
    wins = (
        conf < MIN_LINE_CONFIDENCE
        and score >= MIN_CONFIDENCE
        and score > conf
        and len(other.split()) >= len(text.split())
    )
    return RegionChoice("rapidocr" if wins else "tesseract", confidences)


def _mean_score(words: Sequence[Word]) -> float:
    return float(np.mean([w.score for w in words])) if words else 0.0


def choose(tesseract_passed: bool, second: SecondRead | None, min_confidence: float = MIN_CONFIDENCE) -> str:
    """Which engine's text a page keeps: ``"tesseract"`` when it met the bar
    (or there is no second reading), ``"rapidocr"`` when Tesseract failed and
    the second engine read words at ``min_confidence`` or more, else ``"none"``
    (the page goes to review)."""
    if tesseract_passed:
        return "tesseract"
    if second is not None and second.lines and second.confidence >= min_confidence:
        return "rapidocr"
    return "none"
