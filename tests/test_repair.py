"""``ragsync reconcile --repair``: the pure plan (chunk ids per store), and a
real backfill whose stores are damaged (chunks deleted from one store,
orphans added, the rows of a delete that stopped part-way), repaired through
the CLI with exact action counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragsync.decisions import RepairPlan, plan_repair

DIM = 384


def test_plan_repair_compares_chunk_ids_per_store() -> None:
    rows = {"c1": "d1", "c2": "d1", "c3": "d2", "c4": "gone"}
    stores = {"vector": {"c1", "c3", "c4", "x9"}, "keyword": {"c1", "c2", "c3", "c4"}}
    plan = plan_repair(rows, {"gone"}, stores)
    assert plan == RepairPlan(
        rewrite={"vector": ("c2",), "keyword": ()},
        orphans={"vector": ("x9",), "keyword": ()},
        dead_rows=("c4",),
    )
    assert not plan.empty


def test_plan_repair_same_counts_but_other_ids_is_still_found() -> None:
    plan = plan_repair({"c1": "d1"}, set(), {"vector": {"c2"}, "keyword": {"c1"}})
    assert plan.rewrite == {"vector": ("c1",), "keyword": ()}
    assert plan.orphans == {"vector": ("c2",), "keyword": ()}


def test_plan_repair_nothing_to_do() -> None:
    plan = plan_repair({"c1": "d1"}, set(), {"vector": {"c1"}, "keyword": {"c1"}})
    assert plan.empty and plan.dead_rows == ()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    from cli.main import main

    capsys.readouterr()
    code = main(list(args))
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_reconcile_repair_fixes_damaged_stores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from beam_pipelines.backfill import run_backfill
    from ragsync.config import Settings, open_catalog
    from ragsync.index.backends import open_keyword_index, open_vector_index
    from ragsync.model import Chunk
    from ragsync.query.search import hybrid_query

    src = tmp_path / "src"
    src.mkdir()
    (src / "hotels.md").write_text(
        "# Hotels\n\nIn London the nightly hotel limit is 250 EUR.\n\n## Oslo\n\nIn Oslo it is 210 EUR.\n"
    )
    (src / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    (src / "old.txt").write_text("An old memo about the canteen opening hours.\n")
    home = tmp_path / "home"
    settings = Settings(home=str(home))
    run_backfill(str(src), settings, show_progress=False)

    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM)
    kw = open_keyword_index(settings)
    try:
        docs = {Path(d.uri).name: d for d in cat.documents.documents_for_source(_source_id(cat))}
        hotel_chunks = cat.chunks.chunks_for_doc(docs["hotels.md"].doc_id)
        note_chunks = cat.chunks.chunks_for_doc(docs["notes.txt"].doc_id)
        old_chunks = cat.chunks.chunks_for_doc(docs["old.txt"].doc_id)
        assert hotel_chunks and note_chunks and old_chunks
        # Damage: a chunk lost by the vector index, another by the keyword index.
        vec.delete("default", [hotel_chunks[0].chunk_id])
        kw.delete("default", [note_chunks[0].chunk_id])
        # Orphans: rows in both indexes that no catalog row knows.
        ghost = Chunk("f" * 32, "dghost", "default", "h" * 64, 0, (), 0, "ghost text", 2, ("acl-x",))
        vec.upsert([ghost], [[1.0] + [0.0] * (DIM - 1)])
        kw.upsert([ghost])
        # A delete that stopped after its tombstone: the rows are still everywhere.
        cat.gate_state.put_tombstone(docs["old.txt"].doc_id, "default", "9")
    finally:
        kw.close()
        vec.close()
        cat.close()

    code, before = _cli(capsys, "reconcile", "--home", str(home), "--json")
    assert code == 1 and before["ok"] is False

    code, fixed = _cli(capsys, "reconcile", "--repair", "--home", str(home), "--json")
    assert code == 0, fixed
    assert fixed["counts"] == {
        "delete_dead_rows:catalog": len(old_chunks),
        "delete_orphans:vector": 1,
        "delete_orphans:keyword": 1,
        "rewrite:vector": 1,
        "rewrite:keyword": 1,
    }
    assert fixed["chunks_embedded"] == 0  # the vector came from the embedding cache
    assert fixed["ok"] is True

    code, after = _cli(capsys, "reconcile", "--home", str(home), "--json")
    assert code == 0 and after["ok"] is True
    code, again = _cli(capsys, "reconcile", "--repair", "--home", str(home), "--json")
    assert (code, again["actions"], again["counts"]) == (0, [], {})

    # The rewritten chunks answer queries again, from both indexes.
    hits = hybrid_query(settings, "nightly hotel limit London", groups=["everyone"], k=3)
    assert hits and hits[0].uri.endswith("hotels.md")
    assert any(
        "Revenue grew" in h.text for h in hybrid_query(settings, "revenue grew", groups=["everyone"], k=3)
    )
    assert not any(
        "canteen" in h.text for h in hybrid_query(settings, "canteen memo", groups=["everyone"], k=5)
    )


def _source_id(cat: object) -> str:
    from sqlalchemy import select

    from ragsync.catalog import schema

    with cat.engine.connect() as conn:  # type: ignore[attr-defined]
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())


def test_sweep_orphans_pages_through_the_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-of-backfill sweep removes exactly the index rows without a
    chunk row, comparing the stores with the catalog a page at a time."""
    from ragsync.config import Settings, open_catalog
    from ragsync.index import maintenance
    from ragsync.index.backends import open_keyword_index, open_vector_index
    from ragsync.index.service import IndexService
    from tests.store_contract import make_chunk, vector_for

    monkeypatch.setattr(maintenance, "SWEEP_PAGE", 2)
    settings = Settings(home=str(tmp_path / "home"))
    kept = [make_chunk(i, tenant="t1") for i in range(5)]
    ghosts = [make_chunk(i, tenant="t1", doc="gone") for i in range(5, 8)]
    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM, create=True)
    kw = open_keyword_index(settings, create=True)
    try:
        cat.sources.create_source("t1", source_id="s1", type="object_store", uri="", if_exists="update")
        assert cat.chunks.write_chunks(kept) == 5
        vec.upsert(kept + ghosts, [vector_for(c.chunk_id, DIM) for c in kept + ghosts])
        kw.upsert(kept + ghosts)
        assert cat.chunks.present_chunk_ids("t1", [c.chunk_id for c in kept + ghosts]) == {
            c.chunk_id for c in kept
        }
    finally:
        kw.close()
        vec.close()
        cat.close()

    with IndexService.open(settings, DIM) as service:
        assert service.sweep_orphans() == 6  # 3 per index
    vec, kw = open_vector_index(settings, DIM), open_keyword_index(settings)
    try:
        assert vec.chunk_ids("t1") == kw.chunk_ids("t1") == {c.chunk_id for c in kept}
    finally:
        kw.close()
        vec.close()
    with IndexService.open(settings, DIM) as service:
        assert service.sweep_orphans() == 0


