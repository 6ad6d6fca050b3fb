"""OCR of scanned PDFs and images (Tesseract), the quality bar, and the OCR lane."""

from __future__ import annotations

import io
import pathlib
import shutil
import struct
import tracemalloc
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from ragsync.errors import CorruptDocumentError, OcrBelowBarError, TooLargeError
from ragsync.ingest.detect import choose_lane, needs_ocr
from ragsync.parsing import parse
from ragsync.parsing.ocr import OcrOptions, PageImage, iter_image_pages, ocr_page
from ragsync.parsing.ocr_layout import parse_tsv
from ragsync.parsing.ocr_model import PageOcr
from ragsync.parsing.ocr_quality import (
    PAPER_SPREAD,
    SMALL_GLYPH_CONFIDENCE,
    SPECKS_PER_1000,
    char_error_rate,
    coverage,
    glyph_height,
    ink_mask,
    ink_threshold,
    paper_spread,
    preprocessing,
    speck_density,
    text_ink,
    upscale_factor,
)
from tests.corpus import CORPUS, CORPUS_MISSING
from tests.fixtures_gen import text_pdf_bytes

PDF = "application/pdf"

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract-ocr not installed")

PAGE_A = [
    "The quarterly travel policy applies to every employee who books flights",
    "through the company portal. Receipts must be uploaded within thirty days",
    "of the return date, and managers approve claims above five hundred euros.",
    "Hotel stays are reimbursed up to the city rate published by finance.",
]
PAGE_B = [
    "Security training is mandatory for new staff during their first week.",
    "Passwords must be at least fourteen characters long and never shared.",
    "Report lost laptops to the service desk immediately by phone or email.",
]


def _text_png(lines: list[str], size_mm: tuple[float, float] = (148, 105), dpi: int = 300) -> bytes:
    """A 'scan' of known text: fpdf2 page -> PDFium render -> grayscale PNG bytes."""
    import pypdfium2 as pdfium
    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF(unit="mm", format=size_mm)
    pdf.set_margins(8, 8)
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    for line in lines:
        pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    doc = pdfium.PdfDocument(bytes(pdf.output()))
    image = doc[0].render(scale=dpi / 72, grayscale=True).to_pil()
    doc.close()
    buf = io.BytesIO()
    Image.fromarray(np.asarray(image.convert("L"))).save(buf, format="PNG", dpi=(dpi, dpi))
    return buf.getvalue()


def _noise_png(size_px: tuple[int, int] = (1748, 1240), seed: int = 7) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size_px, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _image_pdf(pngs: list[bytes], size_mm: tuple[float, float] = (148, 105)) -> bytes:
    """An image-only PDF: one full-page image per page, no text layer."""
    from fpdf import FPDF

    pdf = FPDF(unit="mm", format=size_mm)
    for png in pngs:
        pdf.add_page()
        pdf.image(io.BytesIO(png), x=0, y=0, w=size_mm[1], h=size_mm[0])
    return bytes(pdf.output())


@pytest.fixture(scope="module")
def page_a() -> bytes:
    return _text_png(PAGE_A)


@pytest.fixture(scope="module")
def page_b() -> bytes:
    return _text_png(PAGE_B)


# --------------------------------------------------------------------------- pure helpers


def test_char_error_rate() -> None:
    assert char_error_rate("kitten", "sitting") == pytest.approx(3 / 7)
    assert char_error_rate("a  b\nc", "a b c") == 0.0
    assert char_error_rate("", "abc") == 1.0
    assert char_error_rate("", "") == 0.0


def test_parse_tsv_rebuilds_lines_and_paragraphs() -> None:
    header = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext"
    rows = [
        "1\t1\t0\t0\t0\t0\t0\t0\t100\t100\t-1\t",
        "5\t1\t1\t1\t1\t1\t10\t10\t20\t10\t90\tHello",
        "5\t1\t1\t1\t1\t2\t35\t10\t20\t10\t80\tex-",
        "5\t1\t1\t1\t2\t1\t10\t25\t20\t10\t70\tplain",
        "5\t1\t1\t1\t2\t2\t35\t25\t20\t10\t-1\t ",
        "5\t1\t2\t1\t1\t1\t10\t60\t20\t10\t60\tBye",
    ]
    tsv = parse_tsv("\n".join([header, *rows]))
    assert tsv.paragraphs == [["Hello ex-", "plain"], ["Bye"]]
    assert tsv.confs == [90.0, 80.0, 70.0, 60.0]
    assert tsv.boxes[0] == (10, 10, 30, 20)


