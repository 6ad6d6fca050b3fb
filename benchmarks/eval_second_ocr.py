"""The OCR path with its second engine (RapidOCR, models inside the
``rapidocr-onnxruntime`` wheel) against Tesseract alone, on the corpus's OCR
ground truth.

* every scanned page of the corpus with a transcription, in three sets:
  ``tesseract-test`` (the four human-transcribed pages and the phototest page
  turned 90/180/270 degrees and skewed, ``phototestrot.tif``), ``docling-ocr``
  (``ocr_test.pdf`` and its 90/180/270 degree variants rendered at 300 dpi)
  ``docling-webp`` (``webp-test.webp``), and ``low-resolution``: the four
  human-transcribed pages scanned again at 150 and 100 dpi (scaled down,
  JPEG quality 75: what an office scanner at a low setting writes); and three
  ``degraded`` sets made from the same four pages (fixed seed; truth unchanged;
  ``DEGRADATIONS``), where raw Tesseract's CER lands at 0.23-0.44 like the
  badly degraded held-out scans of issue 28: ``degraded-75dpi`` (a coarse
  scan: 75 dpi, letters 5-8 px), ``degraded-speckle`` (a dusty or noisy
  scan: 150 dpi with 6 % salt-and-pepper pixels), ``degraded-shadow`` (a
  phone photo of a page in uneven light: contrast cut to 45 %, lit from 55 %
  at the left to 100 % at the right, 150 dpi, JPEG quality 60). The docling pages' truth is the
  one sentence every engine snapshot in ``parse_groundtruth`` agrees on (an
  engine output, not a human transcription). Per page and per set:
  character error rate and word recall of raw Tesseract (``ocr_page``
  with ``second_engine=False, normalise_resolution=False, tables=False,
  preprocess=False``), of the combined path (the
  default: the second engine reads pages Tesseract leaves below the bar),
  and of RapidOCR alone; CPU seconds of each;
* the PubTabNet table crops with structure truth (``--tables N``, default 20):
  token recall of the human cell text (order-free) for each path, whether
  the combined path kept the page (it met a bar) and emitted a table, and
  the strict cell recall of that table (a truth cell counts when an emitted
  cell has the same text, blanks and case ignored);
* full scanned pages with tables (``--pages-with-tables``, on by default):
  the first page of text-layer PDFs from the pdfplumber test files
  (``SCANNED_TABLES``) rendered at 300 dpi and OCR'd with table detection
  on and off; truth is the table(s) ragsync reads from the same page's text
  layer. Strict cell recall (as above) of the OCR'd tables, token recall of
  the truth cells inside emitted tables, tables found, CPU seconds, and
  where each truth cell went (``_cell_losses``): matched, its text inside
  an emitted table but not as one cell (split or merged), its text outside
  every table (table not found), or its text nowhere on the page (misread);
  and how many unmatched truth cells are the text layer's joins or splits of
  cells the scan reads whole (``_truth_artefacts``), with the cell recall
  counted without them beside the unchanged one;
* scanned prose (``prose_tables``, with the transcribed pages): pages on
  which the default path emits a table (false positives; with the
  transcribed pages' ``combined_tables``, ``prose_pages_with_tables``).

Usage: ``python benchmarks/eval_second_ocr.py [--corpus PATH] [--tables 20] [--no-pages-with-tables]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from ragsync.parsing.ocr import OcrOptions, PageImage, iter_image_pages, ocr_page, render_pdf_page  # noqa: E402
from ragsync.parsing.ocr_quality import GrayImage, char_error_rate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ocr import DEFAULT_CORPUS, IMAGES, PDFS, RENDERS  # noqa: E402

# Every scanned page with a transcription: (set, file under the corpus, truth file under the corpus).
_TT = "ocr_groundtruth/tesseract-test"
_DOCLING_TRUTH = (
    "parse_groundtruth/docling/ocr/groundtruth/tesseract/full_page/ocr_test.tesseract.full_page.md"
)
PAGES: list[tuple[str, str, str]] = [
    *((("tesseract-test", f"{_TT}/{image}", f"{_TT}/{truth}") for image, truth in IMAGES[:4])),
    *(
        ("tesseract-test", f"{_TT}/{image}", f"{_TT}/phototest.txt")
        for image in (
            "phototest-rotated-L.png",
            "phototest-rotated-R.png",
            "phototest-rotated-180.png",
            "phototestrot.tif",
        )
    ),
    *(
        ("docling-ocr", f"documents/docling/ocr/sources/ocr_test{tail}.pdf", _DOCLING_TRUTH)
        for tail in ("", "_rotated_90", "_rotated_180", "_rotated_270")
    ),
    ("docling-webp", "documents/docling/webp/sources/webp-test.webp", _DOCLING_TRUTH),
    *(
        (f"low-resolution@{dpi}", f"{_TT}/{image}@{dpi}", f"{_TT}/{truth}")
        for dpi in (150, 100)
        for image, truth in IMAGES[:4]
    ),
    *(
        (f"degraded-{kind}", f"{_TT}/{image}@{kind}", f"{_TT}/{truth}")
        for kind in ("75dpi", "speckle", "shadow")
        for image, truth in IMAGES[:4]
    ),
]


# Text-layer PDFs whose first page holds a table ragsync's text-layer path reads (pdfplumber's test files).
SCANNED_TABLES = [
    "150109DSP-Milw-505-90D.pdf",
    "cupertino_usd_4-6-16.pdf",
    "issue-13-151201DSP-Fond-581-90D.pdf",
    "issue-140-example.pdf",
    "issue-192-example.pdf",
    "issue-461-example.pdf",
    "issue-466-example.pdf",
    "issue-90-example.pdf",
    "la-precinct-bulletin-2014-p1.pdf",
    "nics-background-checks-2015-11.pdf",
    "pr-138-example.pdf",
    "senate-expenditures.pdf",
    "table-curves-example.pdf",
]


def _markdown_cells(markdown: str) -> list[str]:
    """The cells of a Markdown table (``table_to_markdown``), separator row left out."""
    cells: list[str] = []
    for line in markdown.splitlines():
        parts = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if parts and not all(re.fullmatch(r"-{3,}", c) for c in parts):
            cells.extend(c.replace("\\|", "|") for c in parts)
    return cells


def scanned_tables(corpus: Path) -> list[dict[str, Any]]:
    """Table detection on full scanned pages (see the module docstring)."""
    from ragsync.model import ElementType
    from ragsync.parsing import parse

    out: list[dict[str, Any]] = []
    for name in SCANNED_TABLES:
        path = corpus / "documents" / "pdfplumber" / name
        layer = parse(path.read_bytes(), "application/pdf")
        truth = [
            c
            for e in layer.elements
            if e.page == 1 and e.type == ElementType.TABLE
            for c in _markdown_cells(e.text)
        ]
        page = load_page(path)
        t0 = _cpu()
        plain = ocr_page(page, OcrOptions(tables=False))
        t1 = _cpu()
        found = ocr_page(page, OcrOptions())
        t2 = _cpu()
        rows = tuple(r for t in found.tables for r in t)
        out.append(
            {
                "pdf": name,
                "truth_cells": sum(1 for c in truth if c.strip()),
                "tables_found": len(found.tables),
                "engine": found.engine,
                "cell_recall": round(_cell_recall(truth, rows), 3),
                "token_recall_in_tables": round(
                    _recall(_tokens(" ".join(truth)), _tokens(" ".join(" ".join(r) for r in rows))), 3
                ),
                "token_recall_page": round(_recall(_tokens(" ".join(truth)), _tokens(_page_text(found))), 3),
                "token_recall_page_without_tables": round(
                    _recall(_tokens(" ".join(truth)), _tokens(_page_text(plain))), 3
                ),
                "cpu_s_without_tables": round(t1 - t0, 2),
                "cpu_s": round(t2 - t1, 2),
                "truth_cells_went": _cell_losses(truth, rows, " ".join(found.paragraph_texts())),
                "truth_artefacts": (artefacts := _truth_artefacts(truth, rows)),
                "cell_recall_excluding_artefacts": round(
                    _matched(truth, rows) / max(sum(1 for c in truth if c.strip()) - artefacts, 1), 3
                ),
            }
        )
    return out


# Scanned prose without a transcription (ocrmypdf's test scans, besides bench_ocr's PDFS and RENDERS).
PROSE_SCANS = ["francais.pdf", "kcs.pdf", "typewriter.png", "baiona.png"]


def prose_tables(corpus: Path) -> list[dict[str, Any]]:
    """Tables the default path emits on scanned prose (false positives): the
    first three pages of bench_ocr's ``PDFS`` and of ``PROSE_SCANS``, the
    page of each of ``RENDERS``. Each: the page and its number of tables."""
    import pypdfium2 as pdfium

    scans = corpus / "documents" / "ocrmypdf-resources"
    pages: list[tuple[str, int, Path]] = [
        *((name, i, scans / name) for name in [*PDFS, *PROSE_SCANS] for i in range(3)),
        *((Path(rel).name, i, corpus / rel) for rel, i in RENDERS),
    ]
    out: list[dict[str, Any]] = []
    for name, i, path in pages:
        if not path.is_file():
            continue
        if path.suffix.lower() != ".pdf":
            if i:
                continue
            page = next(iter_image_pages(path.read_bytes()))
        else:
            doc = pdfium.PdfDocument(path.read_bytes())
            try:
                if i >= len(doc):
                    continue
                page = render_pdf_page(doc, i, OcrOptions())
            finally:
                doc.close()
        out.append({"page": f"{name}#{i + 1}", "tables": len(ocr_page(page, OcrOptions()).tables)})
    return out


def degraded(page: PageImage, dpi: int) -> PageImage:
    """``page`` (a 300 dpi scan) as scanned at ``dpi``: scaled down, stored as JPEG quality 75."""
    import cv2

    factor = dpi / 300
    small = cv2.resize(page.gray, None, fx=factor, fy=factor, interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 75])
    return PageImage(page.page, cv2.imdecode(encoded, cv2.IMREAD_GRAYSCALE), dpi)


def _resized(page: PageImage, dpi: int) -> GrayImage:
    import cv2

    factor = dpi / (page.dpi or 300)
    return np.ascontiguousarray(
        cv2.resize(page.gray, None, fx=factor, fy=factor, interpolation=cv2.INTER_AREA)
    )


def coarse_scan(page: PageImage) -> PageImage:
    """``page`` as a coarse scan: slightly blurred (sigma 1.2 px at the page's
    resolution), scaled down to 75 dpi."""
    import cv2

    blurred = PageImage(page.page, cv2.GaussianBlur(page.gray, (0, 0), 1.2), page.dpi)
    return PageImage(page.page, _resized(blurred, 75), 75)


def speckled(page: PageImage) -> PageImage:
    """``page`` at 150 dpi with 6 % of its pixels turned black or white at
    random (salt and pepper; seed 28)."""
    gray = _resized(page, 150).copy()
    noise = np.random.default_rng(28).random(gray.shape)
    gray[noise < 0.03] = 0
    gray[noise > 0.97] = 255
    return PageImage(page.page, gray, 150)


def shadowed(page: PageImage) -> PageImage:
    """``page`` as a photo in uneven light: contrast cut to 45 % (ink 110,
    paper 225), lit from 55 % at the left edge to 100 % at the bottom right,
    at 150 dpi, stored as JPEG quality 60."""
    import cv2

    h, w = page.gray.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    light = 0.55 + 0.45 * (xx / w) * (0.6 + 0.4 * yy / h)
    gray = np.clip((page.gray.astype(np.float32) * 0.45 + 110) * light, 0, 255).astype(np.uint8)
    small = _resized(PageImage(page.page, gray, page.dpi), 150)
    _, encoded = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, 60])
    return PageImage(page.page, cv2.imdecode(encoded, cv2.IMREAD_GRAYSCALE), 150)


# The degraded sets: ``file@kind`` in PAGES (see the module docstring).
DEGRADATIONS = {"75dpi": coarse_scan, "speckle": speckled, "shadow": shadowed}


def load_page(path: Path) -> PageImage:
    """The first page of an image file, or of a PDF rendered as the OCR path renders it;
    ``file@dpi``: the page as scanned at that dpi (``degraded``); ``file@kind``:
    the page degraded as ``DEGRADATIONS[kind]``."""
    name, _, tail = path.name.partition("@")
    if tail in DEGRADATIONS:
        return DEGRADATIONS[tail](load_page(path.with_name(name)))
    if tail:
        return degraded(load_page(path.with_name(name)), int(tail))
    if path.suffix.lower() != ".pdf":
        return next(iter_image_pages(path.read_bytes()))
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(path.read_bytes())
    try:
        return render_pdf_page(doc, 0, OcrOptions())
    finally:
        doc.close()


def _rapid_text(engine: Any, gray: np.ndarray) -> tuple[str, float]:
    result, _ = engine(np.stack([gray] * 3, axis=-1))
    if not result:
        return "", 0.0
    items = sorted(
        (min(p[1] for p in box), min(p[0] for p in box), text, float(score)) for box, text, score in result
    )
    lines: list[tuple[float, list[tuple[float, str]]]] = []
    for y, x, text, _ in items:
        if lines and abs(lines[-1][0] - y) < 12:
            lines[-1][1].append((x, text))
        else:
            lines.append((y, [(x, text)]))
    joined = "\n".join(" ".join(t for _, t in sorted(words)) for _, words in lines)
    return joined, 100 * float(np.mean([s for *_, s in items]))


# Typographic quotes and dashes as the ASCII the UNLV transcriptions use ("folded" CER).
_FOLD = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2014": "-", "\u2013": "-"}
)


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _recall(truth: list[str], got: list[str]) -> float:
    have = Counter(got)
    return sum(min(n, have[t]) for t, n in Counter(truth).items()) / max(len(truth), 1)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (Tesseract runs as a child)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _norm(cell: str) -> str:
    return re.sub(r"\s+", "", cell).lower()


def _cell_recall(truth: list[str], rows: tuple[tuple[str, ...], ...]) -> float:
    return _matched(truth, rows) / max(sum(1 for c in truth if c.strip()), 1)


def _matched(truth: list[str], rows: tuple[tuple[str, ...], ...]) -> int:
    """How many non-blank truth cells an emitted cell matches (``_cell_recall``'s numerator)."""
    have = Counter(_norm(c) for r in rows for c in r if c.strip())
    want = Counter(_norm(c) for c in truth if c.strip())
    return sum(min(n, have[c]) for c, n in want.items())


def _truth_artefacts(truth: list[str], rows: tuple[tuple[str, ...], ...]) -> int:
    """Unmatched truth cells the text layer joins or splits where the scan's
    cells are whole (blanks and case ignored): a cell of two or more words
    whose text is two or more consecutive non-empty cells of one emitted row
    joined (the page shows its parts apart: "YES 90" over two columns, a
    label and its value), or a cell that, joined with its neighbours in the
    truth (up to four cells), is the text of one emitted cell (a heading the
    text layer cuts at a column's edge, a wrapped cell it reads as two rows).
    Reported beside the cell recall, which it does not change."""
    joins: set[str] = set()
    for row in rows:
        cells = [_norm(c) for c in row if c.strip()]
        for i in range(len(cells)):
            for j in range(i + 2, len(cells) + 1):
                joins.add("".join(cells[i:j]))
    whole = {_norm(c) for r in rows for c in r if c.strip()}
    raw = [c for c in truth if c.strip()]
    cells = [_norm(c) for c in raw]
    have = Counter(_norm(c) for r in rows for c in r if c.strip())
    out = 0
    for k, cell in enumerate(cells):
        if have[cell] > 0:
            have[cell] -= 1
            continue
        joined = cell in joins and len(raw[k].split()) >= 2
        split = any(
            "".join(cells[a:b]) in whole
            for a in range(max(0, k - 3), k + 1)
            for b in range(k + 1, min(len(cells), a + 5) + 1)
            if b - a >= 2
        )
        out += joined or split
    return out


def _cell_losses(truth: list[str], rows: tuple[tuple[str, ...], ...], text: str) -> dict[str, int]:
    """Where each non-blank truth cell went (blanks and case ignored):
    ``matched`` (an emitted cell has its text), ``split_or_merged`` (its
    text lies inside the emitted tables' text but in no one cell),
    ``table_not_found`` (its text lies in the page's text outside tables),
    ``misread`` (its text is nowhere on the page)."""
    have = Counter(_norm(c) for r in rows for c in r if c.strip())
    in_tables = "".join(_norm(c) for r in rows for c in r)
    outside = _norm(text)
    out = dict.fromkeys(("matched", "split_or_merged", "table_not_found", "misread"), 0)
    for cell in (_norm(c) for c in truth if c.strip()):
        if have[cell] > 0:
            have[cell] -= 1
            out["matched"] += 1
        elif cell in in_tables:
            out["split_or_merged"] += 1
        elif cell in outside:
            out["table_not_found"] += 1
        else:
            out["misread"] += 1
    return out


def _page_text(result: Any) -> str:
    rows = "\n".join(" ".join(r) for t in result.tables for r in t)
    return "\n".join([rows, *result.paragraph_texts()]) if rows else "\n".join(result.paragraph_texts())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--tables", type=int, default=20, help="PubTabNet crops to score (default 20)")
    ap.add_argument(
        "--no-pages-with-tables", action="store_true", help="skip the full scanned pages with tables"
    )
    ap.add_argument("--no-pages", action="store_true", help="skip the transcribed pages (CER)")
    args = ap.parse_args(argv)
    from ragsync.parsing.ocr_second import read_words, second_read

    alone = OcrOptions(second_engine=False, normalise_resolution=False, tables=False, preprocess=False)
    combined = OcrOptions()
    rows: list[dict[str, Any]] = []
    for name, image, truth in [] if args.no_pages else PAGES:
        page = load_page(args.corpus / image)
        ref = (args.corpus / truth).read_text(encoding="utf-8").replace("-\n", "")
        t0 = _cpu()
        tess = ocr_page(page, alone)
        t1 = _cpu()
        both = ocr_page(page, combined)
        t2 = _cpu()
        rapid = "\n".join(" ".join(li) for li in second_read(read_words(page.gray)).lines)
        t3 = _cpu()
        texts = {"tesseract": _page_text(tess), "combined": _page_text(both), "rapid": rapid}
        row: dict[str, Any] = {
            "set": name,
            "page": Path(image).name,
            "combined_engine": both.engine,
            "combined_scale": both.scale,
            "combined_tables": len(both.tables),
            "combined_preprocessed": list(both.preprocessed),
            "combined_lines_rapidocr": sum(1 for engine, _ in both.region_engines if engine == "rapidocr"),
        }
        for key, text in texts.items():
            row[f"{key}_cer"] = round(char_error_rate(text, ref), 4)
            row[f"{key}_cer_folded"] = round(char_error_rate(text.translate(_FOLD), ref.translate(_FOLD)), 4)
            row[f"{key}_recall"] = round(_recall(_tokens(ref), _tokens(text)), 4)
        row.update(
            tesseract_cpu_s=round(t1 - t0, 2), combined_cpu_s=round(t2 - t1, 2), rapid_cpu_s=round(t3 - t2, 2)
        )
        rows.append(row)
    tables: list[dict[str, Any]] = []
    folder = args.corpus / "parse_groundtruth" / "pubtabnet" / "examples"
    records = (folder / "PubTabNet_Examples.jsonl").read_text(encoding="utf-8").splitlines()
    for line in records[: args.tables]:
        rec = json.loads(line)
        cells = [
            "".join(t for t in c["tokens"] if not re.fullmatch(r"</?\w+>", t)) for c in rec["html"]["cells"]
        ]
        truth_tokens = _tokens(" ".join(cells))
        page = next(iter_image_pages((folder / rec["filename"]).read_bytes()))
        t0 = _cpu()
        tess = ocr_page(page, alone)
        t1 = _cpu()
        both = ocr_page(page, combined)
        t2 = _cpu()
        tables.append(
            {
                "image": rec["filename"],
                "tesseract_passed": tess.passed,
                "tesseract_recall": round(_recall(truth_tokens, _tokens(_page_text(tess))), 3)
                if tess.passed
                else 0.0,
                "combined_passed": both.passed,
                "combined_engine": both.engine,
                "combined_recall": round(_recall(truth_tokens, _tokens(_page_text(both))), 3)
                if both.passed
                else 0.0,
                "table_emitted": bool(both.tables),
                "cell_recall": round(_cell_recall(cells, tuple(r for t in both.tables for r in t)), 3),
                "confidences": dict(both.confidences),
                "tesseract_cpu_s": round(t1 - t0, 2),
                "combined_cpu_s": round(t2 - t1, 2),
            }
        )

    def mean(key: str, items: list[dict[str, Any]]) -> float:
        return round(float(np.mean([r[key] for r in items])), 4) if items else 0.0

    summary = {
        "pages": {
            name: {
                f"{key}_{measure}": mean(f"{key}_{measure}", [r for r in rows if r["set"] == name])
                for key in ("tesseract", "combined", "rapid")
                for measure in ("cer", "cer_folded", "recall")
            }
            for name in dict.fromkeys(r["set"] for r in rows)
        },
        "pages_per_cpu_minute_tesseract": round(
            60 * len(rows) / max(sum(r["tesseract_cpu_s"] for r in rows), 1e-9), 1
        ),
        "pages_per_cpu_minute_combined": round(
            60 * len(rows) / max(sum(r["combined_cpu_s"] for r in rows), 1e-9), 1
        ),
        "tables": len(tables),
        "tables_kept_tesseract": sum(1 for t in tables if t["tesseract_passed"]),
        "tables_kept_combined": sum(1 for t in tables if t["combined_passed"]),
        "tables_emitted": sum(1 for t in tables if t["table_emitted"]),
        "table_token_recall_tesseract": mean("tesseract_recall", tables),
        "table_token_recall_combined": mean("combined_recall", tables),
        "table_cell_recall_combined": mean("cell_recall", tables),
        "table_pages_per_cpu_minute_tesseract": round(
            60 * len(tables) / max(sum(t["tesseract_cpu_s"] for t in tables), 1e-9), 1
        ),
        "table_pages_per_cpu_minute_combined": round(
            60 * len(tables) / max(sum(t["combined_cpu_s"] for t in tables), 1e-9), 1
        ),
    }
    prose = [] if args.no_pages else prose_tables(args.corpus)
    summary["prose_pages_with_tables"] = sum(1 for r in rows if r["combined_tables"]) + sum(
        1 for r in prose if r["tables"]
    )
    summary["prose_pages"] = len(rows) + len(prose)
    full = [] if args.no_pages_with_tables else scanned_tables(args.corpus)
    summary["pages_with_tables"] = {
        "pages": len(full),
        "tables_found": sum(r["tables_found"] for r in full),
        "cell_recall": mean("cell_recall", full),
        "truth_artefacts": sum(r["truth_artefacts"] for r in full),
        "cell_recall_excluding_artefacts": mean("cell_recall_excluding_artefacts", full),
        "token_recall_in_tables": mean("token_recall_in_tables", full),
        "truth_cells_went": {
            key: sum(r["truth_cells_went"][key] for r in full) for key in _cell_losses([], (), "")
        },
        "pages_per_cpu_minute_without_tables": round(
            60 * len(full) / max(sum(r["cpu_s_without_tables"] for r in full), 1e-9), 1
        ),
        "pages_per_cpu_minute": round(60 * len(full) / max(sum(r["cpu_s"] for r in full), 1e-9), 1),
    }
    print(
        json.dumps(
            {
                "summary": summary,
                "cer_pages": rows,
                "prose_scans": prose,
                "pubtabnet": tables,
                "pages_with_tables": full,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