def test_reconcile_reads_the_catalog_a_page_at_a_time(tmp_path: Path) -> None:
    """Reconcile's catalog side is streamed: every chunk-count query it runs
    is one keyset page of at most ``page`` documents (the statement's LIMIT),
    never the whole table at once; the report is the same as the unpaged
    comparison (a chunk lost by the vector index, a document only in the
    indexes, the rest in agreement)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from ragsync.config import Settings, open_catalog
    from ragsync.index.backends import open_keyword_index, open_vector_index
    from ragsync.index.reconcile import Mismatch, reconcile
    from tests.store_contract import make_chunk, vector_for

    settings = Settings(home=str(tmp_path / "home"))
    chunks = [make_chunk(i, tenant="t1", doc=f"d{i // 2}") for i in range(14)]  # d0..d6, 2 chunks each
    ghost = make_chunk(99, tenant="t1", doc="ghost")
    cat = open_catalog(settings)
    vec = open_vector_index(settings, DIM, create=True)
    kw = open_keyword_index(settings, create=True)
    try:
        cat.sources.create_source("t1", source_id="s1", type="object_store", uri="", if_exists="update")
        assert cat.chunks.write_chunks(chunks) == 14
        stored = [c for c in chunks if c.chunk_id != chunks[5].chunk_id] + [ghost]  # d2 lost one
        vec.upsert(stored, [vector_for(c.chunk_id, DIM) for c in stored])
        kw.upsert(chunks + [ghost])
    finally:
        kw.close()
        vec.close()
        cat.close()

    pages: list[tuple[str, object]] = []

    def seen(
        conn: object, cursor: object, statement: str, params: object, context: object, many: bool
    ) -> None:
        flat = " ".join(statement.split()).lower()
        if "from chunks" in flat and "group by chunks.doc_id" in flat:
            pages.append((flat, params))

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        report = reconcile(settings, DIM, page=2)
    finally:
        event.remove(Engine, "before_cursor_execute", seen)

    assert report.documents == 8 and report.chunks == 14
    assert report.mismatches == [Mismatch("d2", 1, 2, 2), Mismatch("ghost", 1, 1, 0)]
    # 7 documents in pages of 2: 2, 2, 2, 1 -> four queries, each with LIMIT 2.
    assert len(pages) == 4, pages
    for flat, params in pages:
        assert " limit " in flat, flat
        assert 2 in (params.values() if isinstance(params, dict) else params), params  # type: ignore[union-attr]
    assert reconcile(settings, DIM, page=2).to_dict() == reconcile(settings, DIM, page=5000).to_dict()
