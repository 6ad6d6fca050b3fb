"""Child documents: e-mail attachments and archive members indexed as documents of
their own under their parent (the parent's groups, their own ids, deleted with
the parent, within the archive limits).

Real public files from the shared corpus (Apache Tika's test e-mails, one with a
PDF attached and one with two text files; unstructured's ``simple.zip``), through
real backfills and the streaming pipeline (FnApiRunner, the real model, Milvus
Lite, tantivy, SQLite).
"""

from __future__ import annotations

import email
import shutil
from email import policy
from pathlib import Path
from typing import Any

import pytest

from ragsync.errors import ArchiveBombError, ChildTimeBudgetError
from ragsync.ids import child_object_id, doc_id
from ragsync.ingest.children import (
    ChildBudget,
    child_document,
    expand_children,
    past_time_budget,
    stale_children,
)
from ragsync.model import Attachment, FetchedDocument, SourceFile
from ragsync.parsing import ArchiveLimits
from tests.corpus import corpus_dir

CORPUS = corpus_dir() / "documents"
MULTI = CORPUS / "tika" / "testRFC822_multipart_attachments.eml"  # Test TxtA.txt, Test TxtB.txt
WITH_PDF = CORPUS / "tika" / "test-incremental-updates.eml"  # testPDF_incrementalUpdates.pdf
ZIP = CORPUS / "unstructured" / "simple.zip"  # ideas-page.html, stanley-cups.csv
DIM = 384

corpus_required = pytest.mark.skipif(not MULTI.is_file(), reason="shared corpus absent")


# --------------------------------------------------------------------------- pure parts


def _parent() -> FetchedDocument:
    src = SourceFile("acme", "mail", "inbox/42.eml", "/m/inbox/42.eml", acl_groups=("eng",), event_id="e1")
    return FetchedDocument(doc_id("acme", "mail", "inbox/42.eml"), src, "h", "raw", 10, "acl1", "x")


def test_child_document_takes_the_parents_identity_and_groups() -> None:
    child = child_document(_parent(), "q3#1.pdf", b"%PDF", raw_uri="raw/c")
    assert child.source.source_object_id == "inbox/42.eml#q3%231.pdf"
    assert child.doc_id == doc_id("acme", "mail", "inbox/42.eml#q3%231.pdf") == child.canonical_doc_id
    assert (child.acl_id, child.source.acl_groups, child.source.tenant_id) == ("acl1", ("eng",), "acme")
    assert (child.source.event_id, child.size, child.source.uri) == ("", 4, "/m/inbox/42.eml#q3%231.pdf")
    assert child.content_hash != _parent().content_hash


def test_child_budget_and_stale_children() -> None:
    budget = ChildBudget(ArchiveLimits(max_bytes=10, max_members=2, max_depth=2), "x.eml")
    budget.take(Attachment("a", b"12345"))
    with pytest.raises(ArchiveBombError, match="exceed 10 bytes"):
        budget.take(Attachment("b", b"123456"))
    two = ChildBudget(ArchiveLimits(max_members=2), "x")
    two.take(Attachment("a", b""))
    two.take(Attachment("b", b""))
    with pytest.raises(ArchiveBombError, match="more than 2 child documents"):
        two.take(Attachment("c", b""))
    with pytest.raises(ArchiveBombError, match="deeper than 2"):
        ChildBudget(ArchiveLimits(max_depth=2), "x").take(Attachment("d", b"", depth=3))
    assert stale_children(["c", "a", "b"], ["b", "d"]) == ["a", "c"]


