"""Tables of a PDF page, from ruling lines and from text alignment, as Markdown blocks.

Two detectors share one cell builder (words assigned to a grid by their
centres, header row first):

* ruled: rulings that touch form a cluster; a cluster with at least two
  horizontal and two vertical lines is a table. Column boundaries are the
  vertical lines, row boundaries the horizontal ones (a cell keeps all its
  lines of text).
* aligned (borderless): runs of consecutive text lines with two or more runs
  each, whose runs fall into at least two x-columns separated by empty
  gutters. Rows are text lines; a line holding only one cell, set as close
  under the row above as lines inside a cell are (0.35 line heights, or well
  under the gap above the table's rows when rows are spaced apart: a wrapped
  row label of a word processor's table), continues that row's cell. To keep prose out, at
  least two columns must hold short cells (median <= 40 characters), at most
  one may hold long ones, and at least three rows must fill two or more
  cells.

``table_hint`` is the cheap per-page test that decides whether the search runs
at all (rulings, or three lines with aligned gaps). Pure functions over
``Item`` boxes; nothing here touches PDFium or imports Beam.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ragsync.parsing._common import table_to_markdown
from ragsync.parsing.pdf_rulings import Rulings
from ragsync.parsing.pdf_text import Item, join_line

_SNAP = 3.0  # points: rulings closer than this are one line
_SHORT_CELL = 40  # characters
_MIN_ROWS = 3
_MAX_LINE_GAP = 2.5  # line heights: a larger vertical gap ends an aligned block


@dataclass
class Table:
    """A table found on a page.

    Attributes:
        rows: cell texts, header row first (rows padded to one width).
        box: ``(x0, bottom, x1, top)`` in PDF points.
    """

    rows: list[list[str]]
    box: tuple[float, float, float, float]

    def item(self) -> Item:
        """The table as one Markdown block item."""
        x0, bottom, x1, top = self.box
        rows = [[c.replace("\ufffe", "") for c in row] for row in self.rows]  # PDFium's soft-hyphen mark
        return Item(x0, x1, bottom, top, 0.0, table_to_markdown(rows), table=True)

    def covers(self, it: Item) -> bool:
        """Whether an item's centre lies inside the table box."""
        x0, bottom, x1, top = self.box
        cx = (it.x0 + it.x1) / 2
        return x0 - 1 <= cx <= x1 + 1 and bottom - 1 <= it.cy <= top + 1


# --------------------------------------------------------------------------- lines


def text_lines(items: Sequence[Item], *, ordered: bool = False) -> list[list[Item]]:
    """Group items into text lines, top to bottom, each sorted left to right.

    Args:
        items: the items; a table item (``Item.table``) is a line of its own.
        ordered: the items are in reading order already (a flow of a page,
            top to bottom): they are not sorted again.
    """
    lines: list[list[Item]] = []
    for it in items if ordered else sorted(items, key=lambda i: -i.cy):
        if lines and not it.table and not lines[-1][0].table:
            head = lines[-1][0]
            if abs(head.cy - it.cy) <= 0.4 * min(head.size, it.size):
                lines[-1].append(it)
                continue
        lines.append([it])
    for line in lines:
        line.sort(key=lambda i: i.x0)
    return lines


def table_hint(runs: Sequence[Item], rulings: Rulings) -> bool:
    """Cheap test: could this page hold a table?

    Args:
        runs: the page's text runs.
        rulings: the page's rulings.

    Returns:
        True when the page draws at least two horizontal and two vertical
        rulings, or has three text lines of two or more runs whose gaps line
        up with another such line.
    """
    if len(rulings.horizontal) >= 2 and len(rulings.vertical) >= 2:
        return True
    multi = [line for line in text_lines(runs) if len(line) >= 2]
    if len(multi) < _MIN_ROWS:
        return False
    starts: dict[int, int] = {}
    for line in multi:
        for it in line[1:]:
            key = round(it.x0 / 4)
            starts[key] = starts.get(key, 0) + 1
    return any(n >= _MIN_ROWS for n in starts.values())


