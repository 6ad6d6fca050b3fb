"""Unchanged re-run cost through the CLI: a cold ``ragsync backfill`` of N real
documents, then unchanged re-runs of the same folder into the same home.

The files are the fixed set of ``bench_backfill.select_files`` (wiki Markdown,
HTML, DOCX and text-layer PDFs from the shared corpus, in fixed proportions),
copied into a temporary folder with their modification times set one hour
back (so no file lies in the racy window of ``ragsync.decisions.skip_unread``).
Every run is ``python -m cli.main backfill FOLDER --home HOME
--quiet --json`` in a fresh process, timed from outside (imports included).

ratio = median re-run wall / cold wall (target <= 0.05). The re-run must
report ``pipeline_skipped`` 1 and nothing embedded or written, else the script
fails. Figures are wall-clock on a shared machine: the load average before and
after is printed with them.

With ``--s3`` the staged files are uploaded to a local S3 server (moto's
server mode, in this process: ``requirements-dev.txt``) and the source is
``s3://bench/docs``: the re-run then lists the prefix on the launcher through
Beam's S3 file system (``beam_pipelines.quick``), Beam import included.

Usage: ``python benchmarks/bench_rerun.py [--files 200] [--reruns 3] [--s3] [--keep DIR] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_backfill import DEFAULT_CORPUS, cli_backfill, stage_aged_set  # noqa: E402


def serve_s3(folder: Path) -> tuple[Any, str, list[str]]:
    """Start a local S3 server, upload every file of ``folder`` under
    ``s3://bench/docs/`` and wait out the racy window of the first listing.
    Returns (the server, the prefix, the Beam options that reach it)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from ragsync.decisions import RACY_WINDOW_S
    from tests.mediawiki import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket="bench")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), "bench", "docs/" + path.relative_to(folder).as_posix())
    time.sleep(RACY_WINDOW_S + 1.1)
    args = [f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=k", "--s3_secret_access_key=s"]
    return server, "s3://bench/docs", [*args, "--s3_region_name=us-east-1", "--runner=DirectRunner"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Stage the files, run cold, re-run unchanged; returns every figure."""
    corpus = Path(args.corpus).resolve()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_rerun_"))
    folder, home = work / "docs", work / "home"
    files = stage_aged_set(corpus, args.files, folder)
    server = None
    source: Path | str = folder
    beam_args: list[str] = []
    if args.s3:
        server, source, beam_args = serve_s3(folder)
    load_before = round(os.getloadavg()[0], 2)
    try:
        cold = cli_backfill(source, home, beam_args=beam_args)
        reruns = [cli_backfill(source, home, beam_args=beam_args) for _ in range(args.reruns)]
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for r in reruns:
        s = r["summary"]
        if s.get("pipeline_skipped") != 1 or s["chunks_embedded"] or s["chunks_written"]:
            raise RuntimeError(f"the unchanged re-run did work: {s}")
    rerun_wall = statistics.median(r["wall_s"] for r in reruns)
    c = cold["summary"]
    return {
        "source": "s3" if args.s3 else "folder",
        "files": len(files),
        "cold": {
            "wall_s": cold["wall_s"],
            "documents_indexed": c["documents_indexed"],
            "dead_lettered": c["dead_lettered"],
            "chunks_written": c["chunks_written"],
        },
        "rerun_wall_s": [r["wall_s"] for r in reruns],
        "rerun_median_s": rerun_wall,
        "rerun_in_process_s": reruns[-1]["summary"]["seconds"],
        "ratio": round(rerun_wall / cold["wall_s"], 4),
        "target": 0.05,
        "loadavg": [load_before, round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures (``--json``: one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200, help="documents to backfill (default 200)")
    parser.add_argument(
        "--reruns", type=int, default=3, help="unchanged re-runs; the median counts (default 3)"
    )
    parser.add_argument("--keep", help="work in this (empty) folder and keep it (default: a temp folder)")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the shared corpus (../shared/corpus)")
    parser.add_argument("--s3", action="store_true", help="serve the files from a local S3 server (moto)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    r = run(args)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    cold = r["cold"]
    print(f"files: {r['files']} (indexed {cold['documents_indexed']}, dead letters {cold['dead_lettered']})")
    print(f"cold backfill (CLI):      {r['cold']['wall_s']:.1f} s")
    print(f"unchanged re-run (CLI):   {r['rerun_median_s']:.2f} s median of {r['rerun_wall_s']}")
    print(f"ratio re-run / cold:      {r['ratio']:.3f}x (target <= {r['target']})")
    print(f"load average before/after: {r['loadavg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
