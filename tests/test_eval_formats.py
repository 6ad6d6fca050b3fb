"""The per-format retrieval benchmark's renderings (``benchmarks/eval_formats.py``), without embedding.

Two generated reports are rendered into every format; each file must hold
every table cell, the DOCX table must have no border, and ragsync must parse
the table back from HTML, Markdown, DOCX and every PDF producer's PDF with
the header row first and every row whole. The Chromium PDF needs Chromium:
skipped without it, except in CI with ``RAGSYNC_WITH_CHROMIUM=1`` (as in
``tests/test_report.py``); the LibreOffice and LaTeX PDFs are skipped
without ``soffice`` or ``pdflatex``.
"""

from __future__ import annotations

import html
import io
import re
from pathlib import Path

import pytest

from ragsync.ingest.detect import detect_mime
from ragsync.model import ElementType
from ragsync.parsing import parse
from tests.bench_module import load_benchmark
from tests.chromium import fail_if_chromium_required, find_chromium

ef = load_benchmark("eval_formats")


def _formats() -> tuple[str, ...]:
    if find_chromium() is None:
        fail_if_chromium_required("the PDF rendering must be tested")
    # LibreOffice and pdflatex are optional producers: their formats are left out without them.
    # The scan is read back by OCR, not exactly: test_the_scan_is_a_picture_of_the_page checks it.
    return tuple(f for f in ef.FORMATS if f != "scan" and ef.producer_missing(f) is None)


def test_the_scan_is_a_picture_of_the_page() -> None:
    from PIL import Image

    (rep,), _ = ef.generate(1, 11)
    png = ef.render_scan(ef.render_fpdf2(rep), seed=3)
    assert png == ef.render_scan(ef.render_fpdf2(rep), seed=3)  # a function of its seed
    image = Image.open(io.BytesIO(png))
    assert image.mode == "L" and image.info["dpi"][0] == pytest.approx(200, abs=1)
    assert image.size[0] > 1600  # an A4 page at 200 dpi, turned
    assert detect_mime(png, "x.png") == "image/png"


def _md_rows(markdown: str) -> list[list[str]]:
    rows = []
    for line in markdown.splitlines():
        if re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", line.strip()):
            continue
        rows.append([" ".join(c.split()) for c in line.strip().strip("|").split("|")])
    return rows


def test_generation_is_a_function_of_the_seed() -> None:
    reports, questions = ef.generate(5, 3)
    again, questions_again = ef.generate(5, 3)
    assert reports == again and questions == questions_again
    assert ef.generate(5, 4)[0] != reports
    assert len(questions) == 20
    assert [q.target for q in questions].count("table") == 15
    for rep in reports:
        assert 4 <= len(rep.rows) <= 8 and 3 <= len(rep.header) <= 5
        assert all(len(row) == len(rep.header) for row in rep.rows)
        company = rep.title.rsplit(" annual report", 1)[0]
        mine = [q for q in questions if q.slug == rep.slug]
        assert len(mine) == 4 and [company in q.text for q in mine] == [True, True, False, True]
        # Each table question names one row label of its own report; the
        # third one names a cell value of that row instead of the company.
        for q in mine[:3]:
            assert q.target == "table" and any(row[0].lower() in q.text.lower() for row in rep.rows)
        assert any(
            f"{row[0]} (" in mine[2].text and any(c in mine[2].text for c in row[1:]) for row in rep.rows
        )


def test_every_rendering_holds_the_table_and_parses_back_header_first(tmp_path: Path) -> None:
    formats = _formats()
    reports, _ = ef.generate(2, 11)
    folders = ef.render_all(reports, formats, tmp_path)
    assert set(folders) == set(formats)
    for rep in reports:
        truth = [list(rep.header), *(list(r) for r in rep.rows)]
        for fmt in formats:
            name = f"{rep.slug}.{ef.extension(fmt)}"
            data = (folders[fmt] / name).read_bytes()
            if fmt in ("html", "md", "txt"):
                text = data.decode("utf-8")
                for cell in rep.cells():
                    assert (html.escape(cell) if fmt == "html" else cell) in text, (fmt, cell)
                for para in rep.paragraphs:
                    assert (html.escape(para) if fmt == "html" else para) in text, fmt
            if fmt == "docx":
                from docx import Document

                doc = Document(io.BytesIO(data))
                assert len(doc.tables) == 1
                assert [[c.text for c in row.cells] for row in doc.tables[0].rows] == truth
                assert b"tblBorders" not in data and b"w:tcBorders" not in data
            if fmt.startswith("pdf"):
                import pypdfium2 as pdfium

                pdf = pdfium.PdfDocument(data)
                assert len(pdf) == 1
                page_text = " ".join(pdf[0].get_textpage().get_text_range().split())
                for cell in rep.cells():
                    assert cell in page_text, cell
            if fmt == "txt":
                continue  # plain text has no table markup to parse back
            result = parse(data, detect_mime(data, name), filename=name)
            tables = [e for e in result.elements if e.type == ElementType.TABLE]
            assert len(tables) == 1, (fmt, [e.type for e in result.elements])
            assert _md_rows(tables[0].text) == truth, fmt
            body = " ".join(e.text for e in result.elements if e.type != ElementType.TABLE)
            for para in rep.paragraphs:
                assert para in " ".join(body.split()), fmt
