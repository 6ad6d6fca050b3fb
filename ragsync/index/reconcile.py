"""Reconciliation: chunk counts per document in the vector index, the keyword
index and the catalog's chunks table must agree; and the reports of the
repair that fixes what disagrees (``ragsync.index.maintenance.repair``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.base import KeywordIndex, VectorIndex

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.catalog import Catalog


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


def reconcile(settings: Settings, dim: int, *, page: int = 5000) -> ReconcileReport:
    """Compare per-document chunk counts across the three stores.

    The catalog's counts are streamed (:meth:`Catalog.iter_chunk_counts_by_doc`,
    ``page`` documents at a time), so the catalog side holds at most ``page``
    documents' counts, plus the mismatches found. Each index's counts are one
    ``{doc_id: count}`` dict (O(documents in that index)): the stores cannot
    list counts in doc_id order.
    """
    catalog = open_catalog(settings)
    vectors = open_vector_index(settings, dim)
    keywords = open_keyword_index(settings)
    try:
        return reconcile_stores(catalog, vectors, keywords, page=page)
    finally:
        keywords.close()
        vectors.close()
        catalog.close()


def reconcile_stores(
    catalog: Catalog, vectors: VectorIndex, keywords: KeywordIndex, *, page: int = 5000
) -> ReconcileReport:
    """:func:`reconcile` on stores already open (the repair's own, after it ran)."""
    return compare_counts(
        catalog.chunks.iter_chunk_counts_by_doc(page=page), vectors.count_by_doc(), keywords.count_by_doc()
    )


def compare_counts(
    catalog: Iterable[tuple[str, int]], vector: dict[str, int], keyword: dict[str, int]
) -> ReconcileReport:
    """The reconciliation of per-document chunk counts.

    Args:
        catalog: (doc_id, chunk rows) of every document the catalog has
            chunks for, each doc_id once, in any order; consumed once, one
            pair at a time (never held whole).
        vector: chunk rows per doc_id in the vector index. Emptied: each
            catalog document's entry is taken out as it is compared.
        keyword: the same for the keyword index; emptied likewise.

    Returns:
        Documents in any of the three, the catalog's chunk total, and the
        documents whose three counts differ (a missing document counts 0),
        sorted by doc_id.
    """
    bad: list[Mismatch] = []
    documents = chunks = 0
    for doc, n in catalog:
        documents += 1
        chunks += n
        vn, kn = vector.pop(doc, 0), keyword.pop(doc, 0)
        if not vn == kn == n:
            bad.append(Mismatch(doc, vn, kn, n))
    rest = set(vector) | set(keyword)  # in an index, not in the catalog
    documents += len(rest)
    bad += [
        Mismatch(d, vector.get(d, 0), keyword.get(d, 0), 0)
        for d in rest
        if vector.get(d, 0) or keyword.get(d, 0)
    ]
    bad.sort(key=lambda m: m.doc_id)
    return ReconcileReport(documents=documents, chunks=chunks, mismatches=bad)


@dataclass(frozen=True)
class RepairAction:
    """One thing ``repair`` did.

    Attributes:
        action: ``rewrite`` (chunks written again from the catalog),
            ``delete_orphans`` (store rows with no catalog chunk row) or
            ``delete_dead_rows`` (chunks of deleted documents, and pending
            chunks of no live version, everywhere).
        store: ``vector``, ``keyword`` or ``catalog``.
        tenant_id: the tenant.
        chunks: number of chunks.
    """

    action: str
    store: str
    tenant_id: str
    chunks: int


@dataclass(frozen=True)
class RepairReport:
    """What ``repair`` found, did and left.

    Attributes:
        actions: every action taken, in order.
        chunks_embedded: vectors the model computed (those missing from the
            embedding cache); every other rewritten vector came from the cache.
        after: reconciliation once the repair ran.
    """

    actions: list[RepairAction]
    chunks_embedded: int
    after: ReconcileReport

    def counts(self) -> dict[str, int]:
        """Chunks per ``action:store``, e.g. ``{"rewrite:vector": 3}``."""
        out: dict[str, int] = {}
        for a in self.actions:
            key = f"{a.action}:{a.store}"
            out[key] = out.get(key, 0) + a.chunks
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.after.ok,
            "actions": [a.__dict__ for a in self.actions],
            "counts": self.counts(),
            "chunks_embedded": self.chunks_embedded,
            "after": self.after.to_dict(),
        }
