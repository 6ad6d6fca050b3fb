"""Dry runs: ``ragsync backfill --dry-run`` and ``ragsync sync --dry-run``
write nothing anywhere, and the real run's changes equal the plan (real
model, Milvus Lite, tantivy, SQLite)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from beam_pipelines.backfill import run_backfill
from cli.main import main
from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.ingest.change_plan import ChangePlan, PlannedChange, classify_event, classify_listed

TENANT = "acme"
SOURCE = "handbook"
DIM = 384


# -- the pure decisions ---------------------------------------------------------------


def _stored(**kw: Any) -> Any:
    """A catalog row as the decisions read it (``DocumentRow``'s fields)."""
    base: dict[str, Any] = dict(
        status="indexed",
        content_hash="h1",
        acl_id="a1",
        parser_version="p",
        chunker_id="c",
        chunk_count=2,
        error_class=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_classify_listed_follows_the_pipelines_fetch_decision() -> None:
    same = dict(content_hash="h1", acl_id="a1", parser_version="p", chunker_id="c", stored_chunk_rows=2)
    assert classify_listed(None, **same)[0] == "add"  # type: ignore[arg-type]
    assert classify_listed(_stored(status="deleted"), **same)[0] == "add"  # type: ignore[arg-type]
    assert classify_listed(_stored(), **same) == ("unchanged", "")  # type: ignore[arg-type]
    assert classify_listed(_stored(), **{**same, "content_hash": "h2"}) == ("update", "new content")  # type: ignore[arg-type]
    assert classify_listed(_stored(), **{**same, "acl_id": "a2"})[0] == "permissions"  # type: ignore[arg-type]
    # New content and new permissions at once: one update (it carries the new ACL).
    assert classify_listed(_stored(), **{**same, "acl_id": "a2", "content_hash": "h2"})[0] == "update"  # type: ignore[arg-type]
    assert classify_listed(_stored(), **{**same, "parser_version": "p2"})[0] == "update"  # type: ignore[arg-type]
    assert classify_listed(_stored(), **{**same, "stored_chunk_rows": 1})[0] == "update"  # type: ignore[arg-type]
    failed = _stored(status="dead_letter", error_class="corrupt")
    assert classify_listed(failed, **same) == ("update", "not indexed yet (dead_letter: corrupt)")  # type: ignore[arg-type]
    assert classify_event("delete", None)[0] == "delete"
    assert classify_event("acl", _stored())[0] == "permissions"
    assert classify_event("upsert", None)[0] == "add"
    assert classify_event("upsert", _stored())[0] == "update"
    plan = ChangePlan("s", "t", "full")
    plan.add("unchanged", PlannedChange("x"))
    plan.add("add", PlannedChange("b"))
    plan.add("add", PlannedChange("a"))
    d = plan.to_dict()
    assert [c["object_id"] for c in d["adds"]] == ["a", "b"] and d["totals"]["unchanged"] == 1


# -- end to end ---------------------------------------------------------------------------


def _write(path: Path, title: str, text: str) -> None:
    path.write_text(f"# {title}\n\n{text}\n\n{text} In other words, once more.\n")


def _snapshot(settings: Settings) -> dict[str, Any]:
    """Everything a run could write: every file under home (bytes), every
    catalog table's rows, both indexes' chunk ids."""
    files = {}
    for root, _, names in os.walk(settings.home):
        for name in names:
            path = os.path.join(root, name)
            if "milvus" in path or name.endswith(("-wal", "-shm", ".lock")) or "keyword" in path:
                continue  # the stores are compared by content below
            with open(path, "rb") as fh:
                files[os.path.relpath(path, settings.home)] = hashlib.sha256(fh.read()).hexdigest()
    catalog = open_catalog(settings)
    try:
        from ragsync.catalog import schema

        rows = {t: catalog.count_rows(t) for t in sorted(schema.metadata.tables)}
        docs = {
            d.source_object_id: (d.status, d.content_hash, d.acl_id)
            for d in catalog.documents.documents_for_source(SOURCE)
        }
        cursor = catalog.sources.get_source(SOURCE, tenant_id=TENANT)
    finally:
        catalog.close()
    vectors, keywords = open_vector_index(settings, DIM), open_keyword_index(settings)
    try:
        stores = (sorted(vectors.chunk_ids(TENANT)), sorted(keywords.chunk_ids(TENANT)))
    finally:
        keywords.close()
        vectors.close()
    return {"files": files, "rows": rows, "docs": docs, "source": cursor, "stores": stores}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _ids(plan: dict[str, Any], name: str) -> set[str]:
    return {c["object_id"] for c in plan[name]}


@pytest.mark.slow
def test_dry_runs_write_nothing_and_the_real_run_does_what_they_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "docs"
    src.mkdir()
    _write(src / "alpha.md", "Alpha", "Alpacas graze on the high plateau and are shorn once a year.")
    _write(src / "beta.md", "Beta", "Beekeepers open the hives in spring to check the queen.")
    _write(src / "gamma.md", "Gamma", "Glaciers carve deep valleys as they slide slowly downhill.")
    _write(src / "delta.md", "Delta", "River deltas form where sediment settles at the mouth of a river.")
    home = str(tmp_path / "home")
    settings = Settings(home=home)

    # Before the first backfill there is no catalog: a dry run plans four
    # adds and creates nothing (not even the home).
    first = _cli(capsys, "backfill", str(src), "--home", home, "--tenant", TENANT, "--source-id", SOURCE,
                 "--dry-run", "--json")  # fmt: skip
    assert _ids(first, "adds") == {"alpha.md", "beta.md", "gamma.md", "delta.md"}
    assert not os.path.exists(home)

    run_backfill(str(src), settings, tenant_id=TENANT, source_id=SOURCE, show_progress=False)
    # Changes: new content, new permissions, a vanished file, a new file, and
    # a file touched without a change.
    _write(src / "alpha.md", "Alpha", "Alpacas hum softly when they are curious or worried.")
    (src / ".ragsync-acl.json").write_text(json.dumps({"rules": [{"glob": "beta.md", "groups": ["bees"]}]}))
    (src / "gamma.md").unlink()
    _write(src / "epsilon.md", "Epsilon", "Eels migrate thousands of kilometres to spawn in the sea.")
    later = time.time() + 5
    os.utime(src / "delta.md", (later, later))

    before = _snapshot(settings)
    plan = _cli(capsys, "backfill", str(src), "--home", home, "--tenant", TENANT, "--source-id", SOURCE,
                "--dry-run", "--json")  # fmt: skip
    synced = _cli(capsys, "sync", SOURCE, "--tenant", TENANT, "--home", home, "--dry-run", "--json")
    # The command line prints what the backfill's one entry point returns.
    returned = run_backfill(str(src), settings, tenant_id=TENANT, source_id=SOURCE, dry_run=True)
    assert isinstance(returned, ChangePlan) and returned.to_dict() == plan
    assert _snapshot(settings) == before  # nothing written anywhere
    expected = {
        "adds": {"epsilon.md"},
        "updates": {"alpha.md"},
        "permission_changes": {"beta.md"},
        "deletes": {"gamma.md"},
    }
    for p in (plan, synced):
        assert {name: _ids(p, name) for name in expected} == expected
        assert p["totals"]["unchanged"] == 1 and not p["deletes_held"] and p["mode"] == "full"

    # The real run: its changes are the plan.
    run_backfill(str(src), settings, tenant_id=TENANT, source_id=SOURCE, show_progress=False)
    after = _snapshot(settings)["docs"]
    old = before["docs"]
    actual = {
        "adds": {k for k in after if k not in old},
        "updates": {k for k in after if k in old and after[k][1] != old[k][1]},
        "permission_changes": {
            k for k in after if k in old and after[k][1] == old[k][1] and after[k][2] != old[k][2]
        },
        "deletes": {k for k in after if after[k][0] == "deleted" and old.get(k, ("",))[0] != "deleted"},
    }
    assert actual == expected
    assert after["delta.md"] == old["delta.md"]
    # And now there is nothing left to do.
    again = _cli(capsys, "sync", SOURCE, "--tenant", TENANT, "--home", home, "--dry-run", "--json")
    assert again["totals"] == {
        "adds": 0, "updates": 0, "permission_changes": 0, "deletes": 0, "dead_letters": 0, "unchanged": 4
    }  # fmt: skip


@pytest.mark.slow
def test_incremental_sync_dry_run_reads_the_feed_and_keeps_the_cursor(
    mediawiki: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mediawiki.edit("Alpha", "== Animals ==\nAlpacas graze on the high plateau of the Andes every summer.")
    mediawiki.edit("Beta", "== Transport ==\nBarges carry coal along the canal between the two harbours.")
    home = str(tmp_path / "home")
    settings = Settings(home=home)
    assert main(["sources", "add", "wiki", "--tenant", TENANT, "--type", "wiki", "--uri", mediawiki.api_url,
                 "--home", home]) == 0  # fmt: skip
    first = _cli(capsys, "sync", "wiki", "--home", home, "--json", "--quiet")
    assert first["mode"] == "full"
    capsys.readouterr()

    mediawiki.edit("Alpha", "== Animals ==\nAlpacas were moved to the winter stables in the valley below.")
    mediawiki.delete("Beta")
    mediawiki.edit("Epsilon", "== Buildings ==\nElevators in the north tower are inspected every Tuesday.")

    def state() -> tuple[Any, ...]:
        catalog = open_catalog(settings)
        try:
            source = catalog.sources.get_source("wiki", tenant_id=TENANT)
            docs = {
                d.source_object_id: (d.status, d.content_hash)
                for d in catalog.documents.documents_for_source("wiki")
            }
            return source.cursor if source else None, catalog.count_rows("events"), docs
        finally:
            catalog.close()

    cursor, events, before = state()
    plan = _cli(capsys, "sync", "wiki", "--tenant", TENANT, "--home", home, "--dry-run", "--json")
    assert state() == (cursor, events, before)  # the cursor is not saved, nothing queued or written
    assert plan["mode"] == "incremental"
    assert plan["totals"] == {
        "adds": 1, "updates": 1, "permission_changes": 0, "deletes": 1, "dead_letters": 0, "unchanged": 0
    }  # fmt: skip

    real = _cli(capsys, "sync", "wiki", "--home", home, "--json", "--quiet")
    assert real["mode"] == "incremental"
    _, _, after = state()
    assert _ids(plan, "adds") == {k for k in after if k not in before}
    assert _ids(plan, "updates") == {k for k in after if k in before and after[k][1] != before[k][1]}
    assert _ids(plan, "deletes") == {k for k in after if after[k][0] == "deleted" != before.get(k, ("",))[0]}
