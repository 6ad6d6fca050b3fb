"""Tables on a full scanned page: where they are, and their words as rows.

Two kinds of table are found on a page Tesseract has read:

* ruled tables (:func:`ruled_regions`): a stack of horizontal rules of the
  same extent, found by morphological opening of the page's ink (a fully
  ruled grid, or rules between rows only); the region runs from the first
  rule to the last, and one row pitch beyond each when no vertical rule
  frames it (a header above the first rule, a last row below the last);
  its vertical rules (:func:`rule_positions` of :func:`vertical_rules`) make its columns;
* unruled tables (:func:`aligned_runs`): consecutive lines whose words fall
  apart at wide gaps (two or more segments per line), not columns of prose
  (:func:`is_prose`), read with the columns between the vertical rules that
  cross them (:func:`rule_positions`, a page of columns divided by rules
  only), else with their segments as cells (:func:`segment_table`); a
  form's labelled fields ("Agency:  value", :func:`is_form`) are read line
  by line (:func:`form_rows`).

Glyphs Tesseract reads from a rule a word touches go (:func:`off_rules`), and
amounts whose thousands commas were read as points are put back
(:func:`commas_read_as_points`).

Either way the region's words go through ``ocr_second.table_rows`` (the path
table crops take), which keeps only aligned columns of short cells: two
columns of prose are not a table, and their words stay text.

Pure functions on ink masks and word boxes; nothing here runs an engine.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ragsync.parsing.ocr_second import (
    MAX_MEDIAN_CELL_WORDS,
    Word,
    group_lines,
    has_digit,
    rule_rows,
    table_rows,
)

Box = tuple[float, float, float, float]

# A horizontal rule is at least this share of the page width long.
MIN_RULE_WIDTH = 1 / 15
# Rules stack (one table) when their ends lie within this many letter heights
# of each other and the gap between two is at most MAX_RULE_GAP letter heights.
RULE_END_SLACK = 2.0
MAX_RULE_GAP = 25.0
# Words fall into two cells of a line where the gap between them is wider
# than this many times the line's median word height.
COLUMN_GAP = 1.5
# An unruled table has at least this many lines of two or more segments.
MIN_ALIGNED_LINES = 3
# A run of aligned lines ends where the next line starts more than this many
# line heights below the previous one's bottom (a heading far above a table,
# or a ruled region's words taken out between them, is not one of its rows).
MAX_RUN_GAP = 3.0
# ... except that a form's field (a label, then its value: is_field) goes on
# a form's run (is_form) within this many line heights: a form sets a field
# apart by a blank line or two of its own line pitch (a "Date of Incident:"
# field ~4 line heights under the child's fields), where a table's next row
# would not be.
MAX_FORM_GAP = 6.0
# Up to this many one-segment lines in a row inside a run are kept in it (a
# long cell wrapped onto the next line, a subtotal): the run goes on when a
# line of two or more segments follows them.
MAX_RUN_WRAPS = 2
# A prose segment has at least this many words; a run of lines is two or more
# columns of prose when half or more of its multi-segment lines hold two such
# segments (a table row rarely has two cells of five words).
PROSE_WORDS = 5
# A ruled region whose Tesseract words have a median box height under this
# many pixels (small print: an x-height under ~10 px, where Tesseract's
# accuracy drops) is read again from its crop scaled up SMALL_PRINT_SCALE
# times; the new words replace the old when their mean confidence is higher.
SMALL_PRINT_PX = 20.0
SMALL_PRINT_SCALE = 2.0
# A run refused as a whole is tried again in pieces cut at its lines holding
# a segment of this many words or more (split_at_long_lines): sentences, not cells.
LONG_SEGMENT_WORDS = 10
# A table read with its segments as cells (segment_table) has at least this
# share of cells holding a digit.
MIN_NUMERIC_SHARE = 0.25
# ... and at least this share of its rows with two or more cells (a row with a
# cell wrapped over two more lines: the wraps are rows of one cell each, as
# the text-layer path reads them).
SEGMENT_MULTI_SHARE = 1 / 3
# A form's field: a label ending in a colon, its value after it (written on an
# underline, which Tesseract reads as a leading "_" or dash, or a row of
# check boxes, read as "[X]", "[_]"). A run read with its segments as cells
# is also kept, digits or not, when at least this share of its multi-segment
# lines hold such a label with a segment after it.
MIN_LABEL_SHARE = 0.5
UNDERLINE = "_\u2014\u2013"
FIELD_START = UNDERLINE + "["
# A vertical rule a word touches is at times read as a glyph of that word
# (a count right-aligned against a rule, "90|", read "90)"; a header "| PO
# number"): a bracket or bar at a word's end lying within RULE_GLYPH_REACH of
# the word's height of a rule is the rule and goes, unless the word also holds
# its matching bracket ("(WBC)"). Half a line height: the rule is the glyph
# itself, so its centre lies within the glyph's width (about half its height).
RULE_GLYPH_REACH = 0.5
# A number with two or more points, the last before one or two digits
# ("37.499.96"), is a US-style amount whose thousands commas were read as points
# (small print): no convention writes it so (a point-decimal number groups its
# thousands with commas, a comma-decimal one ends in a comma). With three digits
# after the last point ("1.234.567") it is a comma-decimal number's thousands,
# left as it is.
POINT_READ_COMMAS = re.compile(r"^([(\-$]?\d{1,3})((?:\.\d{3})+)(\.\d{1,2}[)%]?)$")
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


def segments(line: Sequence[Word]) -> list[list[Word]]:
    """A line's words (left to right) cut into segments: a new one starts at
    a gap wider than ``COLUMN_GAP`` times the line's median word height, and
    after a label (a word ending in ":") whose next word starts with an
    underline character or a check box (``FIELD_START``: a form's field
    written on a line, or its boxes)."""
    if not line:
        return []
    gap = COLUMN_GAP * statistics.median(w.height for w in line)
    out: list[list[Word]] = [[line[0]]]
    for a, b in zip(line, line[1:], strict=False):
        if b.x0 - a.x1 > gap or (a.text.endswith(":") and b.text[:1] in FIELD_START):
            out.append([b])
        else:
            out[-1].append(b)
    return out


def is_label(segment: Sequence[Word]) -> bool:
    """Whether a segment is a form field's label: its last word ends in ":"."""
    return bool(segment) and segment[-1].text.endswith(":")


