"""Near-duplicate signatures (``ragsync.ingest.near_dup``, datasketch), their
grouping in the catalog, and revision 0008, which re-signs the signatures of
the hand-written MinHash (``tests/near_dup_legacy.py``), on SQLite and
PostgreSQL (``catalog_url``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic import command
from datasketch import MinHash
from sqlalchemy import func, inspect, select

from ragsync.catalog import Catalog, FetchRecord, create_catalog_engine, current_revision, migrate, schema
from ragsync.catalog.copies import ResignCounts, resign_near_dups
from ragsync.catalog.migrations import alembic_config
from ragsync.ingest import near_dup
from ragsync.model import Chunk
from tests.near_dup_legacy import legacy_signature

# --------------------------------------------------------------------- signatures


def test_the_signature_format_is_pinned() -> None:
    """A datasketch release (or a change of seed/scheme) that changes the
    digests fails here: stored signatures would silently stop matching.
    Change ``near_dup.ALGORITHM`` and add a re-signing revision then."""
    sig = near_dup.signature("The quick brown fox jumps over the lazy dog")
    assert sig.dtype == np.uint64 and sig.shape == (64,)
    assert sig[:3].tolist() == [901677000520742730, 2145251286625137793, 724629769073536607]
    assert near_dup.ALGORITHM == "datasketch-affine64-sha1-seed1-64"
    empty = near_dup.signature(" ... ")
    assert empty.tolist() == [2**64 - 1] * 64
    assert near_dup.similarity(empty, near_dup.signature("")) == 1.0


def test_a_long_document_is_hashed_in_batches_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    words = [f"w{i}" for i in range(40)]
    sh = near_dup.shingles(" ".join(words))
    assert len(sh) == 36
    whole = MinHash(num_perm=64, seed=1, scheme="affine64")
    whole.update_batch([s.encode("utf-8") for s in sh])
    monkeypatch.setattr(near_dup, "_BATCH", 5)  # 7 full batches and one of 1
    assert near_dup.signature_of_shingles(sh).tolist() == whole.hashvalues.tolist()


def test_choose_group_takes_the_most_similar_candidate_at_the_threshold() -> None:
    sig = np.arange(64, dtype=np.uint64)

    def like(matching: int) -> np.ndarray:
        other = sig.copy()
        other[matching:] += np.uint64(1000)
        return other

    assert near_dup.choose_group("d", sig, []) == "d"
    assert near_dup.choose_group("d", sig, [(like(50), "g1")]) == "d"  # 0.78 < 0.8
    assert near_dup.choose_group("d", sig, [(like(52), "g1"), (like(60), "g2")]) == "g2"
    assert near_dup.choose_group("d", sig, [(like(60), "g2"), (like(60), "g1")]) == "g1"  # tie: smallest id


# ---------------------------------------------------------------------- catalog


def _text(seed: int, words: int = 300) -> str:
    rng = random.Random(seed)
    vocabulary = [f"{a}{b}" for a in ("ta", "re", "mo", "ki", "lu") for b in ("n", "s", "x", "do", "rp", "q")]
    body = [rng.choice(vocabulary) for _ in range(words)]
    # Three paragraphs: the chunks of the document.
    return "\n\n".join(" ".join(body[i : i + words // 3]) for i in range(0, words, words // 3))


def _draft(text: str, seed: int) -> str:
    """The same text with three words replaced (exact shingle Jaccard ~0.9)."""
    rng = random.Random(seed)
    words = text.split(" ")
    for i in rng.sample(range(len(words)), 3):
        words[i] = "edited"
    return " ".join(words)


ORIGINAL = _text(1)
# doc id -> (tenant, text, signing time); the draft was signed before the original.
DOCS = {
    "d-draft": ("t1", _draft(ORIGINAL, 2), 1.0),
    "d-orig": ("t1", ORIGINAL, 2.0),
    "d-copy": ("t1", ORIGINAL + "\n\nSaved for review before the meeting.", 3.0),
    "d-other": ("t1", _text(3), 3.0),  # same signing time as d-copy: ordered by doc id
    "d-t2": ("t2", ORIGINAL, 4.0),  # the same text in another tenant
}
EXPECTED_GROUPS = {
    "d-draft": "d-draft",
    "d-orig": "d-draft",
    "d-copy": "d-draft",
    "d-other": "d-other",
    "d-t2": "d-t2",
}


def _record(cat: Catalog, doc_id: str, tenant: str) -> None:
    cat.sources.create_source(
        tenant, source_id="s1", type="object_store", uri="file:///src", if_exists="update"
    )
    cat.documents.record_fetch(
        FetchRecord(
            doc_id=doc_id,
            source_id="s1",
            tenant_id=tenant,
            source_object_id=doc_id,
            uri=f"file:///src/{doc_id}",
            size=1,
            source_version="v1",
            content_hash=f"h-{doc_id}",
            acl_id="acl1",
            canonical_doc_id=doc_id,
            mime="text/plain",
        )
    )


def _chunks(doc_id: str, tenant: str, text: str) -> list[Chunk]:
    """The paragraphs of ``text`` as chunks, listed last first and with ids
    that sort against their ordinals (the stored order must not matter)."""
    paragraphs = text.split("\n\n")
    return [
        Chunk(
            chunk_id=f"{doc_id}-{len(paragraphs) - i:02d}",
            doc_id=doc_id,
            tenant_id=tenant,
            text_hash=f"{doc_id}-th{i}",
            ordinal=i,
            heading_path=(),
            page=1,
            text=p,
            token_count=len(p.split()),
            acl_ids=("acl1",),
        )
        for i, p in reversed(list(enumerate(paragraphs)))
    ]


def _fresh_backfill(url: str) -> dict[str, tuple[list[int], str]]:
    """{doc id: (signature, group)} of signing :data:`DOCS` in their order
    into an empty catalog, as the pipeline does."""
    with Catalog.open(url) as cat:
        for doc_id, (tenant, text, _) in sorted(DOCS.items(), key=lambda kv: (kv[1][2], kv[0])):
            sig = near_dup.signature(text)
            cat.copies.set_near_dup(doc_id, tenant, sig, near_dup.band_keys(sig))
    return _stored(url)


def _stored(url: str) -> dict[str, tuple[list[int], str]]:
    engine = create_catalog_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(schema.doc_signatures)).mappings().all()
    finally:
        engine.dispose()
    assert {r["algorithm"] for r in rows} <= {near_dup.ALGORITHM}
    return {
        r["doc_id"]: (np.frombuffer(r["signature"], dtype=np.uint64).tolist(), r["near_dup_group"])
        for r in rows
    }


def _bands(url: str) -> set[tuple[str, str, str]]:
    engine = create_catalog_engine(url)
    try:
        with engine.connect() as conn:
            return {tuple(r) for r in conn.execute(select(schema.doc_bands))}  # type: ignore[misc]
    finally:
        engine.dispose()


def test_set_near_dup_groups_drafts_per_tenant(catalog_url: str, tmp_path: Path) -> None:
    assert {d: g for d, (_, g) in _fresh_backfill(catalog_url).items()} == EXPECTED_GROUPS


def test_signatures_of_another_algorithm_are_never_candidates(catalog_url: str) -> None:
    sig = near_dup.signature(ORIGINAL)
    with Catalog.open(catalog_url) as cat:
        cat.copies.set_near_dup("d-old", "t1", sig, near_dup.band_keys(sig))
        with cat.engine.begin() as conn:
            conn.execute(schema.doc_signatures.update().values(algorithm="some-older-minhash"))
        assert cat.copies.set_near_dup("d-new", "t1", sig, near_dup.band_keys(sig)) == "d-new"
        assert cat.copies.set_near_dup("d-newer", "t1", sig, near_dup.band_keys(sig)) == "d-new"


# ------------------------------------------------------------------ revision 0008


def _write_old_chunks(engine: Any, chunks: list[Any]) -> None:
    """Chunk rows as revision 0007 stores them: only the columns it has (the
    repository writes those of the head revision)."""
    from sqlalchemy import column, inspect, table

    from ragsync.catalog.chunks import chunk_row

    with engine.begin() as conn:
        have = {c["name"] for c in inspect(conn).get_columns("chunks")}
        rows = [chunk_row(c) for c in chunks]
        names = [n for n in rows[0] if n in have]
        conn.execute(
            table("chunks", *(column(n) for n in names)).insert(), [{n: r[n] for n in names} for r in rows]
        )


@pytest.fixture
def catalog_at_0007(catalog_url: str) -> Iterator[str]:
    """A catalog at revision 0007 holding :data:`DOCS` (their chunks) with
    the hand-written signatures, plus ``d-dup``: an exact copy (no chunks)
    still holding the signature it had before it became one. Groups as the
    old code made them, except ``d-other``, left in a stale group."""
    engine = create_catalog_engine(catalog_url)
    try:
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0007")
        cat = Catalog(engine, catalog_url)
        rows, bands = [], []
        for doc_id, (tenant, text, signed_at) in [*DOCS.items(), ("d-dup", ("t1", ORIGINAL, 5.0))]:
            _record(cat, doc_id, tenant)
            if doc_id == "d-dup":
                cat.copies.mark_duplicate(doc_id, "d-orig", content_hash="h-d-orig")
            else:
                _write_old_chunks(engine, _chunks(doc_id, tenant, text))
            sig = legacy_signature(text)
            group = "d-draft" if doc_id in ("d-orig", "d-copy", "d-other", "d-dup") else doc_id
            rows.append(
                {
                    "doc_id": doc_id,
                    "tenant_id": tenant,
                    "signature": sig.tobytes(),
                    "near_dup_group": group,
                    "updated_at": signed_at,
                }
            )
            bands += [{"tenant_id": tenant, "band_key": k, "doc_id": doc_id} for k in near_dup.band_keys(sig)]
        with engine.begin() as conn:
            conn.execute(schema.doc_signatures.insert(), rows)
            conn.execute(schema.doc_bands.insert(), bands)
        assert current_revision(engine) == "0007"
    finally:
        engine.dispose()
    yield catalog_url


def test_revision_0008_re_signs_old_signatures_like_a_fresh_backfill(
    catalog_at_0007: str, tmp_path: Path
) -> None:
    url = catalog_at_0007
    assert near_dup.signature(ORIGINAL).tolist() != legacy_signature(ORIGINAL).tolist()
    engine = create_catalog_engine(url)
    try:
        assert migrate(engine)[:1] == ["0008"]  # then every later revision
        with engine.connect() as conn:
            times = dict(
                conn.execute(select(schema.doc_signatures.c.doc_id, schema.doc_signatures.c.updated_at)).all()
            )
    finally:
        engine.dispose()
    migrated = _stored(url)
    fresh = _fresh_backfill(f"sqlite:///{tmp_path}/fresh.db")
    assert migrated == fresh  # signatures and groups; d-dup's signature is gone
    assert {d: g for d, (_, g) in migrated.items()} == EXPECTED_GROUPS
    for doc_id, (_, text, signed_at) in DOCS.items():
        assert migrated[doc_id][0] == near_dup.signature(text).tolist()
        assert times[doc_id] == signed_at
    assert _bands(url) == _bands(f"sqlite:///{tmp_path}/fresh.db")
    assert len(_bands(url)) == 16 * len(DOCS)  # none for d-dup


def test_re_signing_streams_in_batches_and_is_repeatable(catalog_at_0007: str) -> None:
    """Pages of 3 rows: the signing-time tie of d-copy and d-other falls on a
    page boundary; a second run finds the same signatures and groups."""
    engine = create_catalog_engine(catalog_at_0007)
    try:
        assert migrate(engine)[:1] == ["0008"]  # then every later revision
        first = _stored(catalog_at_0007)
        with engine.begin() as conn:
            assert resign_near_dups(conn, batch_size=3) == ResignCounts(signed=5, grouped=2, dropped=0)
            assert resign_near_dups(conn, batch_size=1) == ResignCounts(signed=5, grouped=2, dropped=0)
    finally:
        engine.dispose()
    assert _stored(catalog_at_0007) == first


def test_downgrading_0008_drops_every_signature(catalog_at_0007: str) -> None:
    """An older ragsync cannot read datasketch signatures: it finds none."""
    engine = create_catalog_engine(catalog_at_0007)
    try:
        assert migrate(engine)[:1] == ["0008"]  # then every later revision
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0007")
        assert current_revision(engine) == "0007"
        assert "algorithm" not in {c["name"] for c in inspect(engine).get_columns("doc_signatures")}
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(schema.doc_signatures)).scalar() == 0
            assert conn.execute(select(func.count()).select_from(schema.doc_bands)).scalar() == 0
            assert conn.execute(select(func.count()).select_from(schema.chunks)).scalar() == 16  # kept
    finally:
        engine.dispose()
