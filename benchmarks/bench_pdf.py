"""PDF text-layer throughput and fast-lane latency under a concurrent OCR job.

Part 1, throughput. Files: PDFs under ``../shared/corpus/documents/`` that
``detect_mime`` calls PDF, that PDFium opens without a password, that
``needs_ocr`` says have a text layer and that have at most ``--max-pages``
pages; ``--max-files`` of them are taken at an even stride over the sorted
paths (so every corpus folder is represented), plus the longest candidate. For each file, in the same
process and alternating:

* ``raw``: ``pdfium.PdfDocument(data)``, then for every page
  ``page.get_textpage().get_text_range()`` (the floor: no layout at all);
* ``parse``: ``ragsync.parsing.parse(data, "application/pdf")`` (layout,
  columns, headings, pdfplumber tables on ruled pages, OCR of any later
  scanned page);
* ``pdfplumber``: ``page.extract_text()`` on every page, for the first
  ``--plumber-files`` files of at most 30 pages only (it is slow).

The sample is dominated by one-page test files, where ``parse``'s fixed
per-document cost (layout analysis set-up, running-header detection, table
candidate scan) weighs most, so the ratio is also given for files of >= 5
pages.

Cost is CPU seconds of this process plus its children (Tesseract), so the
figures hold on a shared machine; pages/s = pages / CPU seconds, summed over
the files, after one warm-up pass over the first file. Ratios:
``parse / raw`` (aim >= 0.3) and ``parse / pdfplumber`` on the pdfplumber
subset (aim >= 10).

Part 2, fast-lane wait. A small Markdown file is parsed ``--md-repeats``
times (a) alone, (b) while a child process OCRs a scanned PDF
(``ocrmypdf-resources/multipage.pdf``, 6 pages) in a loop pinned to the other
core (how the pipeline runs its slow lane: its own worker), and (c) while the
child is not pinned (Tesseract may take every core). Latency is wall-clock
per parse (median and p95). Other jobs on the machine add noise to all three.

Usage::

    python benchmarks/bench_pdf.py [--max-files N] [--max-pages N] [--plumber-files N] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pypdfium2 as pdfium  # noqa: E402

from ragsync.errors import RagsyncError  # noqa: E402
from ragsync.ingest.detect import detect_mime, needs_ocr  # noqa: E402
from ragsync.parsing import parse  # noqa: E402
from tests.fixtures_gen import long_pdf_bytes  # noqa: E402

CORPUS = Path(
    os.environ.get("RAGSYNC_CORPUS") or Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
)
LONG_CORPUS_PDF = "documents/unstructured/pdf/DA-619p.pdf"
LONG_PAGES = 1500
SCAN = "documents/ocrmypdf-resources/multipage.pdf"
MARKDOWN = "documents/wiki-18f-handbook/README.md"


def cpu_seconds() -> float:
    """CPU time of this process and its waited-for children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pick_files(root: Path, max_files: int, max_pages: int) -> list[tuple[Path, int]]:
    """Text-layer PDFs (path, pages), sampled at an even stride over the sorted candidates."""
    cands: list[tuple[Path, int]] = []
    for path in sorted(root.rglob("*.pdf")):
        data = path.read_bytes()
        if detect_mime(data, path.name) != "application/pdf" or needs_ocr(data, "application/pdf"):
            continue
        try:
            doc = pdfium.PdfDocument(data)
            n = len(doc)
            doc.close()
        except Exception:  # noqa: BLE001 - encrypted / broken: not a throughput sample
            continue
        if 0 < n <= max_pages:
            cands.append((path, n))
    if len(cands) <= max_files:
        return cands
    step = len(cands) / max_files
    picked = [cands[int(i * step)] for i in range(max_files)]
    longest = max(cands, key=lambda c: c[1])  # always one long document (the 619-page PDF)
    return picked if longest in picked else [*picked, longest]


def raw_pdfium(data: bytes) -> int:
    """Raw PDFium text of every page; returns characters extracted."""
    doc = pdfium.PdfDocument(data)
    chars = 0
    try:
        for i in range(len(doc)):
            page = doc[i]
            tp = page.get_textpage()
            chars += len(tp.get_text_range())
            tp.close()
            page.close()
    finally:
        doc.close()
    return chars


