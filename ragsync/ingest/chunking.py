"""Structure-first chunking: a parsed document's elements into chunks.

Input: a document's elements in reading order. Output: chunks that
- never cross a heading (the heading path is kept with each chunk),
- pack whole paragraphs and list items up to ``max_tokens`` tokens counted by
  the embedding model's own tokenizer,
- end early at content-defined points, so an edit to one paragraph changes
  the chunk holding it (and at most the next one, through overlap) instead of
  shifting every later boundary the way fixed windows do,
- keep a table whole, or split a long table into pieces that each repeat the
  header row,
- split a paragraph longer than ``max_tokens`` into windows that overlap by
  15 % of ``max_tokens``. Chunks made of whole paragraphs do not overlap:
  they already end at a structural boundary, and an overlap there would make
  every edit of a chunk's last paragraph change the next chunk too.

Everything here is a pure function of (elements, config, tokenizer).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ragsync import ids
from ragsync.model import Box, Chunk, Element, ElementType, element_offsets

CHUNKER_VERSION = "c2"
"""c2: the document's identity (``Chunk.context``) is embedded and indexed with
every chunk and hashed into its text hash (so the embedding cache never serves
a vector of the text without it); chunks carry page ranges, character offsets
and line boxes; paragraphs known as a source's boilerplate are left out."""


class Tokenizer(Protocol):
    """The subset of ``tokenizers.Tokenizer`` the chunker uses."""

    def encode(self, sequence: str, add_special_tokens: bool = True) -> object: ...