def is_field(line: Sequence[Word]) -> bool:
    """Whether a line holds a form's field: a label (``is_label``) with a
    segment after it."""
    return any(is_label(s) for s in segments(line)[:-1])


def is_form(run: Sequence[Sequence[Word]]) -> bool:
    """Whether a run of lines is a form's fields: at least ``MIN_LABEL_SHARE``
    of its lines of two or more segments hold a label (``is_label``) with a
    segment after it ("Agency:  Bureau of ...")."""
    multi = [segments(line) for line in run if line_segments(line) >= 2]
    labelled = sum(1 for segs in multi if any(is_label(s) for s in segs[:-1]))
    return bool(multi) and labelled >= MIN_LABEL_SHARE * len(multi)


def _segment_text(segment: Sequence[Word], after_label: bool) -> str:
    """A segment's words joined; a field value (``after_label``) loses the
    underline characters it starts with (a lone underline word goes)."""
    text = " ".join(w.text for w in segment)
    return text.lstrip(UNDERLINE + " ") if after_label else text


def line_segments(line: Sequence[Word]) -> int:
    """How many segments a line's words fall into (``segments``)."""
    return len(segments(line))


def aligned_runs(lines: Sequence[Sequence[Word]]) -> list[list[Sequence[Word]]]:
    """Runs of lines with ``MIN_ALIGNED_LINES`` or more lines of two or more
    segments each (``line_segments``): the candidates for an unruled table.

    A run holds consecutive lines: it ends at a line that starts more than
    ``MAX_RUN_GAP`` line heights below the previous one, and at the
    ``MAX_RUN_WRAPS + 1``-th one-segment line in a row; up to
    ``MAX_RUN_WRAPS`` one-segment lines followed by a line of two or more
    segments stay in the run (a wrapped cell), at its ends they are left out.

    Args:
        lines: a page's lines top to bottom (``ocr_second.group_lines``).
    """
    runs: list[list[Sequence[Word]]] = []
    current: list[Sequence[Word]] = []
    pending: list[Sequence[Word]] = []

    def close() -> None:
        if sum(1 for line in current if line_segments(line) >= 2) >= MIN_ALIGNED_LINES:
            runs.append(list(current))
        current.clear()
        pending.clear()

    for line in lines:
        if not line:
            continue
        if current:
            last = (pending or current)[-1]
            height = statistics.median(w.height for w in last)
            bottom = statistics.median(w.y1 for w in last)
            gap = statistics.median(w.y0 for w in line) - bottom
            if gap > MAX_RUN_GAP * height and not (
                gap <= MAX_FORM_GAP * height and not pending and is_field(line) and is_form(current)
            ):
                close()
        if line_segments(line) >= 2:
            current.extend(pending)
            pending.clear()
            current.append(line)
        elif current and len(pending) < MAX_RUN_WRAPS:
            pending.append(line)
        else:
            close()
    close()
    return runs


