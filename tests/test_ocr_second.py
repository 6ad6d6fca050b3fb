"""The second OCR engine (RapidOCR): when its text is kept, how its boxes
become lines and tables, and a real reading of a generated table image."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from ragsync.model import ElementType
from ragsync.parsing.ocr import assemble, iter_image_pages
from ragsync.parsing.ocr_engine import ocr_page
from ragsync.parsing.ocr_layout import TsvWord
from ragsync.parsing.ocr_model import OcrOptions
from ragsync.parsing.ocr_second import (
    MIN_CONFIDENCE,
    MIN_LINE_CONFIDENCE,
    RegionChoice,
    SecondRead,
    Word,
    choose,
    choose_line,
    choose_region,
    group_lines,
    needs_second_read,
    rereads_lines,
    second_read,
    table_rows,
)


def _w(x0: float, y0: float, text: str, width: float = 40, height: float = 12, score: float = 95) -> Word:
    return Word(x0, y0, x0 + width, y0 + height, text, score)


# ------------------------------------------------------------------ the choice


@pytest.mark.parametrize(
    ("passed", "second", "expected"),
    [
        (True, SecondRead((("a",),), 99.0), "tesseract"),  # Tesseract met the bar: it stays
        (True, None, "tesseract"),
        (False, SecondRead((("a",),), 99.0), "rapidocr"),
        (False, SecondRead((("a",),), 85.0), "rapidocr"),  # at the bar
        (False, SecondRead((("a",),), 84.9), "none"),  # below it: review
        (False, SecondRead((), 0.0), "none"),  # nothing read
        (False, None, "none"),
    ],
)
def test_the_second_engine_replaces_only_a_failing_page_and_only_above_its_bar(
    passed: bool, second: SecondRead | None, expected: str
) -> None:
    assert choose(passed, second) == expected


@pytest.mark.parametrize(
    ("tesseract", "second", "expected"),
    [
        # under the line bar (75): RapidOCR's reading at its own bar (85) with a higher confidence wins
        (("Hcte1 stays", 60.0), ("Hotel stays", 97.0), ("rapidocr", 60.0, 97.0)),
        (("Hcte1 stays", 74.9), ("Hotel stays", 85.0), ("rapidocr", 74.9, 85.0)),
        (("Hcte1 stays", 60.0), ("Hotel stays", 84.9), ("tesseract", 60.0, 84.9)),  # under its bar
        (("Hcte1 stays", 74.0), ("Hotel stays", 95.0), ("rapidocr", 74.0, 95.0)),
        # ... not when it has fewer words (spaces dropped), nor no text
        (("Hcte1 stays", 60.0), ("Hotelstays", 97.0), ("tesseract", 60.0, 97.0)),
        (("Hcte1 stays", 60.0), ("Hotel stays here", 97.0), ("rapidocr", 60.0, 97.0)),
        (("Hcte1 stays", 60.0), ("", 0.0), ("tesseract", 60.0, 0.0)),
        # at the line bar or above Tesseract's line stays, whatever RapidOCR read
        (("Hcte1 stays", 75.0), ("Hotel stays", 99.0), ("tesseract", 75.0, 99.0)),
    ],
)
def test_a_line_keeps_the_reading_with_the_higher_confidence_only_under_the_line_bar(
    tesseract: tuple[str, float], second: tuple[str, float], expected: tuple[str, float, float]
) -> None:
    assert (MIN_LINE_CONFIDENCE, MIN_CONFIDENCE) == (75.0, 85.0)
    engine, mine, theirs = expected
    assert choose_line(tesseract, second) == RegionChoice(engine, (("tesseract", mine), ("rapidocr", theirs)))
    # not read again: Tesseract's, with its confidence alone
    assert choose_line(tesseract, None) == RegionChoice("tesseract", (("tesseract", tesseract[1]),))


def test_only_lines_under_the_line_bar_are_read_again_and_the_kept_reading_replaces_their_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ocr_regions.reread_lines`` with a stand-in recogniser: the line
    Tesseract read at 50 is read again (its crop padded by a quarter of its
    height) and takes RapidOCR's words, boxes cut by character count; the line
    at 90 is not read; both confidences are listed for the line read again."""
    from ragsync.parsing import ocr_regions, ocr_second

    crops: list[tuple[int, int]] = []

    def fake_read_line(gray: np.ndarray) -> tuple[str, float]:
        crops.append(gray.shape)
        return "Hotel stays", 96.0

    monkeypatch.setattr(ocr_second, "read_line", fake_read_line)
    words = [
        TsvWord((10, 10, 50, 30), "Travel", 90.0, 0, 0),
        TsvWord((60, 10, 100, 30), "policy", 90.0, 0, 0),
        TsvWord((10, 50, 60, 70), "Hcte1", 40.0, 0, 1),
        TsvWord((70, 50, 120, 70), "stays", 60.0, 0, 1),
    ]
    image = np.full((100, 200), 255, dtype=np.uint8)
    out, choices = ocr_regions.reread_lines(image, words)
    assert crops == [(20 + 2 * 6, 110 + 2 * 6)]
    assert choices == [("rapidocr", (("tesseract", 50.0), ("rapidocr", 96.0)))]
    assert out[:2] == words[:2]
    assert out[2:] == [
        TsvWord((10, 50, 60, 70), "Hotel", 96.0, 0, 1),
        TsvWord((70, 50, 120, 70), "stays", 96.0, 0, 1),
    ]
    monkeypatch.setattr(ocr_second, "read_line", lambda gray: ("Hotel stays", 84.0))
    assert ocr_regions.reread_lines(image, words) == (
        words,
        [("tesseract", (("tesseract", 50.0), ("rapidocr", 84.0)))],
    )


