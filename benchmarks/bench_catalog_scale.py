"""The catalog's operational reads at production scale: a synthetic home of N
documents (and N x C chunk rows) written straight into the catalog, then each
read operations make, timed with its peak Python memory.

The catalog is built by bulk inserts (SQLite: ``executemany`` in batches;
PostgreSQL: ``COPY``; a commit per batch, 1,000 documents or 20,000 other
rows), not through the pipeline: one tenant, one source;
97 % of documents indexed, 2 % dead letters (with an open dead-letter row),
1 % deleted; a ``parsed_docs`` row per document (0.1 % with pages for review);
50 recorded runs. The migrations (and so any triggers) are in place while it
loads.

Reads measured (each once, after the build):

* ``rerun_check``: the unchanged re-run's catalog side, ``unread_states`` of
  the whole listing 500 documents at a time (``beam_pipelines.quick``);
* ``status``: the catalog reads of ``ragsync status`` (the same calls as
  ``cli.main.cmd_status``);
* ``coverage``: ``coverage_by_source(document_outcomes())``;
* ``scrape``: one ``/metrics`` body (``ragsync.ops.metrics.render``);
* ``reconcile_catalog``: the catalog's part of ``ragsync reconcile``
  (``iter_chunk_counts_by_doc``, 5,000 documents a page; the stores' counts
  are not built here);
* ``sync_diff``: a full listing's catalog side, ``iter_source_documents``
  read to the end;
* ``orphan_sweep_catalog``: the sweep's catalog side, ``present_chunk_ids``
  for every chunk id 1,000 at a time (``beam_pipelines.listing``).

Peak memory is ``tracemalloc``'s peak of Python allocations during the read
(the times include its overhead; ``--no-trace`` times without it), and the
process's RSS high water (``VmHWM``) before and after it; with ``--rss``
each read runs in its own child process, so that high water is the read's.

With ``--engine postgres`` and no ``--url`` a throwaway PostgreSQL starts
(``scripts/pg_throwaway.sh``) and stops at the end.

Usage: ``python benchmarks/bench_catalog_scale.py --docs 100000 --chunks-per-doc 10
--engine sqlite|postgres [--url URL [--no-build]] [--dir DIR] [--reads a,b] [--no-trace] [--rss] [--json]``
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
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragsync.catalog import Catalog  # noqa: E402
from ragsync.ops.coverage import coverage_by_source  # noqa: E402
from ragsync.ops.metrics import render  # noqa: E402

TENANT, SOURCE = "t1", "s1"
PARSER, CHUNKER = "p1", "c1"
BATCH = 20_000
# Documents are committed 1,000 at a time: the tally trigger updates one
# ``document_tallies`` row per document, and on PostgreSQL each update in one
# transaction leaves a row version the next update walks past (quadratic in
# the batch: a 1M-document build in one transaction did not finish).
DOC_BATCH = 1_000


def doc_id(i: int) -> str:
    """The i-th synthetic document id."""
    return f"d{i:09d}"


def doc_row(i: int, chunks: int) -> tuple[Any, ...]:
    """The i-th document row: indexed, or (i % 100 in 0..1) a dead letter, or
    (i % 100 == 2) deleted. Columns as :data:`DOC_COLUMNS`."""
    kind = i % 100
    status = "dead_letter" if kind < 2 else "deleted" if kind == 2 else "indexed"
    error = ("corrupt" if kind == 0 else "too_large") if kind < 2 else None
    h = f"h{i:09d}"
    return (
        doc_id(i), SOURCE, TENANT, f"obj/{i}", f"file:///src/{i}", "text/plain", 1000, "v1", h, doc_id(i),
        "acl1", status, error, PARSER, CHUNKER, f"{h}@m1", chunks if status == "indexed" else 0,
        1.0, 2.0 if status == "deleted" else None, 1.0,
    )  # fmt: skip


DOC_COLUMNS = (
    "doc_id, source_id, tenant_id, source_object_id, uri, mime, size, source_version, content_hash, "
    "canonical_doc_id, acl_id, status, error_class, parser_version, chunker_id, indexed_version, "
    "chunk_count, indexed_at, deleted_at, updated_at"
)
CHUNK_COLUMNS = (
    "chunk_id, doc_id, tenant_id, text_hash, ordinal, heading_path, page, text, token_count, acl_ids"
)
PARSED_COLUMNS = "content_hash, parser_version, elements_uri, pages, pages_for_review"
DEAD_COLUMNS = (
    "created_at, tenant_id, source_id, doc_id, uri, stage, error_class, message, traceback, attempts, "
    "payload, source_version"
)


def rows(n: int, chunks: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every synthetic row as (table, values), document by document."""
    for i in range(n):
        doc = doc_row(i, chunks)
        yield "documents", doc
        yield "parsed_docs", (doc[8], PARSER, f"file:///parsed/{i}", 1, "[1]" if i % 1000 == 5 else "[]")
        if doc[11] == "dead_letter":
            dead = (1.0, TENANT, SOURCE, doc[0], doc[4], "parse", doc[12], "", "", 1, "{}", "v1")
            yield "dead_letters", dead
        for j in range(doc[16]):
            chunk_id = f"{doc[0]}-{j:04d}"
            yield "chunks", (chunk_id, doc[0], TENANT, f"th{i}-{j}", j, "[]", 1, "x", 1, '["acl1"]')


