"""The README's walkthroughs (and those of docs/*.md), run exactly as written.

Each fenced block after a ``<!-- walkthrough:NAME -->`` comment in README.md
(or in a page of docs/) is extracted from that file at test time (no copy of
its commands here) and
run with ``bash -e`` in an empty directory that holds what a clone's root
holds for it (``scripts/`` and ``.venv``, linked to this checkout's), with
``.venv/bin`` first on ``PATH`` as after ``source .venv/bin/activate``. The
ports come from ``$RAGSYNC_PORT``, ``$RAGSYNC_WIKI_PORT`` and ``$RAGSYNC_REDMINE_PORT`` (free ones here),
which the blocks read. Asserted: the exact counts, hits and documents the
README's text says they print.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import mediawiki, redmine
from tests.mediawiki import free_port

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- walkthrough:([\w-]+) -->\n```(?:bash)?\n(.*?)```", re.DOTALL)


def walkthroughs(readme: str) -> dict[str, str]:
    """Each marked block of ``readme`` by name.

    Raises:
        AssertionError: a name is marked twice (one block per walkthrough).
    """
    found: dict[str, str] = {}
    for name, block in MARKER.findall(readme):
        assert name not in found, f"walkthrough {name!r} is marked twice in README.md"
        found[name] = block
    return found


def _block(name: str, page: str = "README.md") -> str:
    blocks = walkthroughs((ROOT / page).read_text(encoding="utf-8"))
    assert name in blocks, f"{page} has no block marked <!-- walkthrough:{name} -->"
    return blocks[name]


def test_every_walkthrough_is_found_once() -> None:
    assert sorted(walkthroughs((ROOT / "README.md").read_text(encoding="utf-8"))) == [
        "api",
        "quickstart",
        "then-try",
        "wiki",
    ]
    assert sorted(walkthroughs((ROOT / "docs" / "redmine.md").read_text(encoding="utf-8"))) == ["redmine"]
    with pytest.raises(AssertionError, match="marked twice"):
        walkthroughs("<!-- walkthrough:a -->\n```bash\ntrue\n```\n<!-- walkthrough:a -->\n```\nfalse\n```\n")


def _directory(tmp_path: Path) -> Path:
    """An empty directory with a clone's ``scripts`` and ``.venv``."""
    cwd = tmp_path / "clone"
    cwd.mkdir()
    (cwd / "scripts").symlink_to(ROOT / "scripts")
    (cwd / ".venv").symlink_to(ROOT / ".venv")
    return cwd


