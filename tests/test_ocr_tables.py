"""Tables on full scanned pages: ruled regions from the ink, unruled tables from
aligned words, and real pages (a PDF with a ruled, a rows-only ruled and an
unruled table, rasterised at 300 dpi) read back to the PDF's own table."""

from __future__ import annotations

import io
import shutil
import warnings

import numpy as np
import pytest

from ragsync.model import ElementType
from ragsync.parsing import parse
from ragsync.parsing.ocr_engine import table_positions
from ragsync.parsing.ocr_layout import TsvWord
from ragsync.parsing.ocr_second import Word, group_lines, table_rows
from ragsync.parsing.ocr_tables import aligned_runs, page_tables, ruled_regions

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr not installed")

GRID = [
    ["Region", "Units", "Revenue", "Margin"],
    ["North", "1,204", "88,310", "12.5%"],
    ["South", "977", "61,002", "9.8%"],
    ["East", "2,101", "140,287", "14.1%"],
    ["West", "1,530", "97,644", "11.0%"],
]
BEFORE = "Quarterly sales by region. The figures below are unaudited and rounded to the nearest unit."
AFTER = "Regional managers confirm the totals by the end of the month and report changes to finance."


# ------------------------------------------------------------------ ruled regions (pure)


def _page(rules: list[int], verticals: tuple[int, ...] = ()) -> np.ndarray:
    ink = np.zeros((1000, 800), dtype=bool)
    for y in rules:
        ink[y : y + 3, 100:700] = True
    for x in verticals:
        ink[rules[0] : rules[-1] + 3, x : x + 3] = True
    return ink


def test_three_rules_of_one_extent_are_a_table_reaching_a_row_beyond_them() -> None:
    # rules 60 px apart (letters 20 px: pitch capped at 4 letters = 80, so 60)
    assert ruled_regions(_page([300, 360, 420]), 20.0) == [(100.0, 240.0, 700.0, 483.0)]


def test_two_rules_are_a_table_only_when_vertical_rules_frame_it() -> None:
    assert ruled_regions(_page([300, 420]), 20.0) == []
    assert ruled_regions(_page([300, 420], verticals=(100, 400, 697)), 20.0) == [(100.0, 300.0, 700.0, 423.0)]


def test_rules_of_different_extents_or_far_apart_are_not_one_table() -> None:
    ink = _page([300])
    ink[360:363, 100:400] = True  # half as wide
    ink[420:423, 100:700] = True
    assert ruled_regions(ink, 20.0) == []
    # rules ~300 px apart: one table at 20 px letters (gap <= 25 letters), none at 10 px
    assert len(ruled_regions(_page([100, 400, 700]), 20.0)) == 1
    assert ruled_regions(_page([100, 400, 700]), 10.0) == []


# ------------------------------------------------------------------ words to tables (pure)


def _words(lines: list[list[tuple[float, str]]], top: float = 100, pitch: float = 30) -> list[Word]:
    return [
        Word(x, top + pitch * r, x + 12 * len(t), top + pitch * r + 14, t, 95.0)
        for r, line in enumerate(lines)
        for x, t in line
    ]


PROSE = [
    "the figures below are unaudited and rounded to",
    "nearest unit while margins are stated before tax",
    "and every region reports its totals each month",
    "to finance where the controller checks them all",
    "against the ledger before the quarterly close",
]


def _set(text: str, x: float) -> list[tuple[float, str]]:
    """A line of words set with one space (6 px) between them from ``x``."""
    out = []
    for word in text.split():
        out.append((x, word))
        x += 12 * len(word) + 6
    return out


def _prose(top: float, rows: int) -> list[Word]:
    return _words([_set(PROSE[r], 10) for r in range(rows)], top)


def test_aligned_short_cells_between_prose_are_a_table_and_the_prose_stays_text() -> None:
    table = _words([[(10 + 200 * c, cell) for c, cell in enumerate(row)] for row in GRID], top=200)
    above = _prose(100, 2)
    words = [*above, *table, *_prose(400, 2)]
    tables, used = page_tables(words, [])
    assert [rows for _, rows in tables] == [GRID]
    assert tables[0][0] == 200.0
    assert used == set(range(len(above), len(above) + len(table)))