def test_children_past_the_time_budget_per_parent_are_too_large_dead_letters() -> None:
    """Issue #29: a parent whose children's parsing passes ``max_children_s``
    stops expanding; each remaining child (nested ones included) is a
    ``too_large`` dead letter of its own, the children parsed before stay."""
    ticks = iter(range(100))  # a clock that advances one second per reading

    def clock() -> float:
        return float(next(ticks))

    def text(name: str) -> Attachment:
        return Attachment(name, f"Minutes of meeting {name}.\n".encode(), "text/plain", 1)

    inner = (
        b'MIME-Version: 1.0\nSubject: Fwd\nContent-Type: multipart/mixed; boundary="i"\n\n'
        b"--i\nContent-Type: text/plain\n\nForwarded.\n"
        b'--i\nContent-Type: text/plain\nContent-Disposition: attachment; filename="deep.txt"\n\n'
        b"Deep notes.\n--i--\n"
    )
    attachments = [
        text("a.txt"),
        Attachment("fwd.eml", inner, "message/rfc822", 1),
        text("b.txt"),
        text("c.txt"),
        text("d.txt"),
    ]
    children = expand_children(
        _parent(),
        attachments,
        raw_uri=lambda h: f"raw/{h}",
        limits=ArchiveLimits(max_children_s=3.5),
        max_bytes=1 << 20,
        max_pages=10,
        clock=clock,
    )
    # Budget from t=0: a.txt (t=1), fwd.eml (t=2) and its deep.txt (t=3) are
    # parsed; at t=4 the budget of 3.5 s is spent: b, c and d are not.
    names = [c.doc.source.source_object_id.rsplit("#", 1)[-1] for c in children]
    assert names == ["a.txt", "fwd.eml", "deep.txt", "b.txt", "c.txt", "d.txt"]
    parsed = [c for c in children if c.result is not None]
    skipped = [c for c in children if c.error is not None]
    assert (len(parsed), len(skipped)) == (3, 3)
    assert all(isinstance(c.error, ChildTimeBudgetError) for c in skipped)
    assert {c.error.error_class for c in skipped if c.error} == {"too_large"}
    assert str(skipped[0].error) == (
        "42.eml: 'b.txt' was not parsed: the document's attachments and members passed the time "
        "budget of 3.5 s per parent"
    )
    # The first child is always parsed: a zero budget still gives one child.
    one = expand_children(
        _parent(),
        [text("x.txt"), text("y.txt")],
        raw_uri=lambda h: f"raw/{h}",
        limits=ArchiveLimits(max_children_s=1e-9),
        max_bytes=1 << 20,
        max_pages=10,
    )
    assert [c.error is None for c in one] == [True, False]
    assert past_time_budget(0.0, 5.0, 4.0, parsed=0) is False
    assert past_time_budget(0.0, 5.0, 4.0, parsed=1) is True
    assert past_time_budget(0.0, 4.0, 4.0, parsed=1) is False


# --------------------------------------------------------------------------- pipelines


def _counts(settings: Any, tenant: str, ids: list[str]) -> dict[str, list[int]]:
    """Chunks per document in the catalog, the vector index and the keyword index."""
    from ragsync.config import open_catalog
    from ragsync.index.backends import open_keyword_index, open_vector_index

    cat, vec, kw = open_catalog(settings), open_vector_index(settings, DIM), open_keyword_index(settings)
    try:
        v, k = vec.count_by_doc(tenant), kw.count_by_doc(tenant)
        return {
            "catalog": [len(cat.chunks.chunk_ids_for_doc(i)) for i in ids],
            "vector": [v.get(i, 0) for i in ids],
            "keyword": [k.get(i, 0) for i in ids],
        }
    finally:
        kw.close()
        vec.close()
        cat.close()


def _children(settings: Any, parent: str) -> list[str]:
    from ragsync.config import open_catalog

    cat = open_catalog(settings)
    try:
        return [c.doc_id for c in cat.documents.children_of(parent)]
    finally:
        cat.close()


def _hits(settings: Any, text: str, groups: list[str], tenant: str) -> list[tuple[str, str | None]]:
    from ragsync.query.search import hybrid_query

    return [
        (h.doc_id, h.parent_doc_id)
        for h in hybrid_query(settings, text, groups=groups, tenant_id=tenant, k=20)
    ]


def _dead(settings: Any) -> list[tuple[str, str, str]]:
    from ragsync.config import open_catalog

    cat = open_catalog(settings)
    try:
        return [(d.stage, d.error_class, d.message) for d in cat.dead_letters.list_dead_letters()]
    finally:
        cat.close()


def _without_attachment(data: bytes, name: str) -> bytes:
    """The same e-mail with the attachment ``name`` removed (Python's email library)."""
    msg = email.message_from_bytes(data, policy=policy.default)
    parts = msg.get_payload()
    assert isinstance(parts, list)
    msg.set_payload([p for p in parts if p.get_filename() != name])
    return bytes(msg)


