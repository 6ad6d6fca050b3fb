"""Tables on full scanned pages: ruled regions from the ink, unruled tables from
aligned words, and real pages (a PDF with a ruled, a rows-only ruled and an
unruled table, rasterised at 300 dpi) read back to the PDF's own table."""

from __future__ import annotations

import io
import shutil
import statistics
import warnings

import numpy as np
import pytest

from ragsync.model import ElementType
from ragsync.parsing import parse
from ragsync.parsing.ocr_layout import TsvWord
from ragsync.parsing.ocr_regions import table_positions
from ragsync.parsing.ocr_rules import off_rules, rule_positions, ruled_regions, vertical_rules
from ragsync.parsing.ocr_second import Word, group_lines, table_rows
from ragsync.parsing.ocr_tables import (
    aligned_runs,
    better_reading,
    commas_read_as_points,
    form_rows,
    is_form,
    is_prose,
    page_tables,
    scaled_back,
    segment_table,
    segments,
    small_print,
    split_at_long_lines,
)

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


def _framed(ink: np.ndarray, rules: list[int]) -> None:
    """Rules from x 100 to 700 at ``rules``, framed by vertical rules at x 100, 400 and 697."""
    for y in rules:
        ink[y : y + 3, 100:700] = True
    for x in (100, 400, 697):
        ink[rules[0] : rules[-1] + 3, x : x + 3] = True


def test_framed_tables_stacked_under_a_heading_rule_are_one_table_each() -> None:
    ink = np.zeros((1000, 800), dtype=bool)
    _framed(ink, [100, 160, 220])
    ink[300:303, 100:700] = True  # a heading's rule between the two tables, same width
    _framed(ink, [380, 440, 500])
    assert ruled_regions(ink, 20.0) == [(100.0, 100.0, 700.0, 223.0), (100.0, 380.0, 700.0, 503.0)]


def test_a_table_ruled_between_rows_only_above_a_framed_one_stays_a_table() -> None:
    ink = _page([100, 160, 220, 280])
    _framed(ink, [400, 460, 520])
    # the rows-only table reaches a row pitch (60) beyond its first and last rule
    assert ruled_regions(ink, 20.0) == [(100.0, 40.0, 700.0, 343.0), (100.0, 400.0, 700.0, 523.0)]


def _columns(
    ink: np.ndarray, letter: float, regions: list[tuple[float, float, float, float]]
) -> list[list[float]]:
    """Each region's column rules as ``ocr_engine`` finds them: ``rule_positions`` of the
    page's ``vertical_rules``."""
    verticals = vertical_rules(ink, letter)
    return [rule_positions(verticals, letter, box) for box in regions]


def test_vertical_rules_spanning_half_a_region_are_its_columns_and_a_double_rule_counts_once() -> None:
    ink = _page([300, 360, 420, 480], verticals=(100, 300, 306, 500, 697))
    ink[300:360, 600:603] = True  # under a spanning header only: does not cut the body
    regions = ruled_regions(ink, 20.0)
    assert regions == [(100.0, 300.0, 700.0, 483.0)]
    assert _columns(ink, 20.0, regions) == [[101.5, 301.5, 501.5, 698.5]]
    assert _columns(_page([300, 360, 420]), 20.0, ruled_regions(_page([300, 360, 420]), 20.0)) == [[]]
    assert _columns(ink, 0.0, regions) == [[]]


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


def test_a_ruled_region_with_vertical_rules_takes_its_columns_from_them() -> None:
    # 18 one-word columns 10 px apart: more than MAX_TABLE_COLUMNS from the gaps, so no table;
    # the region's vertical rules (halfway between the columns) make the grid
    grid = [[f"{'abc'[r]}{'0123456789ABCDEFGH'[c]}" for c in range(18)] for r in range(3)]
    words = _words([[(10 + 34 * c, cell) for c, cell in enumerate(row)] for row in grid])
    box = (0.0, 90.0, 700.0, 200.0)
    assert page_tables(words, [box]) == ([], set())
    rules = [5.0 + 34 * c for c in range(19)]
    tables, used = page_tables(words, [box], columns=[rules])
    assert [rows for _, rows in tables] == [grid] and used == set(range(54))


