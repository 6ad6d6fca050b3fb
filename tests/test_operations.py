"""Operations: coverage and cost (pure), and the Prometheus series of a real
``ragsync serve`` and ``ragsync stream --metrics-port`` after a small
backfill and a small stream run (real model, Milvus Lite, tantivy, SQLite).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragsync.config import Settings, open_catalog
from ragsync.ops.cost import Prices, cost_report, format_cost, sum_stages
from ragsync.ops.coverage import coverage_by_source
from tests.mediawiki import free_port

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli.main"]
TENANT = "acme"
SOURCE = "docs"


# -- coverage and cost: pure ---------------------------------------------------------


def test_coverage_counts_duplicates_as_indexed_and_leaves_rule_exclusions_out() -> None:
    rows = [
        ("t", "wiki", "indexed", "", 990),
        ("t", "wiki", "duplicate", "", 5),
        ("t", "wiki", "dead_letter", "corrupt", 3),
        ("t", "wiki", "dead_letter", "no_permissions", 40),  # excluded by rule
        ("t", "wiki", "fetched", "", 2),  # pending
        ("t", "wiki", "deleted", "", 100),  # not seen any more
        ("t", "empty", "deleted", "", 1),
    ]
    by_source = {c["source_id"]: c for c in coverage_by_source(rows)}
    wiki = by_source["wiki"]
    assert (wiki["seen"], wiki["indexed"]) == (1040, 995)
    assert wiki["excluded"] == {"no_permissions": 40}
    assert wiki["not_indexed"] == {"corrupt": 3, "pending": 2}
    assert wiki["coverage"] == round(995 / 1000, 6) and wiki["meets_target"] is True
    assert by_source["empty"]["coverage"] == 1.0 and by_source["empty"]["seen"] == 0
    below = coverage_by_source([("t", "s", "indexed", "", 994), ("t", "s", "dead_letter", "corrupt", 6)])
    assert below[0]["coverage"] == 0.994 and below[0]["meets_target"] is False


def test_cost_per_thousand_documents_from_stage_cpu_and_prices() -> None:
    stages = {
        "fetch": {"cpu_us": 2_000_000, "latency_us_sum": 3_000_000},
        "embed": {"cpu_us": 36_000_000, "latency_us_sum": 18_000_000},
    }
    report = cost_report(
        stages,
        documents=500,
        cache_hits=30,
        cache_misses=70,
        prices=Prices(vcpu_hour_usd=3.6, gpu_hour_usd=7.2),
    )
    assert report["cpu_s_per_1k_docs"] == {"embed": 72.0, "fetch": 4.0, "total": 76.0}
    # Wall seconds of the run itself (not per 1,000): where its time went.
    assert report["stage_wall_s"] == {"embed": 18.0, "fetch": 3.0}
    assert format_cost(report)[1] == "  wall s per stage: embed 18.0, fetch 3.0"
    assert report["embedding_cache_hit_rate"] == 0.3
    # 38 CPU s at $3.6/h = $0.038 for 500 documents: $0.076 per 1,000.
    assert report["est_usd_per_1k_docs"] == {"vcpu": 0.076, "gpu": 0.0, "total": 0.076}
    on_gpu = cost_report(
        stages, documents=500, cache_hits=0, cache_misses=0, prices=Prices(3.6, 7.2), gpu=True
    )
    # The embed stage's 18 wall s on a $7.2/h GPU; its CPU is not counted again.
    assert on_gpu["cpu_s_per_1k_docs"] == {"fetch": 4.0, "total": 4.0}
    assert on_gpu["est_usd_per_1k_docs"] == {"vcpu": 0.004, "gpu": 0.072, "total": 0.076}
    assert on_gpu["embedding_cache_hit_rate"] is None
    none = cost_report({}, documents=0, cache_hits=0, cache_misses=0, prices=Prices())
    assert none["cpu_s_per_1k_docs"] == {"total": None} and none["est_usd_per_1k_docs"]["total"] is None
    summed = sum_stages(
        [
            {"stages": {"a": {"cpu_us": 1, "latency_us_max": 5}}},
            {"stages": {"a": {"cpu_us": 2, "latency_us_max": 3}}},
        ]
    )
    assert summed == {"a": {"cpu_us": 3, "latency_us_max": 5}}


# -- the series of a running serve and stream --------------------------------------------


def _scrape(
    url: str, headers: dict[str, str] | None = None
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``{sample name: {sorted labels: value}}`` of a Prometheus text page."""
    text = httpx.get(url, headers=headers or {}, timeout=30).raise_for_status().text
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _value(series: dict[str, Any], name: str, **labels: str) -> float:
    return float(series[name][tuple(sorted(labels.items()))])


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)