COLUMNS = {
    "documents": DOC_COLUMNS,
    "chunks": CHUNK_COLUMNS,
    "parsed_docs": PARSED_COLUMNS,
    "dead_letters": DEAD_COLUMNS,
}


def build(cat: Catalog, n: int, chunks: int) -> float:
    """Write the synthetic catalog in bulk; returns the seconds it took."""
    start = time.perf_counter()
    buffers: dict[str, list[tuple[Any, ...]]] = {t: [] for t in COLUMNS}
    raw = cat.engine.raw_connection()
    try:
        cur = raw.cursor()
        postgres = cat.engine.dialect.name == "postgresql"

        def flush(table: str) -> None:
            batch = buffers[table]
            if not batch:
                return
            if postgres:
                with cur.copy(f"COPY {table} ({COLUMNS[table]}) FROM STDIN") as copy:  # type: ignore[attr-defined]
                    for r in batch:
                        copy.write_row(r)
            else:
                marks = ", ".join("?" * len(batch[0]))
                cur.executemany(f"INSERT INTO {table} ({COLUMNS[table]}) VALUES ({marks})", batch)
            raw.commit()
            batch.clear()

        for table, values in rows(n, chunks):
            buffers[table].append(values)
            if len(buffers[table]) >= (DOC_BATCH if table == "documents" else BATCH):
                flush(table)
        for table in COLUMNS:
            flush(table)
        for k in range(50):
            counters = json.dumps({"embedding_cache_hits": 10, "stage.parse.elements": 5})
            values = (f"run{k}", "listing", TENANT, SOURCE, float(k), float(k + 1), 100, counters)
            if postgres:
                cur.execute("INSERT INTO pipeline_runs VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", values)
            else:
                cur.execute("INSERT INTO pipeline_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
        raw.commit()
        cur.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
    return time.perf_counter() - start


def rerun_check(cat: Catalog, n: int, chunks: int) -> int:
    """Known live documents found, 500 listed ids at a time."""
    found = 0
    for start in range(0, n, 500):
        found += len(cat.syncs.unread_states([doc_id(i) for i in range(start, min(n, start + 500))]))
    return found


def status(cat: Catalog, n: int, chunks: int) -> int:
    """The catalog reads of ``ragsync status``; returns the documents counted."""
    coverage_by_source(cat.runs.document_outcomes())
    for kind in ("listing", "stream"):
        cat.runs.list_runs(kind=kind, limit=1)
    docs = cat.documents.document_counts_by_status()
    cat.dead_letters.dead_letter_counts()
    cat.dead_letters.list_dead_letters(limit=20)
    cat.queue_views.queue_stats()
    cat.freshness.freshness_stats()
    cat.parsed.pages_for_review()
    cat.syncs.source_states()
    cat.queue_views.stale_events(limit=20)
    return sum(docs.values())


def coverage(cat: Catalog, n: int, chunks: int) -> int:
    """Documents seen by coverage."""
    return sum(s["seen"] for s in coverage_by_source(cat.runs.document_outcomes()))


def scrape(cat: Catalog, n: int, chunks: int) -> int:
    """Bytes of one /metrics body."""
    return len(render(cat))


def reconcile_catalog(cat: Catalog, n: int, chunks: int) -> int:
    """Chunk rows the catalog reports per document, summed."""
    return sum(n for _, n in cat.chunks.iter_chunk_counts_by_doc())


def reconcile_catalog_dict(cat: Catalog, n: int, chunks: int) -> int:
    """The same counts as one ``{doc_id: count}`` dict (reconcile's catalog
    side before it was streamed), for comparison."""
    return sum(cat.chunks.chunk_counts_by_doc().values())


def sync_diff(cat: Catalog, n: int, chunks: int) -> int:
    """Documents a full listing is compared with."""
    return sum(1 for _ in cat.documents.iter_source_documents(SOURCE, TENANT, updated_before=float("inf")))


def orphan_sweep_catalog(cat: Catalog, n: int, chunks: int) -> int:
    """Chunk ids found in the catalog, asked 1,000 at a time."""
    found, page = 0, []
    for i in range(n):
        if doc_row(i, chunks)[11] != "indexed":
            continue
        page += [f"{doc_id(i)}-{j:04d}" for j in range(chunks)]
        if len(page) >= 1000:
            found += len(cat.chunks.present_chunk_ids(TENANT, page))
            page = []
    return found + len(cat.chunks.present_chunk_ids(TENANT, page))


READS: dict[str, Callable[[Catalog, int, int], int]] = {
    f.__name__: f
    for f in (
        rerun_check,
        status,
        coverage,
        scrape,
        reconcile_catalog,
        reconcile_catalog_dict,
        sync_diff,
        orphan_sweep_catalog,
    )
}


def measure(
    cat: Catalog, n: int, chunks: int, names: list[str], *, trace: bool = True
) -> dict[str, dict[str, float]]:
    """Each read's seconds, peak MiB of Python allocations (0 when not
    ``trace``: tracemalloc slows pure-Python work such as rendering a
    scrape several-fold) and result."""
    out = {}
    for name in names:
        if trace:
            tracemalloc.start()
        base = rss_high_water_mib()
        start = time.perf_counter()
        result = READS[name](cat, n, chunks)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
        if trace:
            tracemalloc.stop()
        rss = rss_high_water_mib()
        out[name] = {
            "s": round(seconds, 3),
            "peak_mib": round(peak / 2**20, 2),
            "rss_base_mib": base,
            "rss_peak_mib": rss,
            "result": result,
        }
        print(
            f"{name:22s} {seconds:9.3f} s {peak / 2**20:9.2f} MiB traced, RSS high water {base} -> {rss} MiB"
            f"  result {result}",
            flush=True,
        )
    return out


def rss_high_water_mib() -> float:
    """This process's peak resident set so far, MiB: ``VmHWM`` of
    ``/proc/self/status`` (Linux; ``ru_maxrss`` elsewhere, which on Linux
    keeps the parent's high water across fork and exec, so a child started by
    a larger parent would report the parent's)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def measure_in_children(args: argparse.Namespace, url: str, names: list[str]) -> dict[str, dict[str, float]]:
    """Each read in a fresh child process of this script (``--no-build``,
    ``--no-trace``), so the child's RSS high water is that read's alone:
    ``rss_base_mib`` after imports and ``Catalog.open``, ``rss_peak_mib``
    after the read."""
    out = {}
    for name in names:
        cmd = [sys.executable, __file__, "--url", url, "--no-build", "--no-trace", "--json", "--reads", name]
        cmd += ["--docs", str(args.docs), "--chunks-per-doc", str(args.chunks_per_doc)]
        cmd += ["--engine", args.engine]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])["reads"][name]
        print(f"{name:22s} {out[name]}", flush=True)
    return out


def throwaway_postgres(root: Path) -> str:
    """Start scripts/pg_throwaway.sh in ``root``; returns the SQLAlchemy URL."""
    script = str(ROOT / "scripts" / "pg_throwaway.sh")
    out = subprocess.run([script, "start", str(root)], check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1].strip("'\"")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--chunks-per-doc", type=int, default=10)
    ap.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--url", help="an empty catalog database (default: a new one)")
    ap.add_argument("--dir", help="where the SQLite file or throwaway cluster goes (default: a temp dir)")
    ap.add_argument("--reads", default=",".join(READS), help="comma-separated reads to measure")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    ap.add_argument("--no-trace", action="store_true", help="time only (no tracemalloc)")
    ap.add_argument("--rss", action="store_true", help="each read in a child process: its RSS high water")
    ap.add_argument(
        "--no-build", action="store_true", help="measure a catalog this script built before (--url)"
    )
    args = ap.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-catalog-"))
    work.mkdir(parents=True, exist_ok=True)
    started_pg = args.engine == "postgres" and not args.url
    url = args.url or (throwaway_postgres(work / "pg") if started_pg else f"sqlite:///{work / 'catalog.db'}")
    try:
        print(f"load before: {os.getloadavg()}", flush=True)
        cat = Catalog.open(url)
        try:
            built = 0.0 if args.no_build else build(cat, args.docs, args.chunks_per_doc)
            print(f"built {args.docs} documents x {args.chunks_per_doc} chunks in {built:.1f} s", flush=True)
            names = [r for r in args.reads.split(",") if r]
            if not args.rss:
                figures = measure(cat, args.docs, args.chunks_per_doc, names, trace=not args.no_trace)
        finally:
            cat.close()
        if args.rss:
            figures = measure_in_children(args, url, names)
        print(f"load after: {os.getloadavg()}", flush=True)
    finally:
        if started_pg:
            subprocess.run([str(ROOT / "scripts" / "pg_throwaway.sh"), "stop", str(work / "pg")], check=False)
    if args.json:
        print(json.dumps({"engine": args.engine, "docs": args.docs, "chunks_per_doc": args.chunks_per_doc,
                          "build_s": round(built, 1), "reads": figures}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
