"""Words and text runs of one PDF page, from PDFium or (fallback) pdfminer, and text-layer checks.

A page's text becomes ``Item`` boxes in PDF points with y pointing up: first
words (PDFium's text with the boxes of each word's first and last character),
then runs (words on one line closer than one em merged). Text outside the
reading flow is dropped here: vertical text (arXiv side stamps, rotated margin
notes) and line numbers in the margins. ``garbage_ratio`` tells a text layer
whose fonts have no usable Unicode mapping (the page is then read by the next
parser in the chain).

Call the PDFium functions under ``PDFIUM_LOCK``. Nothing here imports Beam.
"""

from __future__ import annotations

import ctypes
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pypdfium2.raw as pdfium_c

_WORD = re.compile(r"\S+")
# Characters of a text layer whose font maps glyphs to nothing useful: control codes, U+FFFD,
# private use. PDFium passes unmapped glyph codes through as control characters.
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd\ue000-\uf8ff]")
_CID = re.compile(r"\(cid:\d+\)")
_DIGITS_ONLY = re.compile(r"\d{1,4}")
# Line numbers: at least this many number-only runs in one narrow margin band of a page.
_MIN_LINE_NUMBERS = 5


@dataclass(slots=True)
class Item:
    """A word, a run of words on one line, or a table block, with its box (PDF points, y up).

    Attributes:
        x0: left edge.
        x1: right edge.
        bottom: lower edge.
        top: upper edge.
        size: text height (the font size, roughly); 0 for tables.
        text: the text (Markdown for a table block).
        table: whether this is a table block.
    """

    x0: float
    x1: float
    bottom: float
    top: float
    size: float
    text: str
    table: bool = False

    @property
    def cy(self) -> float:
        """Vertical centre."""
        return (self.top + self.bottom) / 2


def join_line(items: Sequence[Item]) -> str:
    """The text of one line's items, given left to right, in reading order.

    Each word's own characters are in logical order already; the words of a
    right-to-left line (more Hebrew/Arabic letters than left-to-right ones)
    are read from right to left, so their order is reversed.

    Args:
        items: the line's words or runs, sorted by ``x0``.

    Returns:
        Their texts joined with single spaces.
    """
    texts = [it.text for it in items]
    bidi = [unicodedata.bidirectional(c) for t in texts for c in t]
    if sum(b in ("R", "AL") for b in bidi) > bidi.count("L"):
        texts.reverse()
    return " ".join(texts)


