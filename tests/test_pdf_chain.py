"""PDF fallback chain, long documents, borderless tables, text outside the reading flow, OCR confidence."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragsync.errors import CorruptDocumentError, EncryptedDocumentError, TooLargeError
from ragsync.model import Chunk, Element, ElementType
from ragsync.parsing import parse
from tests.corpus import CORPUS, CORPUS_MISSING, have_corpus
from tests.fixtures_gen import long_pdf_bytes, text_pdf_bytes

PDF = "application/pdf"
LONG_PAGES = 1500
corpus_required = pytest.mark.skipif(not have_corpus(), reason=CORPUS_MISSING)


@pytest.fixture(scope="session")
def long_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 pages: a running header and page-number footer, a heading every 10 pages, marked paragraphs."""
    words = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
        "mike",
    ]

    def chapter(page: int) -> str:
        return f"Chapter {page // 10 + 1}: {words[page % 13].title()}" if page % 10 == 1 else ""

    def paragraph(page: int, para: int) -> str:
        filler = " ".join(words[(page + para + k) % 13] for k in range(24))
        return f"Marker p{page}x{para}: {filler}."

    path = tmp_path_factory.mktemp("long") / "long.pdf"
    path.write_bytes(long_pdf_bytes(LONG_PAGES, paragraph, chapter))
    return path


# --------------------------------------------------------------------------- fallback chain


def test_pdfium_rejects_pdfminer_reads_generated() -> None:
    """A PDF behind 2 KB of junk: PDFium refuses it, pdfminer finds the header and reads it."""
    data = (
        b"%"
        + b"x" * 2047
        + b"\n"
        + text_pdf_bytes(["Fallback chain sample text here", "Second line of text"])
    )
    import pypdfium2 as pdfium

    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(data)
    result = parse(data, PDF)
    assert result.page_parsers == ("pdfminer",)
    assert [e.text for e in result.elements] == ["Fallback chain sample text here", "Second line of text"]


def test_no_parser_reads_it_is_corrupt() -> None:
    with pytest.raises(CorruptDocumentError, match="neither PDFium"):
        parse(b"%PDF-1.4\n" + b"\x00garbage" * 200, PDF)


def test_text_layer_pages_record_pdfium() -> None:
    result = parse(text_pdf_bytes(["Plain text layer page with enough characters to count."]), PDF)
    assert result.page_parsers == ("pdfium",)
    assert all(e.confidence is None for e in result.elements)


@corpus_required
def test_corpus_pdf_only_the_fallback_reads() -> None:
    """pdf.js issue15893_reduced.pdf: PDFium rejects it (an encryption update), pdfminer reads the text."""
    data = (CORPUS / "documents" / "pdfjs" / "issue15893_reduced.pdf").read_bytes()
    import pypdfium2 as pdfium

    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(data)
    result = parse(data, PDF)
    assert result.page_parsers == ("pdfminer",)
    assert [e.text for e in result.elements] == ["Issue 15893"]


@corpus_required
def test_corpus_password_pdf_stays_encrypted() -> None:
    data = (CORPUS / "documents" / "pdfplumber" / "password-example.pdf").read_bytes()
    with pytest.raises(EncryptedDocumentError):
        parse(data, PDF)


# --------------------------------------------------------------------------- long documents


def test_long_pdf_parses_completely(long_pdf: Path) -> None:
    result = parse(long_pdf.read_bytes(), PDF)
    assert result.pages == LONG_PAGES
    assert result.page_parsers == ("pdfium",) * LONG_PAGES
    text = "\n".join(e.text for e in result.elements)
    markers = set(re.findall(r"Marker p(\d+)x(\d)", text))
    assert len(markers) == LONG_PAGES * 3
    assert {int(p) for p, _ in markers} == set(range(1, LONG_PAGES + 1))
    # running header and page-number footer are gone, chapter headings are kept
    assert "Long Document Society" not in text
    assert not re.search(r"Page \d+ of", text)
    headings = [e for e in result.elements if e.type == ElementType.HEADING]
    assert len(headings) == LONG_PAGES // 10
    assert headings[-1].page == LONG_PAGES - 9


def test_long_pdf_over_the_page_limit_is_too_large(long_pdf: Path) -> None:
    with pytest.raises(TooLargeError, match="1500 pages, above the limit of 1000"):
        parse(long_pdf.read_bytes(), PDF, max_pages=1000)