def test_text_ink_ignores_pictures() -> None:
    gray = np.full((600, 600), 255, dtype=np.uint8)
    gray[100:110, 100:130] = 0  # a "character": 30x10 px at 300 dpi
    gray[300:560, 300:560] = 0  # a photo: 260 px > 0.4 in
    ink = ink_mask(gray)
    assert int(ink.sum()) == 300 + 260 * 260
    text, factor = text_ink(ink, 300)
    assert factor == 1
    assert int(text.sum()) == 300
    assert coverage(text, [(100, 100, 130, 110)], factor) == 1.0
    assert coverage(ink, [(100, 100, 130, 110)], factor) == pytest.approx(300 / (300 + 260 * 260))


@pytest.mark.parametrize(
    ("height", "factor"),
    [(0.0, 1.0), (12.0, 1.0), (23.0, 1.0), (10.0, 2.0), (8.0, 2.5), (5.0, 4.0), (3.0, 4.0)],
)
def test_upscale_factor_brings_small_glyphs_to_twenty_pixels_at_most_four_times(
    height: float, factor: float
) -> None:
    assert upscale_factor(height) == factor


def test_glyph_height_is_the_median_letter_leaving_out_rules_and_specks() -> None:
    ink = np.zeros((400, 600), dtype=bool)
    for i, h in enumerate([9, 10, 10, 11, 10]):  # five letters, median 10
        ink[100 : 100 + h, 20 + 15 * i : 28 + 15 * i] = True
    ink[300:303, 10:590] = True  # a rule: far wider than tall
    ink[50, 50] = True  # a speck
    ink[20:380, 550:560] = True  # a frame edge taller than 5 % of the page
    assert glyph_height(ink) == 10.0
    assert glyph_height(np.zeros((10, 10), dtype=bool)) == 0.0


@needs_tesseract
def test_a_low_resolution_scan_is_scaled_up_before_tesseract_reads_it() -> None:
    """A 75 dpi scan: 7 px letters; read as it is, CER > 0.03; scaled up to
    ~20 px letters, under 0.02. A 300 dpi scan is read as it came."""
    from ragsync.parsing.ocr import iter_image_pages

    low = next(iter_image_pages(_text_png(PAGE_A, dpi=75)))
    assert glyph_height(ink_mask(low.gray)) == 7.0
    raw = ocr_page(low, OcrOptions(second_engine=False, normalise_resolution=False))
    scaled = ocr_page(low, OcrOptions(second_engine=False, normalise_resolution=True))
    assert (raw.scale, scaled.scale) == (1.0, 2.857)
    assert char_error_rate(" ".join(raw.paragraph_texts()), " ".join(PAGE_A)) > 0.03
    assert char_error_rate(" ".join(scaled.paragraph_texts()), " ".join(PAGE_A)) < 0.02
    assert scaled.passed and scaled.words == len(" ".join(PAGE_A).split())
    full = next(iter_image_pages(_text_png(PAGE_A, dpi=300)))
    assert ocr_page(full, OcrOptions(second_engine=False, normalise_resolution=True)).scale == 1.0
    assert ocr_page(low, OcrOptions(second_engine=False)).scale == 1.0  # off by default


# --------------------------------------------------------------------------- degraded scans


