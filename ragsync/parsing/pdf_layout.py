"""Reading order of PDF pages: columns, lines, paragraphs, running headers and footers, headings.

Input are the text runs and table blocks of each page (``Item``, PDF points,
y up). A page's columns are found from the x-distribution of its runs (a
gutter crossed by few runs between 30% and 70% of the text width); a
two-column page reads spanning blocks, then the left column, then the right
one. Lines join into paragraphs unless the font size changes, the gap grows
or an indented line follows a sentence end. Running headers and footers are
runs on the outer lines of a page, set apart from the body by a gap, whose
text with digits removed repeats on at least half the pages. Headings are
paragraphs of at most three lines at 1.15x the body size or more. Pure
functions; nothing here imports Beam.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragsync.model import Box, ElementType
from ragsync.parsing._common import RawElement, clean_text, page_box
from ragsync.parsing.pdf_tables import text_lines
from ragsync.parsing.pdf_text import Item

_DIGITS = re.compile(r"\d+")
_WS = re.compile(r"\s+")
_EDGE_LINES = 2  # lines at the top and at the bottom of a page checked for running headers/footers
# A running header/footer is set apart from the body by a gap of at least this many line heights.
_EDGE_GAP = 0.8


@dataclass
class Para:
    """A paragraph (or table block) of one page in reading order.

    ``boxes`` holds each line's box in PDF points, y up: ``(x0, bottom, x1, top)``.
    """

    page: int
    size: float
    lines: list[str] = field(default_factory=list)
    table: bool = False
    n_lines: int = 1
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.lines) if not self.table else self.lines[0]


def _gutter(items: list[Item]) -> float | None:
    """x of a column gutter crossed by few text runs, or None for one column."""
    texts = [it for it in items if not it.table]
    if len(texts) < 8:
        return None
    lo = min(it.x0 for it in texts)
    hi = max(it.x1 for it in texts)
    width = hi - lo
    if width < 100:
        return None
    bins = max(int(width / 2), 1)
    diff = [0] * (bins + 2)
    for it in texts:
        b0 = int((it.x0 - lo) / width * bins)
        b1 = int((it.x1 - lo) / width * bins)
        diff[max(b0, 0)] += 1
        diff[min(b1, bins) + 1] -= 1
    cover: list[int] = []
    run = 0
    for d in diff[: bins + 1]:
        run += d
        cover.append(run)
    start, end = int(bins * 0.3), int(bins * 0.7)
    best = min(range(start, end + 1), key=lambda b: (cover[b], abs(b - bins / 2)))
    if cover[best] > max(1, len(texts) * 0.15):
        return None
    x = lo + (best + 0.5) * width / bins
    left_chars = sum(len(it.text) for it in texts if it.x1 <= x)
    right_chars = sum(len(it.text) for it in texts if it.x0 >= x)
    left_n = sum(1 for it in texts if it.x1 <= x)
    right_n = sum(1 for it in texts if it.x0 >= x)
    total = sum(len(it.text) for it in texts)
    if min(left_chars, right_chars) < 0.2 * total or min(left_n, right_n) < 4:
        return None
    return x


def flows(items: list[Item]) -> list[list[Item]]:
    """Split a page into flows read in order: spanning blocks, then left column, then right."""
    x = _gutter(items)
    ordered = sorted(items, key=lambda it: (-it.cy, it.x0))
    if x is None:
        return [ordered]
    flows: list[list[Item]] = []
    left: list[Item] = []
    right: list[Item] = []
    for it in ordered:
        if it.x0 < x - 1 and it.x1 > x + 1:
            if left or right:
                flows.extend(f for f in (left, right) if f)
                left, right = [], []
            flows.append([it])
        elif it.x1 <= x + 1:
            left.append(it)
        else:
            right.append(it)
    flows.extend(f for f in (left, right) if f)
    return flows


_SOFT_HYPHENS = ("\ufffe", "\xad", "\x02")


def _join(a: str, b: str) -> str:
    if a.endswith(_SOFT_HYPHENS):
        return a[:-1] + b
    if len(a) > 1 and a.endswith("-") and a[-2].isalpha() and b[:1].islower():
        return a[:-1] + b
    return a + " " + b


def paragraphs(flow: list[Item], page: int) -> list[Para]:
    paras: list[Para] = []
    prev: list[Item] | None = None
    right_edge = max((it.x1 for it in flow), default=0.0)
    for line in text_lines(flow, ordered=True):  # flow is sorted by top descending
        first = line[0]
        box = (
            min(it.x0 for it in line),
            min(it.bottom for it in line),
            max(it.x1 for it in line),
            max(it.top for it in line),
        )
        if first.table:
            paras.append(Para(page, 0.0, [first.text], table=True, boxes=[box]))
            prev = None
            continue
        text = " ".join(it.text for it in line)
        size = max(it.size for it in line)
        x0 = first.x0
        top = max(it.top for it in line)
        new = prev is None or not paras or paras[-1].table
        if not new and prev is not None:
            p_size = max(it.size for it in prev)
            p_bottom = min(it.bottom for it in prev)
            p_x0 = prev[0].x0
            p_x1 = max(it.x1 for it in prev)
            p_text = prev[-1].text
            gap = p_bottom - top
            ref = max(size, p_size)
            if (
                abs(size - p_size) > 0.15 * ref
                or gap > 0.6 * ref
                or gap < -1.5 * ref
                or (x0 > p_x0 + 0.8 * ref and p_x1 < right_edge - 0.5 * ref and p_text[-1:] in ".:!?")
                or (p_x1 < right_edge - 4 * ref and p_text[-1:] in ".:!?")
            ):
                new = True
        if new:
            paras.append(Para(page, size, [text], boxes=[box]))
        else:
            last = paras[-1]
            last.lines[-1:] = [_join(last.lines[-1], text)]
            last.size = max(last.size, size)
            last.n_lines += 1
            last.boxes.append(box)
        prev = line
    return paras


def _norm(text: str) -> str:
    return _WS.sub(" ", _DIGITS.sub("", text.lower())).strip()


def edge_runs(items: Sequence[Item]) -> list[int]:
    """Indexes of the runs on a page's outer lines that are set apart from the body.

    From the top (and the bottom), the first ``_EDGE_LINES`` lines are
    candidates up to the first gap of at least ``_EDGE_GAP`` line heights;
    without such a gap there is no header (or footer) on the page.

    Args:
        items: the page's items.

    Returns:
        Indexes into ``items`` of text runs that may be running headers/footers.
    """
    index = {id(it): i for i, it in enumerate(items)}
    lines = text_lines([it for it in items if not it.table])
    if len(lines) < 2:
        return []
    picked: list[int] = []
    for ordered in (lines, lines[::-1]):
        for k in range(min(_EDGE_LINES, len(ordered) - 1)):
            a, b = ordered[k], ordered[k + 1]
            upper, lower = (a, b) if ordered is lines else (b, a)
            gap = min(it.bottom for it in upper) - max(it.top for it in lower)
            if gap >= _EDGE_GAP * max(it.size for it in a):
                picked.extend(index[id(it)] for line in ordered[: k + 1] for it in line)
                break
    return picked


def drop_running_lines(pages: list[list[Item]]) -> list[list[Item]]:
    """Remove running headers/footers: edge runs whose digit-free text repeats on half the pages.

    Only documents of three or more pages are looked at.

    Args:
        pages: each page's items.

    Returns:
        The pages without those runs (the same lists when nothing repeats).
    """
    if len(pages) < 3:
        return pages
    edges = [edge_runs(items) for items in pages]
    counts: Counter[str] = Counter()
    for items, edge in zip(pages, edges, strict=True):
        counts.update({_norm(items[i].text) for i in edge})
    threshold = max(2, (len(pages) + 1) // 2)
    repeated = {k for k, c in counts.items() if c >= threshold}
    if not repeated:
        return pages
    out = []
    for items, edge in zip(pages, edges, strict=True):
        drop = {i for i in edge if _norm(items[i].text) in repeated}
        out.append([it for i, it in enumerate(items) if i not in drop] if drop else items)
    return out


def _boxes(p: Para, sizes: Sequence[tuple[float, float]]) -> tuple[Box, ...]:
    """A paragraph's line boxes as fractions of its page (origin top left)."""
    width, height = sizes[p.page - 1] if 0 < p.page <= len(sizes) else (0.0, 0.0)
    return tuple(
        page_box(p.page, x0, height - top, x1, height - bottom, width, height)
        for x0, bottom, x1, top in p.boxes
    )