def _run(*argv: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *argv, "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _corpus(root: Path) -> Path:
    src = root / "docs"
    src.mkdir()
    topics = {
        "alpha.md": "Alpacas graze on the high plateau and are shorn once a year for their fine wool.",
        "beta.md": "Beekeepers open the hives in spring to check the queen and the brood pattern.",
        "gamma.md": "Glaciers carve deep valleys as they slide slowly downhill over thousands of years.",
    }
    for name, text in topics.items():
        (src / name).write_text(f"# {name[:-3].title()}\n\n{text}\n\n{text} Again, in other words.\n")
    (src / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage without xref\n")
    return src


@pytest.mark.slow
def test_serve_and_stream_expose_the_operators_series(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    src = _corpus(tmp_path)
    summary = _run("backfill", str(src), "--home", home, "--tenant", TENANT, "--source-id", SOURCE, "--quiet")
    assert (summary["documents_seen"], summary["documents_indexed"], summary["dead_lettered"]) == (4, 3, 1)
    cost = summary["cost"]
    assert cost["documents"] == 4 and cost["embedding_cache_hit_rate"] == 0.0
    assert {"fetch", "detect", "parse", "chunk", "embed", "write"} <= set(cost["cpu_s_per_1k_docs"])
    assert cost["cpu_s_per_1k_docs"]["embed"] > 0 and cost["est_usd_per_1k_docs"]["total"] > 0

    # A small stream: an edit, a permission change and a delete, each newer
    # than what the listing applied (a file's version is its mtime).
    version = f"{time.time() + 60:.6f}"
    (src / "alpha.md").write_text("# Alpha\n\nAlpacas hum softly when they are curious or worried.\n")
    events = [
        {"source_id": SOURCE, "doc_id": "alpha.md", "op": "upsert", "source_version": version,
         "content_uri": str(src / "alpha.md"), "acl_groups": ["everyone"]},
        {"source_id": SOURCE, "doc_id": "beta.md", "op": "acl", "source_version": version,
         "acl_groups": ["bees"]},
        {"source_id": SOURCE, "doc_id": "gamma.md", "op": "delete", "source_version": version},
    ]  # fmt: skip
    now = time.time()
    lines = [json.dumps({**e, "tenant_id": TENANT, "event_time": now}) for e in events]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    pushed = _run("events", "push", str(tmp_path / "events.jsonl"), "--home", home)
    assert pushed["queued"] == 3 and not pushed["rejected"], pushed
    stream = _run("stream", "--until-idle", "--home", home, "--quiet")
    assert (stream["documents_indexed"], stream["documents_acl_updated"], stream["documents_deleted"]) == (
        1,
        1,
        1,
    )
    assert stream["cost"]["documents"] == stream["events_applied"] == 3

    catalog = open_catalog(Settings(home=home))
    try:
        by_state = catalog.documents.document_counts_by_status()
    finally:
        catalog.close()
    assert by_state == {"indexed": 2, "deleted": 1, "dead_letter": 1}

    # A long-running stream serves the same series on a port of its own.
    port = free_port()
    log = tmp_path / "stream.log"
    proc = subprocess.Popen(
        [*CLI, "stream", "--home", home, "--metrics-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True, cwd=ROOT,
    )  # fmt: skip
    try:
        _wait_http(f"http://127.0.0.1:{port}/metrics", proc, log)
        from_stream = _scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        _stop(proc)

    port = free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [*CLI, "serve", "--home", home, "--port", str(port), "--workers", "0", "--metrics-token", "s3cret"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True, cwd=ROOT,
    )  # fmt: skip
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz", proc, log)
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401
        series = _scrape(f"http://127.0.0.1:{port}/metrics", {"Authorization": "Bearer s3cret"})
    finally:
        _stop(proc)

    for s in (series, from_stream):
        # Documents by state: exactly the catalog's counts.
        assert {dict(k)["state"]: v for k, v in s["ragsync_documents"].items()} == by_state
        assert _value(s, "ragsync_dead_letters", error_class="corrupt") == 1
        for lane in ("priority", "fast", "slow"):
            assert _value(s, "ragsync_queue_depth", lane=lane) == 0
            assert _value(s, "ragsync_queue_oldest_pending_age_seconds", lane=lane) == 0
        assert _value(s, "ragsync_queue_events", state="done") == 3
        # Freshness of the three applied events: deletes and permission
        # changes in the priority lane, the edit in the fast lane.
        src = {"tenant_id": TENANT, "source_id": SOURCE}
        assert _value(s, "ragsync_freshness_events", **src, lane="priority", kind="permissions") == 2
        assert _value(s, "ragsync_freshness_events", **src, lane="fast", kind="content") == 1
        for lane, kind in (("priority", "permissions"), ("fast", "content")):
            p50 = _value(s, "ragsync_freshness_p50_seconds", **src, lane=lane, kind=kind)
            p95 = _value(s, "ragsync_freshness_p95_seconds", **src, lane=lane, kind=kind)
            assert 0 <= p50 <= p95 < 600
        # Coverage: alpha and beta indexed, broken.pdf a corrupt dead letter, gamma deleted.
        assert _value(s, "ragsync_coverage_ratio", tenant_id=TENANT, source_id=SOURCE) == pytest.approx(
            2 / 3, abs=1e-6
        )
        assert (
            _value(s, "ragsync_source_documents", tenant_id=TENANT, source_id=SOURCE, outcome="not_indexed")
            == 1
        )
        assert _value(s, "ragsync_coverage_target_ratio") == 0.995
        # Stage series of the two recorded runs.
        assert _value(s, "ragsync_pipeline_runs_total", run="listing") == 1
        assert _value(s, "ragsync_pipeline_runs_total", run="stream") == 1
        assert _value(s, "ragsync_stage_elements_total", stage="fetch", run="listing") == 4
        assert _value(s, "ragsync_stage_elements_total", stage="parse", run="listing") == 3
        assert _value(s, "ragsync_stage_errors_total", stage="parse", run="listing") == 1
        assert _value(s, "ragsync_stage_elements_total", stage="delete", run="stream") == 1
        assert _value(s, "ragsync_stage_elements_total", stage="acl", run="stream") == 1
        assert _value(s, "ragsync_stage_elements_total", stage="gate", run="stream") == 3
        assert _value(s, "ragsync_stage_cpu_seconds_total", stage="embed", run="listing") > 0
        # One observation per batch: the listing's three documents were written as one.
        assert _value(s, "ragsync_stage_latency_seconds_count", stage="write", run="listing") == 1
        assert _value(s, "ragsync_stage_elements_total", stage="write", run="listing") == 3
        assert _value(s, "ragsync_stage_latency_seconds_sum", stage="write", run="listing") > 0
        hits = _value(s, "ragsync_embedding_cache_lookups_total", result="hit")
        misses = _value(s, "ragsync_embedding_cache_lookups_total", result="miss")
        assert misses >= summary["chunks_embedded"] > 0
        assert _value(s, "ragsync_embedding_cache_hit_ratio") == pytest.approx(
            hits / (hits + misses), abs=1e-4
        )


def test_a_permission_change_applied_on_retry_clears_the_documents_dead_letter(catalog_url: str) -> None:
    from sqlalchemy import insert

    from ragsync.catalog import Catalog, schema

    base = {"source_id": "s", "tenant_id": "t", "updated_at": 1.0, "acl_id": "old"}
    rows = [
        # The live version is the current content: the failed ACL write was the only problem.
        {**base, "doc_id": "acl-failed", "status": "dead_letter", "error_class": "write_failed",
         "content_hash": "h1", "indexed_version": "h1@5"},
        # Newer content failed to parse while the old version stays live: still a dead letter.
        {**base, "doc_id": "new-content-failed", "status": "dead_letter", "error_class": "corrupt",
         "content_hash": "h2", "indexed_version": "h1@5"},
        {**base, "doc_id": "never-indexed", "status": "dead_letter", "error_class": "write_failed",
         "content_hash": "h3", "indexed_version": None},
    ]  # fmt: skip
    with Catalog.open(catalog_url) as catalog:
        with catalog.engine.begin() as conn:
            conn.execute(insert(schema.documents), rows)
        for row in rows:
            catalog.documents.set_document_acl(row["doc_id"], "new")
        got = {r["doc_id"]: catalog.documents.get_document(r["doc_id"]) for r in rows}
    assert {k: (d.status, d.error_class, d.acl_id) for k, d in got.items() if d} == {
        "acl-failed": ("indexed", None, "new"),
        "new-content-failed": ("dead_letter", "corrupt", "new"),
        "never-indexed": ("dead_letter", "write_failed", "new"),
    }