@pytest.mark.parametrize(
    ("specks", "spread", "steps"),
    [
        (0.0, 0.0, ()),  # a clean scan is read as it came
        (SPECKS_PER_1000 - 0.01, PAPER_SPREAD - 0.01, ()),
        (SPECKS_PER_1000, 0.0, ("despeckle",)),  # salt and pepper: median filter
        (0.0, PAPER_SPREAD, ("flatten",)),  # uneven light: background divided out
        (15.0, 70.0, ("despeckle", "flatten")),  # both, specks first
    ],
)
def test_preprocessing_follows_the_measured_specks_and_paper_spread(
    specks: float, spread: float, steps: tuple[str, ...]
) -> None:
    assert preprocessing(specks, spread) == steps


def _speckled(gray: np.ndarray, share: float = 0.06, seed: int = 28) -> np.ndarray:
    """``gray`` with ``share`` of its pixels turned black or white at random."""
    noisy = gray.copy()
    noise = np.random.default_rng(seed).random(gray.shape)
    noisy[noise < share / 2] = 0
    noisy[noise > 1 - share / 2] = 255
    return noisy


def _shadowed(gray: np.ndarray) -> np.ndarray:
    """``gray`` at 45 % contrast, lit from 55 % at the left edge to 100 % at the bottom right."""
    h, w = gray.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    light = 0.55 + 0.45 * (xx / w) * (0.6 + 0.4 * yy / h)
    return np.clip((gray.astype(np.float32) * 0.45 + 110) * light, 0, 255).astype(np.uint8)


def test_speck_density_counts_isolated_specks_and_paper_spread_uneven_light() -> None:
    page = np.full((200, 300), 255, dtype=np.uint8)
    for i in range(10):  # ten 8 x 10 px "letters" on a line
        page[50:60, 20 + 20 * i : 28 + 20 * i] = 0
    page[58, 17] = 0  # a speck 3 px left of the first letter: near ink, not isolated
    assert speck_density(page, ink_threshold(page)[0]) == 0.0
    specked = page.copy()
    specked[150, 20:300:20] = 0  # 14 single-pixel specks far from the text
    assert speck_density(specked, ink_threshold(specked)[0]) == pytest.approx(1000 * 14 / page.size)
    assert paper_spread(page) == 0.0
    lit = np.tile(np.linspace(130, 250, 300).astype(np.uint8), (200, 1))  # dark at the left, bright right
    assert 90 < paper_spread(lit) < 120
    assert paper_spread(np.full((4, 4), 255, dtype=np.uint8)) == 0.0


@needs_tesseract
@pytest.mark.parametrize(
    ("degrade", "steps", "raw_errors", "default_errors"),
    [(_speckled, ("despeckle",), 15, 4), (_shadowed, ("flatten",), 40, 2)],
)
def test_a_degraded_scan_is_cleaned_before_tesseract_reads_it(
    degrade: Callable[[np.ndarray], np.ndarray], steps: tuple[str, ...], raw_errors: int, default_errors: int
) -> None:
    """The real engines on a rendered page at 150 dpi, speckled (6 % salt and
    pepper) or shadowed: raw Tesseract misreads it (more than ``raw_errors``
    character errors), the default path cleans it first and reads it with at
    most ``default_errors``."""
    clean = next(iter_image_pages(_text_png(PAGE_A, dpi=150)))
    page = PageImage(1, degrade(clean.gray), 150)
    raw = ocr_page(page, OcrOptions(second_engine=False, tables=False, preprocess=False))
    default = ocr_page(page)
    truth = " ".join(PAGE_A)

    def errors(result: PageOcr) -> int:
        return round(char_error_rate(" ".join(result.paragraph_texts()), truth) * len(truth))

    assert (raw.preprocessed, default.preprocessed) == ((), steps)
    assert errors(raw) > raw_errors
    assert errors(default) <= default_errors
    assert ocr_page(clean).preprocessed == ()  # the clean page is read as it came