@corpus_required
@pytest.mark.slow
def test_backfill_indexes_attachments_and_members_as_children(tmp_path: Path) -> None:
    from beam_pipelines.backfill import run_backfill
    from beam_pipelines.quick import source_id_for
    from ragsync.config import Settings, open_catalog
    from ragsync.index.reconcile import reconcile

    src = tmp_path / "src"
    src.mkdir()
    for f in (MULTI, WITH_PDF, ZIP):
        shutil.copy(f, src / f.name)
    settings = Settings(home=str(tmp_path / "home"))
    sid, tenant = source_id_for(str(src)), "default"

    def did(object_id: str) -> str:
        return doc_id(tenant, sid, object_id)

    multi, pdf_mail, zipped = did(MULTI.name), did(WITH_PDF.name), did(ZIP.name)
    txt_a, txt_b = (did(child_object_id(MULTI.name, n)) for n in ("Test TxtA.txt", "Test TxtB.txt"))
    pdf = did(child_object_id(WITH_PDF.name, "testPDF_incrementalUpdates.pdf"))
    html, csv = (did(child_object_id(ZIP.name, n)) for n in ("ideas-page.html", "stanley-cups.csv"))

    first = run_backfill(str(src), settings, acl_groups=["eng"], show_progress=False)
    assert (first.documents_seen, first.documents_indexed, first.dead_lettered) == (3, 3 + 5, 0)
    assert _children(settings, multi) == sorted([txt_a, txt_b])
    assert _children(settings, pdf_mail) == [pdf]
    assert _children(settings, zipped) == sorted([html, csv])
    cat = open_catalog(settings)
    try:
        rows = {d.doc_id: d for d in cat.documents.documents_for_source(sid)}
    finally:
        cat.close()
    assert len(rows) == 8 and {r.status for r in rows.values()} == {"indexed"}
    assert rows[pdf].mime == "application/pdf" and rows[pdf].parent_doc_id == pdf_mail
    assert rows[pdf].acl_id == rows[pdf_mail].acl_id and rows[pdf].content_hash != rows[pdf_mail].content_hash
    assert rows[txt_a].source_object_id == f"{MULTI.name}#Test TxtA.txt"
    # A child is found with its own id and its parent; only by the parent's group.
    assert (txt_a, multi) in _hits(settings, "This is Test TXTA File for parser", ["eng"], tenant)
    assert (pdf, pdf_mail) in _hits(settings, "Testing Incremental", ["eng"], tenant)
    assert _hits(settings, "This is Test TXTA File for parser", ["sales"], tenant) == []
    assert reconcile(settings, DIM).ok

    # An unchanged re-run leaves the children alone (not listed, not deleted).
    again = run_backfill(str(src), settings, acl_groups=["eng"], show_progress=False)
    assert (again.documents_indexed, again.documents_deleted, again.chunks_written) == (0, 0, 0)
    assert len(_children(settings, multi)) == 2

    # The parent is edited: one attachment removed -> that child is deleted everywhere.
    (src / MULTI.name).write_bytes(_without_attachment(MULTI.read_bytes(), "Test TxtB.txt"))
    before = _counts(settings, tenant, [txt_b])
    assert before == {"catalog": [1], "vector": [1], "keyword": [1]}
    edited = run_backfill(str(src), settings, acl_groups=["eng"], show_progress=False)
    assert edited.dead_lettered == 0, _dead(settings)
    assert _children(settings, multi) == [txt_a]
    assert _counts(settings, tenant, [txt_b]) == {"catalog": [0], "vector": [0], "keyword": [0]}
    assert txt_b not in dict(_hits(settings, "This is Test TXTB File for parser", ["eng"], tenant))

    # The archive vanishes from the folder -> it and both members are gone.
    (src / ZIP.name).unlink()
    gone = run_backfill(str(src), settings, acl_groups=["eng"], show_progress=False, max_delete_share=1.0)
    assert gone.documents_deleted == 1  # the listing's delete; its children go with it
    assert _children(settings, zipped) == []
    assert _counts(settings, tenant, [zipped, html, csv]) == {
        k: [0, 0, 0] for k in ("catalog", "vector", "keyword")
    }
    cat = open_catalog(settings)
    try:
        rows = {d.doc_id: d for d in cat.documents.documents_for_source(sid)}
    finally:
        cat.close()
    assert {i: rows[i].status for i in (zipped, html, csv, txt_b)} == dict.fromkeys(
        (zipped, html, csv, txt_b), "deleted"
    )
    assert sorted(i for i, r in rows.items() if r.status == "indexed") == sorted(
        [multi, txt_a, pdf_mail, pdf]
    )
    assert reconcile(settings, DIM).ok