# A page of columns divided by vertical rules, no horizontal rule between them (an election
# bulletin): each column a label, a party and a count right-aligned against the rule on its
# right, which Tesseract reads as the count's last glyph ("247)"), 6 px from the next column.
BULLETIN = [
    [(10, "GOVERNOR"), (406, "LIU")],
    [(10, "NEEL"), (200, "REP"), (352, "247)"), (406, "YES"), (764, "90)")],
    [(10, "ED"), (200, "DEM"), (364, "69]"), (406, "NO"), (752, "142|")],
    [(10, "VOTER"), (406, "SMITH"), (764, "64)")],
]
BULLETIN_RULES = [(0, 90, 3, 300), (399, 90, 402, 300), (798, 90, 801, 300)]


def test_vertical_rules_crossing_an_unruled_run_are_its_columns_and_their_glyphs_go() -> None:
    words = _words(BULLETIN)
    # without the rules: columns from the word gaps, a count and the next column's label one cell
    without = page_tables(words, [])[0]
    assert [rows for _, rows in without][0][1] == ["NEEL", "REP", "247) YES", "90)"]
    tables, used = page_tables(words, [], verticals=BULLETIN_RULES)
    assert [rows for _, rows in tables] == [
        [["GOVERNOR", "LIU"], ["NEEL REP 247", "YES 90"], ["ED DEM 69", "NO 142"], ["VOTER", "SMITH 64"]]
    ]
    assert used == set(range(len(words)))
    # a rule spanning under half the run's height (a header's tick) makes no column
    short = [(0, 90, 3, 300), (399, 90, 402, 140), (798, 90, 801, 300)]
    assert rule_positions(short, 14.0, (10.0, 100.0, 800.0, 204.0)) == [1.5, 799.5]
    assert page_tables(words, [], verticals=short) == page_tables(words, [])


def test_a_column_rule_broken_by_a_shaded_row_is_one_rule() -> None:
    # the middle rule stops for a shaded row (150-170): pieces of 50 and 34 px over the run's
    # 104 px, each under half of it, together over half
    broken = [(0, 90, 3, 300), (399, 90, 402, 150), (399, 170, 402, 300), (798, 90, 801, 300)]
    assert rule_positions(broken, 14.0, (10.0, 100.0, 800.0, 204.0)) == [1.5, 400.5, 799.5]
    assert rule_positions(broken[1:2], 14.0, (10.0, 100.0, 800.0, 204.0)) == []
    words = _words(BULLETIN)
    assert page_tables(words, [], verticals=broken) == page_tables(words, [], verticals=BULLETIN_RULES)


def test_a_ruled_column_s_text_ends_at_its_rule_for_the_wrap_test() -> None:
    # a section heading's last word starts left of the rule at 300.5 and runs past it (to 424);
    # "of eye" 4 px under "Eye bleeding (including" continues its cell: "of" would not fit
    # before the rule, though it would before the heading's end
    def line(top: float, cells: list[tuple[float, str]]) -> list[Word]:
        return [Word(x, top, x + 12 * len(t), top + 14, t, 95.0) for x, t in cells]

    words = [
        *line(100, [(10, "Organ"), (310, "Risk")]),
        *line(130, _set("Respiratory thoracic and mediastinal", 10)),
        *line(160, [*_set("Eye bleeding (including", 10), (310, "Rare")]),
        *line(178, _set("of eye", 10)),
        *line(208, [(10, "Nausea"), (310, "Common")]),
    ]
    tables, _ = page_tables(words, [(0.0, 90.0, 600.0, 230.0)], columns=[[1.5, 300.5, 599.5]])
    assert [rows for _, rows in tables] == [
        [
            ["Organ", "Risk"],
            ["Respiratory thoracic and mediastinal", ""],
            ["Eye bleeding (including of eye", "Rare"],
            ["Nausea", "Common"],
        ]
    ]


def test_glyphs_read_from_a_vertical_rule_a_word_touches_go() -> None:
    rule = [400.5]
    words = [
        Word(352, 0, 400, 14, "247)", 90.0),  # a count against the rule: ")" is the rule
        Word(406, 0, 442, 14, "[12", 90.0),  # "[" just right of it: the rule
        Word(398, 0, 403, 14, "|", 90.0),  # a bar on the rule: dropped
        Word(340, 20, 400, 34, "(WBC)", 90.0),  # its opening bracket is in the word: kept
        Word(250, 20, 274, 34, "3)", 90.0),  # far from the rule: kept
        Word(406, 20, 430, 34, "|", 90.0),  # a bar 5.5 px off the rule (reach 7 px): dropped
        Word(420, 40, 444, 54, "|", 90.0),  # 19.5 px off: kept
    ]
    assert [w.text for w in off_rules(words, rule)] == ["247", "12", "(WBC)", "3)", "|"]
    assert off_rules(words, []) == words


