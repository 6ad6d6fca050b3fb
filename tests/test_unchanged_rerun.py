"""Unchanged re-runs through the real CLI: objects whose listing metadata
(size, modification time, permissions) matches the catalog are skipped
without reading their bytes, and an unchanged folder runs no pipeline.

A small folder of real corpus files (four wiki pages and a DOCX the parser
dead-letters as corrupt) is backfilled cold, then re-run after each kind of
change: nothing, a touched file, an edited one, a deleted one, a file in the
racy window, a dead letter recorded by another parser version, ``--reread``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ragsync.config import Settings, open_catalog
from ragsync.decisions import RACY_WINDOW_S, KnownObject, ListedObject, skip_unread
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.parsing import PARSER_VERSION
from tests.corpus import CORPUS_MISSING, corpus_dir, have_corpus

ROOT = Path(__file__).resolve().parents[1]
DIM = 384
WIKI = "documents/wiki-18f-handbook/pages"
CORRUPT = "documents/docling/docx/sources/Strict.docx"


def _wiki_pages(n: int) -> list[Path]:
    """``n`` small wiki pages of the corpus (1-4 KB, first in path order)."""
    pages = sorted((corpus_dir() / WIKI).rglob("*.md"))
    small = [p for p in pages if 1000 <= p.stat().st_size <= 4000]
    assert len(small) >= n
    return small[:n]


def _set_mtime(path: Path, when: float) -> None:
    os.utime(path, (when, when))


def _backfill(src: Path, home: Path, *extra: str) -> dict[str, Any]:
    summary, _ = _backfill_imports(src, home, *extra)
    return summary


def _backfill_imports(src: Path, home: Path, *extra: str) -> tuple[dict[str, Any], set[str]]:
    """``ragsync backfill`` of ``src`` in a fresh process: its ``--json``
    summary and the top-level packages it imported (``python -X importtime``
    lists every import on stderr)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "cli.main", "backfill", str(src)]
    cmd += ["--home", str(home), "--quiet", "--json", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    return summary, imported


def _stores(home: Path) -> dict[str, Any]:
    """Chunk ids per store, chunk rows per document, open dead letters."""
    settings = Settings(home=str(home))
    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM)
    kw = open_keyword_index(settings)
    try:
        per_doc: dict[str, int] = {}
        for doc in cat.documents.documents_for_source(cat.syncs.source_states()[0].source_id):
            if doc.deleted_at is None:
                per_doc[doc.source_object_id] = len(cat.chunks.chunk_ids_for_doc(doc.doc_id))
        return {
            "catalog": cat.chunks.chunk_ids_for_tenant("default"),
            "vector": vec.chunk_ids(),
            "keyword": kw.chunk_ids(),
            "per_doc": per_doc,
            "dead": len(cat.dead_letters.list_dead_letters(limit=1000)),
        }
    finally:
        kw.close()
        vec.close()
        cat.close()