def _run(block: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``block`` with ``bash -e`` in ``cwd``; on return nothing it started
    is left running (its whole process group is ended)."""
    environ = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    environ.pop("RAGSYNC_HOME", None)
    proc = subprocess.Popen(
        ["bash", "-e", "-c", block],
        cwd=cwd,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert result.returncode == 0, f"exit {result.returncode}\n{out[-4000:]}\n{err[-4000:]}"
    return result


def _counter(text: str, name: str) -> list[int]:
    """The values of summary line ``name`` in ``text``, in order."""
    return [int(v) for v in re.findall(rf"^\s+{name}\s+(\d+)$", text, re.MULTILINE)]


def test_quick_start_then_try(tmp_path: Path) -> None:
    cwd = _directory(tmp_path)
    first = _run(_block("quickstart"), cwd)
    out = first.stdout
    assert _counter(out, "documents_seen") == [26]
    assert _counter(out, "documents_indexed") == [24]
    assert _counter(out, "dead_lettered") == [2]
    assert _counter(out, "chunks_embedded") == [79]
    query = out[out.index("Example query:") :]
    # The travel policy (a wiki page, an intranet page and a DOCX say the same)
    # comes first, then the expense limits' table: every hit states the
    # 180 EUR hotel limit. Which two of the policy's three formats lead
    # follows the reranker's reading of their headings.
    hits = re.findall(r"^ (\d)\. ([\d.]+) +\S+/sample-corpus/(\S+)\n.*\n(.*)$", query, re.MULTILINE)
    assert [rank for rank, _, _, _ in hits] == ["1", "2", "3"]
    policy = {"intranet/travel-policy.html", "policies/travel-policy.docx", "wiki/travel-policy.md"}
    assert {path for _, _, path, _ in hits[:2]} <= policy
    assert {path for _, _, path, _ in hits} <= policy | {"policies/expense-limits.docx"}
    assert all("180" in text for _, _, _, text in hits), hits
    assert (cwd / "sample-corpus").is_dir() and (cwd / "ragsync-data").is_dir()

    then = _run(_block("then-try"), cwd).stdout
    assert "24 documents, 79 chunks in the catalog" in then  # reconcile
    assert "vector index, keyword index and chunks table agree" in then
    rerun, parsed = (json.loads(line) for line in then.splitlines() if line.startswith("{"))
    # The unchanged re-run (`backfill --json`): nothing read, embedded or written again.
    assert (rerun["documents_unread"], rerun["chunks_embedded"], rerun["chunks_written"]) == (26, 0, 0)
    # `parse --json` of the two-column newsletter: read by PDFium in the fast lane, heading first.
    assert (parsed["mime"], parsed["lane"], parsed["error"]) == ("application/pdf", "fast", None)
    assert parsed["elements"][0]["text"] == "Company Newsletter Spring Edition"


def _wiki_skip() -> None:
    if not mediawiki.available():
        if os.environ.get("CI"):
            pytest.fail(mediawiki.MISSING)
        pytest.skip(mediawiki.MISSING)


def test_wiki(tmp_path: Path) -> None:
    _wiki_skip()
    cwd = _directory(tmp_path)
    port = free_port()
    try:
        done = _run(_block("wiki"), cwd, RAGSYNC_WIKI_PORT=str(port))
    finally:
        subprocess.run([str(ROOT / "scripts" / "mediawiki.sh"), "stop", str(cwd / "wiki")], check=False)
    out, err = done.stdout, done.stderr
    # The first sync (a full listing), then the incremental one.
    assert _counter(out, "documents_listed") == [2, 0]
    assert _counter(out, "documents_indexed") == [2, 1]
    assert _counter(out, "changes_read") == [0, 2]
    assert _counter(out, "documents_deleted") == [0, 1]
    hits = re.findall(r"^ *\d+\. [\d.]+ +(\S+)$", out, re.MULTILINE)
    assert hits == [f"http://127.0.0.1:{port}/index.php?curid=2"]  # the page Alpacas
    assert "Alpacas are shorn once a year, in spring." in out
    assert not (cwd / "wiki" / "server.pid").exists()  # the block's last line stopped the wiki
    # Progress: the listing's total, then the steps' lines with it; the change feed's rate.
    assert "[list] listing complete: 2 objects in " in err
    assert re.search(r"^\[write\] 1/2 docs", err, re.M) and "[write] done: 2 docs in " in err
    assert re.search(
        r"^\[sync\] wiki-eng: 2 changes in 1 pages, 2 queued, [\d.]+s \([\d.]+ changes/s\)$", err, re.M
    )


def test_redmine(tmp_path: Path) -> None:
    """docs/redmine.md's walkthrough. Its ``./redmine`` is a copy of the tests'
    installed one (``scripts/redmine.sh install``, as the block's first line
    would run it), which saves a minute of CI."""
    if not redmine.available():
        if os.environ.get("CI"):
            pytest.fail(redmine.MISSING)
        pytest.skip(redmine.MISSING)
    cwd = _directory(tmp_path)
    redmine.template().copy_to(cwd / "redmine")
    port = free_port()
    try:
        done = _run(_block("redmine", "docs/redmine.md"), cwd, RAGSYNC_REDMINE_PORT=str(port))
    finally:
        subprocess.run([str(ROOT / "scripts" / "redmine.sh"), "stop", str(cwd / "redmine")], check=False)
    out = done.stdout
    # The first sync (a full listing), then the incremental one: the comment and the delete.
    assert _counter(out, "documents_listed") == [2, 0]
    assert _counter(out, "documents_indexed") == [2, 1]
    assert _counter(out, "changes_read") == [0, 2]
    assert _counter(out, "documents_deleted") == [0, 1]
    hits = re.findall(r"^ *\d+\. [\d.]+ +(\S+)$", out, re.MULTILINE)
    assert hits == [f"http://127.0.0.1:{port}/issues/1"]  # read as the user admin, linked to its page
    assert "Resurfacing moved to the first week of June." in out
    assert not (cwd / "redmine" / "server.pid").exists()  # the block's last line stopped Redmine


def test_api_with_curl(tmp_path: Path) -> None:
    cwd = _directory(tmp_path)
    out = _run(_block("api"), cwd, RAGSYNC_PORT=str(free_port())).stdout
    source, receipt, status, answer = (json.loads(line) for line in out.splitlines())
    assert (source["source_id"], source["type"], source["sync"]) == ("handbook", "object_store", "webhook")
    assert receipt["accepted"] == 1, receipt
    coverage: dict[str, Any] = status["coverage"]
    assert (coverage["seen"], coverage["indexed"], coverage["coverage"]) == (1, 1, 1.0)
    assert status["source"]["last_full_at"] is None  # indexed by the event, not by a listing
    hits = answer["hits"]
    assert [(h["source_id"], h["link"], h["heading_path"]) for h in hits] == [
        ("handbook", str(cwd / "handbook" / "parking.md"), ["Parking"])
    ]
    assert hits[0]["text"] == "The parking garage closes for repairs in May."
