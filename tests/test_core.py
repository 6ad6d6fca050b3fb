"""Pure functions: identities, the element model's JSON round trip, decisions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ragsync import ids
from ragsync.decisions import FetchAction, choose_canonical, diff_chunks, fetch_action
from ragsync.model import (
    Chunk,
    DeadLetter,
    DocumentPlan,
    Element,
    ElementType,
    FetchedDocument,
    ParsedDocument,
    SourceFile,
)


def _chunk(cid: str, text: str = "t") -> Chunk:
    return Chunk(cid, "d1", "t1", ids.text_hash(text), 0, ("H",), 1, text, 3, ("acl1",))


def _doc() -> FetchedDocument:
    src = SourceFile("t1", "s1", "a/b.md", "/x/a/b.md", 10, ("g1", "g2"), "1.0")
    return FetchedDocument(
        "d1", src, "c" * 64, "/raw/cc", 10, "acl1", "d1", "text/markdown", "fast", ("acl2",)
    )


def test_ids_are_stable_and_namespaced() -> None:
    assert ids.doc_id("t", "s", "a.md") == ids.doc_id("t", "s", "a.md")
    assert ids.doc_id("t", "s", "a.md") != ids.doc_id("t2", "s", "a.md")
    # the separator keeps field boundaries: ("ab","c") differs from ("a","bc")
    assert ids.doc_id("ab", "c", "x") != ids.doc_id("a", "bc", "x")
    cid = ids.chunk_id("d1", "c1-x", ids.text_hash("hello"))
    assert len(cid) == 32 and int(cid, 16) >= 0
    assert cid != ids.chunk_id("d1", "c1-y", ids.text_hash("hello"))
    assert ids.acl_id("t", ["b", "a", "a"]) == ids.acl_id("t", ["a", "b"])
    assert ids.acl_id("t", ["a"]) != ids.acl_id("u", ["a"])
    assert ids.content_hash(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_every_record_round_trips_through_json() -> None:
    doc = _doc()
    el = Element(ElementType.TABLE, "| a |\n| --- |\n| 1 |", 0, 3, 7)
    parsed = ParsedDocument(doc, "p1", (el,), 4, (2,), {"title": "T"})
    plan = DocumentPlan(doc, "p1", "c1", (_chunk("x"),), ("x",), ("y",), ("acl1", "acl2"), (2,))
    dl = DeadLetter("parse", "d1", "/x", "corrupt", "bad", "tb", 2, "{}", "t1", "1.0")
    for rec in (doc, doc.source, el, parsed, plan, dl, _chunk("z")):
        assert type(rec).from_json(rec.to_json()) == rec
    assert doc.chunk_acl_ids == ("acl1", "acl2")


@dataclass
class _Row:
    status: str = "indexed"
    content_hash: str | None = "h"
    acl_id: str | None = "a"
    chunker_id: str | None = "c"
    parser_version: str | None = "p"
    chunk_count: int | None = 3


@pytest.mark.parametrize(
    ("row", "kwargs", "expected"),
    [
        (None, {}, FetchAction.PROCESS),
        (_Row(), {}, FetchAction.UNCHANGED),
        (_Row(status="fetched"), {}, FetchAction.PROCESS),
        (_Row(content_hash="other"), {}, FetchAction.PROCESS),
        (_Row(acl_id="other"), {}, FetchAction.ACL_ONLY),
        (_Row(parser_version="old"), {}, FetchAction.PROCESS),
        (_Row(chunker_id="old"), {}, FetchAction.PROCESS),
        (_Row(), {"stored_chunk_rows": 5}, FetchAction.PROCESS),
        (_Row(), {"stored_chunk_rows": 3}, FetchAction.UNCHANGED),
    ],
)
def test_fetch_action(row: _Row | None, kwargs: dict[str, int], expected: FetchAction) -> None:
    args = {
        "content_hash": "h",
        "acl_id": "a",
        "parser_version": "p",
        "chunker_id": "c",
        "stored_chunk_rows": None,
    }
    args.update(kwargs)
    assert fetch_action(row, **args) == expected  # type: ignore[arg-type]


def test_diff_chunks_splits_new_kept_vanished() -> None:
    d = diff_chunks({"a", "b", "z"}, [_chunk("a"), _chunk("c"), _chunk("b"), _chunk("d")])
    assert [c.chunk_id for c in d.new] == ["c", "d"]
    assert [c.chunk_id for c in d.kept] == ["a", "b"]
    assert d.vanished == ("z",)
    assert diff_chunks([], []).vanished == ()


def test_choose_canonical_prefers_indexed_then_smallest() -> None:
    assert choose_canonical(["d3", "d1", "d2"], None) == "d1"
    assert choose_canonical(["d3", "d1"], "d9") == "d9"
    with pytest.raises(ValueError):
        choose_canonical([], None)