@pytest.mark.parametrize(
    ("lang", "again"),
    [("eng", True), ("chi_sim+eng", True), ("deu+eng", False), ("eng+fra", False), ("deu", False)],
)
def test_lines_are_read_again_only_in_languages_the_recogniser_writes(lang: str, again: bool) -> None:
    assert rereads_lines(lang) is again


def test_a_page_read_in_another_language_keeps_tesseracts_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Tesseract reads a rendered English page that meets the bar:
    with ``eng`` its lines go to the line re-read, with ``deu+eng`` they do
    not (the recogniser would drop the accents)."""
    from ragsync.parsing import ocr_engine

    seen: list[int] = []

    def counting(image: np.ndarray, words: list[TsvWord]) -> tuple[list[TsvWord], list[object]]:
        seen.append(len(words))
        return words, []

    monkeypatch.setattr(ocr_engine, "reread_lines", counting)
    image = Image.new("L", (1200, 300), 255)
    font = ImageFont.truetype("DejaVuSans.ttf", 40)
    ImageDraw.Draw(image).text((60, 100), "The travel policy covers hotel stays.", font=font, fill=0)
    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(300, 300))
    page = next(iter_image_pages(buf.getvalue()))
    english = ocr_page(page, OcrOptions(lang="eng", tables=False))
    assert english.passed and seen == [6]
    german = ocr_page(page, OcrOptions(lang="deu+eng", tables=False))
    assert german.passed and seen == [6]


# ------------------------------------------------------------------ lines and tables


def _grid(score: float) -> list[Word]:
    """A 2 x 2 table's words, every word at ``score``."""
    return [
        _w(10, 10, "a", score=score),
        _w(200, 10, "1", score=score),
        _w(10, 40, "b", score=score),
        _w(200, 40, "2", score=score),
    ]


@pytest.mark.parametrize(
    ("tesseract", "second", "expected"),
    [
        # Tesseract at the region bar (90) or above: it stays, whatever RapidOCR read
        (_grid(90.0), _grid(99.0), RegionChoice("tesseract", (("tesseract", 90.0), ("rapidocr", 99.0)))),
        (_grid(70.0), None, RegionChoice("tesseract", (("tesseract", 70.0),))),  # not read again
        # under it: RapidOCR's table at its own bar (85) or above wins ...
        (_grid(70.0), _grid(85.0), RegionChoice("rapidocr", (("tesseract", 70.0), ("rapidocr", 85.0)))),
        # ... not under its bar, nor words that make no table (one column)
        (_grid(70.0), _grid(84.9), RegionChoice("tesseract", (("tesseract", 70.0), ("rapidocr", 84.9)))),
        (
            _grid(70.0),
            [_w(10, 10, "a", score=99.0), _w(10, 40, "b", score=99.0)],
            RegionChoice("tesseract", (("tesseract", 70.0), ("rapidocr", 99.0))),
        ),
    ],
)
def test_a_table_region_takes_rapidocr_words_only_when_tesseract_is_under_the_region_bar(
    tesseract: list[Word], second: list[Word] | None, expected: RegionChoice
) -> None:
    assert choose_region(tesseract, second) == expected


def test_only_a_region_tesseract_reads_under_the_region_bar_is_read_again() -> None:
    assert needs_second_read(_grid(89.9)) is True
    assert needs_second_read(_grid(90.0)) is False
    assert needs_second_read([]) is False


def test_words_group_into_lines_by_their_vertical_centre() -> None:
    words = [_w(200, 41, "world"), _w(10, 40, "hello"), _w(10, 70, "next"), _w(120, 72, "line")]
    assert [[w.text for w in line] for line in group_lines(words)] == [["hello", "world"], ["next", "line"]]


def test_aligned_short_cells_are_a_table_with_empty_cells_kept() -> None:
    grid = [
        ["Region", "2023", "2024"],
        ["North", "1,204", "1,310"],
        ["South", "", "977"],
        ["Total", "2,101", "2,287"],
    ]
    words = [
        _w(10 + 100 * c, 20 + 30 * r, text)
        for r, row in enumerate(grid)
        for c, text in enumerate(row)
        if text
    ]
    assert table_rows(group_lines(words)) == grid
    read = second_read(words)
    assert read.table == tuple(tuple(r) for r in grid) and read.confidence == 95.0


