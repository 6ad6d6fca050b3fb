"""OCR throughput and accuracy: our path (``ragsync.parsing.ocr.ocr_page``) vs the raw Tesseract CLI.

Pages: the tesseract-test images of the shared corpus (with transcriptions)
plus the first page of a few scanned ocrmypdf-resources PDFs, rendered once
at 300 dpi to PNG files in a temporary folder. Each page is OCR'd by both
paths in the same run, alternating, one page at a time (one core):

* ``cli``:  ``OMP_THREAD_LIMIT=1 tesseract IMG stdout`` on the image file
  (plain text, Tesseract's default output);
* ``cli tsv``: the same with ``tsv`` output, as ours asks for (word boxes
  and confidences; ~3% more Tesseract CPU than plain text);
* ``ours``: decode the file, ``ocr_page`` (TSV, confidence, coverage, retry
  of pages below the bar).

Same image and settings for all three (``--psm 3``, ``-l eng``, the file's
dpi, ``OMP_THREAD_LIMIT=1``). ``ratio`` compares with plain-text output (the
stricter bar), ``ratio_vs_cli_tsv`` with the same output format as ours.

Cost is CPU time (this process plus its children), so the figures hold on a
shared machine; pages per core-second = pages / CPU seconds. CER is the
Levenshtein distance over the reference length with whitespace collapsed
(``char_error_rate``), for pages that have a transcription; a word split at
a line end ("ex-\\nplain") is rejoined in the reference for ``ours`` (we rejoin
such words) and kept for ``cli``.

Usage: ``python benchmarks/bench_ocr.py [--corpus PATH] [--repeat N] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragsync.parsing.ocr import (  # noqa: E402
    OcrOptions,
    char_error_rate,
    image_frame_count,
    iter_image_pages,
    ocr_page,
    render_pdf_page,
)
from ragsync.parsing.tesseract import tesseract_env, tesseract_path  # noqa: E402

DEFAULT_CORPUS = Path(
    os.environ.get("RAGSYNC_CORPUS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
)
IMAGES = [
    ("phototest.tif", "phototest.txt"),
    ("eurotext.tif", "eurotext.txt"),
    ("8071_093.3B.tif", "8071_093.3B.txt"),
    ("8087_054.3B.tif", "8087_054.3B.txt"),
    ("deslant.tif", None),
    ("phototest-rotated-180.png", "phototest.txt"),
]
PDFS = ["linn.pdf", "skew.pdf", "epson.pdf", "c02-22.pdf", "cardinal.pdf", "multipage.pdf"]
# Text PDFs rendered as 300 dpi page images: large, clean "scans" with known layouts.
RENDERS = [("documents/pdfjs/tracemonkey.pdf", 0), ("documents/unstructured/pdf/DA-619p.pdf", 20)]


@dataclass
class Row:
    """One page's figures."""

    page: str
    pixels: int
    cli_cpu_s: float
    cli_tsv_cpu_s: float
    ours_cpu_s: float
    cli_cer: float | None
    ours_cer: float | None
    confidence: float
    coverage: float
    passed: bool
    retried: bool


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _cli(path: Path, *, tsv: bool = False) -> str:
    cmd = [tesseract_path(), str(path), "stdout"] + (["tsv"] if tsv else [])
    out = subprocess.run(cmd, capture_output=True, env=tesseract_env(), check=True)
    return out.stdout.decode("utf-8", "replace")


def _ours(path: Path, options: OcrOptions) -> tuple[str, float, float, bool, bool]:
    data = path.read_bytes()
    image_frame_count(data)
    page = next(iter_image_pages(data))
    result = ocr_page(page, options)
    text = "\n".join(result.paragraph_texts())
    return text, result.confidence, result.coverage, result.passed, result.retried


def _pages(corpus: Path, work: Path) -> list[tuple[str, Path, str | None]]:
    import pypdfium2 as pdfium
    from PIL import Image

    base = corpus / "ocr_groundtruth" / "tesseract-test"
    pages: list[tuple[str, Path, str | None]] = []
    for image, truth in IMAGES:
        if (base / image).is_file():
            reference = (base / truth).read_text(encoding="utf-8") if truth else None
            pages.append((image, base / image, reference))
    scans = corpus / "documents" / "ocrmypdf-resources"
    for name in PDFS:
        if not (scans / name).is_file():
            continue
        doc = pdfium.PdfDocument((scans / name).read_bytes())
        try:
            rendered = render_pdf_page(doc, 0, OcrOptions())
        finally:
            doc.close()
        out = work / (name + ".png")
        Image.fromarray(rendered.gray).save(out, dpi=(rendered.dpi, rendered.dpi))
        pages.append((name + " p1", out, None))
    for rel, index in RENDERS:
        if not (corpus / rel).is_file():
            continue
        doc = pdfium.PdfDocument((corpus / rel).read_bytes())
        try:
            rendered = render_pdf_page(doc, index, OcrOptions())
        finally:
            doc.close()
        out = work / f"{Path(rel).stem}-p{index + 1}.png"
        Image.fromarray(rendered.gray).save(out, dpi=(rendered.dpi, rendered.dpi))
        pages.append((f"{Path(rel).name} p{index + 1} (render)", out, None))
    return pages


