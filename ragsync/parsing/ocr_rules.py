"""Rules on a scanned page: ruled table regions, vertical rules, glyphs read from rules.

Horizontal and vertical rules are found by morphological opening of the
page's ink (:func:`rule_masks`). Horizontal rules of the same extent stack
into a ruled table region (:func:`ruled_regions`: a fully ruled grid, or
rules between rows only); the region runs from the first rule to the last,
and one row pitch beyond each when no vertical rule frames it (a header
above the first rule, a last row below the last). The vertical rules that
divide a box into columns are :func:`rule_positions` of
:func:`vertical_rules`. Glyphs Tesseract reads from a rule a word touches
go (:func:`off_rules`).

Pure functions on ink masks and word boxes; nothing here runs an engine.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ragsync.parsing.ocr_second import Word

Box = tuple[float, float, float, float]

# A horizontal rule is at least this share of the page width long.
MIN_RULE_WIDTH = 1 / 15
# Rules stack (one table) when their ends lie within this many letter heights
# of each other and the gap between two is at most MAX_RULE_GAP letter heights.
RULE_END_SLACK = 2.0
MAX_RULE_GAP = 25.0
# A vertical rule a word touches is at times read as a glyph of that word
# (a count right-aligned against a rule, "90|", read "90)"; a header "| PO
# number"): a bracket or bar at a word's end lying within RULE_GLYPH_REACH of
# the word's height of a rule is the rule and goes, unless the word also holds
# its matching bracket ("(WBC)"). Half a line height: the rule is the glyph
# itself, so its centre lies within the glyph's width (about half its height).
RULE_GLYPH_REACH = 0.5
RULE_GLYPHS = {")": "(", "]": "[", "}": "{", "|": "", "(": ")", "[": "]", "{": "}"}


def _segments(mask: NDArray[np.bool_], horizontal: bool) -> list[tuple[int, int, int, int]]:
    """Bounding boxes ``(x0, y0, x1, y1)`` of the connected runs in a rule mask."""
    import cv2

    n, _, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    out = []
    for i in range(1, n):
        x, y, w, h = (int(v) for v in stats[i, :4])
        out.append((x, y, x + w, y + h))
    return sorted(out, key=(lambda b: (b[1], b[0])) if horizontal else (lambda b: (b[0], b[1])))


def rule_masks(ink: NDArray[np.bool_], letter: float) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Horizontal and vertical rules of a page: its ink opened with a long
    thin kernel (``MIN_RULE_WIDTH`` of the page wide; three letter heights
    tall, at least 15 px).

    Args:
        ink: the page's ink mask.
        letter: the page's median glyph height (``ocr_quality.glyph_height``).
    """
    import cv2

    img = ink.astype(np.uint8)
    h_len = max(int(ink.shape[1] * MIN_RULE_WIDTH), 15)
    v_len = max(int(3 * letter), 15)
    horizontal = cv2.morphologyEx(img, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (h_len, 1)))
    vertical = cv2.morphologyEx(img, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (1, v_len)))
    return horizontal.astype(bool), vertical.astype(bool)


def ruled_regions(ink: NDArray[np.bool_], letter: float) -> list[Box]:
    """Regions of a page that ruled tables occupy, top to bottom.

    Horizontal rules (``rule_masks``) whose ends agree within
    ``RULE_END_SLACK`` letter heights and follow each other within
    ``MAX_RULE_GAP`` letter heights form a stack. A stack is a table when
    it has three or more rules, or two with two or more vertical rules
    between them spanning half its height. A stack some of whose gaps are
    framed (two or more vertical rules cross the gap) is cut into its
    framed and unframed parts (``_cut_unframed``): framed tables one under
    another with the same width (a form's sections, each under its
    heading's rule) are one table each.
    Without such vertical rules the
    region reaches one row pitch (the median gap between its rules, at most
    four letter heights) above the first rule and below the last.

    Args:
        ink: the page's ink mask.
        letter: the page's median glyph height in pixels (> 0).

    Returns:
        ``(x0, y0, x1, y1)`` boxes in pixels.
    """
    if letter <= 0:
        return []
    hmask, vmask = rule_masks(ink, letter)
    rules = _segments(hmask, horizontal=True)
    slack = RULE_END_SLACK * letter
    stacks: list[list[tuple[int, int, int, int]]] = []
    for rule in rules:
        for stack in stacks:
            last = stack[-1]
            if (
                abs(rule[0] - last[0]) <= slack
                and abs(rule[2] - last[2]) <= slack
                and 0 < rule[1] - last[3] <= MAX_RULE_GAP * letter
            ):
                stack.append(rule)
                break
        else:
            stacks.append([rule])
    verticals = _segments(vmask, horizontal=False)
    regions: list[Box] = []
    for stack in (part for whole in stacks for part in _cut_unframed(whole, verticals, slack)):
        if len(stack) < 2:
            continue
        x0, x1 = min(r[0] for r in stack), max(r[2] for r in stack)
        y0, y1 = float(stack[0][1]), float(stack[-1][3])
        framed = sum(
            1
            for v in verticals
            if x0 - slack <= v[0] <= x1 + slack and min(v[3], y1) - max(v[1], y0) >= (y1 - y0) / 2
        )
        if len(stack) < 3 and framed < 2:
            continue
        if framed < 2:
            pitch = min(
                statistics.median(b[1] - a[1] for a, b in zip(stack, stack[1:], strict=False)), 4 * letter
            )
            y0, y1 = max(y0 - pitch, 0), min(y1 + pitch, ink.shape[0])
        regions.append((float(x0), float(y0), float(x1), float(y1)))
    return sorted(regions, key=lambda b: b[1])