def pdfium_items(textpage: Any, *, words: bool = False) -> list[Item]:
    """Runs (or words) of a PDFium text page in PDFium's text order, vertical text left out.

    A word's box joins the loose boxes of its first and last characters;
    consecutive words on one line closer than one em form a run (unless
    ``words``). PDFium lines of rotated text (the middle character turned by
    45-135 degrees: arXiv identifiers in the side margin, rotated notes) are
    dropped so they never interleave with the page's lines.

    Args:
        textpage: a ``pypdfium2.PdfTextPage``.
        words: return one item per word instead of runs.

    Returns:
        Items with ``size`` = box height.
    """
    n = textpage.count_chars()
    if n <= 0:
        return []
    raw = textpage.raw
    text = textpage.get_text_range(0, n)
    exact = len(text) == n
    if not exact:
        text = _unit_text(raw, n)
    rect = pdfium_c.FS_RECTF()
    rect_p = ctypes.byref(rect)
    get_box = pdfium_c.FPDFText_GetLooseCharBox
    lines, starts, turns, page_turn = _turns(raw, text)
    out: list[Item] = []
    out_parts: list[list[str]] = []
    parts: list[str] = []
    for line, start, turn in zip(lines, starts, turns, strict=True):
        if turn is not None and turn != page_turn:
            continue  # text turned against the page's own (side-margin stamps, rotated notes)
        # Runs never continue across PDFium's line breaks: it breaks between the columns of a
        # page even where the gutter is narrower than one em.
        first = len(out)
        for a, b, word in _words(raw, line, start, rect_p, upright_page=not page_turn):
            get_box(raw, a, rect_p)
            left, right, bottom, top = rect.left, rect.right, rect.bottom, rect.top
            if b != a:
                get_box(raw, b, rect_p)
                if not page_turn and abs(rect.bottom + rect.top - bottom - top) > top - bottom:
                    # hyphenated across a line break (PDFium joins the halves at its soft-hyphen
                    # mark): the box ends at the mark, on the first line
                    mark = word.find("\ufffe")
                    get_box(raw, a + mark if mark > 0 else a, rect_p)
                    rect.bottom, rect.top = bottom, top
                if rect.left < left:
                    left = rect.left
                if rect.right > right:
                    right = rect.right
                if rect.bottom < bottom:
                    bottom = rect.bottom
                if rect.top > top:
                    top = rect.top
            if page_turn:
                left, right, bottom, top = upright(page_turn, left, right, bottom, top)
            size = top - bottom
            if size < 0.1:
                size = 0.1
            if "\ufffe" in word:
                word = _hard_hyphens(word)
            if not words and len(out) > first and _extend_run(out[-1], left, right, bottom, top, size):
                parts.append(word)
                continue
            out.append(Item(left, right, bottom, top, size, word))
            parts = [word]
            out_parts.append(parts)
    for item, item_parts in zip(out, out_parts, strict=True):
        if len(item_parts) > 1:
            item.text = " ".join(item_parts)
        if not exact:
            item.text = _fix_units(item.text)
    return [it for it in out if it.text] if not exact else out


def _hard_hyphens(word: str) -> str:
    """A word joined at PDFium's line-end hyphen mark, the mark kept as a hyphen before a capital.

    PDFium marks every hyphen ending a line as soft (``U+FFFE``, dropped
    later); one before a capitalised word is a compound's own ("South-East";
    "CO-BRA", inside a word in capitals, is not).
    """
    return "".join(
        "-" if ch == "\ufffe" and word[i + 1 : i + 2].isupper() and word[i + 2 : i + 3].islower() else ch
        for i, ch in enumerate(word)
    )


_MARKERS = frozenset("0123456789*\u2020\u2021")  # footnote markers: digits, asterisk, daggers


def _words(raw: Any, line: str, start: int, rect_p: Any, *, upright_page: bool) -> list[tuple[int, int, str]]:
    """``(first, last, text)`` of each word of one PDFium line; a footnote marker is a word of its own.

    A marker (up to two digits, an asterisk or a dagger) set raised and
    smaller right after a lower-case letter ("tax" + superscript "1", as TeX
    and word processors set it with no space) would otherwise end the word:
    "tax1". After a capital or a word of one or two letters it stays (a
    product name "DB2", an exponent "X2", "a2").
    """
    out = []
    for m in _WORD.finditer(line):
        a, b, text = start + m.start(), start + m.end() - 1, m.group()
        k = len(text)
        while k > 1 and len(text) - k < 2 and text[k - 1] in _MARKERS:
            k -= 1
        # not "DB2", "X2", "a2": a name, an exponent (of a capital or a one- or two-letter variable)
        marked = k >= 3 and k < len(text) and text[k - 1].islower()
        if marked and upright_page and _raised(raw, a + k - 1, a + k, rect_p):
            out += [(a, a + k - 1, text[:k]), (a + k, b, text[k:])]
        else:
            out.append((a, b, text))
    return out


def _raised(raw: Any, base: int, mark: int, rect_p: Any) -> bool:
    """Whether character ``mark`` is set smaller than ``base`` and raised above its baseline."""
    rect = rect_p._obj
    pdfium_c.FPDFText_GetLooseCharBox(raw, base, rect_p)
    bottom, height = rect.bottom, rect.top - rect.bottom
    pdfium_c.FPDFText_GetLooseCharBox(raw, mark, rect_p)
    return height > 0 and rect.top - rect.bottom < 0.85 * height and rect.bottom > bottom + 0.2 * height


