"""Listing a large source: on the launcher (the old way) vs inside the pipeline.

Creates a folder of N empty files (default 1,000,000, in 1,000 sub-folders)
once, then measures, each in a fresh process so peak memory is its own:

* ``launcher-old``: what ``ragsync backfill`` did before listing moved into
  the pipeline: the folder connector lists every file on the launcher into a
  list and hands it to ``beam.Create`` (pickled into the graph). Wall time and
  peak memory of the launcher up to ``p.run()``.
* ``launcher-new``: what the launcher does now: ask the connector for its
  shards (``transforms.listing.listing_shards``) and build the graph
  (``ListSource``). Same measures.
* ``pipeline``: the listing itself, run by the workers: ``ListSource`` then a
  count, on the FnApiRunner (whose SDK worker runs inside this process, so
  its maximum RSS is the workers'). Checks the count is N.

Launcher time is measured untraced; launcher memory is ``tracemalloc``'s
peak of Python allocations in a second, traced build of the same graph (what
holding the listing costs), and the process's maximum resident set size.

    .venv/bin/python benchmarks/bench_listing.py                 # 1M files, Markdown table
    .venv/bin/python benchmarks/bench_listing.py --files 100000 --json
    .venv/bin/python benchmarks/bench_listing.py --root /tmp/l1m --keep   # reuse the folder later
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PER_DIR = 1000


def make_folder(root: Path, files: int) -> float:
    """N empty files in sub-folders of ``PER_DIR``; returns seconds (0 when it exists)."""
    marker = root / ".complete"
    if marker.exists() and marker.read_text() == str(files):
        return 0.0
    shutil.rmtree(root, ignore_errors=True)
    start = time.monotonic()
    for d in range((files + PER_DIR - 1) // PER_DIR):
        sub = root / f"d{d:05d}"
        sub.mkdir(parents=True)
        for f in range(min(PER_DIR, files - d * PER_DIR)):
            os.close(os.open(sub / f"f{f:04d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    marker.write_text(str(files))
    return time.monotonic() - start


def _spec(root: Path) -> Any:
    from ragsync.source_types import SourceSpec

    return SourceSpec("bench", "bench", "object_store", str(root), options={"acl_groups": ["everyone"]})


def _graph(mode: str, root: Path, settings: Any) -> tuple[Any, dict[str, Any]]:
    """The launcher's work for ``mode``: a pipeline whose listing is counted."""
    import apache_beam as beam

    from transforms.listing import ListSource, listing_shards

    spec = _spec(root)
    info: dict[str, Any] = {}
    p = beam.Pipeline(runner="FnApiRunner")
    if mode == "launcher-old":
        from connectors.base import list_all
        from connectors.files import FolderConnector
        from transforms.io import BeamFileSystem

        files = list(list_all(FolderConnector(spec, BeamFileSystem())))
        listed = p | "ListSource" >> beam.Create(files)
        info["listed_on_launcher"] = len(files)
    else:
        shards = listing_shards(spec, settings)
        listed = p | "ListSource" >> ListSource(spec, settings, shards)
        info["shards"] = len(shards)
    listed | "Count" >> beam.combiners.Count.Globally()
    return p, info


def measure(mode: str, root: Path, home: Path) -> dict[str, Any]:
    """One measurement in this process: the launcher's wall time (untraced),
    then its peak Python memory (traced); for ``pipeline``, the run too."""
    import apache_beam  # noqa: F401 - imported before timing, as a launcher has it

    import transforms.listing  # noqa: F401
    from ragsync.config import Settings
    from transforms.metrics import counter_value

    settings = Settings(home=str(home))
    out: dict[str, Any] = {"mode": mode}
    start = time.monotonic()
    p, info = _graph(mode, root, settings)
    out["launcher_s"] = round(time.monotonic() - start, 3)
    out.update(info)
    if mode == "pipeline":
        start = time.monotonic()
        result = p.run()
        result.wait_until_finish()
        out["pipeline_s"] = round(time.monotonic() - start, 3)
        out["listed_by_workers"] = counter_value(result, "documents_listed")
    else:
        del p
        tracemalloc.start()
        _graph(mode, root, settings)
        out["launcher_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    out["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--root", help="folder for the files (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the folder")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--measure", choices=("launcher-old", "launcher-new", "pipeline"), help=argparse.SUPPRESS
    )
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, Path(args.root), Path(args.home))))
        return 0

    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench-listing-")) / "files"
    made_s = make_folder(root, args.files)
    home = Path(tempfile.mkdtemp(prefix="bench-listing-home-"))
    rows = []
    try:
        for mode in ("launcher-old", "launcher-new", "pipeline"):
            proc = subprocess.run(
                [sys.executable, __file__, "--measure", mode, "--root", str(root), "--home", str(home)],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                check=False,
            )
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if not args.keep and not args.root:
            shutil.rmtree(root.parent, ignore_errors=True)
    old, new, run = rows
    report = {
        "files": args.files,
        "folder_created_s": round(made_s, 1),
        "runs": rows,
        "launcher_time_ratio_new_over_old": round(new["launcher_s"] / max(old["launcher_s"], 1e-9), 4),
        "launcher_memory_ratio_new_over_old": round(
            new["launcher_peak_mib"] / max(old["launcher_peak_mib"], 1e-9), 4
        ),
        "listing_complete": run.get("listed_by_workers") == args.files == old.get("listed_on_launcher"),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"Listing {args.files:,} empty files (folder made in {made_s:.0f} s)\n")
    print("| measurement | launcher s | launcher peak MiB (Python) | max RSS MiB | notes |")
    print("|---|---|---|---|---|")
    print(
        f"| launcher lists, `beam.Create` (old) | {old['launcher_s']} | {old['launcher_peak_mib']} | "
        f"{old['max_rss_mib']} | {old['listed_on_launcher']:,} records held |"
    )
    print(
        f"| launcher asks for shards, `ListSource` (new) | {new['launcher_s']} | "
        f"{new['launcher_peak_mib']} | {new['max_rss_mib']} | {new['shards']} shard(s) |"
    )
    print(
        f"| the listing run by workers (FnApiRunner, in process) | run {run['pipeline_s']} | - | "
        f"{run['max_rss_mib']} | {run['listed_by_workers']:,} listed |"
    )
    print(
        f"\nnew ÷ old on the launcher: time {report['launcher_time_ratio_new_over_old']}, "
        f"memory {report['launcher_memory_ratio_new_over_old']}; complete: {report['listing_complete']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