def plumber_text(path: Path) -> int:
    """pdfplumber ``extract_text`` of every page; returns characters extracted."""
    import pdfplumber

    chars = 0
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            chars += len(page.extract_text() or "")
            page.close()
    return chars


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    """CPU seconds of one call and its result (exceptions are returned, not raised)."""
    t0 = cpu_seconds()
    try:
        out = fn(*args)
    except (RagsyncError, Exception) as exc:  # noqa: BLE001 - a failed parse is reported, not fatal
        out = exc
    return cpu_seconds() - t0, out


def throughput(
    files: list[tuple[Path, int]], plumber_files: int, plumber_max_pages: int = 30
) -> dict[str, Any]:
    """Part 1: pages per CPU second for raw PDFium, ``parse`` and pdfplumber."""
    per_file: list[dict[str, Any]] = []
    if files:  # warm-up: first-call imports (pdfplumber, PIL, ...) are not throughput
        warm = files[0][0]
        timed(raw_pdfium, warm.read_bytes())
        timed(parse, warm.read_bytes(), "application/pdf")
        timed(plumber_text, warm)
    in_subset = 0
    for path, pages in files:
        data = path.read_bytes()
        t_raw, _ = timed(raw_pdfium, data)
        t_parse, res = timed(parse, data, "application/pdf")
        row: dict[str, Any] = {"path": str(path), "pages": pages, "raw_s": t_raw, "parse_s": t_parse}
        row["parse_error"] = (
            "" if not isinstance(res, BaseException) else f"{type(res).__name__}: {res}"[:120]
        )
        if in_subset < plumber_files and pages <= plumber_max_pages:
            in_subset += 1
            row["plumber_s"], _ = timed(plumber_text, path)
        per_file.append(row)
    ok = [r for r in per_file if not r["parse_error"]]
    pages = sum(r["pages"] for r in ok)
    raw = sum(r["raw_s"] for r in ok)
    prs = sum(r["parse_s"] for r in ok)
    big = [r for r in ok if r["pages"] >= 5]
    big_pages = sum(r["pages"] for r in big)
    big_raw = sum(r["raw_s"] for r in big)
    big_parse = sum(r["parse_s"] for r in big)
    sub = [r for r in ok if "plumber_s" in r]
    sub_pages = sum(r["pages"] for r in sub)
    sub_parse = sum(r["parse_s"] for r in sub)
    sub_plumber = sum(r["plumber_s"] for r in sub)

    def rate(n: int, s: float) -> float:
        return n / s if s > 0 else float("inf")

    return {
        "files": len(per_file),
        "parse_errors": [r for r in per_file if r["parse_error"]],
        "pages": pages,
        "raw_pages_per_s": rate(pages, raw),
        "parse_pages_per_s": rate(pages, prs),
        "parse_over_raw": raw / prs if prs else float("inf"),
        "multipage_files": len(big),
        "multipage_pages": big_pages,
        "multipage_raw_pages_per_s": rate(big_pages, big_raw),
        "multipage_parse_pages_per_s": rate(big_pages, big_parse),
        "multipage_parse_over_raw": big_raw / big_parse if big_parse else float("inf"),
        "plumber_files": len(sub),
        "plumber_pages": sub_pages,
        "plumber_pages_per_s": rate(sub_pages, sub_plumber),
        "parse_pages_per_s_on_plumber_subset": rate(sub_pages, sub_parse),
        "parse_over_plumber": sub_plumber / sub_parse if sub_parse else float("inf"),
        "slowest_parse": sorted(
            ({"path": r["path"], "pages": r["pages"], "parse_s": round(r["parse_s"], 2)} for r in ok),
            key=lambda r: -r["parse_s"],
        )[:5],
    }