def test_a_bar_read_from_a_ruled_column_s_rule_is_not_part_of_its_cell() -> None:
    lines = [
        [(10, "Line"), (200, "Bill"), (398, "|"), (410, "PO"), (452, "number")],
        [(10, "1"), (200, "0.61"), (410, "4500")],
        [(10, "2"), (200, "0.62"), (410, "4501")],
    ]
    box = (0.0, 90.0, 700.0, 200.0)
    tables, used = page_tables(_words(lines), [box], columns=[[1.5, 190.5, 400.5, 699.5]])
    assert [rows for _, rows in tables] == [
        [["Line", "Bill", "PO number"], ["1", "0.61", "4500"], ["2", "0.62", "4501"]]
    ]
    assert used == set(range(11))


def test_thousands_commas_read_as_points_are_put_back_in_table_cells() -> None:
    # small print: Tesseract reads "37,499.96" as "37.499.96"; "1.234.567" (three digits after
    # the last point) is a comma-decimal number's thousands and stays
    grid = [["Name", "Amount", "Count"], ["Bain", "37.499.96", "1.234.567"], ["Smith", "(1.260.00)", "12.5"]]
    words = _words([[(10 + 200 * c, cell) for c, cell in enumerate(row)] for row in grid])
    tables, _ = page_tables(words, [])
    assert [rows for _, rows in tables] == [
        [["Name", "Amount", "Count"], ["Bain", "37,499.96", "1.234.567"], ["Smith", "(1,260.00)", "12.5"]]
    ]
    assert commas_read_as_points("paid $21.000.00 in 4.5.6") == "paid $21,000.00 in 4.5.6"


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
def test_a_scanned_page_reads_its_table_as_the_pdf_text_layer_does(layout: str) -> None:
    """Ruled grid, rules between rows only, no rules (unruled tables, on by
    default): the scan's table equals the table
    ragsync reads from the PDF's own text layer (every cell), in the same
    place between the two paragraphs."""
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


def _ruled_grid_scan(rows: list[list[str]], column: int, pitch: int, gray: int) -> bytes:
    """A PNG at 300 dpi of ``rows`` in a fully ruled grid drawn with PIL:
    cells ``column`` x ``pitch`` px, rules of ink level ``gray`` (0 black),
    text 28 px DejaVu Sans (the PIL default font when it is missing)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font: ImageFont.FreeTypeFont | ImageFont.ImageFont = ImageFont.truetype("DejaVuSans.ttf", 28)
    except OSError:
        font = ImageFont.load_default(size=28)
    width, height = 100 + column * len(rows[0]), 260 + pitch * len(rows)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    draw.text((50, 60), "Checks by state and kind, one month.", font=font, fill=0)
    top = 160
    for r in range(len(rows) + 1):
        draw.line([(50, top + r * pitch), (50 + column * len(rows[0]), top + r * pitch)], fill=gray, width=3)
    for c in range(len(rows[0]) + 1):
        draw.line([(50 + c * column, top), (50 + c * column, top + pitch * len(rows))], fill=gray, width=3)
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            draw.text((62 + c * column, top + r * pitch + 14), cell, font=font, fill=0)
    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(300, 300))
    return buf.getvalue()


@needs_tesseract
def test_a_scanned_ruled_grid_of_more_columns_than_word_gaps_allow_is_read_cell_for_cell() -> None:
    """18 narrow numeric columns in a grey-ruled grid (a NICS-style sheet): the
    word gaps alone allow at most MAX_TABLE_COLUMNS columns, the vertical rules
    give all 18; every cell is read into its place by the real Tesseract."""
    rows = [[str(10 * r + c) for c in range(18)] for r in range(1, 5)]
    scan = parse(_ruled_grid_scan(rows, column=90, pitch=60, gray=120), "image/png")
    tables = [e for e in scan.elements if e.type == ElementType.TABLE]
    assert len(tables) == 1
    lines = tables[0].text.splitlines()
    assert len(lines) == 5  # the first row as header, the separator, three rows
    assert [[c.strip() for c in line.split("|")[1:-1]] for line in lines[:1] + lines[2:]] == rows


COUNTRIES = [["Country", "Cases", "Deaths"], ["Norway", "1840", "22"], ["Sweden", "3102", "105"]]


@needs_tesseract
def test_a_ruled_region_tesseract_reads_below_the_region_bar_is_read_again_by_rapidocr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per-region engine choice with the real engines: at the default bar
    Tesseract reads the grid well and keeps it (no region listed); with a bar
    it cannot meet (standing for a region it reads poorly) RapidOCR reads the
    region's crop, its table is kept, and both confidences are stored."""
    from ragsync.parsing import ocr_second
    from ragsync.parsing.ocr import iter_image_pages
    from ragsync.parsing.ocr_engine import ocr_page
    from ragsync.parsing.ocr_model import OcrOptions

    page = next(iter_image_pages(_ruled_grid_scan(COUNTRIES, column=260, pitch=60, gray=0)))
    plain = ocr_page(page, OcrOptions())
    assert plain.tables == (tuple(tuple(r) for r in COUNTRIES),)
    assert plain.region_engines == ()
    monkeypatch.setattr(ocr_second, "MIN_REGION_CONFIDENCE", 101.0)
    assert ocr_page(page, OcrOptions(second_engine=False)).region_engines == ()
    result = ocr_page(page, OcrOptions())
    assert result.tables == (tuple(tuple(r) for r in COUNTRIES),)
    assert [(engine, [name for name, _ in confs]) for engine, confs in result.region_engines] == [
        ("rapidocr", ["tesseract", "rapidocr"])
    ]
    tesseract, rapid = (c for _, c in result.region_engines[0][1])
    assert 0 < tesseract <= 100
    assert rapid >= ocr_second.MIN_CONFIDENCE
    assert "Norway" not in " ".join(result.paragraph_texts())  # the table's words are not text too


