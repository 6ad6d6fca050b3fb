"""Borderless financial tables printed by different PDF producers: the reconstructed rows, exactly.

Fixtures (``tests/fixtures/pdf_tables/``, made once by ``make.py`` there): one
table with a header row spanning column pairs, currency and percent signs in
cells of their own, right-aligned figures, negatives in parentheses and a
footnote marker, printed by headless Chromium, by the fpdf2 report library, by
LibreOffice (a DOCX exported to PDF) and by pdflatex (a ``tabular``).
Their cells are set less than one em apart: searched in runs (words closer
than one em merged), a figure and the next column's currency sign became one
cell and rows lost their columns. LibreOffice wraps the longest row label in
its column and spaces rows apart (the label's second line was a row of its
own, the last row's second line fell out of the table); TeX sets a wider
space after a full stop (a justified line of prose above the table became
cells of it) and the footnote marker right after the word ("sales1").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragsync.model import ElementType
from ragsync.parsing import parse

FIXTURES = Path(__file__).parent / "fixtures" / "pdf_tables"
BODY = [
    ["Cost of sales", "€", "(2,110.5)", "€", "(1,998.2)", "5.6", "%"],
    ["Gross profit", "€", "2,158.9", "€", "1,982.8", "8.9", "%"],
    ["Research and development", "€", "312.0", "€", "298.7", "4.5", "%"],
    ["Operating profit", "€", "845.1", "€", "760.3", "11.2", "%"],
]


def _table(name: str) -> list[list[str]]:
    result = parse((FIXTURES / name).read_bytes(), "application/pdf")
    tables = [e for e in result.elements if e.type == ElementType.TABLE]
    assert len(tables) == 1, [e.text for e in result.elements]
    lines = [ln for ln in tables[0].text.splitlines() if not set(ln) <= set("|- ")]
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]


# The header row as each producer places the spanning cells: centred over the sign and the
# figure (the centre falls in the figure's column), or left-aligned (the sign's column).
CENTRED = ["", "", "2024", "", "2023", "Change", ""]
LEFT = ["", "2024", "", "2023", "", "Change", ""]


@pytest.mark.parametrize(
    ("name", "header", "first"),
    [
        ("chromium.pdf", CENTRED, "Net sales 1"),  # <sup>: a word of its own
        ("fpdf2.pdf", CENTRED, "Net sales¹"),  # the superscript glyph
        ("libreoffice.pdf", LEFT, "Net sales¹"),
        ("latex.pdf", CENTRED, "Net sales 1"),  # \textsuperscript set right after the word
    ],
)
def test_borderless_table_rows_and_columns(name: str, header: list[str], first: str) -> None:
    rows = _table(name)
    assert rows[0] == header
    assert rows[1] == ["EUR million", "", "", "", "", "", ""]
    assert rows[2] == [first, "€", "4,269.4", "€", "3,981.0", "7.2", "%"]
    assert rows[3:] == BODY
