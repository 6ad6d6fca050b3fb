"""Backfill documents/s with 1 vs 2 Beam worker processes on the same servers.

Inputs: ``--files N`` (default 24) wiki Markdown pages, every k-th page in path
order of ``documents/wiki-18f-handbook/pages`` under ``--corpus`` (default the first
``shared/corpus`` beside an ancestor of the repository), copied into a temporary folder. Servers: a throwaway
PostgreSQL (``scripts/pg_throwaway.sh``, or ``$RAGSYNC_PG_URL``) and one
``milvus-lite server`` (or ``$RAGSYNC_MILVUS_URI``), with the keyword index on
Milvus BM25 (``keyword_index=milvus``). Each measured run indexes the same
folder into its own fresh PostgreSQL database and Milvus database, so every
run is a cold one with the same work.

For each worker count N in ``--workers`` (default ``1 2``), ``run_backfill``
with ``--direct_running_mode=multi_processing --direct_num_workers=N``: wall
time (including the SDK worker processes' start and the model load in each),
documents/s = documents_indexed / wall, chunks/s. Reported with the 1-minute
load average before and after each run (other jobs share the machine) and the
ratio docs/s(N) / docs/s(first N).

Output: a table on stdout and ``--json PATH`` (optional) with the figures.

Failures: exits 1 when a run indexes a different number of documents or
chunks than the first run (the runs must do the same work), 2 when the corpus
or the servers are missing.

    .venv/bin/python benchmarks/bench_workers.py --files 24
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sample(corpus: Path, files: int, dest: Path) -> int:
    """Copy every k-th wiki page (path order) into ``dest``; returns the count."""
    pages = sorted((corpus / "documents" / "wiki-18f-handbook" / "pages").rglob("*.md"))
    if not pages:
        raise SystemExit(f"bench_workers: no wiki pages under {corpus}")
    step = max(1, len(pages) // files)
    chosen = pages[::step][:files]
    dest.mkdir(parents=True)
    for i, page in enumerate(chosen):
        shutil.copyfile(page, dest / f"{i:03d}_{page.name}")
    old = time.time() - 3600
    for path in dest.iterdir():
        os.utime(path, (old, old))
    return len(chosen)


def _start_servers(tmp: Path) -> tuple[str, str, list[Any]]:
    """(PostgreSQL URL, Milvus URI, cleanups): from the environment, else started here."""
    cleanups: list[Any] = []
    pg = os.environ.get("RAGSYNC_PG_URL", "")
    if not pg:
        root = tmp / "pg"
        out = subprocess.run(
            [str(ROOT / "scripts" / "pg_throwaway.sh"), "start", str(root)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pg = out.strip().split("RAGSYNC_PG_URL=", 1)[1]
        cleanups.append(
            lambda: subprocess.run([str(ROOT / "scripts" / "pg_throwaway.sh"), "stop", str(root)])
        )
    milvus = os.environ.get("RAGSYNC_MILVUS_URI", "")
    if not milvus:
        from tests.mediawiki import free_port
        from tests.test_stores_servers import _answers, _milvus_lite_command

        command = _milvus_lite_command()
        if command is None:
            raise SystemExit("bench_workers: milvus-lite not installed and RAGSYNC_MILVUS_URI not set")
        port = free_port()
        log = open(tmp / "milvus.log", "wb")  # noqa: SIM115 - closed with the server
        proc = subprocess.Popen(
            [
                *command,
                "server",
                "--data-dir",
                str(tmp / "milvus"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        milvus = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while _answers(milvus) and time.monotonic() < deadline:
            time.sleep(0.5)

        def stop() -> None:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()

        cleanups.append(stop)
    return pg, milvus, cleanups


def _run(src: Path, tmp: Path, pg: str, milvus: str, workers: int) -> dict[str, Any]:
    from beam_pipelines.backfill import run_backfill
    from tests.test_cluster import _cluster_settings

    settings = _cluster_settings(tmp, pg, milvus)
    args = ("--direct_running_mode=multi_processing", f"--direct_num_workers={workers}")
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    summary = run_backfill(str(src), settings, acl_groups=["staff"], beam_args=args, show_progress=False)
    wall = time.monotonic() - start
    return {
        "workers": workers,
        "seconds": round(wall, 1),
        "documents_indexed": summary.documents_indexed,
        "chunks_written": summary.chunks_written,
        "docs_per_s": round(summary.documents_indexed / wall, 3),
        "chunks_per_s": round(summary.chunks_written / wall, 2),
        "load1_before": round(load_before, 2),
        "load1_after": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    near = [p / "shared" / "corpus" for p in ROOT.parents]
    parser.add_argument("--corpus", default=str(next((p for p in near if p.is_dir()), near[0])))
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        print(f"bench_workers: corpus {corpus} not found", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ragsync-bench-workers-"))
    src = tmp / "src"
    files = _sample(corpus, args.files, src)
    pg, milvus, cleanups = _start_servers(tmp)
    rows: list[dict[str, Any]] = []
    try:
        for n in args.workers:
            rows.append(_run(src, tmp / f"run_{n}_{uuid.uuid4().hex[:6]}", pg, milvus, n))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        for cleanup in reversed(cleanups):
            cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]
    work = [(r["documents_indexed"], r["chunks_written"]) for r in rows]
    same = len(set(work)) == 1
    for r in rows:
        r["ratio"] = round(r["docs_per_s"] / base["docs_per_s"], 2) if base["docs_per_s"] else None
    print(f"\n{files} wiki pages, cpus={os.cpu_count()}")
    print("workers  seconds  docs/s  chunks/s  ratio  load1 before/after")
    for r in rows:
        print(
            f"{r['workers']:>7}  {r['seconds']:>7}  {r['docs_per_s']:>6}  {r['chunks_per_s']:>8}  "
            f"{r['ratio']:>5}  {r['load1_before']}/{r['load1_after']}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"files": files, "cpus": os.cpu_count(), "runs": rows}, indent=2)
        )
    if not same:
        print("bench_workers: the runs indexed different work", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