def _ocr_loop(path: str, cpu: int | None, stop: Any) -> None:
    """Child: parse (OCR) the scanned PDF again and again until ``stop`` is set."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    data = Path(path).read_bytes()
    while not stop.is_set():
        with contextlib.suppress(RagsyncError):
            parse(data, "application/pdf")


def md_latency(data: bytes, repeats: int) -> dict[str, float]:
    """Wall-clock latency of ``parse`` on a Markdown file (ms)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parse(data, "text/markdown", filename="note.md")
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p95_ms": times[int(0.95 * (len(times) - 1))],
        "max_ms": times[-1],
    }


def fast_lane_wait(corpus: Path, repeats: int) -> dict[str, Any]:
    """Part 2: Markdown parse latency alone and next to an OCR job (pinned / unpinned)."""
    md = (corpus / MARKDOWN).read_bytes()
    cpus = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {"markdown": MARKDOWN, "bytes": len(md), "scan": SCAN, "cpus": len(cpus)}
    md_latency(md, 5)  # warm imports
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[0]})
    out["alone"] = md_latency(md, repeats)
    ctx = mp.get_context("fork")
    for label, cpu in (
        ("ocr_pinned_other_core", cpus[1] if len(cpus) >= 2 else None),
        ("ocr_unpinned", None),
    ):
        stop = ctx.Event()
        child = ctx.Process(target=_ocr_loop, args=(str(corpus / SCAN), cpu, stop), daemon=True)
        if cpu is None:
            os.sched_setaffinity(0, set(cpus))  # the child inherits every core
        child.start()
        if cpu is None and len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[0]})
        time.sleep(3.0)  # let the OCR get going
        out[label] = md_latency(md, repeats)
        stop.set()
        child.join(60)
        if child.is_alive():
            child.kill()
            child.join()
    os.sched_setaffinity(0, set(cpus))
    return out


_LONG_CHILD = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_DATA, (int(sys.argv[2]) * 1024 * 1024, resource.RLIM_INFINITY))
from ragsync.parsing import parse
data = open(sys.argv[1], "rb").read()
t0 = time.process_time()
r = parse(data, "application/pdf", max_pages=100000)
cpu = time.process_time() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(r.pages, len(r.elements), round(cpu, 2), peak, len(set(e.page for e in r.elements)))
"""


def _paragraph(page: int, para: int) -> str:
    return f"Marker p{page}x{para}: " + "the quick brown fox jumps over the lazy dog " * 5


def long_documents(corpus: Path, memory_mb: int) -> list[dict[str, Any]]:
    """Long PDFs parsed in a child under RLIMIT_DATA = ``memory_mb`` (the parse child's limit)."""
    import subprocess
    import tempfile

    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "generated-1500.pdf"
        # A generated text PDF: running header, page numbers, three paragraphs a page.
        generated.write_bytes(long_pdf_bytes(LONG_PAGES, _paragraph))
        for path in (corpus / LONG_CORPUS_PDF, generated):
            if not path.is_file():
                continue
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-c", _LONG_CHILD, str(path), str(memory_mb)], capture_output=True, text=True
            )
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                out.append({"file": path.name, "error": proc.stderr.strip().splitlines()[-1:]})
                continue
            pages, elements, cpu, peak, with_text = (float(v) for v in proc.stdout.split())
            raw_cpu, _ = timed(raw_pdfium, path.read_bytes())
            out.append(
                {
                    "file": path.name,
                    "pages": int(pages),
                    "pages_with_text": int(with_text),
                    "elements": int(elements),
                    "parse_cpu_s": cpu,
                    "raw_cpu_s": round(raw_cpu, 2),
                    "parse_over_raw": round(raw_cpu / cpu, 3) if cpu else None,
                    "peak_rss_mb": int(peak),
                    "limit_mb": memory_mb,
                    "wall_s": round(wall, 1),
                }
            )
    return out


