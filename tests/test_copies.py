"""Exact copies across backfill runs and events: each copy keeps its own
groups, the indexed copy is readable by the union of the live copies' groups,
and deleting or editing the indexed copy promotes another without
re-embedding.

The pure decision (``plan_copies``, the copy branch of ``fetch_action``) is
tested exhaustively; the scenarios run real backfills (FnApiRunner, the real
model, Milvus Lite, tantivy, SQLite) over real files whose permissions come
from an ACL sidecar.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragsync.decisions import (
    CopiesPlan,
    CopyIdentity,
    CopyLink,
    FetchAction,
    copy_lost_its_holder,
    fetch_action,
    plan_copies,
)

DIM = 384
NOTES = "Notes from the quarterly meeting.\n\nRevenue grew by twelve percent in the northern region.\n"
QUESTION = "revenue grew quarterly meeting northern region"


# --------------------------------------------------------------------------- pure


def _id(doc: str, acl: str, h: str = "h", live: bool = True) -> CopyIdentity:
    return CopyIdentity(doc, acl, h, live)


def test_plan_copies_owner_keeps_role_and_union_covers_live_copies() -> None:
    plan = plan_copies("d2", "h", [_id("d2", "a2"), _id("d1", "a1"), _id("d3", "a1")])
    assert plan == CopiesPlan("d2", False, ("a1", "a2"), ("d1", "d3"))


def test_plan_copies_deleted_copy_leaves_the_union() -> None:
    plan = plan_copies("d1", "h", [_id("d1", "a1"), _id("d2", "a2", live=False)])
    assert plan == CopiesPlan("d1", False, ("a1",), ())


def test_plan_copies_copy_with_other_bytes_leaves_the_union() -> None:
    plan = plan_copies("d1", "h", [_id("d1", "a1"), _id("d2", "a2", h="other")])
    assert plan == CopiesPlan("d1", False, ("a1",), ())


def test_plan_copies_promotes_smallest_live_copy_when_owner_goes() -> None:
    identities = [_id("d5", "a5", live=False), _id("d9", "a9"), _id("d7", "a7"), _id("d1", "a1", h="x")]
    assert plan_copies("d5", "h", identities) == CopiesPlan("d7", True, ("a7", "a9"), ("d9",))
    # The owner edited into other bytes counts as gone for the old bytes.
    edited = [_id("d5", "a5", h="new"), _id("d9", "a9")]
    assert plan_copies("d5", "h", edited) == CopiesPlan("d9", True, ("a9",), ())


def test_plan_copies_nothing_live_left() -> None:
    assert plan_copies("d1", "h", [_id("d1", "a1", live=False)]) == CopiesPlan(None, False, (), ())
    assert plan_copies("d1", "h", []) == CopiesPlan(None, False, (), ())


def test_plan_copies_is_order_independent() -> None:
    identities = [_id("d3", "a3"), _id("d2", "a2"), _id("d4", "a2"), _id("d1", "a1", live=False)]
    plans = {
        plan_copies("d1", "h", order)
        for order in (identities, identities[::-1], identities[1:] + identities[:1])
    }
    assert plans == {CopiesPlan("d2", True, ("a2", "a3"), ("d3", "d4"))}


def test_copy_lost_its_holder() -> None:
    link = CopyLink("b", "duplicate", "a", "h")
    assert not copy_lost_its_holder(link, CopyIdentity("a", "acl", "h", True))
    assert copy_lost_its_holder(link, CopyIdentity("a", "acl", "h", False))  # the holder was deleted
    assert copy_lost_its_holder(link, CopyIdentity("a", "acl", "other", True))  # or edited away
    assert copy_lost_its_holder(link, None)  # or is unknown
    # Promoted meanwhile (the holder's delete found the copy), or not a copy at all: nothing lost.
    assert not copy_lost_its_holder(CopyLink("b", "indexed", "b", "h"), None)
    assert not copy_lost_its_holder(CopyLink("b", "fetched", "a", "h"), None)


def test_a_copy_linked_to_a_holder_deleted_meanwhile_is_processed_again(tmp_path: Path) -> None:
    """Regression (found by tests/test_interleavings_property.py): an upsert
    of b.txt (a copy of a.txt's bytes) and a delete of a.txt in the same
    stream run. The fetch found a.txt indexed; a.txt's delete ran before the
    link was recorded and found no copy to promote; b.txt was left linked to
    a vanished holder and its content disappeared from search. The link step
    now raises a retryable error, so the event runs again (b.txt is then
    processed on its own)."""
    from ragsync import ids
    from ragsync.config import Settings
    from ragsync.embedding.models import default_model
    from ragsync.errors import WriteError
    from ragsync.index.operations import RecordDuplicates
    from ragsync.index.versions import prepare_stores
    from ragsync.model import FetchedDocument, SourceFile
    from transforms.fetch import fetch_decision
    from transforms.index import _UpdateIndexFn

    settings = Settings(home=str(tmp_path / "home"))
    prepare_stores(settings, default_model())
    step = _UpdateIndexFn(settings, DIM, RecordDuplicates(), 0, False)
    step.setup()
    cat = step.service.catalog
    try:
        chash = ids.content_hash(NOTES.encode())

        def fetched(path: str, canonical: str = "") -> FetchedDocument:
            src = SourceFile("t", "s", path, f"file:///src/{path}", len(NOTES), ("g",), "1")
            doc_id = ids.doc_id("t", "s", path)
            return FetchedDocument(doc_id, src, chash, "mem://raw", len(NOTES), "acl-g", canonical or doc_id)

        a = fetched("a.txt")
        cat.acls.upsert_acl("acl-g", "t", ["g"], [])
        cat.documents.record_fetch(a)
        flip = dict(source_version="1", indexed_version="1", chunker_id="c", parser_version="p")
        cat.documents.flip_indexed_version(
            a.doc_id, content_hash=chash, chunk_count=0, indexed_at=1.0, **flip
        )
        b = fetched("b.txt", canonical=a.doc_id)
        cat.documents.record_fetch(b)

        # The holder is live: the link holds; so does a holder not written yet.
        assert list(step.process([b])) == [b]
        c, d = fetched("c.txt"), fetched("d.txt", canonical=ids.doc_id("t", "s", "c.txt"))
        cat.documents.record_fetch(c)
        cat.documents.record_fetch(d)
        assert list(step.process([d])) == [d]
        assert cat.documents.get_document(b.doc_id).status == "duplicate"  # type: ignore[union-attr]

        # The holder is deleted before the link is recorded: processed again.
        cat.gate_state.put_tombstone(a.doc_id, "t", "2", version_domain="", observed_at=2.0)
        cat.documents.record_fetch(b)
        with pytest.raises(WriteError, match="no longer serves its bytes"):
            list(step.process([b]))
        row = cat.documents.get_document(b.doc_id)
        assert row is not None and row.content_hash == chash
        # The retry's fetch processes it: its holder is not live.
        action = fetch_decision(
            cat, row, content_hash=chash, acl_id="acl-g", parser_version="p", chunker_id="c"
        )
        assert action == FetchAction.PROCESS
    finally:
        step.teardown()


@dataclass
class _Row:
    status: str
    content_hash: str | None
    acl_id: str | None
    chunker_id: str | None = "c"
    parser_version: str | None = "p"
    chunk_count: int | None = 0


@pytest.mark.parametrize(
    ("row", "copy_of_live", "expected"),
    [
        (_Row("duplicate", "h", "a1"), True, FetchAction.UNCHANGED),
        (_Row("duplicate", "h", "a0"), True, FetchAction.ACL_ONLY),
        (_Row("duplicate", "old", "a1"), True, FetchAction.PROCESS),  # the copy was edited
        (_Row("duplicate", "h", "a1"), False, FetchAction.PROCESS),  # its holder is gone or changed
    ],
)
def test_fetch_action_for_a_linked_copy(row: _Row, copy_of_live: bool, expected: FetchAction) -> None:
    got = fetch_action(
        row,  # type: ignore[arg-type]
        content_hash="h",
        acl_id="a1",
        parser_version="p",
        chunker_id="c",
        stored_chunk_rows=None,
        copy_of_live=copy_of_live,
    )
    assert got == expected


# ---------------------------------------------------------------------- scenarios


def _acl(src: Path, rules: dict[str, list[str]]) -> None:
    (src / ".ragsync-acl.json").write_text(
        json.dumps({"rules": [{"glob": g, "groups": groups} for g, groups in rules.items()]})
    )


def _run(src: Path, settings: object) -> object:
    from beam_pipelines.backfill import run_backfill

    return run_backfill(str(src), settings, show_progress=False, acl_groups=["everyone"])  # type: ignore[arg-type]


def _seen_by(settings: object, groups: list[str]) -> list[str]:
    """Relative paths of the notes hits a member of ``groups`` gets."""
    from ragsync.query.search import hybrid_query

    hits = hybrid_query(settings, QUESTION, groups=groups, k=10)  # type: ignore[arg-type]
    return sorted({h.uri.split("/src/", 1)[1] for h in hits if "Revenue grew" in h.text})


def _state(settings: object) -> dict[str, object]:
    """Statuses by path, chunk owners by path and whether the three stores agree."""
    from ragsync.config import open_catalog
    from ragsync.index.reconcile import reconcile

    cat = open_catalog(settings)  # type: ignore[arg-type]
    try:
        docs = {d.doc_id: d for d in cat.documents.documents_for_source(_source_id(cat))}
        path = {d.doc_id: d.uri.split("/src/", 1)[1] for d in docs.values()}
        owners = {path[doc]: n for doc, n in cat.chunks.chunk_counts_by_doc().items()}
        statuses = {path[d.doc_id]: d.status for d in docs.values()}
    finally:
        cat.close()
    return {"statuses": statuses, "owners": owners, "ok": reconcile(settings, DIM).ok}  # type: ignore[arg-type]


def _source_id(cat: object) -> str:
    from sqlalchemy import select

    from ragsync.catalog import schema

    with cat.engine.connect() as conn:  # type: ignore[attr-defined]
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())


@pytest.mark.slow
def test_copy_added_repermissioned_and_deleted_in_later_runs(tmp_path: Path) -> None:
    from ragsync.config import Settings

    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.txt").write_text(NOTES)
    _acl(src, {"copy/*": ["finance"]})
    settings = Settings(home=str(tmp_path / "home"))
    first = _run(src, settings)
    assert first.documents_indexed == 1  # type: ignore[attr-defined]
    assert _seen_by(settings, ["finance"]) == []

    # A copy appears in a later run: finance reads the one indexed copy
    # through its own copy; nothing is embedded again.
    (src / "copy").mkdir()
    shutil.copy(src / "notes.txt", src / "copy" / "notes.txt")
    second = _run(src, settings)
    assert (second.documents_duplicate, second.chunks_embedded, second.chunks_written) == (1, 0, 0)  # type: ignore[attr-defined]
    # Each reader is shown the copy they may read (never the other's path).
    assert _seen_by(settings, ["finance"]) == ["copy/notes.txt"]
    assert _seen_by(settings, ["everyone"]) == ["notes.txt"]
    state = _state(settings)
    assert state["statuses"] == {"notes.txt": "indexed", "copy/notes.txt": "duplicate"}
    assert state["ok"]

    # An unchanged copy is unchanged on the next run (not relinked).
    third = _run(src, settings)
    assert (third.documents_unchanged, third.documents_duplicate) == (2, 0)  # type: ignore[attr-defined]

    # The copy is re-permissioned: finance loses it, legal gains it; a
    # permission update only.
    _acl(src, {"copy/*": ["legal"]})
    fourth = _run(src, settings)
    assert (fourth.documents_acl_updated, fourth.chunks_embedded, fourth.chunks_written) == (1, 0, 0)  # type: ignore[attr-defined]
    assert _seen_by(settings, ["finance"]) == []
    assert _seen_by(settings, ["legal"]) == ["copy/notes.txt"]

    # The copy is deleted: legal loses it, everyone keeps it.
    shutil.rmtree(src / "copy")
    fifth = _run(src, settings)
    assert (fifth.documents_deleted, fifth.chunks_embedded) == (1, 0)  # type: ignore[attr-defined]
    assert _seen_by(settings, ["legal"]) == []
    assert _seen_by(settings, ["everyone"]) == ["notes.txt"]
    state = _state(settings)
    assert state["owners"] == {"notes.txt": 1} and state["ok"]


@pytest.mark.slow
def test_an_edit_that_turns_a_file_into_a_copy_keeps_its_groups(tmp_path: Path) -> None:
    """Regression (found by tests/test_copies_property.py: put a 0 g0, put b
    1 g1, put a 1 g0): a.txt, already indexed, is edited into b.txt's bytes.
    It becomes a copy of b.txt and its group must read the shared content;
    the catalog used to keep a.txt's old hash, so the union left g0 out."""
    from ragsync.config import Settings, open_catalog

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("The canteen opens at eight and closes at three on weekdays.\n")
    (src / "b.txt").write_text(NOTES)
    _acl(src, {"a.txt": ["g0"], "b.txt": ["g1"]})
    settings = Settings(home=str(tmp_path / "home"))
    first = _run(src, settings)
    assert first.documents_indexed == 2  # type: ignore[attr-defined]
    assert _seen_by(settings, ["g0"]) == []

    (src / "a.txt").write_text(NOTES)
    second = _run(src, settings)
    assert (second.documents_duplicate, second.chunks_embedded) == (1, 0)  # type: ignore[attr-defined]
    assert _seen_by(settings, ["g0"]) == ["a.txt"]
    assert _seen_by(settings, ["g1"]) == ["b.txt"]
    state = _state(settings)
    assert state["statuses"] == {"a.txt": "duplicate", "b.txt": "indexed"}
    assert state["owners"] == {"b.txt": 1} and state["ok"]
    cat = open_catalog(settings)
    try:
        hashes = {
            d.uri.rsplit("/", 1)[1]: d.content_hash
            for d in cat.documents.documents_for_source(_source_id(cat))
        }
    finally:
        cat.close()
    assert hashes["a.txt"] == hashes["b.txt"]


@pytest.mark.slow
def test_deleting_or_editing_the_indexed_copy_promotes_another_without_reembedding(tmp_path: Path) -> None:
    from ragsync.config import Settings

    src = tmp_path / "src"
    for folder in ("a", "b", "c"):
        (src / folder).mkdir(parents=True)
        (src / folder / "notes.txt").write_text(NOTES)
    _acl(src, {"a/*": ["team-a"], "b/*": ["team-b"], "c/*": ["team-c"]})
    settings = Settings(home=str(tmp_path / "home"))
    first = _run(src, settings)
    assert (first.documents_indexed, first.documents_duplicate) == (1, 2)  # type: ignore[attr-defined]
    for folder in ("a", "b", "c"):
        assert _seen_by(settings, ["team-" + folder]) == [f"{folder}/notes.txt"]
    holder = next(iter(_state(settings)["owners"]))  # type: ignore[call-overload]
    rest = sorted({"a/notes.txt", "b/notes.txt", "c/notes.txt"} - {holder})
    holder_team = "team-" + holder[0]

    # The indexed copy is edited: the old text stays readable through the
    # other two copies (re-keyed to the smallest of them, no re-embedding of
    # it), the new text through the edited copy only.
    (src / holder).write_text("Notes from the board meeting.\n\nThe canteen opens at eight.\n")
    second = _run(src, settings)
    assert second.documents_indexed == 1  # type: ignore[attr-defined]
    state = _state(settings)
    assert state["ok"]
    promoted = [p for p in rest if p in state["owners"]]  # type: ignore[operator]
    assert len(promoted) == 1 and state["statuses"][promoted[0]] == "indexed"  # type: ignore[index]
    assert _seen_by(settings, [holder_team]) == []
    for other in rest:
        assert _seen_by(settings, ["team-" + other[0]]) == [other]

    # The promoted copy is deleted: the last copy takes over, again
    # without embedding anything.
    (src / promoted[0]).unlink()
    third = _run(src, settings)
    assert (third.documents_deleted, third.chunks_embedded) == (1, 0)  # type: ignore[attr-defined]
    last = next(p for p in rest if p != promoted[0])
    assert _seen_by(settings, ["team-" + last[0]]) == [last]
    assert _seen_by(settings, ["team-" + promoted[0][0]]) == []
    state = _state(settings)
    assert state["statuses"][last] == "indexed" and state["ok"]  # type: ignore[index]
    assert set(state["owners"]) == {holder, last}  # type: ignore[call-overload]


@pytest.mark.slow
def test_copies_by_events_acl_change_and_holder_delete(tmp_path: Path) -> None:
    """The same rules hold for change events (streaming pipeline, catalog queue)."""

    from connectors.sources import register_source
    from ragsync.config import Settings
    from ragsync.embedding.models import default_model
    from ragsync.index.versions import prepare_stores
    from ragsync.query.search import hybrid_query
    from tests.queue_events import change_event, push_events, stream_until_idle

    content = tmp_path / "content"
    content.mkdir()
    for name in ("a.txt", "b.txt"):
        (content / name).write_text(NOTES)
    settings = Settings(home=str(tmp_path / "home"), event_lease_s=2.0)
    prepare_stores(settings, default_model())
    register_source(settings, "wiki", "acme", "wiki", str(content))

    def push(doc: str, op: str, version: int, groups: list[str], eid: str) -> None:
        uri = str(content / doc) if op == "upsert" else ""
        push_events(settings, [change_event("wiki", doc, op, version, groups, uri, eid)])

    def seen(group: str) -> list[str]:
        hits = hybrid_query(settings, QUESTION, groups=[group], tenant_id="acme", k=10)
        return sorted(h.uri.rsplit("/", 1)[1] for h in hits if "Revenue grew" in h.text)

    push("a.txt", "upsert", 1, ["team-a"], "e1")
    assert stream_until_idle(settings).chunks_embedded == 1
    push("b.txt", "upsert", 1, ["team-b"], "e2")
    assert stream_until_idle(settings).chunks_embedded == 0
    assert (seen("team-a"), seen("team-b")) == (["a.txt"], ["b.txt"])

    # A permission change of the copy moves its share of the union.
    push("b.txt", "acl", 2, ["team-c"], "e3")
    s = stream_until_idle(settings)
    assert (s.documents_acl_updated, s.chunks_embedded) == (1, 0)
    assert (seen("team-b"), seen("team-c")) == ([], ["b.txt"])

    # Deleting the indexed copy promotes the other, without embedding.
    push("a.txt", "delete", 3, [], "e4")
    s = stream_until_idle(settings)
    assert (s.documents_deleted, s.chunks_embedded) == (1, 0)
    assert (seen("team-a"), seen("team-c")) == ([], ["b.txt"])
    assert _state_of(settings) == {"b.txt": 1}


def _state_of(settings: object) -> dict[str, int]:
    """Chunk rows per file name, after checking the three stores agree."""
    from ragsync.config import open_catalog
    from ragsync.index.reconcile import reconcile

    assert reconcile(settings, DIM).ok  # type: ignore[arg-type]
    cat = open_catalog(settings)  # type: ignore[arg-type]
    try:
        counts = cat.chunks.chunk_counts_by_doc()
        return {cat.documents.get_document(d).uri.rsplit("/", 1)[1]: n for d, n in counts.items()}
    finally:
        cat.close()


@pytest.mark.slow
def test_a_failed_promotion_leaves_no_half_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The promotion's live chunk rows and the copy becoming the holder are one
    catalog transaction: a failure injected between the rows' write and the
    document's update (inside ``promote_copy``) leaves the copy a duplicate
    with no rows of its own (never rows under a copy still marked duplicate);
    the next run promotes it, nothing embedded again."""
    import ragsync.catalog.copies as catalog_copies
    from ragsync.config import Settings, open_catalog

    src = tmp_path / "src"
    for folder in ("a", "b"):
        (src / folder).mkdir(parents=True)
        (src / folder / "notes.txt").write_text(NOTES)
    settings = Settings(home=str(tmp_path / "home"))
    first = _run(src, settings)
    assert (first.documents_indexed, first.documents_duplicate) == (1, 1)  # type: ignore[attr-defined]
    holder = next(iter(_state(settings)["owners"]))  # type: ignore[call-overload]
    copy = "b/notes.txt" if holder == "a/notes.txt" else "a/notes.txt"

    real = catalog_copies.document_update
    failed: list[str] = []

    def failing(doc_id: str, **values: object) -> object:
        if values.get("status") == "indexed" and values.get("canonical_doc_id") == doc_id:
            failed.append(doc_id)
            raise RuntimeError("injected: the catalog went away during the promotion")
        return real(doc_id, **values)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog_copies, "document_update", failing)
    (src / holder).unlink()
    _run(src, settings)  # the event's delete fails and is queued for retry
    assert len(failed) >= 1
    cat = open_catalog(settings)
    try:
        docs = {d.uri.split("/src/", 1)[1]: d for d in cat.documents.documents_for_source(_source_id(cat))}
        rows = cat.chunks.chunk_counts_by_doc()
    finally:
        cat.close()
    assert docs[copy].status == "duplicate"
    assert rows.get(docs[copy].doc_id, 0) == 0  # no rows of a copy that is not the holder

    monkeypatch.setattr(catalog_copies, "document_update", real)
    again = _run(src, settings)
    assert again.chunks_embedded == 0  # type: ignore[attr-defined]
    state = _state(settings)
    # (The deleted holder's own delete waits in the retry queue with its backoff.)
    assert state["statuses"][copy] == "indexed" and state["owners"][copy] == 1 and state["ok"]  # type: ignore[index]
