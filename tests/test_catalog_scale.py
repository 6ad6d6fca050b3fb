"""A catalog of millions, tested small (revision 0010): the document tallies
that status, coverage and /metrics read stay exactly the direct counts, and
the reads a full listing and an unchanged re-run make use their indexes.
Figures at 100k and 1M documents: ``benchmarks/bench_catalog_scale.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic import command
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event, func, select, text, update

from ragsync.catalog import Catalog, FetchRecord, create_catalog_engine, migrate, schema
from ragsync.catalog.migrations import alembic_config
from ragsync.model import DeadLetter
from ragsync.ops.coverage import coverage_by_source
from ragsync.ops.metrics import render


def _record(cat: Catalog, doc_id: str, *, source: str = "s1", tenant: str = "t1") -> None:
    cat.documents.record_fetch(
        FetchRecord(
            doc_id=doc_id,
            source_id=source,
            tenant_id=tenant,
            source_object_id=f"obj/{doc_id}",
            uri=f"file:///src/{doc_id}",
            size=10,
            source_version="v1",
            content_hash=f"h-{doc_id}",
            acl_id="acl1",
            canonical_doc_id=doc_id,
            mime="text/plain",
        )
    )


def _dead_letter(doc_id: str) -> DeadLetter:
    return DeadLetter(stage="parse", doc_id=doc_id, uri="", error_class="corrupt", message="m")


def _direct_outcomes(cat: Catalog) -> list[tuple[str, str, str, str, int]]:
    """What the tallies must equal: every document counted now."""
    d = schema.documents
    cols = (d.c.tenant_id, d.c.source_id, d.c.status, func.coalesce(d.c.error_class, ""))
    with cat.engine.connect() as conn:
        rows = conn.execute(select(*cols, func.count()).group_by(*cols)).all()
    return sorted((str(t), str(s), str(st), str(ec), int(n)) for t, s, st, ec, n in rows)


def _write_a_mixed_catalog(cat: Catalog) -> None:
    """Inserts, upserts, status changes, an error class, a move between
    sources, a raw delete and a bulk update: every way a count can change."""
    for i in range(7):
        _record(cat, f"a{i}")
    for i in range(3):
        _record(cat, f"b{i}", source="s2", tenant="t2")
    cat.documents.set_status("a0", "indexed")
    cat.documents.set_status("a1", "indexed")
    cat.documents.set_status("a2", "dead_letter", "corrupt")
    cat.documents.set_status("a3", "dead_letter", "too_large")
    cat.documents.set_status("a3", "dead_letter", "corrupt")  # same status, other class
    cat.documents.set_status("a4", "deleted")
    cat.documents.set_status("b0", "duplicate")
    _record(cat, "a0")  # fetched again (no live version was written): fetched
    _record(cat, "a2")  # a dead letter fetched again: fetched, class cleared
    with cat.engine.begin() as conn:
        d = schema.documents
        conn.execute(update(d).where(d.c.doc_id == "a5").values(source_id="s3"))
        conn.execute(d.delete().where(d.c.doc_id == "a6"))
        conn.execute(update(d).where(d.c.tenant_id == "t2").values(status="indexed"))
        conn.execute(update(d).where(d.c.doc_id == "a1").values(size=99))  # no counted column


def test_tallies_equal_the_direct_counts_after_every_kind_of_write(catalog_url: str) -> None:
    with Catalog.open(catalog_url) as cat:
        _write_a_mixed_catalog(cat)
        expected = [
            ("t1", "s1", "dead_letter", "corrupt", 1),
            ("t1", "s1", "deleted", "", 1),
            ("t1", "s1", "fetched", "", 2),
            ("t1", "s1", "indexed", "", 1),
            ("t1", "s3", "fetched", "", 1),
            ("t2", "s2", "indexed", "", 3),
        ]
        assert _direct_outcomes(cat) == expected
        assert sorted(cat.runs.document_outcomes()) == expected
        assert sorted(cat.runs.document_outcomes(tenant_id="t2")) == expected[-1:]
        assert sorted(cat.runs.document_outcomes(source_id="s3")) == [expected[4]]
        assert cat.documents.document_counts_by_status() == {
            "dead_letter": 1,
            "deleted": 1,
            "fetched": 3,
            "indexed": 4,
        }
        assert cat.documents.document_counts_by_status(tenant_id="t1") == {
            "dead_letter": 1,
            "deleted": 1,
            "fetched": 3,
            "indexed": 1,
        }


def _statements(cat: Catalog) -> list[str]:
    """SQL the catalog's read engine runs from now on (the list fills up)."""
    seen: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(" ".join(statement.lower().split()))

    event.listen(cat._engine, "before_cursor_execute", capture)
    return seen


