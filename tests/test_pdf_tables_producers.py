"""Borderless financial tables printed by different PDF producers: the reconstructed rows, exactly.

Fixtures (``tests/fixtures/pdf_tables/``, made once by ``make.py`` there): one
table with a header row spanning column pairs, currency and percent signs in
cells of their own, right-aligned figures, negatives in parentheses and a
footnote marker, printed by headless Chromium and by the fpdf2 report library.
Their cells are set less than one em apart: searched in runs (words closer
than one em merged), a figure and the next column's currency sign became one
cell and rows lost their columns.
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


@pytest.mark.parametrize("name", ["chromium.pdf", "fpdf2.pdf"])
def test_borderless_table_rows_and_columns(name: str) -> None:
    rows = _table(name)
    assert rows[0] == ["", "", "2024", "", "2023", "Change", ""]
    assert rows[1] == ["EUR million", "", "", "", "", "", ""]
    assert rows[2][0] in ("Net sales 1", "Net sales¹")  # the marker as a word of its own or a glyph
    assert rows[2][1:] == ["€", "4,269.4", "€", "3,981.0", "7.2", "%"]
    assert rows[3:] == BODY
