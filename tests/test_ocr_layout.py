"""Layout before tables on scanned pages, and low confidence recorded, not dropped (issue 38).

Pure tests of the layout rules on word boxes, then the real Tesseract on
rendered pages: a two-column prose page yields no table and its text column
by column; a real table still yields a table; a page below the bar whose
words can be read is indexed with its confidence and listed for review.
"""

from __future__ import annotations

import shutil

import pytest

from ragsync.parsing.ocr_engine import readable_part
from ragsync.parsing.ocr_layout import TsvWord, prose_line, prose_paragraphs
from ragsync.parsing.ocr_model import PageOcr
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


def test_a_page_below_the_bar_keeps_its_lines_read_at_the_region_bar() -> None:
    result = PageOcr(
        page=3,
        paragraphs=(("Readable line", "#@ ~~ ;;"), ("'' ., ~",), ("Another readable line",)),
        confidence=48.0,
        coverage=0.5,
        words=9,
        ink=0.1,
        passed=False,
        paragraph_confidences=(52.0, 12.0, 64.5),
        line_confidences=((91.0, 13.0), (12.0,), (64.5,)),
        tables=((("a", "b"), ("1", "2")),),
        table_positions=(2,),
    )
    kept = readable_part(result, 50.0)
    assert kept.paragraphs == (("Readable line",), ("Another readable line",))
    assert kept.paragraph_confidences == (91.0, 64.5)  # the kept lines' mean
    assert kept.line_confidences == ((91.0,), (64.5,))
    assert kept.table_positions == (1,)  # it followed two paragraphs, one of which went
    assert kept.tables == result.tables and not kept.passed and kept.confidence == 48.0
    assert readable_part(result, 95.0).paragraphs == ()
    # without line confidences the paragraph's stands for each of its lines
    whole = readable_part(
        PageOcr(1, (("a b", "c d"),), 55.0, 0.5, 4, 0.1, False, paragraph_confidences=(55.0,)), 50.0
    )
    assert whole.paragraphs == (("a b", "c d"),)


# ------------------------------------------------------------------ the real Tesseract on rendered pages

_WORDS = [
    "the",
    "compiler",
    "records",
    "nested",
    "loop",
    "traces",
    "separately",
    "and",
    "joins",
    "them",
    "with",
    "calls",
    "from",
    "outer",
    "traces",
    "to",
    "inner",
    "ones;",
    "implementation",
    "considerations",
    "include",
    "interpretation",
    "overhead,",
    "specialization",
    "of",
    "types,",
    "deoptimization,",
    "and",
    "synchronization",
    "between",
    "recorded",
    "fragments",
    "whenever",
    "control",
    "leaves",
    "the",
    "trace",
    "through",
    "an",
    "unexpected",
    "exit",
]


def _columns_page(columns: int = 3, width_mm: float = 52.0, dpi: int = 200) -> tuple[bytes, list[str]]:
    """A page of ``columns`` justified columns of prose (Times 10 pt, 5 mm
    gutters) rendered at ``dpi``: fpdf2 -> PDFium -> gray PNG. Narrow
    justified columns of long words set wide gaps inside lines, which the
    unruled-table rules took for cell gaps (a "table" across the
    three columns before the layout rule). Returns the PNG and each column's text."""
    import io

    import numpy as np
    import pypdfium2 as pdfium
    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF(unit="mm", format="letter")
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("Times", size=10)
    texts = []
    for c in range(columns):
        rng = np.random.default_rng(c)
        text = " ".join(_WORDS[int(i)] for i in rng.integers(0, len(_WORDS), 160))
        texts.append(text)
        pdf.set_xy(15 + c * (width_mm + 5.0), 20)
        pdf.multi_cell(width_mm, 4.2, text, align="J")
    doc = pdfium.PdfDocument(bytes(pdf.output()))
    gray = np.asarray(doc[0].render(scale=dpi / 72, grayscale=True).to_pil().convert("L"))
    doc.close()
    buf = io.BytesIO()
    Image.fromarray(gray).save(buf, format="PNG", dpi=(dpi, dpi))
    return buf.getvalue(), texts


def _tokens(text: str) -> list[str]:
    import re

    return re.findall(r"[a-z]+", text.lower())


@needs_tesseract
def test_three_columns_of_prose_yield_no_table_and_read_column_by_column() -> None:
    from ragsync.parsing import parse

    data, texts = _columns_page()
    result = parse(data, "image/png")
    assert [e.type.value for e in result.elements].count("table") == 0
    assert result.pages_for_review == ()
    read = _tokens(" ".join(e.text for e in result.elements))
    # each column's first eight words are read, in the columns' order (left column first)
    starts = []
    for text in texts:
        head = _tokens(text)[:8]
        found = [i for i in range(len(read) - 7) if read[i : i + 8] == head]
        assert found, head
        starts.append(found[0])
    assert starts == sorted(starts)