def is_prose(run: Sequence[Sequence[Word]]) -> bool:
    """Whether a run of lines is columns of prose: half or more of its lines
    of two or more segments hold two segments of ``PROSE_WORDS`` or more words
    each (two text columns side by side)."""
    multi = [segments(line) for line in run if line_segments(line) >= 2]
    prose = sum(
        1 for segs in multi if sum(1 for s in segs if sum(len(w.text.split()) for w in s) >= PROSE_WORDS) >= 2
    )
    return bool(multi) and 2 * prose >= len(multi)


def _segment_cells(line: Sequence[Word]) -> list[Word]:
    """A line's segments (``segments``) as one word each, its text the
    segment's (``_segment_text``); a segment left empty goes."""
    segs = segments(line)
    cells = [
        Word(
            s[0].x0,
            min(w.y0 for w in s),
            s[-1].x1,
            max(w.y1 for w in s),
            _segment_text(s, k > 0 and is_label(segs[k - 1])),
            0,
        )
        for k, s in enumerate(segs)
    ]
    return [c for c in cells if c.text]


def form_rows(run: Sequence[Sequence[Word]]) -> list[list[str]]:
    """A form's fields (``is_form``) as rows: each line's segments
    (``_segment_cells``) are its cells, left to right, padded with blanks to
    the widest line (a form's labels have no common width, so its fields
    stand in no columns). ``[]`` when the cells are long (a median over
    ``ocr_second.MAX_MEDIAN_CELL_WORDS`` words)."""
    rows = [[c.text for c in _segment_cells(line)] for line in run]
    rows = [r for r in rows if r]
    words = [len(c.split()) for r in rows for c in r]
    if not words or statistics.median(words) > MAX_MEDIAN_CELL_WORDS:
        return []
    width = max(len(r) for r in rows)
    return [r + [""] * (width - len(r)) for r in rows]


def segment_table(run: Sequence[Sequence[Word]]) -> list[list[str]]:
    """A run's rows with each segment (``_segment_cells``) as one cell: the
    columns come from where the segments lie, so word gaps inside a cell that
    line up by chance make no column. A form's fields (``is_form``) are read
    line by line (``form_rows``). Else kept (``ocr_second.table_rows`` on the
    segments, with ``SEGMENT_MULTI_SHARE`` of the rows of two or more cells)
    when at least ``MIN_NUMERIC_SHARE`` of the cells hold a digit; else ``[]``."""
    if is_form(run):
        return form_rows(run)
    merged = [cells for cells in (_segment_cells(line) for line in run) if cells]
    rows = table_rows(merged, multi_share=SEGMENT_MULTI_SHARE)
    texts = [c for row in rows for c in row if c]
    numeric = sum(1 for c in texts if has_digit([c]))
    return rows if texts and numeric >= MIN_NUMERIC_SHARE * len(texts) else []


def small_print(words: Sequence[Word]) -> bool:
    """Whether a region's words are small print: a median box height under
    ``SMALL_PRINT_PX`` (then the region is read again scaled up)."""
    return bool(words) and statistics.median(w.height for w in words) < SMALL_PRINT_PX


def better_reading(old: Sequence[Word], new: Sequence[Word]) -> bool:
    """Whether a second reading of a region (``new``) replaces the first:
    it has words and their mean confidence is higher."""
    mean = statistics.fmean
    return bool(new) and (not old or mean(w.score for w in new) > mean(w.score for w in old))


def scaled_back(words: Sequence[Word], scale: float, x0: float, y0: float) -> list[Word]:
    """Words read on a crop scaled up ``scale`` times (1: not scaled), whose
    top-left corner was at ``(x0, y0)``, in the page's pixels."""
    return [
        Word(w.x0 / scale + x0, w.y0 / scale + y0, w.x1 / scale + x0, w.y1 / scale + y0, w.text, w.score)
        for w in words
    ]


def inside(word: Word, box: Box) -> bool:
    """Whether a word's centre lies in ``box``."""
    cx = (word.x0 + word.x1) / 2
    return box[0] <= cx <= box[2] and box[1] <= word.cy <= box[3]


def split_at_long_lines(run: Sequence[Sequence[Word]]) -> list[list[Sequence[Word]]]:
    """A run cut at its lines that hold a segment of ``LONG_SEGMENT_WORDS``
    or more words (a sentence: a table's rows running into prose set beside
    another column), those lines left out; the pieces that are runs of
    their own (``aligned_runs``), top to bottom; ``[]`` when the run holds
    no such line."""
    pieces: list[list[Sequence[Word]]] = [[]]
    for line in run:
        if max(sum(len(w.text.split()) for w in s) for s in segments(line)) >= LONG_SEGMENT_WORDS:
            pieces.append([])
        else:
            pieces[-1].append(line)
    return [r for piece in pieces if len(piece) < len(run) for r in aligned_runs(piece)]


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