def _unit_text(raw: Any, n: int) -> str:
    """The text page as one character per PDFium character (UTF-16 unit), so indices line up.

    ``get_text_range`` drops NUL characters and joins surrogate pairs, which
    shifts every later index; this keeps them (``_fix_units`` repairs words).
    """
    buf = (ctypes.c_ushort * (n + 1))()
    got = pdfium_c.FPDFText_GetText(raw, 0, n, buf)
    return "".join(map(chr, buf[: max(min(got, n + 1) - 1, 0)])).ljust(n, " ")


def _fix_units(text: str) -> str:
    """Drop NULs and join UTF-16 surrogate pairs of a word taken from ``_unit_text``."""
    text = text.replace("\x00", "")
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _extend_run(
    cur: Item, left: float, right: float, bottom: float, top: float, size: float, max_gap: float = 1.0
) -> bool:
    """Grow run ``cur`` by a word when the word is on its line less than ``max_gap`` em after it.

    Returns:
        Whether the word joined the run (``cur``'s box then covers it).
    """
    csize = cur.size
    gap = left - cur.x1
    cy = (bottom + top) * 0.5
    if not (cur.bottom - 0.3 * size <= cy <= cur.top + 0.3 * size) or not (
        -0.5 * size <= gap <= max_gap * (csize if csize > size else size)
    ):
        return False
    if right > cur.x1:
        cur.x1 = right
    if bottom < cur.bottom:
        cur.bottom = bottom
    if top > cur.top:
        cur.top = top
    if size > csize:
        cur.size = size
    return True


def _turns(raw: Any, text: str) -> tuple[list[str], list[int], list[int | None], int]:
    """PDFium's lines of a page, their start indexes, quarter turns, and the page's own turn."""
    lines = text.split("\r\n")
    starts = []
    pos = 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 2
    turns = [_quarter_turns(raw, line, start) for line, start in zip(lines, starts, strict=True)]
    weight = [0, 0, 0, 0]
    for line, turn in zip(lines, turns, strict=True):
        if turn is not None:
            weight[turn] += len(line)
    return lines, starts, turns, max(range(4), key=lambda k: (weight[k], k == 0))


def page_turn(textpage: Any) -> int:
    """Quarter turns (counter-clockwise) of most of a page's text; 0 for upright text.

    ``pdfium_items`` returns boxes turned back by this much; rulings are
    turned the same way with ``ragsync.parsing.pdf_rulings.turned``.
    """
    n = textpage.count_chars()
    if n <= 0:
        return 0
    raw = textpage.raw
    text = textpage.get_text_range(0, n)
    return _turns(raw, text if len(text) == n else _unit_text(raw, n))[3]


