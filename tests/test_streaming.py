"""End to end: the streaming pipeline (FnApiRunner, --streaming, the catalog's
event queue) with the real model, Milvus Lite, tantivy and SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from connectors.sources import register_source
from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import default_model
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.reconcile import reconcile
from ragsync.index.versions import prepare_stores
from ragsync.parsing import PARSER_VERSION
from ragsync.query.search import hybrid_query
from tests.crash_hooks import crash_env
from tests.proc import cli, run_until_killed
from tests.queue_events import change_event, push_events, stream_until_idle
from tests.store_state import chunk_ids_by_store

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DIM = 384
TENANT = "acme"
SOURCE = "wiki"

PARAS = [
    "Employees may book a hotel for up to 180 EUR per night in most cities.",
    "In London, Paris and New York the nightly hotel limit is 250 EUR.",
    "Taxi rides are reimbursed after nine in the evening.",
    "Submit every receipt within thirty days through the expense tool.",
]


def _handbook(paras: list[str]) -> str:
    return (
        "# Travel handbook\n\n## Hotels\n\n"
        + "\n\n".join(paras[:2])
        + "\n\n## Expenses\n\n"
        + "\n\n".join(paras[2:])
    )


def _event(
    doc: str, op: str, version: int, groups: list[str], uri: str = "", eid: str = ""
) -> dict[str, Any]:
    return change_event(SOURCE, doc, op, version, groups, uri, eid)


_push = push_events


def _setup(tmp_path: Path) -> Settings:
    # The test's content lives in tmp_path, the source's location; ragsync's
    # home must lie outside every source location.
    settings = Settings(home=str(tmp_path.with_name(tmp_path.name + "_home")), event_lease_s=2.0)
    prepare_stores(settings, default_model())
    register_source(settings, SOURCE, TENANT, "wiki", str(tmp_path))
    return settings


def _doc_traces(settings: Settings, doc: str) -> dict[str, int]:
    doc_id = ids.doc_id(TENANT, SOURCE, doc)
    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM)
    kw = open_keyword_index(settings)
    try:
        row = cat.documents.get_document(doc_id)
        raw = parsed = 0
        if row is not None and row.content_hash:
            raw = int(os.path.exists(settings.raw_uri(row.content_hash)))
            parsed = int(os.path.exists(settings.parsed_uri(row.content_hash, PARSER_VERSION)))
        return {
            "vector": vec.count_by_doc(TENANT).get(doc_id, 0),
            "keyword": kw.count_by_doc(TENANT).get(doc_id, 0),
            "catalog": len(cat.chunks.chunk_ids_for_doc(doc_id)),
            "raw": raw,
            "parsed": parsed,
        }
    finally:
        kw.close()
        vec.close()
        cat.close()


def _all_chunk_ids(settings: Settings) -> dict[str, set[str]]:
    return chunk_ids_by_store(settings, TENANT)


def test_replay_edit_delete_and_late_events(tmp_path: Path) -> None:
    settings = _setup(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(_handbook(PARAS))
    (docs / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    (docs / "security.html").write_text("<html><body><h1>Security</h1><p>Lock your screen.</p></body></html>")
    first = [
        _event("handbook", "upsert", 1, ["everyone"], str(docs / "handbook.md"), "e1"),
        _event("notes", "upsert", 1, ["everyone"], "file://" + str(docs / "notes.txt"), "e2"),
        _event("security", "upsert", 1, ["everyone"], str(docs / "security.html"), "e3"),
        {**_event("ghost", "upsert", 1, ["everyone"], str(docs / "notes.txt"), "e4"), "source_id": "nope"},
    ]
    _push(settings, first)
    s1 = stream_until_idle(settings)
    assert (s1.events_applied, s1.documents_indexed, s1.dead_lettered) == (3, 3, 1)
    assert s1.chunks_embedded == s1.chunks_written > 0
    before = _all_chunk_ids(settings)
    assert before["catalog"] == before["vector"] == before["keyword"]

    # Replay: every event delivered again (new delivery ids, same versions).
    _push(settings, [{**e, "event_id": e["event_id"] + "-again"} for e in first[:3]])
    s2 = stream_until_idle(settings)
    assert (s2.events_duplicate, s2.events_applied, s2.chunks_embedded, s2.chunks_written) == (3, 0, 0, 0)
    assert _all_chunk_ids(settings) == before

    # Edit one paragraph: at most two chunks re-embedded, vanished ones deleted.
    edited = list(PARAS)
    edited[1] = "In London, Paris and New York the nightly hotel limit is 275 EUR since March."
    (docs / "handbook.md").write_text(_handbook(edited))
    _push(settings, [_event("handbook", "upsert", 2, ["everyone"], str(docs / "handbook.md"), "e5")])
    s3 = stream_until_idle(settings)
    assert s3.documents_indexed == 1 and 1 <= s3.chunks_embedded <= 2 and s3.chunks_deleted >= 1
    hits = hybrid_query(settings, "nightly hotel limit London", groups=["everyone"], tenant_id=TENANT, k=1)
    assert "275 EUR" in hits[0].text

    # Delete: gone from both indexes, the chunks table and the object store.
    assert _doc_traces(settings, "notes") == {"vector": 1, "keyword": 1, "catalog": 1, "raw": 1, "parsed": 1}
    _push(settings, [_event("notes", "delete", 3, [], eid="e6")])
    s4 = stream_until_idle(settings)
    assert (s4.documents_deleted, s4.events_applied) == (1, 1)
    assert _doc_traces(settings, "notes") == {"vector": 0, "keyword": 0, "catalog": 0, "raw": 0, "parsed": 0}
    cat = open_catalog(settings)
    try:
        tomb = cat.gate_state.get_tombstone(ids.doc_id(TENANT, SOURCE, "notes"))
        assert tomb is not None and tomb["source_version"] == "3" and tomb["completed_at"] is not None
        assert cat.queue_views.queue_stats()["depth"] == 0
        assert cat.queue_views.queue_stats()["by_state"] == {"done": 5, "duplicate": 3, "dead": 1}
        fresh = cat.freshness.freshness_stats()
        assert {(f["source_id"], f["kind"]) for f in fresh} == {("wiki", "content"), ("wiki", "permissions")}
    finally:
        cat.close()

    # A late upsert older than the delete is stale: the document stays gone.
    _push(settings, [_event("notes", "upsert", 2, ["everyone"], str(docs / "notes.txt"), "e7")])
    s5 = stream_until_idle(settings)
    assert (s5.events_stale, s5.documents_indexed) == (1, 0)
    assert _doc_traces(settings, "notes")["vector"] == 0
    assert reconcile(settings, DIM).ok


def test_permission_canary_never_leaks(tmp_path: Path) -> None:
    settings = _setup(tmp_path)
    canary = tmp_path / "canary.md"
    canary.write_text("# Canary\n\nThe canary launch code is purple-falcon-42.\n")
    question = "canary launch code purple falcon"

    def visible(groups: list[str]) -> bool:
        hits = hybrid_query(settings, question, groups=groups, tenant_id=TENANT, k=10)
        return any("purple-falcon-42" in h.text for h in hits)

    _push(settings, [_event("canary", "upsert", 1, ["secret"], str(canary), "c1")])
    assert stream_until_idle(settings).chunks_embedded == 1
    assert (visible(["everyone"]), visible(["secret"])) == (False, True)

    # An acl event newer than the content opens it up, without re-embedding.
    _push(settings, [_event("canary", "acl", 2, ["secret", "everyone"], eid="c2")])
    s = stream_until_idle(settings)
    assert (s.documents_acl_updated, s.chunks_embedded) == (1, 0)
    assert (visible(["everyone"]), visible(["secret"])) == (True, True)

    # Removing every group hides it from everyone (fail closed).
    _push(settings, [_event("canary", "acl", 3, [], eid="c3")])
    stream_until_idle(settings)
    assert (visible(["everyone"]), visible(["secret"])) == (False, False)

    # A late, older acl event cannot widen it again.
    _push(settings, [_event("canary", "acl", 2, ["everyone"], eid="c2-late")])
    assert stream_until_idle(settings).events_stale == 1
    assert visible(["everyone"]) is False

    # A content edit older than the last permission change keeps the newer
    # permissions; a newer one brings its own.
    canary.write_text("# Canary\n\nThe canary launch code is purple-falcon-42, rotated weekly.\n")
    _push(settings, [_event("canary", "upsert", 4, ["secret"], str(canary), "c4")])
    stream_until_idle(settings)
    assert (visible(["everyone"]), visible(["secret"])) == (False, True)
    assert reconcile(settings, DIM).ok


def test_crash_between_flip_and_delete_leaves_no_orphans(tmp_path: Path) -> None:
    settings = _setup(tmp_path)
    doc = tmp_path / "handbook.md"
    doc.write_text(_handbook(PARAS))
    _push(settings, [_event("handbook", "upsert", 1, ["everyone"], str(doc), "h1")])
    stream_until_idle(settings)
    edited = [p.replace("EUR", "euros") for p in PARAS]
    doc.write_text(_handbook(edited))
    _push(settings, [_event("handbook", "upsert", 2, ["everyone"], str(doc), "h2")])

    cmd = cli("stream", "--until-idle", "--quiet", "--lease-s", "1")
    cmd += ["--home", settings.home]
    env = crash_env(RAGSYNC_CRASH_AFTER_FLIPS="1")
    log = tmp_path / "crash.log"
    code = run_until_killed(cmd, env, log)
    assert code == -signal.SIGKILL, log.read_text()[-2000:]
    stale = _all_chunk_ids(settings)
    assert len(stale["vector"]) > 2, "old and new chunks are both in the index after the crash"

    env.pop("RAGSYNC_CRASH_AFTER_FLIPS")
    proc2 = subprocess.run(cmd + ["--json"], env=env, cwd=ROOT, capture_output=True, timeout=600)
    assert proc2.returncode == 0, proc2.stderr.decode()[-2000:]
    summary = json.loads(proc2.stdout.decode().strip().splitlines()[-1])
    assert summary["chunks_embedded"] == 0  # everything came from the embedding cache
    assert summary["chunks_deleted"] >= 1
    after = _all_chunk_ids(settings)
    assert after["vector"] == after["keyword"] == after["catalog"]
    assert reconcile(settings, DIM).ok
    hits = hybrid_query(settings, "hotel limit per night", groups=["everyone"], tenant_id=TENANT, k=5)
    assert hits and all("EUR" not in h.text for h in hits)


def test_content_permission_and_delete_events_in_one_run(tmp_path: Path) -> None:
    """Write, permission and delete steps each hold store clients at once;
    none may lock another out (tantivy allows one writer per index)."""
    settings = _setup(tmp_path)
    docs = {}
    for name in ("x", "y", "z"):
        docs[name] = tmp_path / f"{name}.md"
        docs[name].write_text(f"# Doc {name}\n\nThe {name}-ray budget for {name} is {ord(name)} EUR.\n")
    _push(settings, [_event(n, "upsert", 1, ["everyone"], str(p), f"{n}1") for n, p in docs.items()])
    assert stream_until_idle(settings).documents_indexed == 3
    docs["x"].write_text("# Doc x\n\nThe x-ray budget for x is 999 EUR.\n")
    _push(
        settings,
        [
            _event("x", "upsert", 2, ["everyone"], str(docs["x"]), "x2"),
            _event("y", "acl", 2, ["finance"], eid="y2"),
            _event("z", "delete", 2, [], eid="z2"),
        ],
    )
    s = stream_until_idle(settings)
    assert (s.documents_indexed, s.documents_acl_updated, s.documents_deleted, s.dead_lettered) == (
        1,
        1,
        1,
        0,
    )
    assert _doc_traces(settings, "z") == {"vector": 0, "keyword": 0, "catalog": 0, "raw": 0, "parsed": 0}
    hits = hybrid_query(settings, "y-ray budget", groups=["everyone"], tenant_id=TENANT, k=10)
    assert all("y-ray" not in h.text for h in hits)
    assert reconcile(settings, DIM).ok


def _fetched_handbook(settings: Settings, tmp_path: Path) -> Any:
    """A fetched handbook (its bytes stored under the home's raw objects), as
    the parse step receives it."""
    from ragsync.ingest.detect import detect_mime
    from ragsync.model import FetchedDocument, SourceFile
    from transforms.io import write_bytes_once

    data = _handbook(PARAS).encode()
    chash = ids.content_hash(data)
    raw = settings.raw_uri(chash)
    write_bytes_once(raw, data)
    src = SourceFile(TENANT, SOURCE, "handbook.md", str(tmp_path / "handbook.md"), len(data), ("g",), "1")
    mime = detect_mime(data, "handbook.md")
    return FetchedDocument("d1", src, chash, raw, len(data), "acl", "d1", mime=mime)


def test_a_parse_whose_stored_elements_were_deleted_parses_the_bytes_again(tmp_path: Path) -> None:
    """Regression (found by tests/test_interleavings_property.py): a file
    deleted and re-created with the same bytes was dead-lettered
    ``fetch_failed``: the delete removed the stored elements, the catalog
    still named them, and the parse read them instead of parsing."""
    from transforms.io import delete_if_exists
    from transforms.parse import _ParseFn
    from transforms.steps import CatalogDoFn

    settings = Settings(home=str(tmp_path / "home"))
    doc = _fetched_handbook(settings, tmp_path)
    chash = doc.content_hash
    fn = _ParseFn(settings)
    CatalogDoFn.setup(fn)  # the catalog only: no child-process limits on the test process
    try:
        first = list(fn._parse(doc))
        assert len(first) == 1 and first[0].elements
        # What the delete of the last document with these bytes removes.
        assert delete_if_exists(settings.parsed_uri(chash, PARSER_VERSION))
        again = list(fn._parse(doc))
        assert [e.text for e in again[0].elements] == [e.text for e in first[0].elements]
        assert os.path.exists(settings.parsed_uri(chash, PARSER_VERSION))  # stored again
    finally:
        fn.teardown()


def test_a_parse_child_whose_setup_failed_opens_the_catalog_at_its_next_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by tests/test_cluster.py on a PostgreSQL out of
    connections): Beam's subprocess wrapper keeps a DoFn whose ``setup()``
    raised and calls ``process`` on it without another ``setup()``; every
    later document then failed with ``'NoneType' object has no attribute
    'get_parsed'`` even after the catalog was back."""
    import transforms.steps
    from transforms.parse import _ParseFn
    from transforms.steps import CatalogDoFn

    settings = Settings(home=str(tmp_path / "home"))
    doc = _fetched_handbook(settings, tmp_path)
    real_open = transforms.steps.open_catalog
    calls = {"n": 0}

    def open_twice_down(s: Settings) -> object:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("FATAL: sorry, too many clients already")
        return real_open(s)

    monkeypatch.setattr(transforms.steps, "open_catalog", open_twice_down)
    fn = _ParseFn(settings)
    with pytest.raises(ConnectionError):
        CatalogDoFn.setup(fn)  # what the child's setup() met (its rlimits left out here)
    with pytest.raises(ConnectionError, match="too many clients"):
        list(fn.process(doc))  # still down: the real cause, not an AttributeError
    try:
        parsed = list(fn.process(doc))  # back: parsed
        assert [type(p).__name__ for p in parsed] == ["ParsedDocument"]
        assert parsed[0].elements
        assert calls["n"] == 3
    finally:
        fn.teardown()