@dataclass(frozen=True)
class ChunkerConfig:
    """Chunk size settings.

    Attributes:
        max_tokens: upper bound on a chunk's tokens (model tokenizer).
        overlap_ratio: share of ``max_tokens`` repeated from the previous
            piece when a paragraph or section is split by size.
        min_pieces: a chunk may end at a content-defined boundary once it
            holds this many paragraphs (a count, not a size, so that an edit
            that changes a paragraph's length moves no later boundary).
        boundary_modulus: 1 in this many paragraphs is a content-defined
            boundary (chosen by the paragraph's text hash).
    """

    max_tokens: int = 400
    overlap_ratio: float = 0.15
    min_pieces: int = 2
    boundary_modulus: int = 3

    def __post_init__(self) -> None:
        if self.max_tokens < 16:
            raise ValueError("max_tokens must be >= 16")
        if not 0 <= self.overlap_ratio < 0.5:
            raise ValueError("overlap_ratio must be in [0, 0.5)")
        if self.min_pieces < 1:
            raise ValueError("min_pieces must be >= 1")
        if self.boundary_modulus < 1:
            raise ValueError("boundary_modulus must be >= 1")

    @property
    def overlap_tokens(self) -> int:
        return int(self.max_tokens * self.overlap_ratio)

    @property
    def config_id(self) -> str:
        """Part of every chunk id: a new config is a new id space."""
        fields = (
            CHUNKER_VERSION,
            self.max_tokens,
            self.overlap_ratio,
            self.min_pieces,
            self.boundary_modulus,
        )
        raw = "|".join(str(f) for f in fields)
        return CHUNKER_VERSION + "-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class _Piece:
    text: str
    tokens: int
    page: int
    is_table: bool = False
    confidence: float | None = None
    start: int = 0  # character offsets of the piece in the document's text
    end: int = 0
    boxes: tuple[Box, ...] = ()


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """Tokens of ``text`` without special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


def _token_windows(tokenizer: Tokenizer, text: str, max_tokens: int, overlap: int) -> list[str]:
    """Cut one long text into windows of at most ``max_tokens`` tokens.

    Cuts prefer sentence ends and fall back to token offsets; each window
    after the first starts ``overlap`` tokens before the previous one ended.
    """
    return [piece for piece, _, _ in _token_spans(tokenizer, text, max_tokens, overlap)]


def _token_spans(
    tokenizer: Tokenizer, text: str, max_tokens: int, overlap: int
) -> list[tuple[str, int, int]]:
    """:func:`_token_windows` with each window's character span in ``text``:
    ``(window, start, end)``, ``text[start:end] == window``."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    offsets = enc.offsets  # type: ignore[attr-defined]
    n = len(offsets)
    if n <= max_tokens:
        return [(text, 0, len(text))]
    out: list[tuple[str, int, int]] = []
    start = 0
    while start < n:
        end = min(start + max_tokens, n)
        if end < n:
            # Prefer to end after a sentence terminator in the last third.
            for j in range(end - 1, start + (2 * max_tokens) // 3, -1):
                token_text = text[offsets[j][0] : offsets[j][1]]
                if token_text in (".", "!", "?", ";"):
                    end = j + 1
                    break
        char_start = offsets[start][0]
        char_end = offsets[end - 1][1] if end < n else len(text)
        raw = text[char_start:char_end]
        piece = raw.strip()
        if piece:
            lead = char_start + len(raw) - len(raw.lstrip())
            out.append((piece, lead, lead + len(piece)))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return out


def _span_boxes(element: Element, start: int, end: int) -> tuple[Box, ...]:
    """The element's line boxes that cover ``element.text[start:end]``: the
    lines are taken as sharing the text evenly (a window of a long paragraph
    gets the lines it falls on, give or take one)."""
    boxes = element.boxes
    if len(boxes) <= 1 or (start <= 0 and end >= len(element.text.strip())):
        return boxes
    per_line = max(len(element.text), 1) / len(boxes)
    return tuple(b for i, b in enumerate(boxes) if i * per_line < end and (i + 1) * per_line > start)


def _table_pieces(tokenizer: Tokenizer, element: Element, max_tokens: int, base: int = 0) -> list[_Piece]:
    """A table as one piece, or row groups that each repeat the header rows.

    ``base`` is where the element starts in the document's text; a piece's
    span runs from its first to its last row there (the header it repeats is
    not part of the span, except in the first piece)."""
    tokens = count_tokens(tokenizer, element.text)

    def piece(text: str, n_tokens: int, start: int, end: int) -> _Piece:
        return _Piece(text, n_tokens, element.page, True, None, base + start, base + end, element.boxes)

    if tokens <= max_tokens:
        return [piece(element.text, tokens, 0, len(element.text))]
    lines, spans = _rows_with_spans(element.text)
    header: list[str] = lines[:1]
    body, body_spans = lines[1:], spans[1:]
    if body and re.fullmatch(r"\|?\s*:?-{2,}.*", body[0].strip()):
        header.append(body[0])
        body, body_spans = body[1:], body_spans[1:]
    header_text = "\n".join(header)
    header_tokens = count_tokens(tokenizer, header_text)
    pieces: list[_Piece] = []
    rows: list[str] = []
    row_spans: list[tuple[int, int]] = []
    row_tokens = header_tokens

    def add(text: str, n_tokens: int, first: int, last: int) -> None:
        pieces.append(piece(text, n_tokens, spans[0][0] if not pieces else first, last))

    for row, (r0, r1) in zip(body, body_spans, strict=True):
        t = count_tokens(tokenizer, row) + 1
        if rows and row_tokens + t > max_tokens:
            add(header_text + "\n" + "\n".join(rows), row_tokens, row_spans[0][0], row_spans[-1][1])
            rows, row_spans, row_tokens = [], [], header_tokens
        if header_tokens + t > max_tokens:
            # One row alone is too long: cut it by tokens, header on each.
            budget = max(16, max_tokens - header_tokens)
            for w, w0, w1 in _token_spans(tokenizer, row, budget, 0):
                wt = count_tokens(tokenizer, w)
                add(header_text + "\n" + w, header_tokens + wt, r0 + w0, r0 + w1)
            continue
        rows.append(row)
        row_spans.append((r0, r1))
        row_tokens += t
    if rows:
        add(header_text + "\n" + "\n".join(rows), row_tokens, row_spans[0][0], row_spans[-1][1])
    return pieces


def _rows_with_spans(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """A table's non-blank lines and each line's ``(start, end)`` in ``text``."""
    lines: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for line in text.split("\n"):
        if line.strip():
            lines.append(line)
            spans.append((at, at + len(line)))
        at += len(line) + 1
    return lines, spans


def _is_soft_boundary(text: str, modulus: int) -> bool:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % modulus == 0


def _leading_words(text: str, n: int = 6) -> str:
    return " ".join(text.split()[:n]).lower()


def _pack_section(pieces: list[_Piece], cfg: ChunkerConfig) -> list[list[_Piece]]:
    """Group a section's pieces into chunks (tables alone, prose packed).

    A chunk ends when the next piece does not fit, or at a content-defined
    boundary: before a piece whose leading words hash to 0 modulo
    ``cfg.boundary_modulus`` once the chunk holds ``min_pieces`` pieces.
    Keying the boundary on the next piece's first words (not on sizes alone)
    means an edit inside one paragraph moves no boundary after the next one,
    so it changes one chunk, at most two.
    """
    groups: list[list[_Piece]] = []
    current: list[_Piece] = []
    tokens = 0
    for piece in pieces:
        if piece.is_table:
            if current:
                groups.append(current)
            groups.append([piece])
            current, tokens = [], 0
            continue
        soft = len(current) >= cfg.min_pieces and _is_soft_boundary(
            _leading_words(piece.text), cfg.boundary_modulus
        )
        if current and (soft or tokens + piece.tokens + 1 > cfg.max_tokens):
            groups.append(current)
            current, tokens = [], 0
        current.append(piece)
        tokens += piece.tokens + 1
    if current:
        groups.append(current)
    return groups


def _min_confidence(group: Sequence[_Piece]) -> float | None:
    """Lowest OCR confidence among a chunk's pieces, None when none was OCR'd."""
    confs = [p.confidence for p in group if p.confidence is not None]
    return min(confs) if confs else None


def paragraph_hash(text: str) -> str:
    """The key a paragraph is counted under across a source's documents
    (boilerplate): its words lower-cased, whitespace collapsed, hashed. The
    heading path and the document's identity are not part of it."""
    return hashlib.sha256(" ".join(text.lower().split()).encode("utf-8")).hexdigest()[:32]


MIN_BOILERPLATE_CHARS = 40
"""Paragraphs shorter than this are never counted as boilerplate (a "Thanks,"
or a date line repeats everywhere and costs nothing)."""


def countable_paragraphs(elements: Sequence[Element]) -> list[str]:
    """The hashes of a document's paragraphs that count towards boilerplate
    (paragraphs and list items of at least :data:`MIN_BOILERPLATE_CHARS`
    characters), each once, in reading order."""
    out: dict[str, None] = {}
    for el in elements:
        if (
            el.type in (ElementType.PARAGRAPH, ElementType.LIST_ITEM)
            and len(el.text.strip()) >= MIN_BOILERPLATE_CHARS
        ):
            out.setdefault(paragraph_hash(el.text), None)
    return list(out)


def _text_pieces(el: Element, text: str, base: int, cfg: ChunkerConfig, tokenizer: Tokenizer) -> list[_Piece]:
    """A paragraph or list item as one piece, or overlapping windows when it
    is longer than ``cfg.max_tokens``. ``text`` is the element's stripped
    text (a list item with ``- `` before it: the marker is not in the
    document's text), ``base`` where the stripped text starts there."""
    marker = len(text) - len(el.text.strip())
    out = []
    for window, w0, w1 in _token_spans(tokenizer, text, cfg.max_tokens, cfg.overlap_tokens):
        a, b = max(w0 - marker, 0), max(w1 - marker, 0)
        tokens = count_tokens(tokenizer, window)
        out.append(
            _Piece(window, tokens, el.page, False, el.confidence, base + a, base + b, _span_boxes(el, a, b))
        )
    return out


def _sections(
    elements: Sequence[Element],
    cfg: ChunkerConfig,
    tokenizer: Tokenizer,
    boilerplate: frozenset[str] = frozenset(),
) -> list[tuple[tuple[str, ...], list[_Piece]]]:
    """The document as sections: (heading path, pieces) in reading order. A
    heading closes the section before it; a table gives its pieces (whole,
    or split with the header row repeated); a paragraph longer than
    ``cfg.max_tokens`` is cut into overlapping windows; a paragraph whose
    :func:`paragraph_hash` is in ``boilerplate`` is left out."""
    heading_stack: list[tuple[int, str]] = []
    sections: list[tuple[tuple[str, ...], list[_Piece]]] = []
    pieces: list[_Piece] = []
    path: tuple[str, ...] = ()

    def close_section() -> None:
        if pieces:
            sections.append((path, list(pieces)))
            pieces.clear()

    for el, at in zip(elements, element_offsets(elements), strict=True):
        text = el.text.strip()
        if not text:
            continue
        base = at + len(el.text) - len(el.text.lstrip())
        if el.type == ElementType.HEADING:
            close_section()
            level = max(1, el.level or 1)
            while heading_stack and heading_stack[-1][0] >= level:
                heading_stack.pop()
            heading_stack.append((level, " ".join(text.split())))
            path = tuple(h for _, h in heading_stack)
        elif el.type == ElementType.TABLE:
            pieces.extend(_table_pieces(tokenizer, el, cfg.max_tokens, at))
        elif not (
            boilerplate and len(text) >= MIN_BOILERPLATE_CHARS and paragraph_hash(el.text) in boilerplate
        ):
            marked = "- " + text if el.type == ElementType.LIST_ITEM else text
            pieces.extend(_text_pieces(el, marked, base, cfg, tokenizer))
    close_section()
    return sections


def chunk_elements(
    elements: Sequence[Element],
    cfg: ChunkerConfig,
    tokenizer: Tokenizer,
    *,
    doc_id: str,
    tenant_id: str,
    acl_ids: Sequence[str],
    context: str = "",
    boilerplate: frozenset[str] = frozenset(),
) -> list[Chunk]:
    """Turn a document's elements into chunks with deterministic ids.

    Args:
        elements: parsed elements in reading order.
        cfg: chunk size settings.
        tokenizer: the embedding model's tokenizer.
        doc_id: the canonical document id (part of every chunk id).
        tenant_id: owner tenant.
        acl_ids: ACL ids every chunk carries.
        context: the document's identity (``ragsync.ingest.context``), put
            on every chunk and hashed into its text hash.
        boilerplate: :func:`paragraph_hash` keys of paragraphs repeated
            across the source's documents: left out of the chunks.

    Returns:
        Chunks in document order with ``ordinal`` 0..n-1, each with its page
        range, its character span in :func:`ragsync.model.document_text` and
        its line boxes. Two chunks with the same text in one document get
        distinct ids (an occurrence counter is part of the hashed text). An
        empty element list gives [].
    """
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    acl = tuple(sorted(set(acl_ids)))
    for heading_path, section_pieces in _sections(elements, cfg, tokenizer, boilerplate):
        for group in _pack_section(section_pieces, cfg):
            text = "\n\n".join(p.text for p in group)
            keyed = context + "\x1e" + " > ".join(heading_path) + "\x1e" + text
            occurrence = seen.get(keyed, 0)
            seen[keyed] = occurrence + 1
            th = ids.text_hash(keyed if occurrence == 0 else f"{keyed}\x1e{occurrence}")
            chunks.append(
                Chunk(
                    chunk_id=ids.chunk_id(doc_id, cfg.config_id, th),
                    doc_id=doc_id,
                    tenant_id=tenant_id,
                    text_hash=th,
                    ordinal=len(chunks),
                    heading_path=heading_path,
                    page=group[0].page,
                    text=text,
                    token_count=count_tokens(tokenizer, text),
                    acl_ids=acl,
                    ocr_confidence=_min_confidence(group),
                    page_end=max(p.page for p in group),
                    char_start=min(p.start for p in group),
                    char_end=max(p.end for p in group),
                    boxes=tuple(b for p in group for b in p.boxes),
                    context=context,
                )
            )
    return chunks
