"""Layout before tables on scanned pages, and low confidence recorded, not dropped (issue 38).

Pure tests of the layout rules on word boxes, then the real Tesseract on
rendered pages: a two-column prose page yields no table and its text column
by column; a real table still yields a table; a page below the bar whose
words can be read is indexed with its confidence and listed for review.
"""

from __future__ import annotations

import shutil

import pytest

from ragsync.parsing.ocr_engine import PageOcr, readable_part
from ragsync.parsing.ocr_layout import TsvWord, prose_line, prose_paragraphs
from ragsync.parsing.ocr_second import Word
from ragsync.parsing.ocr_tables import page_tables

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr not installed")


def _line(text: str, x: int, y: int, paragraph: int = 0, line: int = 0, conf: float = 95.0) -> list[TsvWord]:
    """The words of ``text`` set left to right from ``x`` (12 px a letter, 10 px between words)."""
    out = []
    for t in text.split():
        out.append(TsvWord((x, y, x + 12 * len(t), y + 20), t, conf, paragraph, line))
        x += 12 * len(t) + 10
    return out


LEFT = ["The committee met on a grey", "morning to weigh the plan for", "a library beside the old hall"]
RIGHT = ["Residents asked whether the", "budget would cover the roof", "before the winter rains came"]


def _two_columns() -> list[TsvWord]:
    """Two columns of prose whose lines stand side by side, as Tesseract
    reads them: one paragraph per column, the left column first."""
    words = [w for i, t in enumerate(LEFT) for w in _line(t, 100, 100 + 30 * i, 0, i)]
    return words + [w for i, t in enumerate(RIGHT) for w in _line(t, 520, 100 + 30 * i, 1, 3 + i)]


def test_a_line_of_prose_has_five_words_few_digits_and_no_wide_gap() -> None:
    assert prose_line(_line("The committee met on a grey morning", 0, 0))
    assert not prose_line(_line("Alabama 15,397 12,004 9,311 2,010", 0, 0))  # a row of numbers
    assert not prose_line(_line("North region units sold", 0, 0))  # four words
    assert not prose_line(_line("Name of the agency", 0, 0) + _line("Amount paid", 600, 0))  # two cells


def test_paragraphs_of_wrapped_sentences_are_prose_and_a_table_s_columns_are_not() -> None:
    assert prose_paragraphs(_two_columns()) == {0, 1}
    table = [
        w
        for i, (name, units) in enumerate([("North", "1,204"), ("South", "977"), ("East", "3,310")])
        for w in _line(name, 100, 100 + 30 * i, 0, i) + _line(units, 400, 100 + 30 * i, 1, 3 + i)
    ]
    assert prose_paragraphs(table) == set()
    one_line = _line("A single sentence of prose stands alone", 100, 100, 0, 0)
    assert prose_paragraphs(one_line) == set()  # one line: a heading or caption, not a column


def test_two_columns_of_prose_side_by_side_are_never_a_table() -> None:
    """The lines of two prose columns fall into two segments each (a wide
    gutter) and make an unruled candidate; as a column's prose (layout
    first) its words are no candidate's, and the page has no table."""
    words = _two_columns()
    boxes = [Word(*w.box, w.text, w.conf) for w in words]
    prose = prose_paragraphs(words)
    assert page_tables(boxes, [], prose=[w.paragraph in prose for w in words]) == ([], set())


def test_a_page_below_the_bar_keeps_its_paragraphs_read_at_the_region_bar() -> None:
    result = PageOcr(
        page=3,
        paragraphs=(("Readable line",), ("#@ ~~ ;;",), ("Another readable line",)),
        confidence=48.0,
        coverage=0.5,
        words=7,
        ink=0.1,
        passed=False,
        paragraph_confidences=(71.0, 12.0, 64.5),
        tables=((("a", "b"), ("1", "2")),),
        table_positions=(2,),
    )
    kept = readable_part(result, 40.0)
    assert kept.paragraphs == (("Readable line",), ("Another readable line",))
    assert kept.paragraph_confidences == (71.0, 64.5)
    assert kept.table_positions == (1,)  # it followed two paragraphs, one of which went
    assert kept.tables == result.tables and not kept.passed and kept.confidence == 48.0
    assert readable_part(result, 80.0).paragraphs == ()