def test_a_header_spanning_two_columns_does_not_merge_the_columns_below_it() -> None:
    words = [_w(10, 20, "Gene"), _w(110, 20, "Counts in pathway", width=100)]
    for r, (gene, up, down) in enumerate([("TP53", "12", "30"), ("BRCA1", "9", "7"), ("MYC", "15", "21")]):
        y = 50 + 30 * r
        words += [_w(10, y, gene), _w(110, y, up, width=30), _w(170, y, down, width=30)]
    assert table_rows(group_lines(words)) == [
        ["Gene", "Counts in pathway", ""],
        ["TP53", "12", "30"],
        ["BRCA1", "9", "7"],
        ["MYC", "15", "21"],
    ]


def test_a_wrapped_cell_stays_one_cell_and_a_short_line_below_a_short_cell_is_a_row() -> None:
    words = [
        _w(10, 20, "Treatment", width=60),
        _w(200, 20, "Odds"),
        _w(300, 20, "P", width=20),
        _w(10, 50, "Antipsychotic drugs carry a", width=150),
        _w(200, 50, "1.8", width=30),
        _w(300, 50, "0.01", width=30),
        _w(10, 62, "high risk", width=55),  # right below, and "high" did not fit above: a wrap
        _w(10, 92, "Placebo", width=45),
        _w(200, 92, "1.0", width=30),
        _w(300, 92, "0.50", width=30),
        _w(10, 104, "arm", width=20),  # right below, but "arm" fitted after "Placebo": a row
    ]
    assert table_rows(group_lines(words)) == [
        ["Treatment", "Odds", "P"],
        ["Antipsychotic drugs carry a high risk", "1.8", "0.01"],
        ["Placebo", "1.0", "0.50"],
        ["arm", "", ""],
    ]


def test_ruled_columns_make_a_table_of_a_header_over_one_no_results_row() -> None:
    words = [_w(10, 10, "Claim"), _w(200, 10, "Date"), _w(400, 10, "Status"), _w(10, 40, "None", width=60)]
    assert table_rows(group_lines(words)) == []  # one multi-cell row: not a table from word gaps
    assert table_rows(group_lines(words), [5.0, 150.0, 350.0, 600.0]) == [
        ["Claim", "Date", "Status"],
        ["None", "", ""],
    ]


def test_prose_in_two_columns_is_not_a_table() -> None:
    left = "the committee met on tuesday to review the annual budget proposal"
    right = "members agreed that the travel policy needs a simpler approval path"
    words = []
    for r in range(4):
        words.append(_w(10, 20 + 30 * r, left, width=300))
        words.append(_w(400, 20 + 30 * r, right, width=300))
    assert table_rows(group_lines(words)) == []
    assert table_rows(group_lines([_w(10, 20, "one"), _w(10, 50, "two")])) == []  # a single column


# ------------------------------------------------------------------ a real reading


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.truetype("DejaVuSans.ttf", size)
    except OSError:
        return ImageFont.load_default(size=size)


def _table_png(grid: list[list[str]]) -> bytes:
    font = _font(28)
    img = Image.new("L", (900, 80 + 60 * len(grid)), 255)
    draw = ImageDraw.Draw(img)
    for r, row in enumerate(grid):
        for c, text in enumerate(row):
            draw.text((40 + 280 * c, 40 + 60 * r), text, fill=0, font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG", dpi=(150, 150))
    return buf.getvalue()


def test_a_table_image_tesseract_fails_is_read_as_a_table_by_the_second_engine() -> None:
    grid = [["Country", "Cases", "Deaths"], ["Norway", "1840", "22"], ["Sweden", "3102", "105"]]
    page = next(iter_image_pages(_table_png(grid)))
    # A bar Tesseract cannot meet stands for a page it reads poorly.
    strict = OcrOptions(min_confidence=101.0, retry=False)
    alone = ocr_page(page, OcrOptions(min_confidence=101.0, retry=False, second_engine=False))
    assert (alone.passed, alone.engine) == (False, "tesseract")
    result = ocr_page(page, strict)
    assert (result.passed, result.engine) == (True, "rapidocr")
    assert [name for name, _ in result.confidences] == ["tesseract", "rapidocr"]
    assert result.confidences[1][1] >= 85.0
    assert result.tables == (tuple(tuple(r) for r in grid),)
    elements, review, _ = assemble([result])
    assert review == ()
    assert [e.type for e in elements] == [ElementType.TABLE]
    assert elements[0].text.splitlines()[0] == "| Country | Cases | Deaths |"
    assert "| Sweden | 3102 | 105 |" in elements[0].text
    # With the second engine off the page goes to review, as before.
    assert assemble([alone])[1] == (1,)
    assert np.asarray(page.gray).dtype == np.uint8