@pytest.mark.skipif(not have_corpus(), reason=CORPUS_MISSING)
def test_unchanged_reruns_skip_unread_through_the_cli(tmp_path: Path) -> None:
    src, home = tmp_path / "src", tmp_path / "home"
    src.mkdir()
    pages = _wiki_pages(4)
    for i, page in enumerate(pages):
        shutil.copyfile(page, src / f"page{i}.md")
    shutil.copyfile(corpus_dir() / CORRUPT, src / "strict.docx")
    hour_ago = time.time() - 3600
    for f in src.iterdir():
        _set_mtime(f, hour_ago)

    cold, cold_imports = _backfill_imports(src, home)
    assert (cold["documents_indexed"], cold["dead_lettered"], cold["pipeline_skipped"]) == (4, 1, 0)
    assert "apache_beam" in cold_imports  # the pipeline ran
    before = _stores(home)
    assert before["catalog"] == before["vector"] == before["keyword"]
    assert len(before["catalog"]) == cold["chunks_written"] > 0
    assert before["dead"] == 1

    # A same-size edit with the old mtime restored is not noticed: proof that
    # the re-run read no bytes (what --reread is for).
    page0 = src / "page0.md"
    original = page0.read_bytes()
    page0.write_bytes(original.upper() if original.upper() != original else original.lower())
    assert page0.stat().st_size == len(original)
    _set_mtime(page0, hour_ago)

    # 1. Nothing changed (to the listing): no pipeline, nothing read or
    #    retried, and Beam is not even imported (a quick command).
    rerun, rerun_imports = _backfill_imports(src, home)
    assert rerun["pipeline_skipped"] == 1
    assert "apache_beam" not in rerun_imports and "ragsync" in rerun_imports
    assert rerun["documents_listed"] == rerun["documents_seen"] == rerun["documents_unread"] == 5
    assert rerun["documents_unchanged"] == 5
    assert rerun["documents_indexed"] == rerun["dead_lettered"] == rerun["chunks_embedded"] == 0
    assert _stores(home) == before

    # 2. Touched (same bytes, new mtime), edited, deleted: exactly those are read.
    _set_mtime(src / "page1.md", hour_ago + 600)
    (src / "page2.md").write_text("# Rewritten page\n\nThe parking garage opens at seven in the morning.\n")
    _set_mtime(src / "page2.md", hour_ago + 900)
    (src / "page3.md").unlink()
    changed = _backfill(src, home)
    assert changed["pipeline_skipped"] == 0
    assert changed["documents_listed"] == 4
    assert changed["documents_unread"] == 2  # page0, strict.docx
    assert changed["documents_indexed"] == 1  # page2
    assert changed["documents_deleted"] == 1  # page3
    assert changed["documents_unchanged"] == 3  # page1 read, found unchanged; two unread
    assert changed["dead_lettered"] == 0
    after = _stores(home)
    assert after["catalog"] == after["vector"] == after["keyword"]
    assert set(after["per_doc"]) == {"page0.md", "page1.md", "page2.md", "strict.docx"}
    for name in ("page0.md", "page1.md", "strict.docx"):
        assert after["per_doc"][name] == before["per_doc"][name], name
    assert after["per_doc"]["page2.md"] >= 1

    # The touched file's new stamp was noted: the next run needs no pipeline.
    again = _backfill(src, home)
    assert (again["pipeline_skipped"], again["documents_unread"]) == (1, 4)

    # 3. A file modified inside the racy window of the recorded listing time
    #    is read again (its mtime may hide a second write), and a dead letter
    #    recorded by another parser version is retried.
    _set_mtime(src / "page1.md", time.time() + 3600)
    with sqlite3.connect(home / "catalog.db") as db:
        n = db.execute("UPDATE documents SET parser_version = 'p-old' WHERE status = 'dead_letter'").rowcount
    assert n == 1
    racy = _backfill(src, home)
    assert racy["pipeline_skipped"] == 0
    assert racy["documents_unread"] == 2  # page0, page2
    assert racy["documents_unchanged"] == 3  # page1 read (same bytes) + two unread
    assert racy["dead_lettered"] == 1  # strict.docx read and parsed again
    assert racy["documents_indexed"] == racy["chunks_embedded"] == 0
    racy_again = _backfill(src, home)
    assert (
        racy_again["documents_unread"] == 3
    )  # page1 stays in the racy window; the dead letter is final again
    assert racy_again["dead_lettered"] == 0

    # 4. --reread reads everything: the same-size edit of page0 is found now.
    reread = _backfill(src, home, "--reread")
    assert reread["pipeline_skipped"] == 0
    assert reread["documents_unread"] == 0
    assert reread["documents_seen"] == 4
    assert reread["documents_indexed"] == 1  # page0's edit
    final = _stores(home)
    assert final["catalog"] == final["vector"] == final["keyword"]
    assert final["dead"] == 1