# --------------------------------------------------------------------------- ruled


def _cluster_positions(values: list[float]) -> list[float]:
    values = sorted(values)
    out: list[list[float]] = []
    for v in values:
        if out and v - out[-1][-1] <= _SNAP:
            out[-1].append(v)
        else:
            out.append([v])
    return [sum(g) / len(g) for g in out]


def ruled_tables(words: Sequence[Item], rulings: Rulings) -> list[Table]:
    """Tables drawn with rulings: clusters of touching lines with 2+ horizontal and 2+ vertical ones.

    Args:
        words: the page's words (not runs: cells may be closer than one em).
        rulings: the page's rulings.

    Returns:
        Tables with at least two rows and two columns holding text.
    """
    hs = [h for h in rulings.horizontal if h[2] - h[1] >= 6]
    vs = [v for v in rulings.vertical if v[2] - v[1] >= 6]
    if len(hs) < 2 or len(vs) < 2 or not words:
        return []
    # union-find over rulings that touch (within the snap distance)
    lines: list[tuple[str, float, float, float]] = [("h", *h) for h in hs] + [("v", *v) for v in vs]
    parent = list(range(len(lines)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    hidx = [i for i, ln in enumerate(lines) if ln[0] == "h"]
    vidx = [i for i, ln in enumerate(lines) if ln[0] == "v"]
    if len(hidx) * len(vidx) > 400_000:
        return []
    for i in hidx:
        _, y, x0, x1 = lines[i]
        for j in vidx:
            _, x, y0, y1 = lines[j]
            if x0 - _SNAP <= x <= x1 + _SNAP and y0 - _SNAP <= y <= y1 + _SNAP:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(lines)):
        groups.setdefault(find(i), []).append(i)
    tables: list[Table] = []
    for members in groups.values():
        ys = _cluster_positions([lines[i][1] for i in members if lines[i][0] == "h"])
        xs = _cluster_positions([lines[i][1] for i in members if lines[i][0] == "v"])
        if len(ys) < 2 or len(xs) < 2:
            continue
        box = (xs[0], ys[0], xs[-1], ys[-1])
        inside = [
            w
            for w in words
            if box[0] - 1 <= (w.x0 + w.x1) / 2 <= box[2] + 1 and box[1] - 1 <= w.cy <= box[3] + 1
        ]
        if not inside:
            continue
        rows = _grid(inside, xs, ys[::-1])
        rows = _drop_empty(rows)
        if len(rows) >= 2 and max(len(r) for r in rows) >= 2 and sum(1 for r in rows for c in r if c) >= 3:
            tables.append(Table(rows, box))
    return tables


def _grid(words: Sequence[Item], xs: list[float], ys_top_down: list[float]) -> list[list[str]]:
    """Cell texts of words placed in the grid ``xs`` (left to right) x ``ys`` (top to bottom).

    A row band where at least half of the filled cells (two or more) hold
    the same number (3+) of text lines is a band of unruled rows (rules only
    around groups of rows): it is split into one row per text line.
    """
    n_rows, n_cols = len(ys_top_down) - 1, len(xs) - 1
    cells: list[list[list[Item]]] = [[[] for _ in range(n_cols)] for _ in range(n_rows)]
    for w in words:
        cx, cy = (w.x0 + w.x1) / 2, w.cy
        col = next((j for j in range(n_cols) if cx <= xs[j + 1]), n_cols - 1)
        row = next((i for i in range(n_rows) if cy >= ys_top_down[i + 1]), n_rows - 1)
        cells[row][col].append(w)
    out: list[list[str]] = []
    for row_cells in cells:
        lines = text_lines([w for c in row_cells for w in c])
        counts = [len(text_lines(c)) for c in row_cells if c]
        common, same = max(
            ((n, counts.count(n)) for n in set(counts)), key=lambda t: (t[1], t[0]), default=(0, 0)
        )
        if common >= 3 and same >= 2 and 2 * same >= len(counts):
            for line in lines:
                ids = {id(w) for w in line}
                out.append([_cell_text([w for w in c if id(w) in ids]) for c in row_cells])
        else:
            out.append([_cell_text(c) for c in row_cells])
    return out


def _cell_text(words: list[Item]) -> str:
    text = ""
    for line in text_lines(words):
        text = join_cell(text, join_line(line))
    return text


def _drop_empty(rows: list[list[str]]) -> list[list[str]]:
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        return rows
    keep = [j for j in range(len(rows[0])) if any(r[j].strip() for r in rows)]
    return [[r[j] for j in keep] for r in rows]


# --------------------------------------------------------------------------- aligned


def _merge_intervals(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for x0, x1 in sorted(spans):
        if out and x0 <= out[-1][1] + 1.0:
            out[-1] = (out[-1][0], max(out[-1][1], x1))
        else:
            out.append((x0, x1))
    return out


def _columns(block: list[list[Item]]) -> list[tuple[float, float]]:
    """x-intervals of the columns of a block of lines, from the lines with the most runs."""
    most = max(len(line) for line in block)
    strong = [it for line in block if len(line) >= max(2, most - 1) for it in line]
    cols = _merge_intervals([(it.x0, it.x1) for it in strong])
    if len(cols) < 2:
        return cols
    # add runs of other lines that fall inside one gutter-free span (they may open a column)
    gaps = [(cols[i][1], cols[i + 1][0]) for i in range(len(cols) - 1)]
    extra = [
        (it.x0, it.x1)
        for line in block
        if len(line) >= 2
        for it in line
        if not any(it.x0 < g1 and it.x1 > g0 for g0, g1 in gaps)
    ]
    return _merge_intervals(cols + extra)


def _assign(line: list[Item], cols: list[tuple[float, float]]) -> list[str]:
    cells = [""] * len(cols)
    for it in line:
        cx = (it.x0 + it.x1) / 2
        best = min(
            range(len(cols)),
            key=lambda j: (
                0.0 if cols[j][0] <= cx <= cols[j][1] else min(abs(cx - cols[j][0]), abs(cx - cols[j][1]))
            ),
        )
        cells[best] = (cells[best] + " " + it.text).strip()
    return cells


def _blocks(lines: list[list[Item]]) -> list[list[list[Item]]]:
    """Runs of consecutive lines that could form a table (2+ runs; short single runs allowed inside).

    Header lines cut off from the rows by a gap (an empty header row, spaced
    as a word processor spaces rows) rejoin them: lines of too few rows to be
    a table, ending in a line of 2+ runs, right above a block at most one
    empty row (its line height and two row gaps, plus a fifth) away.
    """
    blocks: list[tuple[list[list[Item]], bool]] = []
    cur: list[list[Item]] = []
    after_gap = False  # cur started right under the previous block, cut off only by a gap
    prev: list[Item] | None = None
    for line in lines:
        size = max(it.size for it in line)
        gap = (min(it.bottom for it in prev) - max(it.top for it in line)) if prev else 0.0
        multi = len(line) >= 2
        short_single = len(line) == 1 and len(line[0].text) <= _SHORT_CELL
        cut = False
        if cur and (gap > _MAX_LINE_GAP * size or not (multi or short_single)):
            blocks.append((cur, after_gap))
            cur = []
            cut = gap > _MAX_LINE_GAP * size
        if multi or (cur and short_single):
            if not cur:
                after_gap = cut and multi
            cur.append(line)
        prev = line
    if cur:
        blocks.append((cur, after_gap))
    out = []
    short: list[list[Item]] | None = None  # the previous block, too few rows to be a table
    for b, joined in blocks:
        pitch = _row_gap(b)
        while b and len(b[-1]) < 2 and not _tight(b[-1], b[-2] if len(b) > 1 else None, pitch):
            b = b[:-1]  # trailing single runs are text after the table (unless they continue a cell)
        if (
            joined
            and short
            and b
            and pitch is not None
            and len(short[-1]) >= 2
            and _gap(b[0], short[-1]) <= 1.2 * (max(it.size for it in b[0]) + 2 * pitch)
        ):
            b = short + b
        if sum(1 for line in b if len(line) >= 2) >= _MIN_ROWS:
            out.append(b)
            short = None
        else:
            short = b
    return out


def aligned_tables(runs: Sequence[Item]) -> list[Table]:
    """Borderless tables: blocks of lines whose runs line up in two or more columns.

    Args:
        runs: text runs of one flow (a column of the page, or the whole page).

    Returns:
        Tables that pass the prose filter (see the module docstring).
    """
    tables: list[Table] = []
    for block in _blocks(text_lines([r for r in runs if not r.table])):
        cols = _columns(block)
        if len(cols) < 2:
            continue
        rows: list[list[str]] = []
        prev_line: list[Item] | None = None
        pitch = _row_gap(block)
        for line in block:
            cells = _assign(line, cols)
            col = (
                _continuation(line, prev_line, cells, rows[-1], pitch)
                if rows and prev_line is not None
                else -1
            )
            if col >= 0:
                rows[-1][col] = join_cell(rows[-1][col], cells[col])
            else:
                rows.append(cells)
            prev_line = line
        rows = _drop_empty(rows)
        if not _table_like(rows):
            continue
        items = [it for line in block for it in line]
        box = (
            min(i.x0 for i in items),
            min(i.bottom for i in items),
            max(i.x1 for i in items),
            max(i.top for i in items),
        )
        tables.append(Table(rows, box))
    return tables


def _gap(line: list[Item], prev: list[Item]) -> float:
    """The white space between a line and the line above it."""
    return min(it.bottom for it in prev) - max(it.top for it in line)


def _row_gap(block: list[list[Item]]) -> float | None:
    """The median white space above the lines of a block that fill two or more cells (row starts).

    None with fewer than two such lines below the first line.
    """
    gaps = sorted(_gap(line, prev) for prev, line in zip(block, block[1:], strict=False) if len(line) >= 2)
    return gaps[len(gaps) // 2] if len(gaps) >= 2 else None


def _tight(line: list[Item], prev: list[Item] | None, row_gap: float | None = None) -> bool:
    """Whether ``line`` follows ``prev`` at the spacing of lines inside one cell.

    That is at most 0.35 line heights apart, or (rows spaced apart, as a word
    processor's paragraph spacing sets them) at most 0.6 of the gap above the
    table's rows: the lines of a wrapped cell are set closer than its rows.
    """
    if prev is None:
        return False
    gap = _gap(line, prev)
    return gap <= 0.35 * max(it.size for it in line) or (row_gap is not None and gap <= 0.6 * row_gap)


def _continuation(
    line: list[Item], prev: list[Item], cells: list[str], prev_cells: list[str], row_gap: float | None = None
) -> int:
    """The column a line continues: one filled cell, right under a row whose cell there is filled; else -1."""
    filled = [j for j, c in enumerate(cells) if c]
    if len(filled) != 1 or not prev_cells[filled[0]] or not _tight(line, prev, row_gap):
        return -1
    return filled[0]


def join_cell(a: str, b: str) -> str:
    """Join two lines of one cell (a word split at PDFium's soft-hyphen mark is rejoined)."""
    if a.endswith("\ufffe"):
        return a[:-1] + b
    return (a + " " + b).strip()


def _table_like(rows: list[list[str]]) -> bool:
    if len(rows) < 2 or len(rows[0]) < 2:
        return False
    filled = sum(1 for r in rows if sum(1 for c in r if c) >= 2)
    if filled < _MIN_ROWS:
        return False
    medians = []
    for j in range(len(rows[0])):
        lengths = [len(r[j]) for r in rows if r[j]]
        medians.append(statistics.median(lengths) if lengths else 0)
    short = sum(1 for m in medians if 0 < m <= _SHORT_CELL)
    long = sum(1 for m in medians if m > _SHORT_CELL)
    return short >= 2 and long <= 1