def test_a_scrape_reads_the_tallies_and_reports_the_direct_counts(catalog_url: str) -> None:
    with Catalog.open(catalog_url) as cat:
        _write_a_mixed_catalog(cat)
        cat.dead_letters.add_dead_letter(_dead_letter("a2"))
        statements = _statements(cat)
        body = render(cat).decode()
        # No scrape query groups the documents table (a full count per scrape).
        counting = [s for s in statements if "from documents" in s and "group by" in s]
        assert counting == []
        families = {f.name: f for f in text_string_to_metric_families(body)}
        by_state = {s.labels["state"]: s.value for s in families["ragsync_documents"].samples}
        assert by_state == {"dead_letter": 1, "deleted": 1, "fetched": 3, "indexed": 4}
        direct = coverage_by_source(_direct_outcomes(cat))
        scraped = {
            (s.labels["tenant_id"], s.labels["source_id"], s.labels["outcome"]): s.value
            for s in families["ragsync_source_documents"].samples
        }
        want = {}
        for c in direct:
            key = (c["tenant_id"], c["source_id"])
            want[(*key, "indexed")] = c["indexed"]
            want[(*key, "excluded")] = sum(c["excluded"].values())
            want[(*key, "not_indexed")] = sum(c["not_indexed"].values())
        assert scraped == want
        assert scraped[("t1", "s1", "indexed")] == 1
        assert scraped[("t1", "s1", "not_indexed")] == 3  # a0, a2 fetched (pending), a3 corrupt


def test_revision_0010_fills_the_tallies_from_existing_documents(catalog_url: str) -> None:
    engine = create_catalog_engine(catalog_url)
    try:
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0009")
        cat = Catalog(engine, catalog_url)
        for i in range(4):
            _record(cat, f"d{i}")
        cat.documents.set_status("d0", "dead_letter", "corrupt")
        assert migrate(engine) == ["0010", "0011", "0012", "0013", "0014", "0015", "0016", "0017"]
        assert sorted(cat.runs.document_outcomes()) == [
            ("t1", "s1", "dead_letter", "corrupt", 1),
            ("t1", "s1", "fetched", "", 3),
        ]
        cat.documents.set_status("d1", "indexed")  # and the triggers run from then on
        assert cat.documents.document_counts_by_status() == {"dead_letter": 1, "fetched": 2, "indexed": 1}
    finally:
        engine.dispose()


def test_revision_0013_keeps_existing_chunks_live(catalog_url: str) -> None:
    """A home upgraded from 0012: its chunk rows are its live versions'
    (not pending), so queries keep answering with them."""
    engine = create_catalog_engine(catalog_url)
    try:
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0012")
            conn.execute(
                text(
                    "INSERT INTO chunks (chunk_id, doc_id, tenant_id, text_hash, ordinal, heading_path,"
                    " page, text, token_count, acl_ids)"
                    " VALUES (:c, 'd1', 't1', :h, 0, '[]', 0, 'x', 1, '[\"a\"]')"
                ),
                [{"c": "c1", "h": "h1"}, {"c": "c2", "h": "h2"}],
            )
        assert migrate(engine) == ["0013", "0014", "0015", "0016", "0017"]
        cat = Catalog(engine, catalog_url)
        assert sorted(cat.chunks.chunks_by_ids(["c1", "c2"], live_only=True)) == ["c1", "c2"]
        assert cat.chunks.pending_chunk_ids("t1") == set()
    finally:
        engine.dispose()


def _plan(cat: Catalog, statement: str, params: Any) -> str:
    """The engine's query plan of one captured statement, as one string."""
    raw = cat.engine.raw_connection()
    try:
        cur = raw.cursor()
        if cat.engine.dialect.name == "postgresql":
            # Small tables are scanned whatever the indexes: ask what an index would serve.
            cur.execute("SET enable_seqscan = off")
            cur.execute("EXPLAIN " + statement, params)
        else:
            cur.execute("EXPLAIN QUERY PLAN " + statement, params)
        return "\n".join(str(r) for r in cur.fetchall())
    finally:
        raw.close()


@pytest.fixture
def small_catalog(catalog_url: str) -> Iterator[Catalog]:
    with Catalog.open(catalog_url) as cat:
        for i in range(20):
            _record(cat, f"d{i:02d}", source="s1" if i % 2 else "s2")
        cat.dead_letters.add_dead_letter(_dead_letter("d03"))
        yield cat


