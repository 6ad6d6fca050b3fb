"""Unchanged re-runs of an ``s3://`` prefix through the real CLI, against a
local S3 server (moto's server app, in process, behind a middleware that
records every request): an unchanged prefix is listed on the launcher and
runs no pipeline, reading no object; a changed object starts the pipeline,
which reads only that object; a deleted one starts it and deletes the
document; ``quick_check_max_objects`` bounds what the launcher lists.

boto3 (``apache-beam[aws]``) is in requirements.txt and moto in
requirements-dev.txt: with ``$CI`` set a missing package fails the run;
elsewhere the tests are skipped with the reason."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beam_pipelines.quick import quick_backfill
from ragsync.config import Settings
from ragsync.decisions import RACY_WINDOW_S
from tests.object_store import S3Store, s3_store
from tests.proc import run_json

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "s3://docs/kb"
TEXTS = {
    "kb/a.txt": "The parking garage opens at seven in the morning and closes at ten at night.",
    "kb/b.md": "# Travel\n\nBook flights through the travel desk at least two weeks ahead.",
    "kb/sub/c.txt": "Expense reports are due on the fifth working day of each month.",
    "kb/d.txt": "The library lends laptops for up to three days to every member of staff.",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Store]:
    """A local S3 server with an empty bucket ``docs`` (``tests/object_store.py``)."""
    with s3_store() as store:
        yield store


def _put(s3: S3Store, key: str, text: str) -> None:
    s3.put(key, text)


def _past_racy_window() -> None:
    """Objects written now are older than the racy window of the next listing."""
    time.sleep(RACY_WINDOW_S + 1.1)


def _backfill(s3: S3Store, home: Path, tmp_path: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "cli.main", "backfill", PREFIX, "--tenant", "acme"]
    argv += ["--acl-groups", "staff", "--home", str(home), "--json", "--quiet", "--", "--runner=DirectRunner"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    s3.clear()
    summary: dict[str, Any] = run_json([*argv, *s3.args], env, tmp_path, timeout_s=900)
    return summary


def _quick(s3: S3Store, home: Path, cap: int) -> Any:
    """The launcher's check alone, in this process, with ``cap``."""
    s3.clear()
    settings = Settings(home=str(home), quick_check_max_objects=cap)
    return quick_backfill(PREFIX, settings, tenant_id="acme", acl_groups=["staff"], beam_args=s3.args)


def test_unchanged_s3_reruns_skip_the_pipeline_and_read_nothing(s3: S3Store, tmp_path: Path) -> None:
    home = tmp_path / "home"
    for key, text in TEXTS.items():
        _put(s3, key, text)
    _past_racy_window()
    cold = _backfill(s3, home, tmp_path)
    assert (cold["documents_listed"], cold["documents_indexed"], cold["pipeline_skipped"]) == (4, 4, 0)
    assert sorted(s3.object_reads()) == sorted(f"/docs/{k}" for k in TEXTS)

    # 1. Nothing changed: listed on the launcher, no pipeline, no object read.
    rerun = _backfill(s3, home, tmp_path)
    assert rerun["pipeline_skipped"] == 1
    assert rerun["documents_listed"] == rerun["documents_unread"] == rerun["documents_unchanged"] == 4
    assert rerun["documents_indexed"] == rerun["chunks_embedded"] == 0
    assert s3.object_reads() == []
    assert s3.listings() >= 1

    # 2. One object rewritten: the pipeline runs and reads that object only.
    _put(s3, "kb/b.md", "# Travel\n\nBook trains through the travel desk; flights need approval.")
    _past_racy_window()
    changed = _backfill(s3, home, tmp_path)
    assert changed["pipeline_skipped"] == 0
    counts = (changed["documents_listed"], changed["documents_unread"], changed["documents_indexed"])
    assert counts == (4, 3, 1)
    assert set(s3.object_reads()) == {"/docs/kb/b.md"}

    # 3. One object deleted: the pipeline runs, deletes its document, reads nothing.
    s3.delete("kb/d.txt")
    deleted = _backfill(s3, home, tmp_path)
    assert deleted["pipeline_skipped"] == 0
    counts = (deleted["documents_listed"], deleted["documents_unread"], deleted["documents_deleted"])
    assert counts == (3, 3, 1)
    assert deleted["documents_indexed"] == 0
    assert s3.object_reads() == []

    again = _backfill(s3, home, tmp_path)
    assert (again["pipeline_skipped"], again["documents_listed"], again["documents_unread"]) == (1, 3, 3)
    assert s3.object_reads() == []

    # 4. The cap: more known documents than the cap -> not even listed.
    assert _quick(s3, home, cap=2) is None
    assert s3.requests() == []
    assert _quick(s3, home, cap=0) is None
    assert s3.requests() == []
    # A hidden object is matched (and counted against the cap) but is no
    # document: with the cap at the 3 known documents the listing stops at it.
    _put(s3, "kb/.hidden", "not a document")
    assert _quick(s3, home, cap=3) is None
    assert s3.object_reads() == []
    summary = _quick(s3, home, cap=4)
    assert summary is not None
    assert (summary.pipeline_skipped, summary.documents_listed, summary.documents_unread) == (1, 3, 3)
    assert s3.object_reads() == []
