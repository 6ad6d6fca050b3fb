"""Peak memory of a cold ``ragsync backfill`` of 250, 500 and 1,000 small
real documents, through the CLI, so the growth per document is visible.

The documents are the CISI abstracts of the shared corpus
(``retrieval_golden/cisi/CISI.ALL``, 1,460 records; title and abstract, one
text file each, as ``benchmarks/cisi_to_golden.py`` writes them), with their
modification times set one hour back. Each size is backfilled into a fresh
home by ``python -m cli.main backfill FOLDER --home HOME --quiet
--json`` in its own process.

Memory, three ways:

* ``tree_rss_peak_mib``: the peak over time of the summed RSS of the CLI
  process and every descendant (Beam workers, parse children), sampled from
  ``/proc`` every ``--interval`` seconds (psutil is not installed; this is
  what it would read). Summed RSS counts shared pages once per process.
* ``tree_pss_peak_mib``: the same with PSS (``/proc/PID/smaps_rollup``):
  shared pages split between the processes that map them, so the sum is the
  tree's real footprint.
* ``max_single_rss_mib``: ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``
  of a wrapper process that only runs the CLI: the largest RSS any single
  process of the tree reached (waited-for descendants included), exact but
  not summed.
* ``pss_peak_by_role_mib``: the peak PSS of each kind of process, so the
  growth can be placed: ``launcher`` (the CLI process, which runs the local
  FnApiRunner and the embedding model), ``milvus`` (Milvus Lite's server),
  ``fork server`` / ``parse child`` (isolated parsers), ``other``.

``per_doc_kib``: growth of the PSS peak per added document between the
smallest and the largest size (bounded memory: roughly 0). The load average
before and after each run is printed with it (the machine may be shared:
memory figures stay valid, seconds do not).

Usage: ``python benchmarks/bench_memory.py [--sizes 250,500,1000] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CISI = ROOT.parent.parent / "shared" / "corpus" / "retrieval_golden" / "cisi" / "CISI.ALL"
if not DEFAULT_CISI.exists():  # the corpus beside the checkout, or where RAGSYNC_CORPUS says
    DEFAULT_CISI = (
        Path(os.environ.get("RAGSYNC_CORPUS", ROOT.parent / "shared" / "corpus"))
        / "retrieval_golden"
        / "cisi"
        / "CISI.ALL"
    )

#: Runs the command in argv[2:], then writes RUSAGE_CHILDREN's ru_maxrss (KiB) to argv[1].
WRAPPER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(rc)\n"
)


def cisi_records(path: Path) -> list[tuple[str, str]]:
    """(id, "title\\n\\nabstract\\n") of every CISI record with an abstract, in file order."""
    from cisi_to_golden import records

    out = []
    for doc_id, fields in records(str(path)):
        if fields.get("W"):
            out.append((doc_id, f"{fields.get('T', '')}\n\n{fields['W']}\n"))
    return out


def stage(records: list[tuple[str, str]], n: int, dest: Path) -> int:
    """Write the first ``n`` records as ``cisi_NNNN.txt``, mtimes an hour back."""
    dest.mkdir(parents=True)
    aged = time.time() - 3600
    for doc_id, text in records[:n]:
        path = dest / f"cisi_{int(doc_id):04d}.txt"
        path.write_text(text, encoding="utf-8")
        os.utime(path, (aged, aged))
    return min(n, len(records))


def _tree(root: int) -> list[int]:
    from ragsync.ops.lifecycle import descendants

    return [root, *descendants(root)]


def _kib(pid: int, path: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _role(pid: int, cli_pid: int) -> str:
    """What a process of the tree is, from its command line and parent."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            parent = int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return "other"
    if pid == cli_pid:
        return "launcher"
    if "milvus" in cmdline:
        return "milvus"
    if "multiprocessing.forkserver" in cmdline:  # its children keep its command line
        return "fork server" if parent == cli_pid else "parse child"
    return "other"