def commas_read_as_points(cell: str) -> str:
    """A cell's text with the thousands commas of its amounts read as
    points put back (``POINT_READ_COMMAS``: "37.499.96" -> "37,499.96")."""
    return " ".join(
        m[1] + m[2].replace(".", ",") + m[3] if (m := POINT_READ_COMMAS.match(t)) else t
        for t in cell.split(" ")
    )


def _unruled_rows(run: Sequence[Sequence[Word]], rules: Sequence[float] = ()) -> list[list[str]]:
    """An unruled candidate's rows (see ``page_tables``), or ``[]``."""
    if is_prose(run):
        return []
    if len(rules) >= 2 and (
        rows := rule_rows([c for c in (off_rules(line, rules) for line in run) if c], rules)
    ):
        return rows
    rows = segment_table(run)
    if not rows and (words_rows := table_rows(run)):
        rows = words_rows if len(words_rows[0]) <= max(line_segments(line) for line in run) else []
    return rows


def _run_rules(run: Sequence[Sequence[Word]], verticals: Sequence[tuple[int, int, int, int]]) -> list[float]:
    """The vertical rules that cross a run of lines (``rule_positions`` of
    its words' bounds, its median word height as the letter height)."""
    words = [w for line in run for w in line]
    if not verticals or not words:
        return []
    box = (
        min(w.x0 for w in words),
        min(w.y0 for w in words),
        max(w.x1 for w in words),
        max(w.y1 for w in words),
    )
    return rule_positions(verticals, statistics.median(w.height for w in words), box)


def page_tables(
    words: Sequence[Word],
    regions: Sequence[Box],
    *,
    unruled: bool = True,
    columns: Sequence[Sequence[float]] = (),
    verticals: Sequence[tuple[int, int, int, int]] = (),
) -> tuple[list[tuple[float, list[list[str]]]], set[int]]:
    """The tables among a page's words.

    Words whose centre lies in a ruled region (``ruled_regions``) are read
    as that region's table; the other words' lines are searched for unruled
    tables (``aligned_runs``). A ruled candidate goes through
    ``ocr_second.table_rows``. An unruled one refused is tried again in
    pieces (``split_at_long_lines``). An unruled one is refused when it is columns
    of prose (``is_prose``); else, when two or more of the page's vertical
    rules cross it (``rule_positions``: a page of columns divided by rules,
    with no horizontal rules to make it a ruled region), read with the
    columns between them (``ocr_second.rule_rows``); else with its segments as cells
    (``segment_table``: word gaps inside a cell make no column), or, when
    that gives no table, word by word (``table_rows``), then with no more
    columns than its widest line has segments (``line_segments``): a run of
    prose lines whose word gaps line up by chance splits into many narrow
    columns (on the magazine page 8071_093.3B, a headline over two text
    columns made 15 columns from lines of at most 5 segments). A candidate
    refused leaves its words as text. Wherever rules make the columns, the
    glyphs read from them go first (``off_rules``).

    Args:
        words: the page's words (Tesseract's, in any order).
        regions: ruled table regions on the page.
        unruled: also search the other words for unruled tables.
        columns: for each region, the x positions of its vertical rules
            (``rule_positions``); with two or more, they make its columns
            instead of the words' gaps. Missing: none.
        verticals: the page's vertical rules (``vertical_rules``), for the
            unruled candidates. Missing: none.

    Returns:
        ``(tables, used)``: the tables top to bottom, each as its top edge
        in pixels and its rows of cell strings,
        and the indices in ``words`` of the words they took.
    """
    found: list[tuple[float, list[list[str]], set[int]]] = []
    taken: set[int] = set()
    index = {id(w): i for i, w in enumerate(words)}
    for k, box in enumerate(regions):
        region = [i for i, w in enumerate(words) if i not in taken and inside(w, box)]
        rules = columns[k] if k < len(columns) else ()
        rows = table_rows(group_lines(off_rules([words[i] for i in region], rules)), rules)
        if rows:
            found.append((box[1], rows, set(region)))
            taken.update(region)
    rest = [w for i, w in enumerate(words) if i not in taken]
    for whole in aligned_runs(group_lines(rest)) if unruled else []:
        rows = _unruled_rows(whole, _run_rules(whole, verticals))
        pieces = (
            [(whole, rows)]
            if rows
            else [(r, _unruled_rows(r, _run_rules(r, verticals))) for r in split_at_long_lines(whole)]
        )
        for run, rows in pieces:
            if rows:
                members = {index[id(w)] for line in run for w in line}
                found.append((min(w.y0 for line in run for w in line), rows, members))
                taken.update(members)
    found.sort(key=lambda f: f[0])
    return [(top, [[commas_read_as_points(c) for c in r] for r in rows]) for top, rows, _ in found], taken
