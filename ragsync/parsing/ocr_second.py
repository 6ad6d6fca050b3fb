"""The second OCR engine: RapidOCR (PaddleOCR's models in ONNX, shipped inside
the ``rapidocr-onnxruntime`` wheel; nothing is downloaded).

Tesseract stays the first engine: it is fast and accurate on clean, dense
pages, where RapidOCR (which scales a page down to ~960 px before detecting
text) loses small print. RapidOCR reads what Tesseract cannot: small or
low-resolution crops and table images (PubTabNet table crops: token recall
0.61-0.97 where Tesseract found 0.00-0.08). ``ocr_engine.ocr_page`` asks it
for a page only when Tesseract's best result is below the bar
(:func:`choose`), and keeps both engines' confidences.

Its boxes are grouped into lines (:func:`group_lines`) and, when the lines'
words fall into aligned columns of short cells, into a table
(:func:`table_rows`), emitted as Markdown like a text-layer PDF's table.

Pure functions take ``Word`` boxes; only :func:`read_words` runs the model.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragsync.errors import ConfigurationError

# Mean RapidOCR score (0-100) a page needs before its text replaces a failing
# Tesseract result. Its scores run high (~90-99 on text it reads), so the bar
# is higher than Tesseract's.
MIN_CONFIDENCE = 85.0
# A table: at least this many rows and columns, and short cells (prose in two
# columns is not a table).
MIN_TABLE_ROWS = 2
MIN_TABLE_COLUMNS = 2
MAX_TABLE_COLUMNS = 16
MAX_MEAN_CELL_WORDS = 4.0


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


@functools.lru_cache(maxsize=1)
def _engine() -> Any:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:  # pragma: no cover - a runtime requirement
        raise ConfigurationError(
            "the second OCR engine needs rapidocr-onnxruntime (in requirements.txt)"
        ) from exc
    return RapidOCR()


def read_words(gray: np.ndarray) -> list[Word]:
    """Run RapidOCR on an 8-bit grayscale page.

    Raises:
        ConfigurationError: the engine is not installed.
    """
    result, _ = _engine()(np.ascontiguousarray(np.stack([gray] * 3, axis=-1)))
    words: list[Word] = []
    for box, text, score in result or ():
        xs, ys = [float(p[0]) for p in box], [float(p[1]) for p in box]
        if str(text).strip():
            words.append(Word(min(xs), min(ys), max(xs), max(ys), str(text).strip(), 100.0 * float(score)))
    return words


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
    """The x-ranges no word crosses the gaps between: the union of every
    word's horizontal extent, merged where they overlap."""
    spans = sorted((w.x0, w.x1) for line in lines for w in line)
    bands: list[list[float]] = []
    for x0, x1 in spans:
        if bands and x0 <= bands[-1][1]:
            bands[-1][1] = max(bands[-1][1], x1)
        else:
            bands.append([x0, x1])
    return [(a, b) for a, b in bands]


def table_rows(lines: Sequence[Sequence[Word]]) -> list[list[str]]:
    """The lines as table rows when their words stand in aligned columns.

    Columns are the bands of x no word crosses (:func:`_column_bands`); a
    table needs ``MIN_TABLE_ROWS`` rows with two or more cells, between
    ``MIN_TABLE_COLUMNS`` and ``MAX_TABLE_COLUMNS`` columns, and short cells
    (at most ``MAX_MEAN_CELL_WORDS`` words on average). Otherwise ``[]``.
    """
    if len(lines) < MIN_TABLE_ROWS:
        return []
    bands = _column_bands(lines)
    if not MIN_TABLE_COLUMNS <= len(bands) <= MAX_TABLE_COLUMNS:
        return []
    rows: list[list[str]] = []
    for line in lines:
        cells: list[list[str]] = [[] for _ in bands]
        for w in line:
            index = next(i for i, (a, b) in enumerate(bands) if a <= w.x0 <= b)
            cells[index].append(w.text)
        rows.append([" ".join(c) for c in cells])
    multi = sum(1 for r in rows if sum(1 for c in r if c) >= 2)
    filled = [c for r in rows for c in r if c]
    mean_words = sum(len(c.split()) for c in filled) / max(len(filled), 1)
    if multi < MIN_TABLE_ROWS or multi < len(rows) / 2 or mean_words > MAX_MEAN_CELL_WORDS:
        return []
    return rows


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