@needs_tesseract
def test_a_page_of_small_glyphs_tesseract_is_unsure_of_is_read_again_scaled_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 75 dpi page (7 px letters) read at a confidence over
    ``SMALL_GLYPH_CONFIDENCE`` stays as it came; with the bar above its
    confidence (standing for a coarser, blurred scan) it is read again scaled
    up and the better reading, with fewer errors, is kept."""
    from ragsync.parsing import ocr_engine

    low = next(iter_image_pages(_text_png(PAGE_A, dpi=75)))
    options = OcrOptions(second_engine=False)
    first = ocr_page(low, options)
    assert first.scale == 1.0 and SMALL_GLYPH_CONFIDENCE <= first.confidence < 90
    monkeypatch.setattr(ocr_engine, "SMALL_GLYPH_CONFIDENCE", 90.0)
    again = ocr_page(low, options)
    assert again.scale == 2.857 and again.confidence > first.confidence
    truth = " ".join(PAGE_A)
    assert char_error_rate(" ".join(again.paragraph_texts()), truth) < 0.02
    assert char_error_rate(" ".join(first.paragraph_texts()), truth) > 0.02
    assert ocr_page(low, OcrOptions(second_engine=False, preprocess=False)).scale == 1.0


# --------------------------------------------------------------------------- OCR


@needs_tesseract
def test_scanned_pdf_is_ocrd_with_low_cer(page_a: bytes) -> None:
    data = _image_pdf([page_a])
    result = parse(data, PDF)
    assert result.pages == 1
    assert result.pages_for_review == ()
    assert {e.page for e in result.elements} == {1}
    assert [e.order for e in result.elements] == list(range(len(result.elements)))
    text = " ".join(e.text for e in result.elements)
    cer = char_error_rate(text, " ".join(PAGE_A))
    assert cer < 0.02, (cer, text)
    assert result.ocr_confidence is not None and result.ocr_confidence >= 85


@needs_tesseract
def test_missing_text_lowers_coverage(page_a: bytes) -> None:
    """Confidence cannot see dropped regions; coverage does (half the words -> ~0.5)."""
    from ragsync.parsing.ocr import iter_image_pages
    from ragsync.parsing.tesseract import run_tesseract

    page = next(iter_image_pages(page_a))
    tsv = parse_tsv(run_tesseract(page.gray, 3, page.dpi))
    text, factor = text_ink(ink_mask(page.gray), page.dpi)
    full = coverage(text, tsv.boxes, factor)
    mid = page.gray.shape[1] // 2
    left_only = [b for b in tsv.boxes if b[2] <= mid]
    half = coverage(text, left_only, factor)
    assert full >= 0.97
    assert 0.3 <= half <= 0.7
    assert half < OcrOptions().min_coverage


@needs_tesseract
def test_garbage_page_goes_to_review(page_a: bytes, page_b: bytes) -> None:
    data = _image_pdf([page_a, _noise_png(), page_b])
    result = parse(data, PDF)
    assert result.pages == 3
    assert result.pages_for_review == (2,)
    assert {e.page for e in result.elements} == {1, 3}
    page3 = " ".join(e.text for e in result.elements if e.page == 3)
    assert char_error_rate(page3, " ".join(PAGE_B)) < 0.02


@needs_tesseract
def test_all_pages_below_bar_raises() -> None:
    small = (60.0, 45.0)  # mm: 531x709 px at 300 dpi, keeps the test fast
    data = _image_pdf([_noise_png((709, 531), seed=1), _noise_png((709, 531), seed=2)], small)
    with pytest.raises(OcrBelowBarError):
        parse(data, PDF)
    with pytest.raises(OcrBelowBarError):
        parse(_noise_png((600, 500), seed=3), "image/png")


@needs_tesseract
def test_noise_page_fails_bar_directly() -> None:
    from PIL import Image

    gray = np.asarray(Image.open(io.BytesIO(_noise_png((600, 500)))), dtype=np.uint8)
    result = ocr_page(PageImage(4, gray, 300))
    assert result.page == 4
    assert not result.passed
    assert not result.blank
    assert result.retried


@needs_tesseract
def test_multipage_tiff_page_numbers(page_a: bytes, page_b: bytes) -> None:
    from PIL import Image

    frames = [
        Image.open(io.BytesIO(page_a)).convert("L"),
        Image.new("L", (1240, 1748), 255),  # blank page: passes, no text, not for review
        Image.open(io.BytesIO(page_b)).convert("L"),
    ]
    buf = io.BytesIO()
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:], dpi=(300, 300))
    result = parse(buf.getvalue(), "image/tiff")
    assert result.pages == 3
    assert result.pages_for_review == ()
    assert {e.page for e in result.elements} == {1, 3}
    page1 = " ".join(e.text for e in result.elements if e.page == 1)
    page3 = " ".join(e.text for e in result.elements if e.page == 3)
    assert char_error_rate(page1, " ".join(PAGE_A)) < 0.02
    assert char_error_rate(page3, " ".join(PAGE_B)) < 0.02


class _TesseractRuns:
    """Counts the Tesseract processes ``tesseract.run_tesseract`` starts (the real ones run) and
    keeps their inputs."""

    def __init__(self) -> None:
        import subprocess

        self.inputs: list[bytes] = []
        self.commands: list[list[str]] = []
        self._run = subprocess.run  # the real one, before it is patched

    def __call__(self, cmd: list[str], *args: object, **kwargs: object) -> object:
        from ragsync.parsing.tesseract import tesseract_path

        if tesseract_path() in cmd:
            self.commands.append(list(cmd))
            with open(cmd[cmd.index(tesseract_path()) + 1], "rb") as f:
                self.inputs.append(f.read())
        return self._run(cmd, *args, **kwargs)  # type: ignore[call-overload]


@needs_tesseract
def test_page_above_bar_runs_tesseract_once(
    page_a: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """No double pass: a page that meets the bar costs one Tesseract run, on the file's own bytes.

    A gray PNG goes to Tesseract as it is (what the raw CLI reads, no re-encoding); a rendered PDF
    page as an uncompressed TIFF. The temporary image files are removed.
    """
    import tempfile

    from ragsync.parsing import tesseract

    runs = _TesseractRuns()
    monkeypatch.setattr(tesseract.subprocess, "run", runs)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = parse(page_a, "image/png")
    assert result.pages_for_review == ()
    assert char_error_rate(" ".join(e.text for e in result.elements), " ".join(PAGE_A)) < 0.02
    assert len(runs.commands) == 1
    assert runs.inputs == [page_a]
    assert "tsv" in runs.commands[0] and "--psm" in runs.commands[0]

    result = parse(_image_pdf([page_a, page_a]), PDF)
    assert result.pages_for_review == ()
    assert {e.page for e in result.elements} == {1, 2}
    assert len(runs.commands) == 3  # one more per page
    assert all(data[:4] in (b"II*\x00", b"MM\x00*") for data in runs.inputs[1:])
    assert list(tmp_path.iterdir()) == []


@needs_tesseract
def test_file_bytes_and_encoded_pixels_read_the_same(page_a: bytes) -> None:
    """Tesseract's output is the same whether it reads the PNG file or our encoding of its pixels."""
    from PIL import Image

    from ragsync.parsing.ocr import iter_image_pages
    from ragsync.parsing.tesseract import run_tesseract

    page = next(iter_image_pages(page_a))
    assert page.source == page_a
    from_file = run_tesseract(page.gray, 3, page.dpi, source=page.source)
    encoded = run_tesseract(page.gray, 3, page.dpi)
    assert len(parse_tsv(from_file).confs) >= 40
    assert from_file == encoded

    # pixels Tesseract would read differently from Pillow are encoded from ours instead
    im = Image.open(io.BytesIO(page_a))
    rgb, rotated = io.BytesIO(), io.BytesIO()
    im.convert("RGB").save(rgb, format="PNG", dpi=(300, 300))
    exif = Image.Exif()
    exif[0x0112] = 6  # turned 90 degrees
    im.save(rotated, format="PNG", dpi=(300, 300), exif=exif)
    for data in (rgb.getvalue(), rotated.getvalue()):
        assert next(iter_image_pages(data)).source is None
    assert next(iter_image_pages(rotated.getvalue())).gray.shape == page.gray.shape[::-1]


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(("width", "height"), [(12_000, 10_000), (50_000, 50_000)])
def test_decompression_bomb_refused_without_allocating(width: int, height: int) -> None:
    data = _png_header_only(width, height)
    assert len(data) < 200
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError):
            parse(data, "image/png")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # the image would be 120 MB / 2.5 GB


