"""After fusion: boilerplate rules and demotion, the rerankers, the document's identity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragsync.errors import ConfigurationError
from ragsync.ingest.boilerplate import BoilerplateRule, boilerplate_of, boilerplate_share
from ragsync.ingest.chunking import paragraph_hash
from ragsync.ingest.context import document_context
from ragsync.model import Element
from ragsync.model import ElementType as T
from ragsync.query.ranking import demote_boilerplate, rerank
from ragsync.query.rerank import CrossEncoderReranker, WindowReranker, windows
from ragsync.query.search import QueryResult

DISCLAIMER = "This memo is confidential and intended only for the named recipients of the firm."


def test_boilerplate_rule_counts_a_share_of_the_source() -> None:
    rule = BoilerplateRule(share=0.2, min_docs=50)
    assert rule.is_boilerplate(11, 11)  # eleven memos of eleven
    assert not rule.is_boilerplate(2, 2)  # two documents sharing a paragraph are not boilerplate
    assert rule.is_boilerplate(3, 15) and not rule.is_boilerplate(3, 16)  # 20 % of the source
    assert rule.is_boilerplate(50, 1_000_000)  # a large source: the count alone
    assert not rule.is_boilerplate(49, 1_000_000)
    assert not BoilerplateRule(min_docs=0).is_boilerplate(11, 11)  # off
    found = boilerplate_of(["a", "b", "c"], {"a": 10, "b": 1}, 11, rule, plus=1)
    assert found == frozenset({"a"})


def _hit(i: int, text: str, score: float, source: str = "s") -> QueryResult:
    return QueryResult(f"d{i}", f"c{i}", f"/docs/m{i}.md", [], 0, score, text, source_id=source)


def test_boilerplate_is_shown_once_and_its_copies_rank_below_unique_text() -> None:
    bp = frozenset({paragraph_hash(DISCLAIMER)})
    share, main = boilerplate_share(f"Parking closes in May for repairs.\n\n{DISCLAIMER}", bp)
    assert 0.6 < share < 0.8 and main == paragraph_hash(DISCLAIMER)
    hits = [
        _hit(1, f"Parking closes in May for repairs.\n\n{DISCLAIMER}", 0.030),
        _hit(2, f"The canteen serves lunch on Tuesdays.\n\n{DISCLAIMER}", 0.029),
        _hit(3, DISCLAIMER, 0.028),  # a chunk of the disclaimer alone
        _hit(4, "Bicycle racks open behind building C.", 0.020),
        _hit(5, f"Lockers are emptied on Fridays.\n\n{DISCLAIMER}", 0.015, source="other"),
    ]
    out = demote_boilerplate(hits, {"s": bp})
    assert [h.chunk_id for h in out] == ["c1", "c4", "c5", "c2"]  # c3 has nothing of its own: dropped
    first, _, other, second = out
    assert first.text == hits[0].text and first.score == 0.030 and first.boilerplate > 0.6
    assert second.text == "The canteen serves lunch on Tuesdays." and second.source_text == hits[1].text
    assert second.score < 0.029 * 0.4
    assert other.text == hits[4].text and other.score == 0.015  # another source: not its boilerplate
    assert demote_boilerplate(hits, {}) == hits


def test_windows_keep_whole_sentences() -> None:
    text = " ".join(f"Sentence number {i} has exactly seven words." for i in range(30))
    out = windows(text, words=20, limit=5)
    assert len(out) == 5 and all(w.endswith(".") for w in out)
    assert out[0].startswith("Sentence number 0 ") and len(out[0].split()) <= 21
    assert windows("   ") == []


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    from ragsync.embedding.models import default_model, model_for

    return model_for(replace(default_model(), backend="onnx-int8"))


def test_the_window_reranker_finds_the_sentence_buried_in_a_long_chunk(model) -> None:  # type: ignore[no-untyped-def]
    filler = " ".join(
        f"The group reviewed its {w} policy and found it in line with the previous year's practice."
        for w in ("travel", "pension", "hiring", "supplier", "privacy", "vehicle", "safety", "training")
    )
    buried = (
        filler + " Freight revenue grew to 412 million euros as the Rotterdam terminal doubled its capacity."
    )
    general = "Our freight business moves goods by road, rail and sea for customers across Europe."
    query = "How much did freight revenue grow at Rotterdam?"
    reranker = WindowReranker(model)
    scores = reranker.scores(
        query, [("Harbor Logistics | 2022", "Operating review", general), ("", "", buried)]
    )
    assert scores[1] > scores[0]
    hits = [_hit(1, general, 0.032), _hit(2, buried, 0.030), _hit(3, "Unrelated canteen news.", 0.010)]
    out = rerank(reranker, query, hits, weight=0.5)
    assert [h.chunk_id for h in out][:2] == ["c2", "c1"]
    assert out[0].rerank_score == pytest.approx(scores[1], abs=1e-5)
    assert rerank(reranker, query, hits, weight=0.0) == hits


def test_a_cross_encoder_loads_from_its_directory_only(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ragsync.embedding.models import default_model

    src = default_model().path
    AutoModelForSequenceClassification.from_pretrained(src, num_labels=1).save_pretrained(tmp_path / "ce")
    AutoTokenizer.from_pretrained(src).save_pretrained(tmp_path / "ce")
    reranker = CrossEncoderReranker(str(tmp_path / "ce"))
    scores = reranker.scores("freight revenue", [("", "", "Freight revenue grew."), ("a", "b", "Lunch.")])
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)
    with pytest.raises(ConfigurationError, match="no model"):
        CrossEncoderReranker(str(tmp_path / "missing"))


def test_document_identity_from_a_cover_page() -> None:
    els = [
        Element(T.HEADING, "Annual Report 2022", 1, page=1),
        Element(T.PARAGRAPH, "Harbor Logistics Group plc", page=1),
        Element(T.PARAGRAPH, "Consolidated statements for the fiscal year ended December 31, 2022.", page=1),
        Element(T.HEADING, "Cash flows", 2, page=7),
    ]
    ctx = document_context(els, {"title": "Microsoft Word - AR22_final.docx"}, "filings/HARBOR_2022_AR.pdf")
    assert ctx == (
        "Annual Report 2022 | Harbor Logistics Group plc | fiscal year ended December 31, 2022 "
        "| HARBOR 2022 AR"
    )
    assert document_context(els, {"title": "Harbor annual report"}, "pages/1234").startswith(
        "Harbor annual report | "
    )
    assert document_context([Element(T.PARAGRAPH, "lunch menu")], {}, "a1b2c3d4e5f6a7b8c9d0.md") == ""
    quarter = [Element(T.PARAGRAPH, "Acme Corporation quarterly report Q3 2021 for investors")]
    assert document_context(quarter, {"author": "jdoe"}, "") == "Acme Corporation | Q3 2021"