def to_elements(paras: Sequence[Para], sizes: Sequence[tuple[float, float]] = ()) -> list[RawElement]:
    """Elements of a document's paragraphs: tables, headings (by font size) and paragraphs.

    Args:
        paras: every page's paragraphs in reading order.
        sizes: each page's (width, height) in points, to give the elements
            their line boxes (none when not given).

    Returns:
        Raw elements with their page numbers (and line boxes).
    """
    text_paras = [p for p in paras if not p.table]
    weights: Counter[float] = Counter()
    for p in text_paras:
        weights[round(p.size * 2) / 2] += len(p.text)
    body = weights.most_common(1)[0][0] if weights else 0.0
    heading_sizes = sorted({round(p.size) for p in text_paras if _is_heading(p, body)}, reverse=True)
    levels = {s: min(i + 1, 6) for i, s in enumerate(heading_sizes)}
    out: list[RawElement] = []
    for p in paras:
        boxes = _boxes(p, sizes) if sizes else ()
        if p.table:
            out.append(RawElement(ElementType.TABLE, p.text, 0, p.page, boxes=boxes))
            continue
        text = clean_text(p.text.replace("\ufffe", "").replace("\x02", ""))
        if not text:
            continue
        if _is_heading(p, body):
            out.append(RawElement(ElementType.HEADING, text, levels[round(p.size)], p.page, boxes=boxes))
        else:
            out.append(RawElement(ElementType.PARAGRAPH, text, 0, p.page, boxes=boxes))
    return out


def _is_heading(p: Para, body: float) -> bool:
    text = p.text
    return (
        body > 0
        and p.size >= 1.15 * body
        and p.n_lines <= 3
        and len(text) <= 200
        and any(c.isalpha() for c in text)
    )