def test_two_columns_of_prose_are_not_a_table() -> None:
    words = _words([[*_set(PROSE[r], 10), *_set(PROSE[4 - r], 700)] for r in range(5)])
    assert len(aligned_runs(group_lines(words))) == 1  # a candidate ...
    assert page_tables(words, []) == ([], set())  # ... refused: cells of many words


def test_a_ruled_region_takes_its_words_even_when_they_are_not_two_segments_apart() -> None:
    # columns 6 px apart (under 1.5 line heights): no unruled table, but a ruled one
    grid = [["a1", "b1"], ["a2", "b2"], ["a3", "b3"]]
    words = _words([[(10, r[0]), (40, r[1])] for r in grid])
    assert page_tables(words, []) == ([], set())
    tables, used = page_tables(words, [(0.0, 90.0, 200.0, 200.0)])
    assert [rows for _, rows in tables] == [grid] and used == set(range(6))


def test_a_table_goes_after_the_paragraphs_that_start_above_it() -> None:
    words = [TsvWord((0, y, 10, y + 10), "w", 90.0, p, p) for p, y in enumerate([100, 150, 600])]
    assert table_positions([50.0, 300.0, 900.0], words) == (0, 2, 3)


# ------------------------------------------------------------------ real pages


def _pdf(layout: str) -> bytes:
    from fpdf import FPDF

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pdf = FPDF(unit="mm", format=(148, 160))
    pdf.set_margins(12, 12)
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    pdf.multi_cell(0, 5, BEFORE, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    with pdf.table(borders_layout=layout, text_align="LEFT", first_row_as_headings=False) as table:
        for cells in GRID:
            row = table.row()
            for cell in cells:
                row.cell(cell)
    pdf.ln(4)
    pdf.multi_cell(0, 5, AFTER, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def _scan(data: bytes) -> bytes:
    import pypdfium2 as pdfium
    from PIL import Image

    doc = pdfium.PdfDocument(data)
    image = doc[0].render(scale=300 / 72, grayscale=True).to_pil().convert("L")
    doc.close()
    buf = io.BytesIO()
    Image.fromarray(np.asarray(image)).save(buf, format="PNG", dpi=(300, 300))
    return buf.getvalue()


@needs_tesseract
@pytest.mark.parametrize("layout", ["ALL", "HORIZONTAL_LINES", "NONE"])
def test_a_scanned_page_reads_its_table_as_the_pdf_text_layer_does(
    layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ruled grid, rules between rows only, no rules (unruled tables on:
    ``RAGSYNC_OCR_UNRULED_TABLES=1``): the scan's table equals the table
    ragsync reads from the PDF's own text layer (every cell), in the same
    place between the two paragraphs."""
    if layout == "NONE":
        monkeypatch.setenv("RAGSYNC_OCR_UNRULED_TABLES", "1")
    data = _pdf(layout)
    layer = parse(data, "application/pdf")
    scan = parse(_scan(data), "image/png")
    assert [e.type for e in layer.elements] == [
        ElementType.PARAGRAPH,
        ElementType.TABLE,
        ElementType.PARAGRAPH,
    ]
    assert [e.type for e in scan.elements] == [e.type for e in layer.elements]
    assert scan.elements[1].text == layer.elements[1].text
    assert [e.text for e in scan.elements[::2]] == [BEFORE, AFTER]


@needs_tesseract
def test_unruled_tables_are_off_by_default() -> None:
    """Without RAGSYNC_OCR_UNRULED_TABLES=1 a scan's rule-less table stays text."""
    scan = parse(_scan(_pdf("NONE")), "image/png")
    assert ElementType.TABLE not in [e.type for e in scan.elements]
    assert page_tables(_words([[*_set("a b", 10)]]), [], unruled=False) == ([], set())


def test_lines_whose_word_gaps_line_up_by_chance_are_not_an_unruled_table() -> None:
    """Two text columns of identical short-word lines: the word gaps line up,
    so table_rows alone would make 8 one-word columns; the lines have only 2
    wide-gap segments, so it is text."""
    words = _words([[*_set("aa bb cc dd", 10), *_set("ee ff gg hh", 700)] for _ in range(4)])
    assert len(table_rows(group_lines(words))[0]) == 8
    assert page_tables(words, []) == ([], set())