@corpus_required
@pytest.mark.slow
def test_archive_over_the_limits_is_a_bomb_with_no_children(tmp_path: Path) -> None:
    from beam_pipelines.backfill import run_backfill
    from beam_pipelines.quick import source_id_for
    from ragsync.config import Settings, open_catalog

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ZIP, src / ZIP.name)
    shutil.copy(MULTI, src / MULTI.name)
    settings = Settings(home=str(tmp_path / "home"), max_archive_members=1)
    summary = run_backfill(str(src), settings, show_progress=False)
    # The zip has 2 members (archive_bomb); the e-mail's 2 attachments cross the same limit.
    assert (summary.documents_indexed, summary.dead_lettered) == (0, 2)
    cat = open_catalog(settings)
    try:
        rows = cat.documents.documents_for_source(source_id_for(str(src)))
        assert [
            (r.source_object_id, r.status, r.error_class) for r in rows if r.source_object_id == ZIP.name
        ] == [(ZIP.name, "dead_letter", "archive_bomb")]
        assert len(rows) == 2 and all(r.parent_doc_id is None for r in rows)
        assert cat.dead_letters.dead_letter_counts() == {"archive_bomb": 2}
    finally:
        cat.close()


@corpus_required
@pytest.mark.slow
def test_stream_children_follow_their_parents_acl_and_delete(tmp_path: Path) -> None:
    from connectors.sources import register_source
    from ragsync.config import Settings
    from ragsync.embedding.models import default_model
    from ragsync.index.reconcile import reconcile
    from ragsync.index.versions import prepare_stores
    from tests.queue_events import apply_events, change_event

    content = tmp_path / "content"
    (content / "inbox").mkdir(parents=True)
    mail = content / "inbox" / "multi.eml"
    mail.write_bytes(MULTI.read_bytes())
    settings = Settings(home=str(tmp_path / "home"), event_lease_s=2.0)
    prepare_stores(settings, default_model())
    register_source(settings, "mail", "acme", "wiki", str(content))
    parent = doc_id("acme", "mail", "inbox/multi.eml")
    txt_a, txt_b = (
        doc_id("acme", "mail", child_object_id("inbox/multi.eml", n))
        for n in ("Test TxtA.txt", "Test TxtB.txt")
    )

    def apply(version: int, op: str, groups: list[str], uri: str = "") -> Any:
        return apply_events(settings, [change_event("mail", "inbox/multi.eml", op, version, groups, uri)])

    s = apply(1, "upsert", ["eng"], str(mail))
    assert (s.documents_indexed, s.dead_lettered) == (3, 0)
    assert _children(settings, parent) == sorted([txt_a, txt_b])
    assert (txt_a, parent) in _hits(settings, "This is Test TXTA File for parser", ["eng"], "acme")

    s = apply(2, "acl", ["legal"])
    assert s.documents_acl_updated == 1
    assert _hits(settings, "This is Test TXTA File for parser", ["eng"], "acme") == []
    assert (txt_a, parent) in _hits(settings, "This is Test TXTA File for parser", ["legal"], "acme")
    assert (txt_b, parent) in _hits(settings, "This is Test TXTB File for parser", ["legal"], "acme")

    # An edit by event drops one attachment: that child goes.
    mail.write_bytes(_without_attachment(MULTI.read_bytes(), "Test TxtA.txt"))
    s = apply(3, "upsert", ["legal"], str(mail))
    assert s.dead_lettered == 0, _dead(settings)
    assert _children(settings, parent) == [txt_b]
    assert _counts(settings, "acme", [txt_a]) == {"catalog": [0], "vector": [0], "keyword": [0]}

    s = apply(4, "delete", [])
    assert s.documents_deleted == 1
    assert _children(settings, parent) == []
    assert _counts(settings, "acme", [parent, txt_a, txt_b]) == {
        k: [0, 0, 0] for k in ("catalog", "vector", "keyword")
    }
    assert _hits(settings, "This is Test TXTB File for parser", ["legal"], "acme") == []
    assert reconcile(settings, DIM).ok
