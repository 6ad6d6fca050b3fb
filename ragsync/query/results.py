"""A query's hit: what ``hybrid_query`` returns and the ranking after fusion reorders."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class QueryResult:
    """One hit, best first in a list: the chunk, its document, its citation (page range, span in the
    document's text, line boxes), the document's identity and the scores after fusion."""

    doc_id: str
    chunk_id: str
    uri: str
    heading_path: list[str]
    page: int
    score: float
    text: str
    parent_doc_id: str | None = None  # a child document's container (e-mail, archive)
    source_id: str = ""
    mime: str = ""
    modified_at: float | None = None  # see document_modified_at
    parent_uri: str | None = None  # the container's link, when the reader may read it
    # Citation (ragsync.model.Chunk): page range, span in the document's text, line boxes.
    page_end: int = 0
    char_start: int = 0
    char_end: int = 0
    boxes: list[list[float]] = field(default_factory=list)
    boilerplate: float = 0.0  # share of the chunk's text that is its source's boilerplate
    source_text: str = ""  # the chunk's text whole, when ``text`` shows it without boilerplate
    context: str = ""  # the document's identity as embedded and indexed (title | issuer | period | name)
    rerank_score: float | None = None  # the reranker's own score, when a reranker ran

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