def test_small_print_is_a_median_word_box_under_20_px_and_a_reading_replaces_one_less_sure() -> None:
    def boxes(heights: list[float], score: float = 90.0) -> list[Word]:
        return [Word(0, 0, 10, h, "w", score) for h in heights]

    assert small_print(boxes([17, 18, 19, 40])) and not small_print(boxes([17, 20, 20, 40]))
    assert not small_print([])
    assert better_reading(boxes([17]), boxes([34], 90.5))
    assert not better_reading(boxes([17]), boxes([34], 90.0))
    assert not better_reading(boxes([17]), []) and better_reading([], boxes([34]))
    (word,) = scaled_back([Word(20, 40, 60, 80, "7,095", 96.0)], 2.0, 100, 200)
    assert word == Word(110, 220, 130, 240, "7,095", 96.0)


@needs_tesseract
def test_a_ruled_region_of_small_print_is_read_again_scaled_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Tesseract: a grid of 28 px letters is no small print (no
    second reading); with the bar raised past its words (standing for small
    print) its crop is read again at twice the size, once, and the table is
    the same; a region RapidOCR takes is not read again."""
    from ragsync.parsing import ocr_engine, ocr_regions, ocr_second, ocr_tables
    from ragsync.parsing.ocr import iter_image_pages

    page = next(iter_image_pages(_ruled_grid_scan(COUNTRIES, column=260, pitch=60, gray=0)))
    calls: list[float] = []
    reread = ocr_regions.small_print_words

    def spy(*args: object) -> list[Word]:
        words = reread(*args)  # type: ignore[arg-type]
        calls.append(statistics.median(w.height for w in words))
        return words

    monkeypatch.setattr(ocr_regions, "small_print_words", spy)
    assert ocr_engine.ocr_page(page).tables == (tuple(tuple(r) for r in COUNTRIES),) and calls == []
    monkeypatch.setattr(ocr_tables, "SMALL_PRINT_PX", 100.0)
    assert ocr_engine.ocr_page(page).tables == (tuple(tuple(r) for r in COUNTRIES),)
    assert len(calls) == 1 and 15 < calls[0] < 30  # in page pixels (~40 on the scaled crop)
    monkeypatch.setattr(ocr_second, "MIN_REGION_CONFIDENCE", 101.0)
    assert ocr_engine.ocr_page(page).region_engines[0][0] == "rapidocr" and len(calls) == 1


@needs_tesseract
def test_unruled_tables_are_on_by_default_and_off_with_the_variable_at_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By default a scan's rule-less table is a table; with
    RAGSYNC_OCR_UNRULED_TABLES=0 it stays text."""
    data = _scan(_pdf("NONE"))
    assert [e.type for e in parse(data, "image/png").elements].count(ElementType.TABLE) == 1
    monkeypatch.setenv("RAGSYNC_OCR_UNRULED_TABLES", "0")
    assert ElementType.TABLE not in [e.type for e in parse(data, "image/png").elements]
    assert page_tables(_words([[*_set("a b", 10)]]), [], unruled=False) == ([], set())