def run(corpus: Path, repeat: int) -> dict[str, Any]:
    """Benchmark every page ``repeat`` times with both paths, alternating.

    Args:
        corpus: the shared corpus folder.
        repeat: runs per page and path (the minimum CPU time is kept).

    Returns:
        ``{"rows": [...], "summary": {...}}``.
    """
    options = OcrOptions()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        pages = _pages(corpus, Path(tmp))
        if pages:  # warm-up: imports and first-call costs are paid once per process, not per page
            _cli(pages[0][1])
            _ours(pages[0][1], options)
        for name, path, reference in pages:
            cli_best = cli_tsv_best = ours_best = float("inf")
            cli_text = ours_text = ""
            conf = cov = 0.0
            passed = retried = False
            for _ in range(repeat):
                t0 = _cpu()
                cli_text = _cli(path)
                t1 = _cpu()
                _cli(path, tsv=True)
                t2 = _cpu()
                ours_text, conf, cov, passed, retried = _ours(path, options)
                t3 = _cpu()
                cli_best = min(cli_best, t1 - t0)
                cli_tsv_best = min(cli_tsv_best, t2 - t1)
                ours_best = min(ours_best, t3 - t2)
            from PIL import Image

            with Image.open(path) as im:
                pixels = im.size[0] * im.size[1]
            rows.append(
                Row(
                    page=name,
                    pixels=pixels,
                    cli_cpu_s=round(cli_best, 3),
                    cli_tsv_cpu_s=round(cli_tsv_best, 3),
                    ours_cpu_s=round(ours_best, 3),
                    cli_cer=round(char_error_rate(cli_text, reference), 4) if reference else None,
                    ours_cer=round(char_error_rate(ours_text, reference.replace("-\n", "")), 4)
                    if reference
                    else None,
                    confidence=round(conf, 1),
                    coverage=round(cov, 3),
                    passed=passed,
                    retried=retried,
                )
            )
    n = len(rows)
    cli_total = sum(r.cli_cpu_s for r in rows)
    cli_tsv_total = sum(r.cli_tsv_cpu_s for r in rows)
    ours_total = sum(r.ours_cpu_s for r in rows)
    steady = [r for r in rows if not r.retried]
    large = [r for r in rows if r.pixels >= 3_000_000]
    summary = {
        "pages": n,
        "cli_pages_per_core_s": round(n / cli_total, 3) if cli_total else None,
        "ours_pages_per_core_s": round(n / ours_total, 3) if ours_total else None,
        "ratio": round(cli_total / ours_total, 3) if ours_total else None,
        "ratio_vs_cli_tsv": round(cli_tsv_total / ours_total, 3) if ours_total else None,
        "ratio_pages_without_retry": round(
            sum(r.cli_cpu_s for r in steady) / sum(r.ours_cpu_s for r in steady), 3
        )
        if steady
        else None,
        "ratio_large_pages": round(sum(r.cli_cpu_s for r in large) / sum(r.ours_cpu_s for r in large), 3)
        if large
        else None,
        "ratio_large_pages_vs_cli_tsv": round(
            sum(r.cli_tsv_cpu_s for r in large) / sum(r.ours_cpu_s for r in large), 3
        )
        if large
        else None,
        "large_pages": len(large),
        "cli_mean_cer": _mean([r.cli_cer for r in rows if r.cli_cer is not None]),
        "ours_mean_cer": _mean([r.ours_cer for r in rows if r.ours_cer is not None]),
        "tesseract": tesseract_path(),
        "omp_thread_limit": 1,
        "cpus": os.cpu_count(),
    }
    return {"rows": [asdict(r) for r in rows], "summary": summary}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: arguments (``sys.argv[1:]`` when None).

    Returns:
        0 on success, 2 when the corpus is missing.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if not (args.corpus / "ocr_groundtruth").is_dir():
        print(f"corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    started = time.monotonic()
    report = run(args.corpus, max(args.repeat, 1))
    report["summary"]["wall_s"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    head = f"{'page':<28}{'Mpx':>6}{'cli cpu s':>10}{'tsv cpu s':>10}{'ours cpu s':>11}"
    head += f"{'cli CER':>9}{'our CER':>9}"
    head += f"{'conf':>6}{'cover':>7}{'pass':>6}{'retry':>6}"
    print(head)
    for r in report["rows"]:
        cer_c = f"{r['cli_cer']:.4f}" if r["cli_cer"] is not None else "-"
        cer_o = f"{r['ours_cer']:.4f}" if r["ours_cer"] is not None else "-"
        print(
            f"{r['page']:<28}{r['pixels'] / 1e6:>6.1f}{r['cli_cpu_s']:>10.2f}{r['cli_tsv_cpu_s']:>10.2f}"
            f"{r['ours_cpu_s']:>11.2f}"
            f"{cer_c:>9}{cer_o:>9}{r['confidence']:>6.1f}{r['coverage']:>7.3f}"
            f"{'yes' if r['passed'] else 'no':>6}{'yes' if r['retried'] else 'no':>6}"
        )
    s = report["summary"]
    print()
    print(
        f"pages/core-s: cli {s['cli_pages_per_core_s']}  ours {s['ours_pages_per_core_s']}  "
        f"ratio ours/cli {s['ratio']} (pages without retry: {s['ratio_pages_without_retry']}; "
        f"{s['large_pages']} pages of 3+ Mpx: {s['ratio_large_pages']})"
    )
    print(
        f"vs the CLI with tsv output (as ours): ratio {s['ratio_vs_cli_tsv']} "
        f"(pages of 3+ Mpx: {s['ratio_large_pages_vs_cli_tsv']})"
    )
    print(f"mean CER where a transcription exists: cli {s['cli_mean_cer']}  ours {s['ours_mean_cer']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
