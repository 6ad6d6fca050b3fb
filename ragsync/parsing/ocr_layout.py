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


@dataclass
class Tsv:
    """Words of one page: paragraphs (lists of lines), word confidences and boxes."""

    paragraphs: list[list[str]] = field(default_factory=list)
    paragraph_confs: list[list[float]] = field(default_factory=list)
    confs: list[float] = field(default_factory=list)
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)


def parse_tsv(tsv: str) -> Tsv:
    """Read Tesseract's TSV: words grouped into lines and paragraphs in output (reading) order.

    Args:
        tsv: the TSV text (header line first).

    Returns:
        Paragraphs (lists of lines) with their words' confidences, all word
        confidences and word boxes ``(left, top, right, bottom)`` of
        non-empty words.
    """
    out = Tsv()
    para_key: tuple[str, str, str] | None = None
    line_key: tuple[str, str, str, str] | None = None
    line_words: list[str] = []

    def flush_line() -> None:
        if line_words:
            out.paragraphs[-1].append(" ".join(line_words))
            line_words.clear()

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
        pkey = (f[1], f[2], f[3])
        lkey = (f[1], f[2], f[3], f[4])
        if lkey != line_key:
            flush_line()
            line_key = lkey
        if pkey != para_key:
            out.paragraphs.append([])
            out.paragraph_confs.append([])
            para_key = pkey
        line_words.append(text)
        out.confs.append(conf)
        out.paragraph_confs[-1].append(conf)
        left, top, width, height = (int(v) for v in f[6:10])
        out.boxes.append((left, top, left + width, top + height))
    flush_line()
    kept = [i for i, p in enumerate(out.paragraphs) if p]
    out.paragraphs = [out.paragraphs[i] for i in kept]
    out.paragraph_confs = [out.paragraph_confs[i] for i in kept]
    return out


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
