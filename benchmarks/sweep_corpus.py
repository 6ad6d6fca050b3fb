"""Robustness sweep: detect, choose a lane and parse every file of the shared corpus.

For each file under ``../shared/corpus/documents/`` (sorted, every file, whatever
its name) a worker process runs::

    mime = detect_mime(data, filename)
    ocr = needs_ocr(data, mime)
    lane = choose_lane(mime, len(data), needs_ocr=ocr)
    result = parse(data, mime, filename=filename)

Isolation: ``--workers`` (default 2) long-lived forked worker processes take one
file at a time over a pipe. Each worker runs under a memory limit (``--mem-gb``,
default 4 GiB, inherited by Tesseract): ``RLIMIT_DATA`` by default, because the
Tika parser's embedded Graal VM reserves address space and cannot start under
``RLIMIT_AS`` (even 8 GiB; ``--mem-kind as`` shows it: a pyo3 ``PanicException``).
Each worker is pinned to one CPU when the machine has enough, so OCR inside
it runs one Tesseract at a time. The parent enforces a
per-file wall-clock limit (``--timeout``, default 60 s): a worker that runs past
it is killed (``timeout``), one that dies (segfault, OOM kill) is recorded as
``crash``; either way a fresh worker is started and the sweep goes on. Such a
file's format is re-detected by the parent, its lane is reported as ``?``; a
Tesseract child of a killed worker is left to the parser's own 120 s limit.

Outcome of a file:

* ``parsed``: ``parse`` returned; it should hold >= 1 element with non-empty
  text, otherwise the file is listed as a bug (``parse`` promises never-empty);
* an error class: the ``error_class`` of the ``RagsyncError`` raised
  (empty/encrypted/corrupt/unsupported/too_large/no_text/ocr_below_bar/
  configuration), ``timeout``/``crash`` from the parent, ``crash`` also for a
  ``MemoryError`` under the memory limit, and ``internal`` for any other
  exception escaping ``parse``/``detect_mime``/``needs_ocr`` (a bug: listed);
* ``skipped``: only with ``--skip-ocr-over-pages N``: a file that needs OCR
  and has more than N pages/frames is not parsed (listed in the report).

Throughput per lane: documents per minute of worker wall time (sum of the
per-file times of that lane, i.e. one core's rate), and the sweep's overall
elapsed time. Other jobs on the machine inflate these figures.

Usage::

    python benchmarks/sweep_corpus.py [--limit N] [--only SUBDIR] [--timeout S]
        [--skip-ocr-over-pages N] [--workers N] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import resource
import sys
import time
import traceback
from collections import Counter, defaultdict
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
ERROR_COLUMNS = (
    "empty",
    "encrypted",
    "corrupt",
    "unsupported",
    "too_large",
    "no_text",
    "ocr_below_bar",
    "configuration",
    "timeout",
    "crash",
    "internal",
)


def _page_count(data: bytes, mime: str) -> int:
    """Pages of a PDF or frames of an image (0 when unknown); used only by ``--skip-ocr-over-pages``."""
    try:
        if mime == "application/pdf":
            import pypdfium2 as pdfium

            doc = pdfium.PdfDocument(data)
            try:
                return len(doc)
            finally:
                doc.close()
        if mime.startswith("image/"):
            from ragsync.parsing.ocr import image_frame_count

            return image_frame_count(data)
    except Exception:  # noqa: BLE001 - the parser reports unreadable files
        return 0
    return 0


def process_file(path: str, rel: str, skip_ocr_over: int | None) -> dict[str, Any]:
    """Detect, route and parse one file; never raises.

    Args:
        path: absolute path of the file.
        rel: path relative to ``documents/`` (for the report).
        skip_ocr_over: skip files that need OCR and have more pages than this.

    Returns:
        A JSON-able record: ``path``, ``mime``, ``lane``, ``needs_ocr``,
        ``outcome`` (``parsed``/``skipped``/an error class), ``elements``,
        ``empty_elements``, ``pages``, ``pages_for_review``, ``seconds``,
        ``message``.
    """
    from ragsync.errors import RagsyncError
    from ragsync.ingest.detect import choose_lane, detect_mime, needs_ocr
    from ragsync.parsing import parse

    rec: dict[str, Any] = {"path": rel, "mime": "?", "lane": "?", "needs_ocr": False, "elements": 0}
    rec.update(empty_elements=0, pages=0, pages_for_review=[], message="", size=0)
    start = time.perf_counter()
    try:
        data = Path(path).read_bytes()
        rec["size"] = len(data)
        name = Path(path).name
        mime = detect_mime(data, name)
        rec["mime"] = mime
        ocr = needs_ocr(data, mime)
        rec["needs_ocr"] = ocr
        rec["lane"] = choose_lane(mime, len(data), needs_ocr=ocr)
        if skip_ocr_over is not None and ocr:
            n = _page_count(data, mime)
            if n > skip_ocr_over:
                rec.update(outcome="skipped", message=f"needs OCR, {n} pages > {skip_ocr_over}")
                return rec
        result = parse(data, mime, filename=name)
        rec["outcome"] = "parsed"
        rec["elements"] = len(result.elements)
        rec["empty_elements"] = sum(1 for e in result.elements if not e.text.strip())
        rec["pages"] = result.pages
        rec["pages_for_review"] = list(result.pages_for_review)
    except RagsyncError as exc:
        rec["outcome"] = exc.error_class
        rec["message"] = str(exc)[:300]
    except MemoryError:
        rec["outcome"] = "crash"
        rec["message"] = "MemoryError under the memory limit"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - anything else escaping (even pyo3 panics) is a bug
        rec["outcome"] = "internal"
        tb = traceback.format_exc().strip().splitlines()
        rec["message"] = f"{type(exc).__name__}: {exc}"[:300] + " | " + " / ".join(tb[-3:])[:400]
    finally:
        rec["seconds"] = round(time.perf_counter() - start, 4)
    return rec


def _worker(
    conn: Connection, cpu: int | None, mem_bytes: int, mem_kind: str, skip_ocr_over: int | None
) -> None:
    """Worker loop: receive ``(path, rel)``, send back the record; ``None`` ends it."""
    if cpu is not None:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {cpu})
    if mem_bytes > 0:
        kind = resource.RLIMIT_AS if mem_kind == "as" else resource.RLIMIT_DATA
        resource.setrlimit(kind, (mem_bytes, mem_bytes))
    # warm the imports once per worker
    import ragsync.ingest.detect  # noqa: F401
    import ragsync.parsing  # noqa: F401

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(process_file(job[0], job[1], skip_ocr_over))


class _Slot:
    """One worker process and the job it is running."""

    def __init__(self, index: int, args: argparse.Namespace) -> None:
        self.index = index
        self.args = args
        self.proc: Any = None
        self.conn: Connection | None = None
        self.job: tuple[str, str] | None = None
        self.started = 0.0
        self.spawn()

    def spawn(self) -> None:
        ctx = mp.get_context("fork")
        parent, child = ctx.Pipe()
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        cpu = cpus[self.index] if len(cpus) >= self.args.workers else None
        mem = int(self.args.mem_gb * (1 << 30))
        self.proc = ctx.Process(
            target=_worker, args=(child, cpu, mem, self.args.mem_kind, self.args.skip_ocr_over_pages)
        )
        self.proc.daemon = True
        self.proc.start()
        child.close()
        self.conn = parent
        self.job = None

    def submit(self, job: tuple[str, str]) -> None:
        assert self.conn is not None
        self.job = job
        self.started = time.perf_counter()
        self.conn.send(job)

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()


def _parent_mime(path: str) -> str:
    """Detected format of a file whose worker timed out or died (the lane stays unknown: ``?``)."""
    try:
        from ragsync.ingest.detect import detect_mime

        return detect_mime(Path(path).read_bytes(), Path(path).name)
    except Exception:  # noqa: BLE001 - only for the report
        return "?"


def run_sweep(files: list[tuple[str, str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every file through a worker with a per-file time limit; return one record per file."""
    slots = [_Slot(i, args) for i in range(args.workers)]
    queue = list(reversed(files))
    records: list[dict[str, Any]] = []
    total = len(files)
    t0 = time.perf_counter()

    def lost(slot: _Slot, outcome: str, message: str) -> None:
        assert slot.job is not None
        records.append(
            {"path": slot.job[1], "mime": _parent_mime(slot.job[0]),
             "lane": "?", "needs_ocr": False, "elements": 0,
             "empty_elements": 0, "pages": 0, "pages_for_review": [], "size": 0, "outcome": outcome,
             "message": message, "seconds": round(time.perf_counter() - slot.started, 3)}
        )  # fmt: skip
        slot.kill()
        slot.spawn()

    try:
        while queue or any(s.job is not None for s in slots):
            for s in slots:
                if s.job is None and queue:
                    s.submit(queue.pop())
            busy = [s for s in slots if s.job is not None]
            now = time.perf_counter()
            deadline = min(s.started + args.timeout for s in busy)
            ready = wait([s.conn for s in busy if s.conn is not None], timeout=max(0.0, deadline - now))
            for s in busy:
                if s.conn in ready:
                    try:
                        rec = s.conn.recv()  # type: ignore[union-attr]
                    except (EOFError, OSError):
                        s.proc.join(2)
                        code = s.proc.exitcode
                        lost(s, "crash", f"worker died (exit code {code})")
                        continue
                    records.append(rec)
                    s.job = None
                elif time.perf_counter() - s.started > args.timeout:
                    lost(s, "timeout", f"killed after {args.timeout:g} s")
            if args.progress and len(records) % 100 == 0 and records:
                print(
                    f"[{len(records)}/{total}] {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True
                )
    finally:
        for s in slots:
            if s.conn is not None and s.proc is not None and s.proc.is_alive():
                with contextlib.suppress(OSError):
                    s.conn.send(None)
            s.kill()
    return records


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-format outcome counts, per-lane throughput and the bug lists."""
    by_mime: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        c = by_mime[r["mime"]]
        c["files"] += 1
        if r["outcome"] == "parsed" and r["elements"] > 0:
            c["parsed"] += 1
        elif r["outcome"] == "parsed":
            c["parsed_empty"] += 1
        else:
            c[r["outcome"]] += 1
        if r["pages_for_review"]:
            c["review_files"] += 1
            c["review_pages"] += len(r["pages_for_review"])
    lanes: dict[str, dict[str, float]] = {}
    for lane in sorted({r["lane"] for r in records}):
        rs = [r for r in records if r["lane"] == lane]
        secs = sum(r["seconds"] for r in rs)
        lanes[lane] = {
            "files": len(rs),
            "worker_seconds": round(secs, 1),
            "docs_per_min": round(len(rs) / secs * 60, 1) if secs else 0.0,
            "median_s": round(sorted(r["seconds"] for r in rs)[len(rs) // 2], 3) if rs else 0.0,
        }
    bugs = [r for r in records if r["outcome"] == "internal"]
    empty = [r for r in records if r["outcome"] == "parsed" and (r["elements"] == 0 or r["empty_elements"])]
    return {
        "formats": {m: dict(c) for m, c in sorted(by_mime.items(), key=lambda kv: -kv[1]["files"])},
        "lanes": lanes,
        "internal": [{"path": r["path"], "mime": r["mime"], "message": r["message"]} for r in bugs],
        "parsed_empty": [{"path": r["path"], "mime": r["mime"]} for r in empty],
        "timeouts": [r["path"] for r in records if r["outcome"] == "timeout"],
        "crashes": [{"path": r["path"], "message": r["message"]} for r in records if r["outcome"] == "crash"],
        "skipped": [
            {"path": r["path"], "message": r["message"]} for r in records if r["outcome"] == "skipped"
        ],
        "slowest": [
            {"path": r["path"], "seconds": r["seconds"], "outcome": r["outcome"], "lane": r["lane"]}
            for r in sorted(records, key=lambda r: -r["seconds"])[:10]
        ],
    }


def render(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    """Markdown report."""
    cols = ["files", "parsed", "review_files", "review_pages", *ERROR_COLUMNS, "parsed_empty", "skipped"]
    out = [
        f"Sweep of {meta['files']} files under {meta['root']} in {meta['elapsed_s']:.0f} s "
        f"({meta['workers']} workers, timeout {meta['timeout']:g} s, "
        f"RLIMIT_{meta['mem_kind'].upper()} {meta['mem_gb']:g} GiB, "
        f"skip-ocr-over-pages {meta['skip_ocr_over_pages']}, load avg at start {meta['load_start']})",
        "",
        "| format | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    totals: Counter[str] = Counter()
    for mime, c in summary["formats"].items():
        totals.update(c)
        out.append(f"| {mime} | " + " | ".join(str(c.get(k, 0) or "") for k in cols) + " |")
    out.append("| **total** | " + " | ".join(f"**{totals.get(k, 0)}**" for k in cols) + " |")
    out += [
        "",
        "| lane | files | worker seconds | documents/min (one core) | median s/file |",
        "|---|---:|---:|---:|---:|",
    ]
    for lane, v in summary["lanes"].items():
        out.append(
            f"| {lane} | {v['files']} | {v['worker_seconds']} | {v['docs_per_min']} | {v['median_s']} |"
        )
    for key, title in (
        ("internal", "Internal errors (bugs)"),
        ("parsed_empty", "Parsed with zero / empty elements (bugs)"),
        ("crashes", "Crashes"),
        ("timeouts", "Timeouts"),
        ("skipped", "Skipped (needs OCR, too many pages)"),
    ):
        items = summary[key]
        out += ["", f"**{title}: {len(items)}**"]
        for it in items:
            out.append(f"- `{it}`" if isinstance(it, str) else "- " + " | ".join(f"{v}" for v in it.values()))
    out += ["", "Slowest files:", ""]
    out += [f"- {s['seconds']:.1f} s {s['lane']} {s['outcome']} `{s['path']}`" for s in summary["slowest"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--only", help="a subfolder (or file) of documents/, e.g. tika or unstructured/pdf")
    ap.add_argument("--limit", type=int, help="first N files (sorted paths)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-file wall-clock limit (s)")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="RLIMIT_AS per worker (GiB, 0 = none)")
    ap.add_argument(
        "--mem-kind",
        choices=("data", "as"),
        default="data",
        help="RLIMIT_DATA (default) or RLIMIT_AS; Tika's Graal VM cannot start under RLIMIT_AS <= 8 GiB",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-ocr-over-pages", type=int, default=None, help="skip OCR files above N pages")
    ap.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    ap.add_argument("--out", type=Path, help="also write every per-file record as JSON lines here")
    ap.add_argument("--progress", action="store_true", help="progress on stderr")
    args = ap.parse_args(argv)

    root = (args.corpus / "documents").resolve()
    if not root.is_dir():
        sys.exit(f"corpus not found at {root}: the sweep needs ../shared/corpus next to the project")
    base = root / args.only if args.only else root
    if not base.exists():
        sys.exit(f"no such folder: {base}")
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
    if args.limit:
        files = files[: args.limit]
    jobs = [(str(p), str(p.relative_to(root))) for p in files]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    records = run_sweep(jobs, args)
    elapsed = time.perf_counter() - t0
    meta = {
        "root": str(base.relative_to(root.parent)),  # documents/... (folder or single file)
        "files": len(jobs),
        "elapsed_s": round(elapsed, 1),
        "workers": args.workers,
        "timeout": args.timeout,
        "mem_gb": args.mem_gb,
        "mem_kind": args.mem_kind,
        "skip_ocr_over_pages": args.skip_ocr_over_pages,
        "load_start": round(load, 2),
        "cpus": os.cpu_count(),
    }
    summary = summarise(records)
    if args.out:
        args.out.write_text("\n".join(json.dumps(r) for r in sorted(records, key=lambda r: r["path"])) + "\n")
    if args.json:
        print(json.dumps({"meta": meta, **summary}, indent=2))
    else:
        print(render(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
