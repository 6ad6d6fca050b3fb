"""Reconciliation: chunk counts per document in the vector index, the keyword
index and the catalog's chunks table must agree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index


@dataclass(frozen=True)
class Mismatch:
    doc_id: str
    vector: int
    keyword: int
    catalog: int


@dataclass(frozen=True)
class ReconcileReport:
    documents: int
    chunks: int
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "documents": self.documents,
            "chunks": self.chunks,
            "mismatches": [m.__dict__ for m in self.mismatches],
        }


def reconcile(settings: Settings, dim: int) -> ReconcileReport:
    """Compare per-document chunk counts across the three stores."""
    catalog = open_catalog(settings)
    vectors = open_vector_index(settings, dim)
    keywords = open_keyword_index(settings)
    try:
        v = vectors.count_by_doc()
        kw = keywords.count_by_doc()
        c = catalog.chunk_counts_by_doc()
    finally:
        keywords.close()
        vectors.close()
        catalog.close()
    docs = sorted(set(v) | set(kw) | set(c))
    bad = [
        Mismatch(d, v.get(d, 0), kw.get(d, 0), c.get(d, 0))
        for d in docs
        if not v.get(d, 0) == kw.get(d, 0) == c.get(d, 0)
    ]
    return ReconcileReport(documents=len(docs), chunks=sum(c.values()), mismatches=bad)
