"""Keep the last good version: an update whose new bytes fail leaves the
previous version searchable, its status says ``stale`` with the dead letter,
and a later good version replaces it.

Real backfills (FnApiRunner, the real model, Milvus Lite, tantivy, SQLite)
over a real DOCX that is cut in half (a corrupt file), then fixed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from docx import Document

pytestmark = pytest.mark.slow
DIM = 384


def _docx(title: str, text: str) -> bytes:
    doc = Document()
    doc.add_heading(title, level=1)
    doc.add_paragraph(text)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _status(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    from cli.main import main

    capsys.readouterr()
    assert main(["status", "--home", str(home), "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_failed_update_keeps_the_last_good_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from beam_pipelines.backfill import run_backfill
    from beam_pipelines.quick import source_id_for
    from ragsync.config import Settings, open_catalog
    from ragsync.index.reconcile import reconcile
    from ragsync.query.search import hybrid_query

    src = tmp_path / "src"
    src.mkdir()
    policy = src / "policy.docx"
    policy.write_bytes(_docx("Travel policy", "Hotel nights in Oslo are capped at 210 EUR per night."))
    (src / "notes.txt").write_text("Notes from the quarterly meeting.\n\nRevenue grew by twelve percent.\n")
    home = tmp_path / "home"
    settings = Settings(home=str(home))

    def hotel_hits() -> list[str]:
        hits = hybrid_query(settings, "hotel nights Oslo capped per night", groups=["everyone"], k=5)
        return [h.text for h in hits if h.uri.endswith("policy.docx")]

    first = run_backfill(str(src), settings, show_progress=False)
    assert first.documents_indexed == 2
    assert any("210 EUR" in t for t in hotel_hits())

    # The DOCX is overwritten with a corrupt file (cut in half).
    good = policy.read_bytes()
    policy.write_bytes(good[: len(good) // 2])
    second = run_backfill(str(src), settings, show_progress=False)
    assert (second.documents_indexed, second.dead_lettered, second.chunks_deleted) == (0, 1, 0)
    assert any("210 EUR" in t for t in hotel_hits()), "the last good version must stay searchable"
    status = _status(home, capsys)
    assert status["documents"] == {"indexed": 1, "stale": 1}
    recent = status["recent_dead_letters"]
    assert [r["uri"].endswith("policy.docx") for r in recent] == [True]  # type: ignore[union-attr, index]
    cat = open_catalog(settings)
    try:
        docs = cat.documents.documents_for_source(source_id_for(str(src)))
        doc = next(d for d in docs if d.uri.endswith("policy.docx"))
        assert doc.status == "stale" and doc.error_class == recent[0]["error_class"]  # type: ignore[index]
        assert doc.chunk_count >= 1
    finally:
        cat.close()

    # A re-run with the same corrupt file changes nothing and adds no second dead letter.
    third = run_backfill(str(src), settings, show_progress=False)
    assert (third.documents_indexed, third.chunks_written) == (0, 0)
    assert _status(home, capsys)["dead_letters"] == status["dead_letters"]
    assert any("210 EUR" in t for t in hotel_hits())

    # A later good version replaces it.
    fixed = _docx("Travel policy", "Hotel nights in Oslo are capped at 240 EUR per night since May.")
    policy.write_bytes(fixed)
    fourth = run_backfill(str(src), settings, show_progress=False)
    assert fourth.documents_indexed == 1
    texts = hotel_hits()
    assert any("240 EUR" in t for t in texts) and not any("210 EUR" in t for t in texts)
    assert _status(home, capsys)["documents"] == {"indexed": 2}
    assert reconcile(settings, DIM).ok


def test_failed_update_by_event_keeps_the_last_good_version(tmp_path: Path) -> None:
    """The same through change events (streaming pipeline, catalog queue)."""

    from connectors.sources import register_source
    from ragsync import ids
    from ragsync.config import Settings, open_catalog
    from ragsync.embedding.models import default_model
    from ragsync.index.versions import prepare_stores
    from ragsync.query.search import hybrid_query
    from tests.queue_events import apply_events, change_event

    content = tmp_path / "content"
    content.mkdir()
    policy = content / "policy.docx"
    settings = Settings(home=str(tmp_path / "home"), event_lease_s=2.0)
    prepare_stores(settings, default_model())
    register_source(settings, "wiki", "acme", "wiki", str(content))
    doc_id = ids.doc_id("acme", "wiki", "policy")

    def apply(version: int, data: bytes) -> Any:
        policy.write_bytes(data)
        return apply_events(
            settings, [change_event("wiki", "policy", "upsert", version, ["everyone"], str(policy))]
        )

    def texts() -> list[str]:
        hits = hybrid_query(settings, "hotel nights Oslo capped", groups=["everyone"], tenant_id="acme", k=5)
        return [h.text for h in hits]

    def row() -> Any:
        cat = open_catalog(settings)
        try:
            return cat.documents.get_document(doc_id), cat.dead_letters.dead_letter_counts()
        finally:
            cat.close()

    good = _docx("Travel policy", "Hotel nights in Oslo are capped at 210 EUR per night.")
    assert apply(1, good).documents_indexed == 1
    s = apply(2, good[: len(good) // 2])
    assert (s.documents_indexed, s.dead_lettered) == (0, 1)
    assert any("210 EUR" in t for t in texts())
    doc, dead = row()
    # The failed v2 was never written: the live version keeps its stamp.
    assert (doc.status, doc.source_version, doc.indexed_version) == ("stale", "1", "1")
    assert sum(dead.values()) == 1 and doc.error_class in dead

    s = apply(3, _docx("Travel policy", "Hotel nights in Oslo are capped at 240 EUR per night since May."))
    assert s.documents_indexed == 1
    assert any("240 EUR" in t for t in texts()) and not any("210 EUR" in t for t in texts())
    doc, _ = row()
    assert (doc.status, doc.error_class, doc.indexed_version) == ("indexed", None, "3")
