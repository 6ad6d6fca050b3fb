"""OCR page layout: Tesseract's TSV words grouped into lines and paragraphs, lines joined.

Tesseract reports every word with its block, paragraph and line numbers in
reading order; this module rebuilds paragraphs from them and joins a
paragraph's lines into one string (words hyphenated at a line end rejoined).
Pure functions on text; nothing here runs Tesseract.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class TsvWord:
    """One word Tesseract read.

    Attributes:
        box: ``(left, top, right, bottom)`` in pixels.
        text: the word.
        conf: its confidence 0-100.
        paragraph: index of its paragraph on the page (reading order).
        line: index of its line on the page (reading order).
    """

    box: tuple[int, int, int, int]
    text: str
    conf: float
    paragraph: int
    line: int


@dataclass
class Tsv:
    """Words of one page: paragraphs (lists of lines), word confidences (per
    paragraph, per line of each paragraph, all) and boxes, and the words."""

    paragraphs: list[list[str]] = field(default_factory=list)
    paragraph_confs: list[list[float]] = field(default_factory=list)
    line_confs: list[list[list[float]]] = field(default_factory=list)
    confs: list[float] = field(default_factory=list)
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)
    words: list[TsvWord] = field(default_factory=list)


def parse_tsv(tsv: str) -> Tsv:
    """Read Tesseract's TSV: words grouped into lines and paragraphs in output (reading) order.

    Args:
        tsv: the TSV text (header line first).

    Returns:
        Paragraphs (lists of lines) with their words' confidences, all word
        confidences and word boxes ``(left, top, right, bottom)`` of
        non-empty words, and the words themselves (``group_words``).
    """
    words: list[TsvWord] = []
    keys: dict[tuple[str, str, str], int] = {}
    line_keys: dict[tuple[str, str, str, str], int] = {}
    for row in tsv.splitlines()[1:]:
        f = row.split("\t")
        if len(f) < 12 or f[0] != "5":
            continue
        text = f[11].strip()
        try:
            conf = float(f[10])
        except ValueError:
            continue
        if not text or conf < 0:
            continue
        para = keys.setdefault((f[1], f[2], f[3]), len(keys))
        line = line_keys.setdefault((f[1], f[2], f[3], f[4]), len(line_keys))
        left, top, width, height = (int(v) for v in f[6:10])
        words.append(TsvWord((left, top, left + width, top + height), text, conf, para, line))
    return group_words(words)


def group_words(words: Sequence[TsvWord]) -> Tsv:
    """Words (in reading order) grouped into lines and paragraphs by their indices.

    Args:
        words: a page's words, possibly with some left out (those of a
            table read apart).

    Returns:
        A ``Tsv`` of exactly these words: a paragraph or line none of whose
        words is left is gone.
    """
    out = Tsv(words=list(words))
    para: int | None = None
    line: int | None = None
    for w in words:
        if w.paragraph != para:
            out.paragraphs.append([])
            out.paragraph_confs.append([])
            out.line_confs.append([])
            para, line = w.paragraph, None
        if w.line != line:
            out.paragraphs[-1].append(w.text)
            out.line_confs[-1].append([])
            line = w.line
        else:
            out.paragraphs[-1][-1] += " " + w.text
        out.confs.append(w.conf)
        out.paragraph_confs[-1].append(w.conf)
        out.line_confs[-1][-1].append(w.conf)
        out.boxes.append(w.box)
    return out


def line_boxes(words: Sequence[TsvWord]) -> tuple[tuple[tuple[int, int, int, int], ...], ...]:
    """Each paragraph's line boxes, grouped as ``group_words`` groups the words.

    Args:
        words: a page's words in reading order.

    Returns:
        Per paragraph, the ``(left, top, right, bottom)`` pixel box of each of
        its lines (the union of the line's word boxes).
    """
    paras: list[list[list[int]]] = []
    para: int | None = None
    line: int | None = None
    for w in words:
        if w.paragraph != para:
            paras.append([])
            para, line = w.paragraph, None
        if w.line != line:
            paras[-1].append(list(w.box))
            line = w.line
        else:
            box = paras[-1][-1]
            box[:] = [
                min(box[0], w.box[0]),
                min(box[1], w.box[1]),
                max(box[2], w.box[2]),
                max(box[3], w.box[3]),
            ]
    return tuple(tuple((b[0], b[1], b[2], b[3]) for b in p) for p in paras)


def join_lines(paragraphs: Sequence[Sequence[str]]) -> list[str]:
    """Each paragraph on one line, words split at line ends rejoined.

    Args:
        paragraphs: paragraphs as sequences of their lines.

    Returns:
        Non-empty paragraph strings in reading order.
    """
    out: list[str] = []
    for lines in paragraphs:
        text = ""
        for line in lines:
            line = _WS.sub(" ", line).strip()
            if not line:
                continue
            if not text:
                text = line
            elif len(text) > 1 and text.endswith("-") and text[-2].isalpha() and line[:1].islower():
                text = text[:-1] + line
            else:
                text = text + " " + line
        if text:
            out.append(text)
    return out


# A line of prose: at least PROSE_LINE_WORDS words, at most PROSE_DIGIT_SHARE of them holding a digit,
# and no gap between two words wider than PROSE_GAP times the line's median word height (one column's
# line, not a table row whose cells Tesseract read as one line). A paragraph of Tesseract's (a block's
# paragraph: one column) is prose when it has two or more lines and PROSE_LINE_SHARE of them are prose
# lines: a sentence wrapped inside a column, which no table's column is.
PROSE_LINE_WORDS = 5
PROSE_DIGIT_SHARE = 0.2
PROSE_GAP = 1.5
PROSE_LINE_SHARE = 0.5


def prose_line(line: Sequence[TsvWord]) -> bool:
    """Whether a line's words (left to right) are a line of prose (pure): see ``PROSE_LINE_WORDS``."""
    if len(line) < PROSE_LINE_WORDS:
        return False
    if sum(1 for w in line if any(ch.isdigit() for ch in w.text)) > PROSE_DIGIT_SHARE * len(line):
        return False
    heights = sorted(w.box[3] - w.box[1] for w in line)
    gap = PROSE_GAP * max(heights[len(heights) // 2], 1)
    return all(b.box[0] - a.box[2] <= gap for a, b in zip(line, line[1:], strict=False))


def prose_paragraphs(words: Sequence[TsvWord]) -> set[int]:
    """The paragraphs (``TsvWord.paragraph``) of a page's words that are
    prose (pure): two or more lines, ``PROSE_LINE_SHARE`` of them lines of
    prose (``prose_line``). Their words are a column's text: the page's
    table search leaves them out, so two columns of prose never make a table.

    Args:
        words: a page's words as Tesseract read them (reading order).

    Returns:
        The paragraph indices.
    """
    lines: dict[int, dict[int, list[TsvWord]]] = {}
    for w in words:
        lines.setdefault(w.paragraph, {}).setdefault(w.line, []).append(w)
    out: set[int] = set()
    for paragraph, by_line in lines.items():
        rows = [sorted(line, key=lambda w: w.box[0]) for line in by_line.values()]
        prose = sum(1 for line in rows if prose_line(line))
        if len(rows) >= 2 and prose >= PROSE_LINE_SHARE * len(rows):
            out.add(paragraph)
    return out
