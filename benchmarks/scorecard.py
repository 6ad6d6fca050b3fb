"""The throughput targets (issue 16) in one run: every ratio, side by side, with its target.

Each check runs one benchmark script of this folder in a fresh process with
``--json`` (every script measures ragsync and its reference - raw library,
peer tool or torch - in the same run, interleaved where it can), one after
the other so they do not share the cores, and reads its ratio from the JSON:

==========  =========================================================  ==================
check       script and arguments                                       target
==========  =========================================================  ==================
embed       bench_embed.py --no-recall --pages 30                      onnx-int8 >= 2x torch chunks/s
recall      bench_embed.py --no-throughput                             onnx-int8 Recall@10 +-0.01 of torch
pdf         bench_pdf.py --skip fastlane --skip long                   parse >= 0.3x raw pypdfium2 pages/CPU-s
tables      eval_parse.py --only tables                                ICDAR 2013 cells (strict) >= 0.95
rerun       bench_rerun.py --files 200                                 unchanged re-run <= 0.05x cold, CLI
rerun_s3    bench_rerun.py --s3 --files 200                            the same from a local S3 server
peer        bench_llamaindex.py --files 60 --ragsync-backends default  documents/s > LlamaIndex, as many
                                                                       indexed, re-run faster; the model
                                                                       > 50 % of ragsync's cold run
stream      bench_stream.py --seconds 60 --base 100                    finishes >= 97 % of the 4.6/s produced
memory      bench_memory.py --sizes 250,1000                           reported: growth per document
==========  =========================================================  ==================

A check whose script cannot run here (no corpus, no LlamaIndex venv) is
reported as skipped with the script's own reason; a script that fails is
reported as failed with its last error line; the others still run.

Usage::

    python benchmarks/scorecard.py [--only embed,peer] [--skip recall,rerun_s3] [--corpus DIR] [--json]

Prints a Markdown table (check, measured, target, met) or, with ``--json``,
one object with every check's figures and the scripts' own JSON. Exit status
0 when every check that ran met its target, 1 otherwise. About 20 minutes on
2 quiet cores with every check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_CORPUS = ROOT.parent.parent / "shared" / "corpus"
if not DEFAULT_CORPUS.exists():  # the corpus beside the checkout, or where RAGSYNC_CORPUS says
    DEFAULT_CORPUS = Path(os.environ.get("RAGSYNC_CORPUS", ROOT.parent / "shared" / "corpus"))

#: What a check reads from its script's JSON: (measured text, met or None when only reported).
Verdict = tuple[str, bool | None]


@dataclass(frozen=True)
class Check:
    name: str
    script: str
    args: tuple[str, ...]
    target: str
    judge: Callable[[dict[str, Any]], Verdict]
    corpus_args: Callable[[Path], tuple[str, ...]] = lambda corpus: ("--corpus", str(corpus))
    needs_corpus: bool = True


def _embed(r: dict[str, Any]) -> Verdict:
    t = r["throughput"]
    ratio = t["onnx-int8"]["ratio_to_torch"]
    return (
        f"onnx-int8 {ratio:.2f}x torch ({t['onnx-int8']['chunks_per_s']} vs {t['torch']['chunks_per_s']} "
        f"chunks/s, {r['chunks']} chunks); onnx {t['onnx']['ratio_to_torch']:.2f}x; "
        f"cosine to torch min {t['onnx-int8']['cosine_min']}",
        ratio >= 2.0,
    )


def _recall(r: dict[str, Any]) -> Verdict:
    b = r["recall"]["backends"]
    diff = b["onnx-int8"]["minus_torch"]
    torch = b["torch"]["recall_at_10"]
    worst = max(abs(v) for v in diff.values())
    return (
        f"torch vector {torch['vector']['all']} / hybrid {torch['hybrid']['all']}; onnx-int8 - torch "
        f"{diff['vector']:+.4f} / {diff['hybrid']:+.4f}",
        worst <= 0.01,
    )


def _pdf(r: dict[str, Any]) -> Verdict:
    tp = r["throughput"]
    ratio = tp["parse_over_raw"]
    return (
        f"parse / raw {ratio:.3f} ({tp['parse_pages_per_s']:.0f} vs {tp['raw_pages_per_s']:.0f} pages/CPU-s, "
        f"{tp['files']} files)",
        ratio >= 0.3,
    )


def _tables(r: dict[str, Any]) -> Verdict:
    rows = [row for row in r["rows"] if row["metric"] == "tables" and row["group"] == "pdf (tabula)"]
    if not rows:
        return ("no ICDAR 2013 / tabula row in eval_parse's output", False)
    strict = sum(float(row["scores"].get("strict", 0.0)) for row in rows) / len(rows)
    return (f"ICDAR 2013 / tabula cells, strict {strict:.3f} (mean of {len(rows)} PDFs)", strict >= 0.95)


def _rerun(r: dict[str, Any]) -> Verdict:
    return (
        f"{r['ratio']:.4f} (cold {r['cold']['wall_s']} s, re-run {r['rerun_median_s']} s median of "
        f"{r['rerun_wall_s']}, {r['cold']['documents_indexed']} documents, {r['source']})",
        r["ratio"] <= 0.05,
    )


def _peer(r: dict[str, Any]) -> Verdict:
    ours, peer = r["ragsync"]["default"], r["llamaindex"]
    ahead = ours["ratio_documents_per_s"] > 1.0
    as_many = ours["documents_indexed"] >= peer["documents_indexed"]
    faster_rerun = ours["ratio_rerun_wall"] < 1.0
    embed_share = ours["embed_share_of_run"]
    return (
        f"documents/s {ours['ratio_documents_per_s']:.2f}x "
        f"({ours['cold_wall_s']} vs {peer['cold_wall_s']} s), "
        f"per CPU-s {ours['ratio_documents_per_cpu_s']:.2f}x, indexed {ours['documents_indexed']} vs "
        f"{peer['documents_indexed']}, re-run {ours['ratio_rerun_wall']:.3f}x; "
        f"embedding {embed_share:.0%} of ragsync's cold run "
        f"({ours['embed_share_of_cold_wall']:.0%} of the whole command)",
        ahead and as_many and faster_rerun and embed_share > 0.5,
    )


def _stream(r: dict[str, Any]) -> Verdict:
    produced, finished = r["produced_rate"], r["applied"]["finished_rate_in_window"]
    q = r["queue"]
    return (
        f"finished {finished}/s of {produced}/s produced, queue peak {q['max_sampled_depth']}, drained "
        f"{q['drain_s']} s after the producer stopped, content p95 {r['freshness_s']['content_p95']} s, "
        f"{r['dead_letters']} dead letters",
        finished >= 0.97 * produced and bool(q["drained"]),
    )


def _memory(r: dict[str, Any]) -> Verdict:
    runs = r["runs"]
    sizes = sorted(runs, key=int)
    peaks = ", ".join(f"{n} docs {runs[n]['tree_pss_peak_mib']} MiB" for n in sizes)
    return (f"tree PSS peak {peaks}; growth {r['per_doc_kib']['tree_pss_peak_mib']} KiB per document", None)


CHECKS = (
    Check("embed", "bench_embed.py", ("--no-recall", "--pages", "30"), "onnx-int8 >= 2x torch", _embed),
    Check("recall", "bench_embed.py", ("--no-throughput",), "onnx-int8 within 0.01 of torch", _recall),
    Check("pdf", "bench_pdf.py", ("--skip", "fastlane", "--skip", "long"), ">= 0.3x raw pypdfium2", _pdf),
    Check("tables", "eval_parse.py", ("--only", "tables"), "ICDAR cells >= 0.95", _tables),
    Check("rerun", "bench_rerun.py", ("--files", "200"), "<= 0.05x cold", _rerun),
    Check("rerun_s3", "bench_rerun.py", ("--s3", "--files", "200"), "<= 0.05x cold", _rerun),
    Check(
        "peer",
        "bench_llamaindex.py",
        ("--files", "60", "--ragsync-backends", "default"),
        "ahead on documents/s, as many indexed, faster re-run; embedding > 50 % of the cold run",
        _peer,
    ),
    Check(
        "stream",
        "bench_stream.py",
        ("--seconds", "60", "--base", "100"),
        "keeps up with 4.6/s",
        _stream,
        corpus_args=lambda corpus: (),
        needs_corpus=False,
    ),
    Check(
        "memory",
        "bench_memory.py",
        ("--sizes", "250,1000"),
        "reported",
        _memory,
        corpus_args=lambda corpus: ("--cisi", str(corpus / "retrieval_golden" / "cisi" / "CISI.ALL")),
    ),
)


def _json_of(stdout: str) -> Any:
    """A script's JSON: the whole output (indented documents) or its last line."""
    try:
        return json.loads(stdout)
    except ValueError:
        lines = stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else None


