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


# -- citations: page ranges, offsets into the document's text, line boxes ---------------------------


def _paged_doc() -> list[Element]:
    rng = random.Random(7)
    els = [Element(T.HEADING, "Annual report", 1, page=1)]
    for page in range(1, 6):
        for line in range(3):
            text = _para(rng, rng.randint(30, 90))
            boxes = tuple((page, 0.1, 0.1 + 0.05 * i, 0.9, 0.14 + 0.05 * i) for i in range(line + 1))
            els.append(Element(T.PARAGRAPH, text, page=page, boxes=boxes))
    long_text = " ".join(_para(rng, 40) for _ in range(30))
    long_boxes = tuple((6, 0.1, 0.02 * i, 0.9, 0.02 * i + 0.015) for i in range(40))
    els.append(Element(T.PARAGRAPH, long_text, page=6, boxes=long_boxes))
    els.append(
        Element(
            T.TABLE,
            "| Item | Amount |\n| --- | --- |\n| Rent | 12 |",
            page=7,
            boxes=((7, 0.1, 0.5, 0.9, 0.6),),
        )
    )
    return els


def test_chunk_spans_index_the_document_text(tok) -> None:  # type: ignore[no-untyped-def]
    from ragsync.model import document_text

    els = _paged_doc()
    text = document_text(els)
    chunks = _chunks(els, tok)
    assert len(chunks) >= 5
    for c in chunks:
        span = text[c.char_start : c.char_end]
        # every piece of the chunk lies inside its span, the first at its start
        pieces = c.text.split("\n\n") if not c.text.startswith("|") else [c.text]
        assert span.startswith(pieces[0][:40]), (c.ordinal, span[:60], pieces[0][:60])
        for p in pieces:
            assert p[:40] in span
        assert c.char_end - c.char_start <= len(c.text) + 4 * len(pieces)
    starts = [c.char_start for c in chunks]
    assert starts == sorted(starts)


def test_chunk_page_range_and_boxes_come_from_their_elements(tok) -> None:  # type: ignore[no-untyped-def]
    els = _paged_doc()
    chunks = _chunks(els, tok)
    for c in chunks:
        assert 1 <= c.page <= c.page_end <= 7
        assert {b[0] for b in c.boxes} <= set(range(c.page, c.page_end + 1))
        assert c.boxes, c.ordinal
    multi = [c for c in chunks if c.page_end > c.page]
    assert multi, "paragraphs of two pages packed together give a range"
    windows = [c for c in chunks if c.page == 6]
    assert len(windows) >= 2
    # each window of the long paragraph gets the lines it falls on, not all 40
    assert all(0 < len(c.boxes) < 40 for c in windows)
    assert windows[0].boxes[0] == els[-2].boxes[0] and windows[-1].boxes[-1] == els[-2].boxes[-1]
    (table,) = [c for c in chunks if c.page == 7]
    assert table.boxes == ((7, 0.1, 0.5, 0.9, 0.6),)


def test_split_table_pieces_span_their_rows(tok) -> None:  # type: ignore[no-untyped-def]
    from ragsync.model import document_text

    rows = "\n".join(f"| item {i} | {i * 7} EUR | approved by the finance team |" for i in range(120))
    table = "| Item | Amount | Note |\n| --- | --- | --- |\n" + rows
    els = [Element(T.HEADING, "Costs", 1), Element(T.TABLE, table, page=2)]
    text = document_text(els)
    chunks = _chunks(els, tok)
    assert len(chunks) > 2
    assert text[chunks[0].char_start :].startswith("| Item | Amount")
    for c in chunks[1:]:
        first_row = c.text.split("\n")[2]
        last_row = c.text.split("\n")[-1]
        assert text[c.char_start : c.char_end].startswith(first_row)
        assert text[c.char_start : c.char_end].endswith(last_row)


def test_citation_fields_survive_the_json_round_trip(tok) -> None:  # type: ignore[no-untyped-def]
    from ragsync.model import Chunk

    for c in _chunks(_paged_doc(), tok):
        back = Chunk.from_json(c.to_json())
        assert back == c
    el = _paged_doc()[2]
    assert Element.from_json(el.to_json()) == el
    plain = Element(T.PARAGRAPH, "x")
    assert "boxes" not in plain.to_json()


def test_context_is_embedded_indexed_and_hashed(tok) -> None:  # type: ignore[no-untyped-def]
    els = _doc()
    plain = _chunks(els, tok)
    ctx = chunk_elements(
        els,
        ChunkerConfig(),
        tok,
        doc_id="d1",
        tenant_id="t",
        acl_ids=["a"],
        context="Acme Corp | 2022 annual report",
    )
    assert [c.text for c in ctx] == [c.text for c in plain]
    assert all(c.embedding_text().startswith("Acme Corp | 2022 annual report\nHandbook > ") for c in ctx)
    assert not {c.text_hash for c in ctx} & {c.text_hash for c in plain}
    assert not {c.chunk_id for c in ctx} & {c.chunk_id for c in plain}


def test_boilerplate_paragraphs_are_left_out(tok) -> None:  # type: ignore[no-untyped-def]
    from ragsync.ingest.chunking import countable_paragraphs, paragraph_hash

    disclaimer = "This memo is confidential and intended only for the named recipients of this firm."
    els = [
        Element(T.HEADING, "Memo", 1),
        Element(T.PARAGRAPH, "The garage closes in May for repairs of the second floor."),
        Element(T.PARAGRAPH, disclaimer),
        Element(T.PARAGRAPH, "Short."),
    ]
    assert countable_paragraphs(els) == [
        paragraph_hash("The garage closes in May for repairs of the second floor."),
        paragraph_hash(disclaimer),
    ]
    assert paragraph_hash(
        "  THIS memo is confidential and intended only  for the named recipients of this firm."
    ) == (paragraph_hash(disclaimer))
    kept = chunk_elements(
        els,
        ChunkerConfig(),
        tok,
        doc_id="d",
        tenant_id="t",
        acl_ids=["a"],
        boilerplate=frozenset({paragraph_hash(disclaimer)}),
    )
    assert "confidential" not in " ".join(c.text for c in kept)
    assert "garage" in " ".join(c.text for c in kept)
    assert "confidential" in " ".join(c.text for c in _chunks(els, tok))
