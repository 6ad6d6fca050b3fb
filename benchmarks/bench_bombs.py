"""Peak memory of a backfill and of ``ragsync parse`` over a flate bomb, beside
the parse child's memory limit (issue 43).

The bomb is the red team's: a one-page PDF of ~1.6 MB whose content stream
inflates to 1.5 GiB of spaces (``--decoded-mib``), made at run time
(``tests.fixtures_gen.flate_bomb_pdf``), in a folder beside one Markdown
file. Two commands run through the CLI, each in a fresh home and process:

* ``ragsync backfill FOLDER --json --quiet`` (the sync of a folder source:
  listing, fetch, detection, parse, chunk, embed, write);
* ``ragsync parse FOLDER/bomb.pdf --json``.

While each runs, the peak RSS (``VmHWM``) of the command's process and of
every process it starts is read from ``/proc`` every 50 ms
(``tests.proc.run_watching_memory``). Reported per command: exit code, the
bomb's outcome (its dead letter's stage and class, or ``ragsync parse``'s
error class), the peak RSS of the command's own process (the pipeline
process of the backfill), the largest peak of the processes it started (fork
server, detection and parse children, Milvus Lite), and the limit.

``--expansion-limits off`` raises ``max_archive_bytes`` and
``max_archive_ratio`` past the bomb, so the expansion check lets it through
and only the memory limit of the isolated child stops it (use a
``--memory-mb`` the bomb exceeds, e.g. 2048).

Usage: ``python benchmarks/bench_bombs.py [--decoded-mib 1536] [--memory-mb N]
[--expansion-limits on|off] [--json]``. Run it with ``PYTHONPATH`` naming
another checkout to measure that one (the "before" figures in
``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures_gen import flate_bomb_pdf  # noqa: E402
from tests.proc import cli, run_watching_memory  # noqa: E402


def _bomb_outcome(home: Path) -> str:
    """``stage/class`` of the bomb's dead letter in ``home``'s catalog."""
    from ragsync.config import Settings, open_catalog

    catalog = open_catalog(Settings(home=str(home)))
    try:
        rows = [r for r in catalog.dead_letters.list_dead_letters(limit=20) if r.uri.endswith("bomb.pdf")]
    finally:
        catalog.close()
    return ", ".join(f"{r.stage}/{r.error_class}" for r in rows) or "none"


def _measure(argv: list[str], home: Path, limit_mb: int) -> dict[str, Any]:
    env = {**os.environ, "RAGSYNC_HOME": str(home), "HF_HUB_OFFLINE": "1", "OMP_THREAD_LIMIT": "1"}
    start = time.monotonic()
    done, peaks = run_watching_memory(argv, env)
    seconds = time.monotonic() - start
    others = {k: v for k, v in peaks.items() if k != "main"}
    largest = max(others.items(), key=lambda kv: kv[1]) if others else ("-", 0.0)
    out: dict[str, Any] = {
        "exit_code": done.returncode,
        "seconds": round(seconds, 1),
        "main_peak_rss_mib": round(peaks.get("main", 0.0), 1),
        "largest_child_peak_rss_mib": round(largest[1], 1),
        "largest_child": largest[0].split(" ", 1)[-1][:80],
        "processes": len(peaks),
        "limit_mib": limit_mb,
        "under_limit": all(v < limit_mb for v in peaks.values()),
    }
    if "parse" in argv:
        try:
            out["outcome"] = (json.loads(done.stdout.strip().splitlines()[-1])["error"] or {}).get("class")
        except (ValueError, IndexError, KeyError):
            out["outcome"] = f"no JSON (exit {done.returncode}): {done.stderr[-300:]}"
    else:
        out["outcome"] = _bomb_outcome(home)
    return out


def main() -> None:
    from ragsync.config import Settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decoded-mib", type=int, default=1536, help="what the bomb's stream inflates to")
    ap.add_argument(
        "--memory-mb", type=int, default=0, help="parse_memory_mb (default: the setting's default)"
    )
    ap.add_argument("--expansion-limits", choices=("on", "off"), default="on")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    limit = args.memory_mb or Settings(home=tempfile.gettempdir()).parse_memory_mb
    flags = ["--parse-memory-mb", str(limit)]
    if args.expansion_limits == "off":
        flags += ["--max-archive-bytes", str(64 << 30), "--max-archive-ratio", "1000000"]
    with tempfile.TemporaryDirectory(prefix="bench-bombs-") as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        bomb = flate_bomb_pdf(args.decoded_mib)
        (folder / "bomb.pdf").write_bytes(bomb)
        (folder / "good.md").write_text("# Holidays\n\nThe office closes on the first Monday of August.\n")
        results = {
            "bomb_bytes": len(bomb),
            "decoded_mib": args.decoded_mib,
            "expansion_limits": args.expansion_limits,
            "load_before": os.getloadavg()[0],
            "backfill": _measure(
                cli("backfill", str(folder), "--json", "--quiet", *flags), Path(tmp) / "h1", limit
            ),
            "parse": _measure(
                cli("parse", str(folder / "bomb.pdf"), "--json", *flags), Path(tmp) / "h2", limit
            ),
            "load_after": os.getloadavg()[0],
        }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"bomb: {results['bomb_bytes']} bytes -> {args.decoded_mib} MiB; parse_memory_mb {limit}; "
        f"expansion limits {args.expansion_limits}"
    )
    for name in ("backfill", "parse"):
        r = results[name]
        print(
            f"  {name:8s} exit {r['exit_code']}  bomb: {r['outcome']}  "
            f"own peak {r['main_peak_rss_mib']} MiB  largest child {r['largest_child_peak_rss_mib']} MiB  "
            f"limit {r['limit_mib']} MiB  "
            f"under limit: {r['under_limit']}  {r['seconds']} s"
        )


if __name__ == "__main__":
    main()