@needs_tesseract
def test_a_scanned_table_of_figures_still_yields_a_table() -> None:
    """A table without rules, its cells figures, beside a paragraph: a table
    (the layout rule leaves it to the table rules), the paragraph text."""
    import io

    import numpy as np
    import pypdfium2 as pdfium
    from fpdf import FPDF
    from PIL import Image

    from ragsync.parsing import parse

    rows = [
        ["Region", "Units", "Revenue"],
        ["North", "1,204", "88,310"],
        ["South", "977", "61,002"],
        ["East", "3,310", "240,118"],
    ]
    pdf = FPDF(unit="mm", format=(148, 120))
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.multi_cell(
        0, 6, "Sales by region in the first quarter, as reported by the finance team to the board."
    )
    pdf.ln(4)
    for row in rows:
        for i, cell in enumerate(row):
            pdf.cell(40 if i == 0 else 35, 8, cell, align="L" if i == 0 else "R")
        pdf.ln(8)
    doc = pdfium.PdfDocument(bytes(pdf.output()))
    gray = np.asarray(doc[0].render(scale=300 / 72, grayscale=True).to_pil().convert("L"))
    doc.close()
    buf = io.BytesIO()
    Image.fromarray(gray).save(buf, format="PNG", dpi=(300, 300))
    result = parse(buf.getvalue(), "image/png")
    tables = [e.text for e in result.elements if e.type.value == "table"]
    assert len(tables) == 1
    assert "| North | 1,204 | 88,310 |" in tables[0] and "| East | 3,310 | 240,118 |" in tables[0]
    assert any("finance team" in e.text for e in result.elements if e.type.value == "paragraph")


_POLICY = [
    "The quarterly travel policy applies to every employee who books flights",
    "through the company portal. Receipts must be uploaded within thirty days",
    "of the return date, and managers approve claims above five hundred euros.",
    "Hotel stays are reimbursed up to the city rate published by finance.",
    "Security training is mandatory for new staff during their first week.",
    "Passwords must be at least fourteen characters long and never shared.",
]


def _rgba_chart_page() -> bytes:
    """A 2000 x 2468 RGBA page: six lines of dark blue text over a scatter
    chart of 2,600 red marks the size of letters. Tesseract reads the text
    right, but no word covers the marks (coverage ~0.15 of the bar's 0.7),
    and read as one block the marks become lines of stray letters."""
    import io

    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGBA", (2000, 2468), (255, 255, 255, 255))
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype("DejaVuSans.ttf", 40)
    for i, line in enumerate(_POLICY):
        draw.text((120, 160 + 70 * i), line, font=font, fill=(20, 30, 90, 255))
    rng = np.random.default_rng(3)
    for _ in range(2600):
        x, y = int(rng.integers(150, 1850)), int(rng.integers(800, 2300))
        draw.ellipse((x, y, x + 18, y + 18), fill=(200, 40, 40, 255))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@needs_tesseract
def test_an_rgba_page_below_the_bar_that_tesseract_reads_is_indexed_and_listed_for_review() -> None:
    """Tesseract alone (the second engine off, which would otherwise read
    this page): the page fails the bar (coverage), yet its six lines are
    indexed word for word, each paragraph with its confidence at the region
    bar or more, the marks' lines of stray letters left out (at most one
    short line of them clears it), and the page is listed for review.
    Before issue 38 the page was refused whole (``ocr_below_bar``)."""
    from ragsync.parsing.ocr import parse_image
    from ragsync.parsing.ocr_model import DEFAULT_MIN_REGION_CONFIDENCE, OcrOptions
    from ragsync.parsing.ocr_quality import char_error_rate

    result = parse_image(_rgba_chart_page(), ocr_options=OcrOptions(second_engine=False))
    assert result.pages_for_review == (1,)
    assert all(
        e.confidence is not None and e.confidence >= DEFAULT_MIN_REGION_CONFIDENCE for e in result.elements
    )
    text = " ".join(e.text for e in result.elements)
    policy = " ".join(_POLICY)
    assert text.startswith(policy), text  # the six lines, word for word, in order
    # of the lines of stray letters the marks were read as, at most one short line clears the region bar
    assert len(text) - len(policy) <= 40 and char_error_rate(text, policy) < 0.1, text