def test_lines_whose_word_gaps_line_up_by_chance_are_not_an_unruled_table() -> None:
    """Two text columns of identical short-word lines: the word gaps line up,
    so table_rows alone would make 8 one-word columns; the lines have only 2
    wide-gap segments, so it is text."""
    words = _words([[*_set("aa bb cc dd", 10), *_set("ee ff gg hh", 700)] for _ in range(4)])
    assert len(table_rows(group_lines(words))[0]) == 8
    assert page_tables(words, []) == ([], set())


# ------------------------------------------------------------------ unruled tables (pure)


def test_a_run_of_aligned_lines_ends_at_a_wide_vertical_gap() -> None:
    """A line of two segments far above (a heading, or a ruled region's words
    taken out between) is not the first row of the aligned lines below it."""
    rows = [[(10, "a1"), (300, "b1")], [(10, "a2"), (300, "b2")], [(10, "a3"), (300, "b3")]]
    heading = _words([[(10, "Report"), (300, "2019")]], top=0)
    body = _words(rows, top=200)  # 186 px below the heading's bottom: over 3 line heights (42)
    runs = aligned_runs(group_lines([*heading, *body]))
    assert [[w.text for line in run for w in line] for run in runs] == [["a1", "b1", "a2", "b2", "a3", "b3"]]
    assert len(aligned_runs(group_lines([*_words(rows, top=0), *_words(rows, top=300)]))) == 2


def test_wrapped_cells_stay_in_the_run_as_rows_of_their_own() -> None:
    """One-segment lines inside a run (the senate list's descriptions wrapped
    under their cell) stay in it, each a row of one cell, as the text-layer
    path reads them (a table of 3 rows of two or more cells in 7: under
    half, above a third); one at the end, or three in a row, leave the run."""
    lines = [
        [(10, "DH01"), *_set("STAFF TRAVEL", 200), (600, "920.68")],
        [*_set("AIRFARE KC TO DC", 200)],
        [*_set("AND BACK", 200)],
        [(10, "DH02"), *_set("STAFF TRAVEL", 200), (600, "907.96")],
        [*_set("AIRFARE STL", 200)],
        [*_set("AND RETURN", 200)],
        [(10, "DH03"), *_set("SENATOR TRAVEL", 200), (600, "798.90")],
        [*_set("LODGING", 200)],
    ]
    runs = aligned_runs(group_lines(_words(lines)))
    assert [len(run) for run in runs] == [7]  # the last wrap is left out
    tables, used = page_tables(_words(lines), [])
    assert [rows for _, rows in tables] == [
        [
            ["DH01", "STAFF TRAVEL", "920.68"],
            ["", "AIRFARE KC TO DC", ""],
            ["", "AND BACK", ""],
            ["DH02", "STAFF TRAVEL", "907.96"],
            ["", "AIRFARE STL", ""],
            ["", "AND RETURN", ""],
            ["DH03", "SENATOR TRAVEL", "798.90"],
        ]
    ]
    assert len(used) == len(_words(lines)) - 1  # LODGING stays text
    singles = [lines[0], [(200, "x")], [(200, "y")], [(200, "z")], lines[3], lines[6]]
    assert aligned_runs(group_lines(_words(singles))) == []  # three one-segment lines end the run


def test_two_columns_of_prose_under_a_split_headline_are_prose() -> None:
    """The magazine page 8071_093.3B at 150 dpi: a headline's short pieces on
    the left of two text columns made a 3 x 4 table; lines holding two
    segments of five or more words each are prose."""
    lines = [[(10, "Listen"), (150, "to"), *_set(PROSE[r], 400), *_set(PROSE[r + 1], 1100)] for r in range(3)]
    words = _words(lines)
    assert is_prose(aligned_runs(group_lines(words))[0])
    assert page_tables(words, []) == ([], set())
    numbers = [[(10, "North"), (200, "1,204"), (400, "88,310")] for _ in range(3)]
    assert not is_prose(aligned_runs(group_lines(_words(numbers)))[0])


