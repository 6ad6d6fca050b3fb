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
from ragsync.model import Chunk, Element, ElementType

CHUNKER_VERSION = "c1"


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


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """Tokens of ``text`` without special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


def _token_windows(tokenizer: Tokenizer, text: str, max_tokens: int, overlap: int) -> list[str]:
    """Cut one long text into windows of at most ``max_tokens`` tokens.

    Cuts prefer sentence ends and fall back to token offsets; each window
    after the first starts ``overlap`` tokens before the previous one ended.
    """
    enc = tokenizer.encode(text, add_special_tokens=False)
    offsets = enc.offsets  # type: ignore[attr-defined]
    n = len(offsets)
    if n <= max_tokens:
        return [text]
    out: list[str] = []
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
        piece = text[char_start:char_end].strip()
        if piece:
            out.append(piece)
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return out


def _table_pieces(tokenizer: Tokenizer, element: Element, max_tokens: int) -> list[_Piece]:
    """A table as one piece, or row groups that each repeat the header rows."""
    tokens = count_tokens(tokenizer, element.text)
    if tokens <= max_tokens:
        return [_Piece(element.text, tokens, element.page, is_table=True)]
    lines = [ln for ln in element.text.split("\n") if ln.strip()]
    header: list[str] = lines[:1]
    body = lines[1:]
    if body and re.fullmatch(r"\|?\s*:?-{2,}.*", body[0].strip()):
        header.append(body[0])
        body = body[1:]
    header_text = "\n".join(header)
    header_tokens = count_tokens(tokenizer, header_text)
    pieces: list[_Piece] = []
    rows: list[str] = []
    row_tokens = header_tokens
    for row in body:
        t = count_tokens(tokenizer, row) + 1
        if rows and row_tokens + t > max_tokens:
            text = header_text + "\n" + "\n".join(rows)
            pieces.append(_Piece(text, row_tokens, element.page, is_table=True))
            rows, row_tokens = [], header_tokens
        if header_tokens + t > max_tokens:
            # One row alone is too long: cut it by tokens, header on each.
            budget = max(16, max_tokens - header_tokens)
            for w in _token_windows(tokenizer, row, budget, 0):
                wt = count_tokens(tokenizer, w)
                pieces.append(_Piece(header_text + "\n" + w, header_tokens + wt, element.page, True))
            continue
        rows.append(row)
        row_tokens += t
    if rows:
        pieces.append(_Piece(header_text + "\n" + "\n".join(rows), row_tokens, element.page, True))
    return pieces


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


def _sections(
    elements: Sequence[Element], cfg: ChunkerConfig, tokenizer: Tokenizer
) -> list[tuple[tuple[str, ...], list[_Piece]]]:
    """The document as sections: (heading path, pieces) in reading order. A
    heading closes the section before it; a table gives its pieces (whole,
    or split with the header row repeated); a paragraph longer than
    ``cfg.max_tokens`` is cut into overlapping windows."""
    heading_stack: list[tuple[int, str]] = []
    sections: list[tuple[tuple[str, ...], list[_Piece]]] = []
    pieces: list[_Piece] = []
    path: tuple[str, ...] = ()
    overlap = cfg.overlap_tokens

    def close_section() -> None:
        if pieces:
            sections.append((path, list(pieces)))
            pieces.clear()

    for el in elements:
        text = el.text.strip()
        if not text:
            continue
        if el.type == ElementType.HEADING:
            close_section()
            level = max(1, el.level or 1)
            while heading_stack and heading_stack[-1][0] >= level:
                heading_stack.pop()
            heading_stack.append((level, " ".join(text.split())))
            path = tuple(h for _, h in heading_stack)
            continue
        if el.type == ElementType.TABLE:
            pieces.extend(_table_pieces(tokenizer, el, cfg.max_tokens))
            continue
        if el.type == ElementType.LIST_ITEM:
            text = "- " + text
        tokens = count_tokens(tokenizer, text)
        if tokens <= cfg.max_tokens:
            pieces.append(_Piece(text, tokens, el.page, confidence=el.confidence))
        else:
            for window in _token_windows(tokenizer, text, cfg.max_tokens, overlap):
                pieces.append(
                    _Piece(window, count_tokens(tokenizer, window), el.page, confidence=el.confidence)
                )
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
) -> list[Chunk]:
    """Turn a document's elements into chunks with deterministic ids.

    Args:
        elements: parsed elements in reading order.
        cfg: chunk size settings.
        tokenizer: the embedding model's tokenizer.
        doc_id: the canonical document id (part of every chunk id).
        tenant_id: owner tenant.
        acl_ids: ACL ids every chunk carries.

    Returns:
        Chunks in document order with ``ordinal`` 0..n-1. Two chunks with the
        same text in one document get distinct ids (an occurrence counter is
        part of the hashed text). An empty element list gives [].
    """
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    acl = tuple(sorted(set(acl_ids)))
    for heading_path, section_pieces in _sections(elements, cfg, tokenizer):
        for group in _pack_section(section_pieces, cfg):
            text = "\n\n".join(p.text for p in group)
            keyed = " > ".join(heading_path) + "\x1e" + text
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
                )
            )
    return chunks