class TreeSampler(threading.Thread):
    """Samples the summed RSS and PSS of ``root``'s process tree, and the peak
    PSS per process role (:func:`_role`), until stopped. ``root`` is the
    wrapper; its one child is the CLI process."""

    def __init__(self, root: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_rss = self.peak_pss = self.peak_procs = self.samples = 0
        self.peak_by_role: dict[str, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            pids = _tree(self.root)
            cli_pid = pids[1] if len(pids) > 1 else self.root
            by_pid = {p: _kib(p, "smaps_rollup", "Pss:") for p in pids}
            rss = sum(_kib(p, "status", "VmRSS:") for p in pids)
            pss = sum(by_pid.values())
            for p, kib in by_pid.items():
                role = _role(p, cli_pid)
                self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), kib)
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(pids))
            self.samples += 1
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()


def measure(folder: Path, home: Path, interval: float) -> dict[str, Any]:
    """One cold backfill of ``folder`` into ``home``: summary, wall, peaks."""
    cli = [sys.executable, "-m", "cli.main", "backfill", str(folder), "--home", str(home)]
    cli += ["--quiet", "--json"]
    maxrss_file = home.parent / f"{home.name}.maxrss"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    load_before = round(os.getloadavg()[0], 2)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, str(maxrss_file), *cli],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = TreeSampler(proc.pid, interval)
    sampler.start()
    out, err = proc.communicate(timeout=7200)
    sampler.stop()
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"backfill failed ({proc.returncode}): {err[-2000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    return {
        "documents_indexed": summary["documents_indexed"],
        "dead_lettered": summary["dead_lettered"],
        "chunks_written": summary["chunks_written"],
        "wall_s": round(wall, 1),
        "tree_rss_peak_mib": round(sampler.peak_rss / 1024, 1),
        "tree_pss_peak_mib": round(sampler.peak_pss / 1024, 1),
        "max_single_rss_mib": round(int(maxrss_file.read_text()) / 1024, 1),
        "pss_peak_by_role_mib": {k: round(v / 1024, 1) for k, v in sorted(sampler.peak_by_role.items())},
        "processes_peak": sampler.peak_procs,
        "samples": sampler.samples,
        "loadavg": [load_before, round(os.getloadavg()[0], 2)],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    records = cisi_records(Path(args.cisi))
    sizes = [int(s) for s in args.sizes.split(",")]
    if max(sizes) > len(records):
        raise SystemExit(f"only {len(records)} CISI abstracts; asked for {max(sizes)}")
    work = Path(tempfile.mkdtemp(prefix="bench_memory_"))
    runs: dict[str, Any] = {}
    try:
        for n in sizes:
            folder = work / f"docs{n}"
            stage(records, n, folder)
            runs[str(n)] = measure(folder, work / f"home{n}", args.interval)
            print(f"[bench_memory] {n}: {runs[str(n)]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lo, hi = str(min(sizes)), str(max(sizes))
    added = max(sizes) - min(sizes)
    growth = {
        key: round((runs[hi][key] - runs[lo][key]) * 1024 / added, 1) if added else 0.0
        for key in ("tree_rss_peak_mib", "tree_pss_peak_mib", "max_single_rss_mib")
    }
    return {"runs": runs, "per_doc_kib": growth, "interval_s": args.interval}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,500,1000", help="documents per run (default 250,500,1000)")
    parser.add_argument("--cisi", default=str(DEFAULT_CISI), help="CISI.ALL of the shared corpus")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between /proc samples")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    r = run(args)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    print("docs  indexed  wall s  tree RSS MiB  tree PSS MiB  largest process MiB  procs  load")
    for n, m in r["runs"].items():
        print(
            f"{n:>5} {m['documents_indexed']:>7} {m['wall_s']:>7} {m['tree_rss_peak_mib']:>13} "
            f"{m['tree_pss_peak_mib']:>13} {m['max_single_rss_mib']:>20} {m['processes_peak']:>6}  "
            f"{m['loadavg']}"
        )
        print(f"      peak PSS by process role (MiB): {m['pss_peak_by_role_mib']}")
    print(f"growth per document (KiB): {r['per_doc_kib']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