def _known(**kw: Any) -> KnownObject:
    base: dict[str, Any] = dict(
        size=10,
        source_version="1000.000000",
        acl_id="a",
        status="indexed",
        error_class=None,
        parser_version=PARSER_VERSION,
        chunker_id="c",
        observed_at=2000.0,
        chunk_count=2,
        chunk_rows=2,
        indexed_version="1000.000000",
    )
    return KnownObject(**{**base, **kw})


LISTED = ListedObject(size=10, source_version="1000.000000", version_domain="timestamp", acl_id="a")


@pytest.mark.parametrize(
    ("known", "listed", "skip"),
    [
        (_known(), LISTED, True),
        (None, LISTED, False),
        (_known(size=11), LISTED, False),
        (_known(source_version="999.000000"), LISTED, False),
        (_known(acl_id="b"), LISTED, False),
        (_known(parser_version="p0"), LISTED, False),
        (_known(chunker_id="other"), LISTED, False),
        (_known(chunk_rows=1), LISTED, False),
        (_known(indexed_version="900.000000"), LISTED, False),  # fetched, not yet written (a crash)
        (_known(status="stale"), LISTED, False),
        (_known(status="fetched"), LISTED, False),
        (_known(observed_at=None), LISTED, False),
        (_known(observed_at=1000.0 + RACY_WINDOW_S), LISTED, False),
        (_known(observed_at=1000.0 + RACY_WINDOW_S + 0.01), LISTED, True),
        (_known(status="duplicate", holder_live=True), LISTED, True),
        (_known(status="duplicate", holder_live=False), LISTED, False),
        (_known(status="dead_letter", error_class="corrupt", open_dead_letter=True), LISTED, True),
        (_known(status="dead_letter", error_class="corrupt", open_dead_letter=False), LISTED, False),
        (
            _known(status="dead_letter", error_class="corrupt", parser_version="p0", open_dead_letter=True),
            LISTED,
            False,
        ),
        (_known(status="dead_letter", error_class="fetch_failed", open_dead_letter=True), LISTED, False),
        (_known(status="dead_letter", error_class="too_large", open_dead_letter=True), LISTED, False),
        (
            _known(
                status="dead_letter", error_class="empty", size=-1, observed_at=None, open_dead_letter=True
            ),
            ListedObject(size=0, source_version="5.0", version_domain="timestamp", acl_id="x"),
            True,
        ),
        (_known(), ListedObject(size=-1, source_version="1000.000000", version_domain="", acl_id="a"), False),
        (
            _known(source_version="r7", indexed_version="r7", observed_at=None),
            ListedObject(size=10, source_version="r7", version_domain="revision", acl_id="a"),
            True,
        ),
    ],
)
def test_skip_unread_decision(known: KnownObject | None, listed: ListedObject, skip: bool) -> None:
    assert skip_unread(listed, known, parser_version=PARSER_VERSION, chunker_id="c") is skip
    assert skip_unread(listed, known, parser_version=PARSER_VERSION, chunker_id="c", reread=True) is False


def test_beam_file_system_budget_spans_matches(tmp_path: Path) -> None:
    """``BeamFileSystem(max_objects=N)``: all matches together may return N
    objects; the match that would go past raises (the quick check's cap)."""
    from transforms.io import BeamFileSystem, TooManyObjectsError

    for name in ("a1", "a2", "a3", "b1", "b2"):
        (tmp_path / name).write_text(name)
    assert len(BeamFileSystem().match(str(tmp_path / "*"))) == 5
    fs = BeamFileSystem(max_objects=4)
    assert sorted(Path(i.path).name for i in fs.match(str(tmp_path / "a*"))) == ["a1", "a2", "a3"]
    with pytest.raises(TooManyObjectsError, match="more than 4 objects"):
        fs.match(str(tmp_path / "b*"))
    assert fs.matched == 5  # one past the budget, never more
    exact = BeamFileSystem(max_objects=5)
    assert len(exact.match(str(tmp_path / "*"))) == 5
    with pytest.raises(ValueError):
        BeamFileSystem(max_objects=-1)