def test_segments_as_cells_keep_a_table_whose_labels_have_word_gaps_in_line() -> None:
    """A judges' score sheet: two-word row labels whose second words start at
    the same x make a word-gap column inside the label, so the word-by-word
    reading has more columns than any line has segments and is refused; read
    segment by segment (most cells numbers) it is the table."""
    lines = [
        [*_set("Skating Skills", 10), (300, "0.80"), (500, "6.25"), (700, "6.79")],
        [*_set("Linking Footwork", 10), (300, "0.70"), (500, "6.00"), (700, "6.43")],
        [*_set("Perform Timing", 10), (300, "1.00"), (500, "5.00"), (700, "6.57")],
    ]
    words = _words(lines)
    run = aligned_runs(group_lines(words))[0]
    assert [len(row) for row in table_rows(run)] == [5, 5, 5]  # word gaps: 5 columns, 4 segments
    expected = [
        ["Skating Skills", "0.80", "6.25", "6.79"],
        ["Linking Footwork", "0.70", "6.00", "6.43"],
        ["Perform Timing", "1.00", "5.00", "6.57"],
    ]
    assert segment_table(run) == expected
    tables, used = page_tables(words, [])
    assert [rows for _, rows in tables] == [expected] and used == set(range(len(words)))


def test_segments_as_cells_need_digits_in_a_quarter_of_them() -> None:
    words = _words([[*_set("aa bb", 10), *_set("cc dd", 400)] for _ in range(4)])
    run = aligned_runs(group_lines(words))[0]
    assert segment_table(run) == []
    with_numbers = _words([[*_set("aa bb", 10), *_set(f"cc {r}", 400)] for r in range(4)])
    assert segment_table(aligned_runs(group_lines(with_numbers))[0]) == [
        ["aa bb", f"cc {r}"] for r in range(4)
    ]


def test_a_label_then_an_underline_or_a_check_box_starts_a_new_segment() -> None:
    """A form's field written on a line: Tesseract reads the underline as a
    leading "_" or dash right after the label, a check box as "[X]" or "[_]";
    the value is a segment of its own."""
    line = group_lines(_words([_set("Date of Incident: _ 12/01/2015", 10)]))[0]
    assert [[w.text for w in s] for s in segments(line)] == [["Date", "of", "Incident:"], ["_", "12/01/2015"]]
    line = group_lines(_words([_set("Agency: \u2014Fond du Lac", 10)]))[0]
    assert [[w.text for w in s] for s in segments(line)] == [["Agency:"], ["\u2014Fond", "du", "Lac"]]
    line = group_lines(_words([_set("Gender: [_] Female [X] Male", 10)]))[0]  # check boxes
    assert [[w.text for w in s] for s in segments(line)] == [["Gender:"], ["[_]", "Female", "[X]", "Male"]]
    # no colon before the underline or box, or neither after the colon: one segment
    for text in ("Date of Incident _ 12/01/2015", "Date of Incident: 12/01/2015", "Sex [X] Male"):
        assert len(segments(group_lines(_words([_set(text, 10)]))[0])) == 1


FORM = [
    [*_set("Case Number:", 10), *_set("_A-DSP-FOND", 330), *_set("Agency:", 700), *_set("Fond du Lac", 900)],
    _set("Child Information (at time of incident)", 10),
    [*_set("Age:", 10), *_set("_Three Years", 130), *_set("Gender: [X] Male", 600)],
    _set("Race or Ethnicity: _ Caucasian", 10),
    [*_set("Special Needs:", 10), *_set("None", 300)],
]


def test_a_form_of_labelled_fields_is_read_line_by_line_without_digits() -> None:
    """Key-value forms (a child-welfare report's header): labels of any width
    ending in ":" with the value after a wide gap or an underline; the
    fields stand in no columns, so each line's segments are its cells, the
    underline dropped; no cell needs a digit."""
    words = _words(FORM)
    run = aligned_runs(group_lines(words))[0]
    assert is_form(run) and not is_prose(run)
    expected = [
        ["Case Number:", "A-DSP-FOND", "Agency:", "Fond du Lac"],
        ["Child Information (at time of incident)", "", "", ""],
        ["Age:", "Three Years", "Gender:", "[X] Male"],
        ["Race or Ethnicity:", "Caucasian", "", ""],
        ["Special Needs:", "None", "", ""],
    ]
    assert form_rows(run) == expected
    assert segment_table(run) == expected
    tables, used = page_tables(words, [])
    assert [rows for _, rows in tables] == [expected] and used == set(range(len(words)))