def test_long_pdf_within_the_parse_memory_limit(long_pdf: Path) -> None:
    """The parse child's RLIMIT_DATA (Settings.parse_memory_mb) holds for 1,500 pages."""
    from ragsync.config import Settings

    limit_mb = Settings(home="/tmp/unused").parse_memory_mb
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_DATA, ({limit_mb} * 1024 * 1024, resource.RLIM_INFINITY))\n"
        "from ragsync.parsing import parse\n"
        f"r = parse(open({str(long_pdf)!r}, 'rb').read(), 'application/pdf')\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "print(r.pages, len(r.elements), peak)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    pages, elements, peak_mb = (int(v) for v in out.stdout.split())
    assert pages == LONG_PAGES and elements >= LONG_PAGES * 3
    assert peak_mb < limit_mb


# --------------------------------------------------------------------------- tables


def _borderless_pdf() -> bytes:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.set_xy(50, 60)
    pdf.multi_cell(
        480,
        14,
        "The board reviewed the results of the year. Revenue grew in every region, "
        "and operating costs were held flat against the plan agreed in spring.",
    )
    rows = [
        ["Region", "2022", "2023", "Change"],
        ["North", "1,204", "1,377", "14.4%"],
        ["South", "987", "1,010", "2.3%"],
        ["East", "2,450", "2,612", "6.6%"],
        ["West", "310", "295", "-4.8%"],
    ]
    xs = [50, 200, 290, 380]
    y = 140
    for row in rows:
        for x, cell in zip(xs, row, strict=True):
            pdf.set_xy(x, y)
            pdf.cell(80, 14, cell)
        y += 16
    pdf.set_xy(50, y + 20)
    pdf.multi_cell(480, 14, "The West region fell short because one large contract ended early.")
    return bytes(pdf.output())


def test_borderless_table_rows_keep_their_header() -> None:
    result = parse(_borderless_pdf(), PDF)
    tables = [e for e in result.elements if e.type == ElementType.TABLE]
    assert [t.text for t in tables] == [
        "| Region | 2022 | 2023 | Change |\n| --- | --- | --- | --- |\n| North | 1,204 | 1,377 | 14.4% |\n"
        "| South | 987 | 1,010 | 2.3% |\n| East | 2,450 | 2,612 | 6.6% |\n| West | 310 | 295 | -4.8% |"
    ]
    paragraphs = [e.text for e in result.elements if e.type == ElementType.PARAGRAPH]
    assert paragraphs[0].startswith("The board reviewed") and paragraphs[-1].startswith("The West region")
    assert not any("1,204" in p for p in paragraphs)


