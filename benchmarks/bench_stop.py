"""How long SIGINT (Ctrl-C) and SIGTERM take to end a backfill or a stream of
40 text PDFs, measured from outside.

Each run starts ``python -m cli.main backfill FOLDER`` (or a long-running
``stream`` over the same 40 PDFs pushed as events) in a session of its own
with SIGINT's default action, as a shell gives a foreground command; once
the run is ``--after`` seconds past its first progress line of the phase
asked for (``parse`` or ``embed``), the signal goes to the process
(``--group``: to its whole process group, as a terminal's Ctrl-C does).
Two times are taken: until the process exits, and until its output pipe
closes (every helper that held it is gone too: what a shell pipeline or a
``subprocess.run`` waits for). With ``$RAGSYNC_STOP_REPORT`` the process
writes how its stop went; the script prints that too, with the load
average before and after (2 shared cores: quote the figures with it).

Usage: ``python benchmarks/bench_stop.py [--runs 3] [--command backfill|stream]
[--signal SIGINT|SIGTERM] [--phase parse|embed] [--after 2] [--group] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = {"parse": "[parse+chunk]", "embed": "[embed]"}


from tests.proc import start_as_at_a_terminal  # noqa: E402


def make_pdfs(folder: Path, count: int = 40, pages: int = 6) -> None:
    """``count`` text PDFs of ``pages`` pages each (three paragraphs a page)."""
    from tests.fixtures_gen import long_pdf_bytes

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):

        def paragraph(page: int, k: int, i: int = i) -> str:
            words = " ".join(f"term{(i * 31 + page * 7 + k * 3 + j) % 997}" for j in range(60))
            return f"Report {i}, page {page}, paragraph {k}: {words}."

        (folder / f"report-{i:02d}.pdf").write_bytes(long_pdf_bytes(pages, paragraph))


def _stream_home(base: list[str], pdfs: Path, home: Path, env: dict[str, str]) -> None:
    """A home whose queue holds an upsert event for every PDF."""
    events = home.parent / f"{home.name}.jsonl"
    lines = [
        {"source_id": "docs", "doc_id": p.name, "op": "upsert", "source_version": 1, "content_uri": str(p)}
        for p in sorted(pdfs.iterdir())
    ]
    events.write_text("".join(json.dumps({**e, "event_time": 1796119200}) + "\n" for e in lines))
    add = ["sources", "add", "docs", "--tenant", "default", "--type", "object_store", "--uri", str(pdfs)]
    for args in ([*add, "--acl-groups", "staff"], ["events", "push", str(events)]):
        command = [*base, *args, "--home", str(home)]
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)


def one_stop(args: argparse.Namespace, pdfs: Path, work: Path, n: int) -> dict[str, Any]:
    """Start one run, signal it in the phase asked for, time its end."""
    base = [sys.executable, "-m", "cli.main"]
    home = work / f"home-{n}"
    report = work / f"stop-{n}.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAGSYNC_STOP_REPORT=str(report))
    if args.command == "stream":
        _stream_home(base, pdfs, home, env)
        cmd = [*base, "stream", "--home", str(home)]
    else:
        cmd = [*base, "backfill", str(pdfs), "--home", str(home)]
    proc = start_as_at_a_terminal(cmd, env, None)
    lines: list[str] = []
    closed: dict[str, float] = {}

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))
        closed["at"] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    marker = PHASES[args.phase]
    while not any(marker in line for line in lines):
        if proc.poll() is not None:
            raise RuntimeError("the run ended before the phase: " + "".join(lines)[-2000:])
        time.sleep(0.05)
    time.sleep(args.after)
    signum = getattr(signal, args.signal)
    load = os.getloadavg()[0]
    sent = time.monotonic()
    if args.group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    code = proc.wait()
    exited = time.monotonic() - sent
    reader.join(timeout=120)
    how = json.loads(report.read_text()) if report.exists() else {}
    return {
        "exit_code": code,
        "exit_s": round(exited, 2),
        "output_closed_s": round(closed.get("at", float("nan")) - sent, 2),
        "load_at_signal": round(load, 2),
        "helpers": sorted(how.get("helpers", {}).values()),
        "left_running": how.get("left_running", []),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--command", choices=("backfill", "stream"), default="backfill")
    parser.add_argument("--signal", choices=("SIGINT", "SIGTERM"), default="SIGINT")
    parser.add_argument("--phase", choices=tuple(PHASES), default="parse")
    parser.add_argument("--after", type=float, default=2.0, help="seconds into the phase")
    parser.add_argument("--group", action="store_true", help="signal the process group (a terminal's Ctrl-C)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-stop-") as tmp:
        work = Path(tmp)
        make_pdfs(work / "pdfs")
        before = os.getloadavg()[0]
        runs = [one_stop(args, work / "pdfs", work, n) for n in range(args.runs)]
        after = os.getloadavg()[0]
    exits = [r["exit_s"] for r in runs]
    closed = [r["output_closed_s"] for r in runs]
    out = {
        "command": args.command,
        "signal": args.signal + (" (process group)" if args.group else ""),
        "phase": args.phase,
        "runs": runs,
        "exit_s": {"min": min(exits), "median": statistics.median(exits), "max": max(exits)},
        "output_closed_s": {"min": min(closed), "median": statistics.median(closed), "max": max(closed)},
        "load": {"before": round(before, 2), "after": round(after, 2)},
    }
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{args.command}, {out['signal']} during {args.phase}, {args.runs} runs")
        print(f"  exit after signal (s):        {out['exit_s']}")
        print(f"  output closed after (s):      {out['output_closed_s']}")
        print(f"  load average before / after:  {before:.2f} / {after:.2f}")
        for r in runs:
            print(f"  exit {r['exit_code']} in {r['exit_s']} s (load {r['load_at_signal']}): {r['helpers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