def test_a_form_s_field_set_apart_by_blank_lines_stays_in_the_form() -> None:
    # FORM's last line ends at 234 (line height 14); a field 70 px (5 line heights) below
    # continues the form, past MAX_RUN_GAP (3) but within MAX_FORM_GAP (6) ...
    form = [
        ["Case Number:", "A-DSP-FOND", "Agency:", "Fond du Lac"],
        ["Child Information (at time of incident)", "", "", ""],
        ["Age:", "Three Years", "Gender:", "[X] Male"],
        ["Race or Ethnicity:", "Caucasian", "", ""],
        ["Special Needs:", "None", "", ""],
    ]
    field = [*_set("Date of Incident:", 10), *_set("_12/01/2015", 330)]
    words = [*_words(FORM), *_words([field], top=304)]
    tables, used = page_tables(words, [])
    assert [rows for _, rows in tables] == [[*form, ["Date of Incident:", "12/01/2015", "", ""]]]
    assert used == set(range(len(words)))
    # ... not 100 px (over 7 line heights) below, and not a line of two segments without a label
    for far in (_words([field], top=334), _words([[*_set("Total", 10), *_set("12", 330)]], top=304)):
        tables, used = page_tables([*_words(FORM), *far], [])
        assert [rows for _, rows in tables] == [form] and used == set(range(len(_words(FORM))))


def test_a_run_is_a_form_only_when_half_its_split_lines_hold_a_label_before_a_segment() -> None:
    lines = [
        [*_set("Note: aa", 10), *_set("bb cc", 400)],
        [*_set("aa bb", 10), *_set("cc dd", 400)],
        [*_set("aa bb", 10), *_set("cc dd", 400)],
    ]
    run = aligned_runs(group_lines(_words(lines)))[0]
    assert not is_form(run) and segment_table(run) == []
    labelled = [*lines[:2], [*_set("ee ff", 10), *_set("Notes:", 400)], [*_set("Key:", 10), *_set("gg", 400)]]
    run = aligned_runs(group_lines(_words(labelled)))[0]
    assert not is_form(run)  # "Note: aa" is no label, "Notes:" has no value after it: 1 of 4
    more = [[*_set("Value:", 10), *_set("hh", 400)], [*_set("Date:", 10), *_set("ii", 400)]]
    run = aligned_runs(group_lines(_words([*labelled, *more])))[0]
    assert is_form(run) and segment_table(run)[-2:] == [["Value:", "hh"], ["Date:", "ii"]]  # 3 of 6


def test_a_form_of_long_cells_is_not_a_table() -> None:
    lines = [[*_set("Summary:", 10), *_set(PROSE[r], 400)] for r in range(3)]
    run = aligned_runs(group_lines(_words(lines)))[0]
    assert is_form(run) and form_rows(run) == []


def _header_table(
    second_line: list[tuple[float, str]], gap: float, first: list[tuple[float, str]] | None = None
) -> list[list[str]]:
    """A 4-column table whose header's second line (``second_line``) lies
    ``gap`` px under its first (20 px letters; ``first``, else four labels),
    over two rows of figures."""
    first = first or [(10, "Item"), (300, "Annual"), (500, "Comparison"), (700, "Fee")]
    y = 120 + gap
    north = [(10, "North"), (300, "5.37%"), (500, "5.51%"), (700, "$10")]
    south = [(10, "South"), (300, "4.04%"), (500, "5.38%"), (700, "$12")]
    lines = [(100.0, first), (y, second_line), (y + 60, north), (y + 120, south)]
    words = [Word(x, top, x + 12 * len(t), top + 20, t, 95.0) for top, line in lines for x, t in line]
    return table_rows(group_lines(words))


def test_a_header_wrapped_over_two_lines_is_one_row_when_neither_line_holds_a_digit() -> None:
    """pr-138's "Annual / percentage rate": a header's second line 0.4 line
    heights under the first, filling three of its four cells, joins it; a
    line of figures that close, or a text line farther than half a line
    height, stays a row of its own."""
    wrapped = [(300, "percentage rate"), (500, "rate"), (700, "charged")]
    assert _header_table(wrapped, 8) == [
        ["Item", "Annual percentage rate", "Comparison rate", "Fee charged"],
        ["North", "5.37%", "5.51%", "$10"],
        ["South", "4.04%", "5.38%", "$12"],
    ]
    assert _header_table(wrapped, 11)[1] == ["", "percentage rate", "rate", "charged"]
    figures = [(300, "percentage rate"), (500, "rate"), (700, "2")]
    assert _header_table(figures, 8)[1] == ["", "percentage rate", "rate", "2"]
    # a one-cell row (a section heading, PubTabNet's "Goal: Exercise regularly") over
    # another one-cell line: two rows
    headings = _header_table([(10, "Cardiopulmonary training")], 8, [(10, "Goal: Exercise regularly")])
    assert [row[0] for row in headings[:2]] == ["Goal: Exercise regularly", "Cardiopulmonary training"]