def _cut_unframed(
    stack: list[tuple[int, int, int, int]], verticals: Sequence[tuple[int, int, int, int]], slack: float
) -> list[list[tuple[int, int, int, int]]]:
    """A stack of horizontal rules (top to bottom) cut into framed and
    unframed parts: a gap is framed when two or more vertical rules cross
    it; rules joined by framed gaps are one part (a framed table), and
    consecutive rules that touch no framed gap are one part (a table ruled
    between rows only). Without framed gaps the stack stays whole."""
    x0, x1 = min(r[0] for r in stack), max(r[2] for r in stack)
    inner = [v for v in verticals if x0 - slack <= v[0] <= x1 + slack]

    def crossed(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
        return sum(1 for v in inner if v[1] <= a[3] + 2 and v[3] >= b[1] - 2) >= 2

    gaps = [crossed(a, b) for a, b in zip(stack, stack[1:], strict=False)]
    if not any(gaps):
        return [stack]
    framed = [(i > 0 and gaps[i - 1]) or (i < len(gaps) and gaps[i]) for i in range(len(stack))]
    parts: list[list[tuple[int, int, int, int]]] = []
    for i, rule in enumerate(stack):
        if i > 0 and (gaps[i - 1] or not (framed[i] or framed[i - 1])):
            parts[-1].append(rule)
        else:
            parts.append([rule])
    return parts


def vertical_rules(ink: NDArray[np.bool_], letter: float) -> list[tuple[int, int, int, int]]:
    """A page's vertical rules (``rule_masks``) as ``(x0, y0, x1, y1)``
    boxes, left to right; ``[]`` when ``letter`` is not positive."""
    if letter <= 0:
        return []
    return _segments(rule_masks(ink, letter)[1], horizontal=False)


def rule_positions(verticals: Sequence[tuple[int, int, int, int]], letter: float, box: Box) -> list[float]:
    """The vertical rules that divide ``box`` into columns (pure).

    Pieces of rule on one line (centres within a letter height of the
    first's) are one rule: a column rule broken by a shaded row or a cell
    spanning the columns goes on below it, and a double rule counts once. A
    rule belongs to the box when it lies within ``RULE_END_SLACK`` letter
    heights of its sides and its pieces cover at least half the box's height
    (a rule under a spanning header only, or a frame's short tick, does not
    cut the body).

    Args:
        verticals: the page's vertical rules (``vertical_rules``).
        letter: the letter height in pixels (> 0).
        box: a table region or an unruled run's bounds.

    Returns:
        The rules' x positions (the first piece's centre) left to right;
        ``[]`` for none.
    """
    x0, y0, x1, y1 = box
    slack = RULE_END_SLACK * letter
    lines: list[tuple[float, list[tuple[int, int, int, int]]]] = []
    for v in sorted(verticals, key=lambda v: (v[0] + v[2], v[1])):
        centre = (v[0] + v[2]) / 2
        if lines and centre - lines[-1][0] < letter:
            lines[-1][1].append(v)
        else:
            lines.append((centre, [v]))
    xs: list[float] = []
    for centre, pieces in lines:
        if x0 - slack <= centre <= x1 + slack and _covered(pieces, y0, y1) >= (y1 - y0) / 2:
            xs.append(centre)
    return xs


def _covered(pieces: Sequence[tuple[int, int, int, int]], y0: float, y1: float) -> float:
    """How much of ``y0..y1`` the pieces' vertical extents cover together."""
    covered, reached = 0.0, y0
    for top, bottom in sorted((max(p[1], y0), min(p[3], y1)) for p in pieces):
        top = max(top, reached)
        if bottom > top:
            covered += bottom - top
            reached = bottom
    return covered


def _rule_glyph(text: str, at: int) -> bool:
    """Whether ``text[at]`` is a bracket or bar (``RULE_GLYPHS``) whose
    matching bracket the text does not hold."""
    ch = text[at]
    return ch in RULE_GLYPHS and (not RULE_GLYPHS[ch] or RULE_GLYPHS[ch] not in text)


def off_rules(words: Sequence[Word], rules: Sequence[float]) -> list[Word]:
    """Words without the glyphs Tesseract read from the vertical ``rules``
    they touch (pure): a bracket or bar (``_rule_glyph``) that ends a word
    within ``RULE_GLYPH_REACH`` of its height of a rule is dropped from its
    text (its box kept), and a word of such glyphs only that lies on a rule
    is dropped. Other words are returned as they are (the same objects).

    Args:
        words: words, any order.
        rules: x positions of vertical rules.
    """
    out: list[Word] = []
    for w in words:
        reach = RULE_GLYPH_REACH * w.height
        near_start = any(abs(x - w.x0) <= reach for x in rules)
        near_end = any(abs(x - w.x1) <= reach for x in rules)
        text = w.text
        if near_end and len(text) > 1 and _rule_glyph(text, -1):
            text = text[:-1]
        if near_start and len(text) > 1 and _rule_glyph(text, 0):
            text = text[1:]
        if all(ch in RULE_GLYPHS for ch in text) and any(w.x0 - reach <= x <= w.x1 + reach for x in rules):
            continue
        out.append(w if text == w.text else Word(w.x0, w.y0, w.x1, w.y1, text, w.score))
    return out