def run_check(check: Check, corpus: Path) -> dict[str, Any]:
    """Run one check's script; return its verdict, timing and the script's JSON."""
    argv = [sys.executable, str(HERE / check.script), *check.args, *check.corpus_args(corpus), "--json"]
    out: dict[str, Any] = {
        "check": check.name,
        "command": " ".join(["python", f"benchmarks/{check.script}", *check.args]),
        "target": check.target,
    }
    if check.needs_corpus and not corpus.is_dir():
        return {**out, "status": "skipped", "measured": f"no corpus at {corpus} (--corpus DIR)", "met": None}
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    load = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    out["seconds"] = round(time.monotonic() - started, 1)
    out["loadavg"] = [load, round(os.getloadavg()[0], 2)]
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode == 2:
        return {**out, "status": "skipped", "measured": last or "the script cannot run here", "met": None}
    try:
        if proc.returncode != 0:
            raise ValueError(f"exit {proc.returncode}: {last}")
        result = _json_of(proc.stdout)
        if not isinstance(result, dict):
            raise ValueError("the script printed no JSON object")
        measured, met = check.judge(result)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return {**out, "status": "failed", "measured": f"{type(exc).__name__}: {exc}", "met": False}
    return {**out, "status": "ran", "measured": measured, "met": met, "result": result}


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - {c.name for c in CHECKS})
    if unknown:
        raise SystemExit(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(c.name for c in CHECKS)}")
    return names


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| check | measured | target | met | command |", "|---|---|---|---|---|"]
    for r in rows:
        met = {True: "**yes**", False: "**no**", None: "-"}[r["met"]]
        if r["status"] != "ran":
            met = r["status"]
        lines.append(f"| {r['check']} | {r['measured']} | {r['target']} | {met} | `{r['command']}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated checks to run (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated checks to leave out")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the shared corpus (../shared/corpus)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    only, skip = set(_names(args.only)), set(_names(args.skip))
    rows = []
    for check in CHECKS:
        if (only and check.name not in only) or check.name in skip:
            continue
        print(f"[scorecard] {check.name}: {check.script} {' '.join(check.args)}", file=sys.stderr, flush=True)
        row = run_check(check, Path(args.corpus))
        print(f"[scorecard] {check.name}: {row['status']}, {row['measured']}", file=sys.stderr, flush=True)
        rows.append(row)
    if args.json:
        print(json.dumps({"checks": rows}, sort_keys=True))
    else:
        print(markdown(rows))
    return 0 if all(r["met"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