def test_a_run_refused_as_a_whole_keeps_its_table_above_the_prose_it_runs_into() -> None:
    """pr-138: a table's rows run on (no wide gap) into prose set beside a
    second column; the whole run is columns of prose and refused, so it is
    cut at its lines holding a sentence (10 or more words) and the rows
    above them are the table; the prose stays text."""
    rows = [("North", "5.37%", "5.51%", "4.87%"), ("South", "4.04%", "5.38%", "3.89%")]
    rows.append(("East", "3.94%", "5.25%", "3.79%"))
    table = [[(10 + 200 * c, cell) for c, cell in enumerate(r)] for r in rows]
    beside = [f"the base rate is {i}.5% for new loans" for i in range(4)]
    prose = [[*_set(PROSE[i] + " and so on", 10), *_set(beside[i], 1400)] for i in range(4)]
    words = _words([*table, *prose])
    (run,) = aligned_runs(group_lines(words))
    assert len(run) == 7 and is_prose(run)
    assert [len(piece) for piece in split_at_long_lines(run)] == [3]
    assert page_tables(words, []) == ([(100, [list(r) for r in rows])], set(range(12)))
    assert split_at_long_lines(run[:3]) == []  # no such line: nothing to try again


# ------------------------------------------------------------------ unruled tables (real Tesseract)


def _text_scan(lines: list[tuple[int, int, str, int]], size: tuple[int, int]) -> bytes:
    """A PNG at 300 dpi with each ``(x, y, text, px)`` of ``lines`` drawn in
    DejaVu Sans of that pixel size (the PIL default font when it is missing)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    for x, y, text, px in lines:
        try:
            font: ImageFont.FreeTypeFont | ImageFont.ImageFont = ImageFont.truetype("DejaVuSans.ttf", px)
        except OSError:
            font = ImageFont.load_default(size=px)
        draw.text((x, y), text, font=font, fill=0)
    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(300, 300))
    return buf.getvalue()


COLUMN_TEXT = [
    "Fathers bring a unique perspective to",
    "the family, a special strength that",
    "children need and remember for years,",
    "says a psychologist who studied how",
    "successful families pass on values to",
    "their children over many generations.",
    "He found that the fathers who spoke",
    "of their affection openly were the",
]


@needs_tesseract
def test_a_scanned_page_of_two_prose_columns_under_a_headline_has_no_table() -> None:
    """Unruled tables are on by default: a headline over two text columns
    (the shape 8071_093.3B's was read as a table) stays text."""
    lines = [(60, 60, "What Kids Need Most", 64), (60, 150, "By a staff writer", 28)]
    for r, text in enumerate(COLUMN_TEXT):
        lines.append((60, 240 + 40 * r, text, 28))
        lines.append((760, 240 + 40 * r, COLUMN_TEXT[-1 - r], 28))
    scan = parse(_text_scan(lines, (1400, 640)), "image/png")
    assert ElementType.TABLE not in [e.type for e in scan.elements]
    assert "Fathers bring a unique perspective to" in " ".join(e.text for e in scan.elements)


@needs_tesseract
def test_a_scanned_unruled_numeric_table_is_read_cell_for_cell() -> None:
    """Four columns without a rule, between two lines of text: one Markdown
    table (the first row as header), every cell as drawn."""
    lines = [(60, 60, "Units and revenue of the quarter, by region.", 28)]
    for r, row in enumerate(GRID):
        lines.extend((60 + 260 * c, 160 + 50 * r, cell, 28) for c, cell in enumerate(row))
    lines.append((60, 460, "Printed after the last region.", 28))
    scan = parse(_text_scan(lines, (1200, 560)), "image/png")
    tables = [e for e in scan.elements if e.type == ElementType.TABLE]
    assert len(tables) == 1
    rows = tables[0].text.splitlines()
    assert [[c.strip() for c in line.split("|")[1:-1]] for line in rows[:1] + rows[2:]] == GRID
