"""Structure-first chunking with the embedding model's own tokenizer."""

from __future__ import annotations

import random

import pytest

from ragsync.embedding.models import default_model, load_tokenizer
from ragsync.ingest.chunking import ChunkerConfig, chunk_elements, count_tokens
from ragsync.model import Element
from ragsync.model import ElementType as T

WORDS = [
    "policy", "travel", "expense", "manager", "approve", "receipt", "hotel", "flight", "budget", "limit",
    "quarterly", "report", "team", "office", "remote", "security", "laptop", "badge", "onboarding", "holiday",
]  # fmt: skip


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return load_tokenizer(default_model().path)


def _para(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def _doc(seed: int = 1) -> list[Element]:
    rng = random.Random(seed)
    els = [Element(T.HEADING, "Handbook", 1)]
    for s in range(3):
        els.append(Element(T.HEADING, f"Section {s}", 2))
        for _ in range(12):
            els.append(Element(T.PARAGRAPH, _para(rng, rng.randint(20, 120)), page=s + 1))
    return els


def _chunks(els: list[Element], tok, cfg: ChunkerConfig | None = None):  # type: ignore[no-untyped-def]
    return chunk_elements(els, cfg or ChunkerConfig(), tok, doc_id="d1", tenant_id="t", acl_ids=["a"])


def test_chunks_respect_size_headings_and_ids(tok) -> None:  # type: ignore[no-untyped-def]
    chunks = _chunks(_doc(), tok)
    assert len(chunks) >= 6
    assert all(c.token_count <= 400 for c in chunks)
    assert all(c.token_count == count_tokens(tok, c.text) for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert {c.heading_path for c in chunks} == {("Handbook", f"Section {s}") for s in range(3)}
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    assert [c.chunk_id for c in _chunks(_doc(), tok)] == [c.chunk_id for c in chunks]


def test_chunks_of_whole_paragraphs_do_not_repeat_text(tok) -> None:  # type: ignore[no-untyped-def]
    chunks = _chunks(_doc(), tok)
    paragraphs = [e.text for e in _doc() if e.type == T.PARAGRAPH]
    assert [p for c in chunks for p in c.text.split("\n\n")] == paragraphs


def test_editing_one_paragraph_changes_at_most_two_chunks(tok) -> None:  # type: ignore[no-untyped-def]
    els = _doc()
    before = {c.chunk_id for c in _chunks(els, tok)}
    worst = 0
    for i, el in enumerate(els):
        if el.type != T.PARAGRAPH:
            continue
        edited = list(els)
        edited[i] = Element(T.PARAGRAPH, el.text.replace("policy", "rule"), page=el.page)
        if edited[i].text == el.text:
            edited[i] = Element(T.PARAGRAPH, el.text + " Updated.", page=el.page)
        after = {c.chunk_id for c in _chunks(edited, tok)}
        worst = max(worst, len(after - before))
        assert len(before - after) <= 2
    assert 1 <= worst <= 2


def test_long_table_is_split_with_header_repeated(tok) -> None:  # type: ignore[no-untyped-def]
    rows = "\n".join(f"| item {i} | {i * 7} EUR | approved by the finance team |" for i in range(120))
    table = "| Item | Amount | Note |\n| --- | --- | --- |\n" + rows
    chunks = _chunks([Element(T.HEADING, "Costs", 1), Element(T.TABLE, table, page=2)], tok)
    assert len(chunks) >= 3
    for c in chunks:
        assert c.text.startswith("| Item | Amount | Note |\n| --- | --- | --- |\n| item ")
        assert c.token_count <= 400 and c.page == 2
    body = [ln for c in chunks for ln in c.text.split("\n")[2:]]
    assert body == rows.split("\n")


def test_small_table_stays_whole_and_alone(tok) -> None:  # type: ignore[no-untyped-def]
    table = "| a | b |\n| --- | --- |\n| 1 | 2 |"
    els = [Element(T.PARAGRAPH, "before"), Element(T.TABLE, table), Element(T.PARAGRAPH, "after")]
    assert [c.text for c in _chunks(els, tok)] == ["before", table, "after"]


def test_oversized_paragraph_is_windowed_with_overlap(tok) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    text = " ".join(_para(rng, 15) for _ in range(80))
    chunks = _chunks([Element(T.PARAGRAPH, text)], tok)
    assert len(chunks) >= 3
    assert all(c.token_count <= 400 for c in chunks)
    joined_words = set(" ".join(c.text for c in chunks).split())
    assert set(text.split()) <= joined_words
    # consecutive windows overlap by about 15 % of 400 tokens
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert " ".join(b.text.split()[:10]) in a.text


def test_repeated_text_gets_distinct_ids_and_empty_input_gives_nothing(tok) -> None:  # type: ignore[no-untyped-def]
    els = [Element(T.PARAGRAPH, "same " * 150), Element(T.PARAGRAPH, "same " * 150)]
    chunks = _chunks(els, tok, ChunkerConfig(max_tokens=160))
    assert len(chunks) == 2 and chunks[0].chunk_id != chunks[1].chunk_id
    assert _chunks([], tok) == []
    with pytest.raises(ValueError):
        ChunkerConfig(max_tokens=8)