def test_truncated_png_is_corrupt(page_a: bytes) -> None:
    with pytest.raises(CorruptDocumentError):
        parse(page_a[: len(page_a) // 2], "image/png")


def test_lanes_for_scans_and_text(page_a: bytes) -> None:
    scanned = _image_pdf([page_a])
    text = text_pdf_bytes(PAGE_A)
    assert needs_ocr(scanned, PDF) is True
    assert needs_ocr(text, PDF) is False
    assert needs_ocr(b"%PDF-1.4 truncated", PDF) is False
    assert needs_ocr(page_a, "image/png") is True
    assert needs_ocr(b"hello", "text/plain") is False
    assert choose_lane(PDF, len(scanned), needs_ocr=needs_ocr(scanned, PDF)) == "slow"
    assert choose_lane(PDF, len(text), needs_ocr=needs_ocr(text, PDF)) == "fast"
    assert choose_lane(PDF, len(text)) == "fast"


@needs_tesseract
def test_mixed_pdf_keeps_text_layer_and_ocr_order(page_b: bytes) -> None:
    from fpdf import FPDF

    pdf = FPDF(unit="mm", format=(148, 105))
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    for line in PAGE_A:
        pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    pdf.image(io.BytesIO(page_b), x=0, y=0, w=105, h=148)
    result = parse(bytes(pdf.output()), PDF)
    assert result.elements[0].page == 1
    assert result.elements[0].text.startswith("The quarterly travel policy")
    assert result.elements[-1].page == 2
    assert char_error_rate(" ".join(e.text for e in result.elements if e.page == 2), " ".join(PAGE_B)) < 0.02
    assert result.ocr_confidence is not None


# --------------------------------------------------------------------------- real corpus

corpus_required = pytest.mark.skipif(not (CORPUS / "ocr_groundtruth").is_dir(), reason=CORPUS_MISSING)

# Measured with tesseract 5.3.0 (eng, this code): phototest 0.0000, phototest-rotated-180
# 0.0000, eurotext 0.0218 (German/French/Spanish accents and quotes; the eng model only).
# Bounds: about 2x the measured value, at least 0.01, for tesseract/leptonica version drift.
_CORPUS_CER = [
    ("phototest.tif", "phototest.txt", 0.01),
    ("eurotext.tif", "eurotext.txt", 0.045),
    # upside down: the first pass fails the bar (confidence 40), the retry turns it upright (OSD)
    ("phototest-rotated-180.png", "phototest.txt", 0.01),
]


@needs_tesseract
@corpus_required
@pytest.mark.parametrize(("image", "truth", "bound"), _CORPUS_CER)
def test_corpus_cer(image: str, truth: str, bound: float) -> None:
    base = CORPUS / "ocr_groundtruth" / "tesseract-test"
    mime = "image/tiff" if image.endswith(".tif") else "image/png"
    result = parse((base / image).read_bytes(), mime)
    text = " ".join(e.text for e in result.elements)
    reference = (base / truth).read_text(encoding="utf-8")
    # the transcription keeps words split at line ends ("ex-\nplain"); our elements rejoin them
    cer = char_error_rate(text, reference.replace("-\n", ""))
    assert cer < bound, (cer, text)
    assert result.pages_for_review == ()


@corpus_required
def test_corpus_hugemono_refused_before_anything_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused from the image's declared size, before PDFium decodes it: no
    page is rendered (this was a time bound of 5 s, which load could break)."""
    import pypdfium2

    def render(*_: object, **__: object) -> None:
        raise AssertionError("a page of hugemono.pdf was rendered")

    monkeypatch.setattr(pypdfium2.PdfPage, "render", render)
    data = (CORPUS / "documents" / "ocrmypdf-resources" / "hugemono.pdf").read_bytes()
    with pytest.raises(TooLargeError, match="above the limit"):
        parse(data, PDF)
