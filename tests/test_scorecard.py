"""benchmarks/scorecard.py: each check's verdict from its script's JSON (in
the shapes the scripts print), and a script that cannot run or fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_module import load_benchmark

sc = load_benchmark("scorecard")
CHECKS = {c.name: c for c in sc.CHECKS}


def _peer(
    docs_ratio: float, ours: int, theirs: int, rerun: float, embed_share: float = 0.55
) -> dict[str, object]:
    return {
        "ragsync": {
            "default": {
                "ratio_documents_per_s": docs_ratio,
                "ratio_documents_per_cpu_s": 1.5,
                "cold_wall_s": 16.6,
                "documents_indexed": ours,
                "ratio_rerun_wall": rerun,
                "embed_share_of_run": embed_share,
                "embed_share_of_cold_wall": embed_share - 0.07,
            }
        },
        "llamaindex": {"cold_wall_s": 21.8, "documents_indexed": theirs},
    }


@pytest.mark.parametrize(
    ("ratio", "ours", "theirs", "rerun", "share", "met"),
    [
        (1.32, 60, 60, 0.09, 0.55, True),
        (0.88, 60, 60, 0.09, 0.55, False),  # behind on documents/s
        (1.32, 59, 60, 0.09, 0.55, False),  # fewer indexed
        (1.32, 60, 60, 1.2, 0.55, False),  # slower re-run
        (1.32, 60, 60, 0.09, 0.40, False),  # the run is mostly something else than the model
    ],
)
def test_peer_needs_all_four(
    ratio: float, ours: int, theirs: int, rerun: float, share: float, met: bool
) -> None:
    measured, verdict = CHECKS["peer"].judge(_peer(ratio, ours, theirs, rerun, share))
    assert verdict is met
    assert f"indexed {ours} vs {theirs}" in measured
    assert (
        f"embedding {share:.0%} of ragsync's cold run ({share - 0.07:.0%} of the whole command)" in measured
    )


def test_each_ratio_against_its_target() -> None:
    embed = {
        "chunks": 746,
        "throughput": {
            "torch": {"chunks_per_s": 7.15, "ratio_to_torch": 1.0},
            "onnx": {"chunks_per_s": 38.2, "ratio_to_torch": 5.34},
            "onnx-int8": {"chunks_per_s": 13.0, "ratio_to_torch": 1.82, "cosine_min": 0.98},
        },
    }
    assert CHECKS["embed"].judge(embed)[1] is False
    embed["throughput"]["onnx-int8"]["ratio_to_torch"] = 8.69  # type: ignore[index]
    assert CHECKS["embed"].judge(embed)[1] is True
    recall = {
        "recall": {
            "backends": {
                "torch": {"recall_at_10": {"vector": {"all": 0.1427}, "hybrid": {"all": 0.1441}}},
                "onnx-int8": {"minus_torch": {"vector": 0.0002, "hybrid": -0.0118}},
            }
        }
    }
    assert CHECKS["recall"].judge(recall)[1] is False  # 0.0118 off in hybrid
    pdf = {
        "throughput": {"parse_over_raw": 0.40, "parse_pages_per_s": 100, "raw_pages_per_s": 251, "files": 60}
    }
    assert CHECKS["pdf"].judge(pdf)[1] is True
    rows = [
        {"metric": "tables", "group": "pdf (tabula)", "scores": {"strict": 1.0}},
        {"metric": "tables", "group": "pdf (tabula)", "scores": {"strict": 0.89}},
        {"metric": "tables", "group": "png (PubTabNet, OCR)", "scores": {"strict": 0.1}},
    ]
    measured, met = CHECKS["tables"].judge({"rows": rows})
    assert met is False and "strict 0.945 (mean of 2 PDFs)" in measured  # PubTabNet is not ICDAR
    rerun = {
        "ratio": 0.0067,
        "cold": {"wall_s": 863.0, "documents_indexed": 200},
        "rerun_median_s": 5.7,
        "rerun_wall_s": [4.9, 5.7, 6.4],
        "source": "folder",
    }
    assert CHECKS["rerun"].judge(rerun)[1] is True
    stream = {
        "produced_rate": 4.51,
        "applied": {"finished_rate_in_window": 4.2},
        "queue": {"max_sampled_depth": 40, "drain_s": 20.0, "drained": True},
        "freshness_s": {"content_p95": 9.0},
        "dead_letters": 0,
    }
    assert CHECKS["stream"].judge(stream)[1] is False  # 93 % of the produced rate
    memory = {
        "runs": {"1000": {"tree_pss_peak_mib": 783}, "250": {"tree_pss_peak_mib": 722}},
        "per_doc_kib": {"tree_pss_peak_mib": 83.3},
    }
    measured, met = CHECKS["memory"].judge(memory)
    assert met is None and measured.startswith("tree PSS peak 250 docs 722 MiB, 1000 docs 783 MiB")


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake_bench.py"
    path.write_text(body, encoding="utf-8")
    return path.name


@pytest.mark.parametrize(
    ("body", "status", "met"),
    [
        ("import sys; print('LlamaIndex venv not found', file=sys.stderr); sys.exit(2)", "skipped", None),
        ("import sys; print('Traceback: boom', file=sys.stderr); sys.exit(1)", "failed", False),
        ("print('not json')", "failed", False),
        (
            "import json; print(json.dumps({'ratio': 0.01, 'cold': {'wall_s': 100, "
            "'documents_indexed': 200}, 'rerun_median_s': 1, 'rerun_wall_s': [1], "
            "'source': 'folder'}, indent=2))",
            "ran",
            True,
        ),
    ],
)
def test_a_script_that_cannot_run_or_fails_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, status: str, met: bool | None
) -> None:
    monkeypatch.setattr(sc, "HERE", tmp_path)
    check = sc.Check("rerun", _script(tmp_path, body), (), "<= 0.05x cold", sc._rerun)
    row = sc.run_check(check, tmp_path)
    assert (row["status"], row["met"]) == (status, met)
    if status == "skipped":
        assert row["measured"] == "LlamaIndex venv not found"
    if status == "failed" and "boom" in body:
        assert row["measured"] == "ValueError: exit 1: Traceback: boom"


def test_no_corpus_is_a_skip_with_the_flag_to_set(tmp_path: Path) -> None:
    row = sc.run_check(CHECKS["pdf"], tmp_path / "missing")
    assert row["status"] == "skipped" and row["met"] is None
    assert row["measured"] == f"no corpus at {tmp_path / 'missing'} (--corpus DIR)"


def _ragsync_round(cold_wall: float, seconds: float, embed_s: float, rerun_wall: float) -> dict[str, object]:
    summary = {
        "documents_indexed": 60,
        "chunks_written": 609,
        "dead_lettered": 0,
        "chunks_embedded": 609,
        "seconds": seconds,
        "cost": {"stage_wall_s": {"embed": embed_s, "parse": 0.8}},
    }
    rerun = {"documents_indexed": 0, "chunks_written": 0, "chunks_embedded": 0, "seconds": 0.2}
    return {
        "cold": {"wall_s": cold_wall, "cpu_s": 20.0, "summary": summary},
        "rerun": {"wall_s": rerun_wall, "cpu_s": 0.5, "summary": rerun},
    }


def test_peer_reads_what_bench_llamaindex_computes() -> None:
    """The script's own figures (``sides_of``) from rounds in the shapes its
    runners return, judged by the scorecard: the two must agree on names."""
    bl = load_benchmark("bench_llamaindex")
    rag = {"default": [_ragsync_round(14.0, 12.0, 7.2, 0.6), _ragsync_round(13.0, 11.0, 5.5, 0.5)]}
    llama_round = {
        "cold": {"wall_s": 20.0, "cpu_s": 32.0, "files_indexed": 60, "nodes": 283, "model_load_s": 0.2},
        "rerun": {"wall_s": 8.0, "cpu_s": 8.0, "nodes": 0},
    }
    llama_side, sides = bl.sides_of(rag, [llama_round, llama_round])
    ours = sides["default"]
    # Medians of two rounds: cold 13.5 s, re-run 0.55 s; shares (0.6 + 0.5) / 2 and (0.514 + 0.423) / 2.
    assert ours["ratio_documents_per_s"] == round((60 / 13.5) / (60 / 20.0), 3)
    assert ours["ratio_rerun_wall"] == round(0.55 / 8.0, 3)
    assert ours["embed_share_of_run"] == pytest.approx(0.55)
    assert ours["embed_share_of_cold_wall"] == round((7.2 / 14.0 + 5.5 / 13.0) / 2, 3)
    measured, met = CHECKS["peer"].judge({"ragsync": sides, "llamaindex": llama_side})
    assert met is True
    assert "embedding 55% of ragsync's cold run (47% of the whole command)" in measured