def render(tp: dict[str, Any] | None, fl: dict[str, Any] | None, meta: dict[str, Any]) -> str:
    """Markdown report."""
    out = [f"Load average at start: {meta['load']} on {meta['cpus']} CPUs", ""]
    if tp:
        out += [
            f"Text-layer PDFs: {tp['files']} files, {tp['pages']} pages parsed without error "
            f"({len(tp['parse_errors'])} parse errors)",
            "",
            "| path | pages/CPU-s | ratio | aim |",
            "|---|---:|---:|---|",
            f"| raw PDFium get_text_range | {tp['raw_pages_per_s']:.1f} | | |",
            f"| ragsync parse | {tp['parse_pages_per_s']:.1f} | "
            f"parse/raw = {tp['parse_over_raw']:.3f} | >= 0.3 |",
            f"| raw PDFium, files >= 5 pages ({tp['multipage_files']} files, "
            f"{tp['multipage_pages']} pages) | "
            f"{tp['multipage_raw_pages_per_s']:.1f} | | |",
            f"| ragsync parse, files >= 5 pages | {tp['multipage_parse_pages_per_s']:.1f} | "
            f"parse/raw = {tp['multipage_parse_over_raw']:.3f} | >= 0.3 |",
            f"| pdfplumber extract_text ({tp['plumber_files']} files, {tp['plumber_pages']} pages) | "
            f"{tp['plumber_pages_per_s']:.1f} | | |",
            f"| ragsync parse, same subset | {tp['parse_pages_per_s_on_plumber_subset']:.1f} | "
            f"parse/pdfplumber = {tp['parse_over_plumber']:.2f}x | >= 10x |",
            "",
            "Slowest parses: "
            + ", ".join(
                f"`{Path(r['path']).name}` {r['pages']} p {r['parse_s']} s" for r in tp["slowest_parse"]
            ),
        ]
        for e in tp["parse_errors"]:
            out.append(f"- parse error `{e['path']}`: {e['parse_error']}")
        out.append("")
    if meta.get("long"):
        out += [
            f"Long documents (parse in a child under RLIMIT_DATA {meta['long'][0].get('limit_mb')} MB):",
            "",
            "| file | pages | pages with text | elements | parse CPU s | raw PDFium CPU s | parse/raw "
            "| peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in meta["long"]:
            if "error" in r:
                out.append(f"| {r['file']} | error: {r['error']} |" + " |" * 6)
                continue
            out.append(
                f"| {r['file']} | {r['pages']} | {r['pages_with_text']} | {r['elements']} "
                f"| {r['parse_cpu_s']} | {r['raw_cpu_s']} | {r['parse_over_raw']} | {r['peak_rss_mb']} |"
            )
        out.append("")
    if fl:
        out += [
            f"Fast-lane wait: `{fl['markdown']}` ({fl['bytes']} bytes) parsed while `{fl['scan']}` is OCR'd",
            "",
            "| condition | median ms | p95 ms | max ms |",
            "|---|---:|---:|---:|",
        ]
        for key in ("alone", "ocr_pinned_other_core", "ocr_unpinned"):
            if key in fl:
                v = fl[key]
                out.append(f"| {key} | {v['median_ms']:.2f} | {v['p95_ms']:.2f} | {v['max_ms']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--max-files", type=int, default=60)
    ap.add_argument("--max-pages", type=int, default=700, help="skip PDFs with more pages")
    ap.add_argument(
        "--plumber-files", type=int, default=15, help="files (<= 30 pages) also run by pdfplumber"
    )
    ap.add_argument("--md-repeats", type=int, default=200)
    ap.add_argument("--skip", choices=("throughput", "fastlane", "long"), action="append", default=[])
    ap.add_argument("--memory-mb", type=int, default=4096, help="RLIMIT_DATA of the long-document child")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    corpus = args.corpus.resolve()
    if not (corpus / "documents").is_dir():
        sys.exit(f"shared corpus not found at {corpus}: bench_pdf needs ../shared/corpus next to the project")
    meta = {"load": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    tp = fl = None
    if "throughput" not in args.skip:
        files = pick_files(corpus / "documents", args.max_files, args.max_pages)
        tp = throughput(files, args.plumber_files)
    if "long" not in args.skip:
        meta["long"] = long_documents(corpus, args.memory_mb)
    if "fastlane" not in args.skip:
        fl = fast_lane_wait(corpus, args.md_repeats)
    if args.json:
        print(json.dumps({"meta": meta, "throughput": tp, "fast_lane": fl}, indent=2, default=str))
    else:
        print(render(tp, fl, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