def _quarter_turns(raw: Any, line: str, start: int) -> int | None:
    """Quarter turns (0-3, counter-clockwise) of a PDFium text line, by its middle character.

    None for lines of fewer than two characters (they follow the page).
    """
    stripped = len(line.rstrip())
    if stripped < 2:
        return None
    index = start + stripped // 2
    if line[stripped // 2] == " ":
        index += 1
    angle = pdfium_c.FPDFText_GetCharAngle(raw, index)
    if angle < 0:
        return None
    return round(angle / (math.pi / 2)) % 4


def upright(
    turn: int, left: float, right: float, bottom: float, top: float
) -> tuple[float, float, float, float]:
    """A box of text turned ``turn`` quarter turns, in coordinates where that text is upright.

    Returns:
        ``(left, right, bottom, top)`` in the turned frame.
    """
    if turn == 1:  # reads downwards: up is +x
        return -top, -bottom, left, right
    if turn == 3:  # reads upwards: up is -x
        return bottom, top, -right, -left
    return -right, -left, -top, -bottom  # upside down


def pdfminer_words(page: Any) -> list[Item]:
    """Words of a pdfplumber page (pdfminer), in PDF points with y up.

    Args:
        page: a ``pdfplumber.page.Page``.

    Returns:
        Word items; ``(cid:N)`` placeholders of unmapped glyphs are removed.
    """
    height = float(page.height)
    x_off, y_off = float(page.bbox[0]), float(page.bbox[1])
    out: list[Item] = []
    for w in page.extract_words(keep_blank_chars=False, use_text_flow=True):
        text = _CID.sub("", str(w["text"])).strip()
        if not text or w.get("upright") is False:
            continue
        top = height - float(w["top"]) + y_off
        bottom = height - float(w["bottom"]) + y_off
        out.append(
            Item(float(w["x0"]) + x_off, float(w["x1"]) + x_off, bottom, top, max(top - bottom, 0.1), text)
        )
    return out


def merge_runs(words: list[Item]) -> list[Item]:
    """Merge consecutive words on one line into runs; a gap wider than one em starts a new run.

    Args:
        words: word items in text order.

    Returns:
        New run items (the words are not modified).
    """
    return [_run(group) for group in _word_groups(words, 1.0)]


# A word space is ~0.25 em (box height) in common fonts; cells of a borderless table are set
# wider apart (report libraries pad a cell by ~0.25 em a side, browsers by ~0.5 em).
CELL_GAP = 0.4


def cell_runs(words: list[Item]) -> list[Item]:
    """Runs for the borderless-table search: words split at gaps wider than a space.

    Cells of a borderless table are often less than one em apart (a figure
    and the next column's currency sign), so a run (one em) can cross a column.
    A run of words whose spaces are all equally wide is a justified line of
    prose (stretched spaces reach one em), not cells, and stays whole; a run
    of figures and signs is never prose (cells padded alike are as even).
    "Equally wide": within 0.08 em of the line's median space (loose glyph
    boxes: an "f" overhangs its space), with two or more such spaces; a space
    after a word of three or more characters ending a sentence or clause
    (. ; : ! ?) may be wider by up to half an em (TeX sets a wider space there
    and stretches it more). A row of words in title case ("Sales Growth
    Customers") set equally apart is a header's cells, not prose.

    Args:
        words: word items in text order.

    Returns:
        New run items (the words are not modified).
    """
    out: list[Item] = []
    for group in _word_groups(words, 1.0):
        wordy = 2 * sum(1 for w in group if any(ch.isalpha() for ch in w.text)) >= len(group)
        # a header row of capitalised words set equally apart is not a line of prose (title
        # case only: scripts without case never are, lines in capitals stay prose)
        title = all(w.text[:1].isupper() for w in group)
        capitalised = title and any(w.text != w.text.upper() for w in group)
        justified = wordy and not capitalised and _even_spaces(group)
        out.extend(_run(g) for g in ([group] if justified else _word_groups(group, CELL_GAP)))
    return out


_SENTENCE_END = tuple(".;:!?")  # not a comma: its space is hardly wider, and "County, | Texas" are cells


def _even_spaces(group: list[Item]) -> bool:
    """Whether the spaces of a word group (3+ words) are those of one line of prose (see ``cell_runs``)."""
    if len(group) < 3:
        return False
    size = max(w.size for w in group)
    # a stop after a word, not after a list label or an initial ("E.", "1.")
    gaps = [
        (b.x0 - a.x1, len(a.text) >= 3 and a.text.endswith(_SENTENCE_END))
        for a, b in zip(group, group[1:], strict=False)
    ]
    plain = sorted(g for g, after_stop in gaps if not after_stop)
    if len(plain) < 2:
        return False  # "C. Ethylène glycol": too few word spaces to tell prose from cells
    space = plain[len(plain) // 2]
    for gap, after_stop in gaps:
        if abs(gap - space) <= 0.08 * size:
            continue
        if not (after_stop and space < gap <= space + 0.5 * size):
            return False
    return True


def _word_groups(words: list[Item], max_gap: float) -> list[list[Item]]:
    """Consecutive words on one line, split where a gap is wider than ``max_gap`` em."""
    groups: list[list[Item]] = []
    cur: Item | None = None
    for w in words:
        if cur is not None and _extend_run(cur, w.x0, w.x1, w.bottom, w.top, w.size, max_gap):
            groups[-1].append(w)
            continue
        cur = Item(w.x0, w.x1, w.bottom, w.top, w.size, w.text)
        groups.append([w])
    return groups


def _run(group: list[Item]) -> Item:
    """One run item of a word group (the box ``_extend_run`` grows)."""
    first = group[0]
    return Item(
        first.x0,
        max(w.x1 for w in group),
        min(w.bottom for w in group),
        max(w.top for w in group),
        max(w.size for w in group),
        " ".join(w.text for w in group),
    )


def drop_line_numbers(items: list[Item]) -> list[Item]:
    """Remove line numbers printed in a margin band (manuscripts, legal texts).

    A run that is only a 1-4 digit number, is the leftmost (or rightmost)
    run of its line with other text on the line, and shares its left (or
    right) edge within 4 pt with at least 4 others like it, is a line number
    when the lines it numbers hold prose (median 30+ characters; a table's
    first column of numbers is kept).

    Args:
        items: the page's runs.

    Returns:
        The runs without line numbers (the same list when there are none).
    """
    numbers = [it for it in items if not it.table and _DIGITS_ONLY.fullmatch(it.text)]
    if len(numbers) < _MIN_LINE_NUMBERS:
        return items
    texts = [it for it in items if not it.table]
    drop: set[int] = set()
    for side in ("left", "right"):
        cands = []
        for it in numbers:
            others = [o for o in texts if o is not it and abs(o.cy - it.cy) <= 0.5 * it.size]
            if not others:
                continue
            if (
                side == "left"
                and all(o.x0 >= it.x1 + 2 for o in others)
                or side == "right"
                and all(o.x1 <= it.x0 - 2 for o in others)
            ):
                cands.append(it)
        key = (lambda it: it.x0) if side == "left" else (lambda it: it.x1)
        cands.sort(key=key)
        i = 0
        while i < len(cands):
            j = i
            while j + 1 < len(cands) and key(cands[j + 1]) - key(cands[i]) <= 4:
                j += 1
            group = cands[i : j + 1]
            if len(group) >= _MIN_LINE_NUMBERS and _next_to_prose(group, texts):
                drop.update(id(c) for c in group)
            i = j + 1
    if not drop:
        return items
    return [it for it in items if id(it) not in drop]


def _next_to_prose(numbers: list[Item], texts: list[Item]) -> bool:
    """Whether the lines of these numbers hold prose (a table's first column of numbers does not)."""
    lengths = sorted(
        sum(len(o.text) for o in texts if o not in numbers and abs(o.cy - n.cy) <= 0.5 * n.size)
        for n in numbers
    )
    return lengths[len(lengths) // 2] >= 30


def garbage_ratio(text: str) -> float:
    """Share of a text layer's non-space characters that map to nothing readable.

    Counts control characters (PDFium's output for glyphs without a Unicode
    mapping), U+FFFD and private-use characters.

    Args:
        text: the page text.

    Returns:
        0-1; 0 for text without non-space characters.
    """
    visible = len(text) - text.count(" ") - text.count("\r") - text.count("\n")
    if visible <= 0:
        return 0.0
    return len(_BAD_CHARS.findall(text)) / visible


def page_text_chars(items: list[Item]) -> int:
    """Non-space characters of a page's items."""
    return sum(len(it.text) - it.text.count(" ") for it in items)
