"""Tables on a full scanned page: where they are, and their words as rows.

Two kinds of table are found on a page Tesseract has read:

* ruled tables (``ocr_rules.ruled_regions``): a stack of horizontal rules of
  the same extent; its vertical rules (``ocr_rules.rule_positions``) make its columns;
* unruled tables (:func:`aligned_runs`): consecutive lines whose words fall
  apart at wide gaps (two or more segments per line), not columns of prose
  (:func:`is_prose`), read with the columns between the vertical rules that
  cross them (:func:`rule_positions`, a page of columns divided by rules
  only), else with their segments as cells (:func:`segment_table`); a
  form's labelled fields ("Agency:  value", :func:`is_form`) are read line
  by line (:func:`form_rows`).

Glyphs Tesseract reads from a rule a word touches go (``ocr_rules.off_rules``), and
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

from ragsync.parsing.ocr_rules import Box, off_rules, rule_positions
from ragsync.parsing.ocr_second import (
    MAX_MEDIAN_CELL_WORDS,
    Word,
    group_lines,
    has_digit,
    rule_rows,
    table_rows,
)

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
# A number with two or more points, the last before one or two digits
# ("37.499.96"), is a US-style amount whose thousands commas were read as points
# (small print): no convention writes it so (a point-decimal number groups its
# thousands with commas, a comma-decimal one ends in a comma). With three digits
# after the last point ("1.234.567") it is a comma-decimal number's thousands,
# left as it is.
POINT_READ_COMMAS = re.compile(r"^([(\-$]?\d{1,3})((?:\.\d{3})+)(\.\d{1,2}[)%]?)$")


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
    return rows if numeric_cells(rows) else []


def numeric_cells(rows: Sequence[Sequence[str]]) -> bool:
    """Whether a table's cells are evidenced as a table's without rules
    (pure): at least ``MIN_NUMERIC_SHARE`` of its non-empty cells hold a digit
    (aligned figures; two columns of prose, a slide's bullets side by side do not)."""
    texts = [c for row in rows for c in row if c]
    return bool(texts) and sum(1 for c in texts if has_digit([c])) >= MIN_NUMERIC_SHARE * len(texts)


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
    if not rows and (words_rows := table_rows(run)) and numeric_cells(words_rows):
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
    prose: Sequence[bool] = (),
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
        prose: for each word, whether it is a column's prose
            (``ocr_layout.prose_paragraphs``): such words are no unruled
            candidate's (layout before tables). Missing: none is.

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
    rest = [w for i, w in enumerate(words) if i not in taken and not (i < len(prose) and prose[i])]
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