def test_two_column_prose_is_not_a_table(tmp_path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    text = "Plain prose in two columns should never be mistaken for a table of short cells. " * 6
    for x in (50, 310):
        pdf.set_xy(x, 60)
        pdf.multi_cell(230, 13, text)
    result = parse(bytes(pdf.output()), PDF)
    assert not [e for e in result.elements if e.type == ElementType.TABLE]


def test_join_line_reads_right_to_left_words_from_the_right() -> None:
    from ragsync.parsing.pdf_text import Item, join_line

    def words(*texts: str) -> list[Item]:
        return [Item(10.0 * i, 10.0 * i + 8, 0, 10, 10, t) for i, t in enumerate(texts)]

    assert join_line(words("Total", "2014")) == "Total 2014"
    assert join_line(words("גולמי", "מקומי", "תוצר")) == "תוצר מקומי גולמי"
    assert join_line(words("(1)", "לנפש")) == "לנפש (1)"  # digits are weak: the Hebrew decides
    assert join_line(words("ICDAR", "2013", "מבחן")) == "ICDAR 2013 מבחן"  # more Latin letters


def test_line_end_hyphen_before_a_capital_is_kept() -> None:
    from ragsync.parsing.pdf_text import _hard_hyphens

    assert _hard_hyphens("South\ufffeEast") == "South-East"  # a compound broken at its hyphen
    assert _hard_hyphens("headquar\ufffetered") == "headquar\ufffetered"  # soft: dropped later


@corpus_required
def test_corpus_right_to_left_table_labels_in_reading_order() -> None:
    """ICDAR 2013 / tabula's indictb1h_14 (Bank of Israel): Hebrew row labels."""
    pdf = CORPUS / "parse_groundtruth" / "tabula-java" / "indictb1h_14.pdf"
    result = parse(pdf.read_bytes(), PDF)
    (table,) = [e.text for e in result.elements if e.type == ElementType.TABLE]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    labels = [r[-1] for r in rows]
    assert "תוצר מקומי גולמי" in labels and "סך הכל" in labels and "סך הכל - לנפש" in labels
    assert rows[labels.index("סך הכל")][:6] == ["2.6", "3.2", "3.0", "4.2", "5.8", "1.9"]


# --------------------------------------------------------------------------- layout


@corpus_required
@pytest.mark.parametrize(
    ("rel", "stamp"),
    [
        ("unstructured/pdf/layout-parser-paper-fast.pdf", "arXiv:2103.15348v2"),
        ("unstructured/pdf/multi-column-2p.pdf", "arXiv:2004.04906v3"),
        ("pdfplumber/issue-982-example.pdf", "arXiv:1601.03642v1"),
    ],
)
def test_corpus_arxiv_margin_stamp_not_in_paragraphs(rel: str, stamp: str) -> None:
    result = parse((CORPUS / "documents" / rel).read_bytes(), PDF)
    assert not [e.text for e in result.elements if stamp in e.text]
    assert len(result.elements) > 10


def test_line_numbers_left_out() -> None:
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    lines = [f"Line {w} of a manuscript with numbered lines for the reviewers to cite." for w in "abcdefgh"]
    for i, line in enumerate(lines, start=1):
        y = 80 + 16 * i
        pdf.set_xy(30, y)
        pdf.cell(20, 14, str(i))
        pdf.set_xy(70, y)
        pdf.cell(400, 14, line)
    result = parse(bytes(pdf.output()), PDF)
    assert [e.text for e in result.elements] == [" ".join(lines)]


# --------------------------------------------------------------------------- OCR confidence


def test_confidence_round_trips_and_old_json_still_reads() -> None:
    element = Element(ElementType.PARAGRAPH, "scanned words", page=2, order=0, confidence=87.5)
    assert json.loads(element.to_json())["confidence"] == 87.5
    assert Element.from_json(element.to_json()) == element
    plain = Element(ElementType.PARAGRAPH, "text layer", page=1)
    assert "confidence" not in json.loads(plain.to_json())  # old records keep their exact JSON
    assert (
        Element.from_json(
            '{"type": "paragraph", "text": "old", "level": 0, "page": 1, "order": 0}'
        ).confidence
        is None
    )
    chunk = Chunk("c" * 32, "d", "t", "h", 0, (), 1, "x", 1, ("a",), ocr_confidence=61.0)
    assert Chunk.from_json(chunk.to_json()).ocr_confidence == 61.0


def test_chunk_confidence_is_the_lowest_ocr_confidence() -> None:
    from ragsync.embedding.models import default_model, load_tokenizer
    from ragsync.ingest.chunking import ChunkerConfig, chunk_elements

    elements = [
        Element(ElementType.PARAGRAPH, "first scanned paragraph", page=1, order=0, confidence=91.0),
        Element(ElementType.PARAGRAPH, "second scanned paragraph", page=1, order=1, confidence=74.5),
        Element(ElementType.PARAGRAPH, "a text layer paragraph", page=2, order=2),
    ]
    chunks = chunk_elements(
        elements,
        ChunkerConfig(),
        load_tokenizer(default_model().path),
        doc_id="d",
        tenant_id="t",
        acl_ids=["a"],
    )
    assert [c.ocr_confidence for c in chunks] == [74.5]
    plain = chunk_elements(
        elements[2:],
        ChunkerConfig(),
        load_tokenizer(default_model().path),
        doc_id="d",
        tenant_id="t",
        acl_ids=["a"],
    )
    assert [c.ocr_confidence for c in plain] == [None]


def test_cli_parse_json_shows_page_parsers_and_confidence(tmp_path: Path) -> None:
    path = tmp_path / "doc.pdf"
    path.write_bytes(text_pdf_bytes(["A page of text that the command line shows as parsed by PDFium."]))
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "parse", str(path), "--json"],
        capture_output=True,
        text=True,
        env=os.environ,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["page_parsers"] == [{"first": 1, "last": 1, "parser": "pdfium"}]
    assert data["elements"][0]["confidence"] is None