def _captured(cat: Catalog, read: Any) -> tuple[str, Any]:
    """The last statement (and its parameters) ``read`` ran (on any repository's engine)."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        seen.append((statement, params))

    event.listen(cat._engine, "before_cursor_execute", capture)
    try:
        read()
    finally:
        event.remove(cat._engine, "before_cursor_execute", capture)
    return seen[-1]


def test_a_full_listings_diff_reads_pages_through_the_source_doc_index(small_catalog: Catalog) -> None:
    cat = small_catalog
    pages = list(cat.documents.iter_source_documents("s1", "t1", updated_before=float("inf"), page=3))
    assert [d for d, _, _ in pages] == [f"d{i:02d}" for i in range(1, 20, 2)]
    statement, params = _captured(
        cat,
        lambda: list(cat.documents.iter_source_documents("s1", "t1", updated_before=float("inf"), page=3)),
    )
    plan = _plan(cat, statement, params)
    assert "ix_documents_source_doc" in plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan  # pages come in index order


def test_the_rerun_check_finds_open_dead_letters_through_the_doc_index(small_catalog: Catalog) -> None:
    cat = small_catalog
    known = cat.syncs.unread_states(["d03", "d04", "nope"])
    assert sorted(known) == ["d03", "d04"]
    assert (known["d03"].open_dead_letter, known["d04"].open_dead_letter) == (True, False)
    statement, params = _captured(cat, lambda: cat.syncs.unread_states(["d03", "d04"]))
    assert "ix_dead_letters_doc" in _plan(cat, statement, params)


def test_a_query_hits_copies_are_found_through_the_canonical_index(small_catalog: Catalog) -> None:
    cat = small_catalog
    assert cat.copies.duplicates_of("d01") == []
    statement, params = _captured(cat, lambda: cat.copies.duplicates_of("d01"))
    assert "ix_documents_canonical" in _plan(cat, statement, params)


def test_the_tally_triggers_do_not_fire_on_columns_they_do_not_count(catalog_url: str) -> None:
    """A write that leaves the four counted columns alone touches no tally
    row (no lock taken on it: concurrent writers of one source do not queue)."""
    with Catalog.open(catalog_url) as cat:
        _record(cat, "d1")
        with cat.engine.begin() as conn:
            conn.execute(text("UPDATE document_tallies SET n = 41"))
            conn.execute(update(schema.documents).values(size=5, updated_at=9.0, uri="file:///x"))
            conn.execute(update(schema.documents).values(status="fetched"))  # same value
        assert cat.runs.document_outcomes() == [("t1", "s1", "fetched", "", 41)]


def test_pages_for_review_start_from_the_few_parses_that_have_them(small_catalog: Catalog) -> None:
    """Status and every scrape ask for pages for review: the plan starts
    from the partial index of parses with such pages, not from every document."""
    cat = small_catalog
    cat.parsed.put_parsed("h-d05", "p1", "file:///e", pages=3, pages_for_review=[2])
    cat.parsed.put_parsed("h-d06", "p1", "file:///e", pages=3)
    review = cat.parsed.pages_for_review()
    assert (review["documents"], review["pages"]) == (1, 1)
    assert review["items"] == [{"doc_id": "d05", "uri": "file:///src/d05", "pages": [2]}]
    statement, params = _captured(cat, cat.parsed.pages_for_review)
    plan = _plan(cat, statement, params)
    assert "ix_parsed_docs_review" in plan
    assert "ix_documents_content" in plan


def test_reconciles_chunk_counts_come_in_pages_along_the_chunk_doc_index(catalog_url: str) -> None:
    """``iter_chunk_counts_by_doc`` (reconcile's catalog side) reads keyset
    pages in ``ix_chunks_doc`` order (no sort of the whole table), each page
    at most ``page`` documents; the counts equal the unpaged ones."""
    from ragsync.model import Chunk

    with Catalog.open(catalog_url) as cat:
        chunks = [
            Chunk(f"c{d}-{j}", f"d{d}", "t1" if d % 3 else "t2", f"h{d}-{j}", j, (), 0, "x", 1, ("a",))
            for d in range(7)
            for j in range(d % 3 + 1)
        ]
        cat.chunks.write_chunks(chunks)
        expected = {f"d{d}": d % 3 + 1 for d in range(7)}
        assert list(cat.chunks.iter_chunk_counts_by_doc(page=2)) == sorted(expected.items())
        assert dict(cat.chunks.iter_chunk_counts_by_doc("t2", page=1)) == {"d0": 1, "d3": 1, "d6": 1}
        assert cat.chunks.chunk_counts_by_doc() == expected
        statement, params = _captured(cat, lambda: list(cat.chunks.iter_chunk_counts_by_doc(page=2)))
        assert " LIMIT " in " ".join(statement.split()).upper()
        plan = _plan(cat, statement, params)
        assert "ix_chunks_doc" in plan
        assert "TEMP B-TREE" not in plan and "Sort" not in plan  # pages come in index order
        with pytest.raises(ValueError):
            next(cat.chunks.iter_chunk_counts_by_doc(page=0))
