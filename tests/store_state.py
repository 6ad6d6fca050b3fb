"""What the three stores hold, for tests that compare runs (a clean run
with a crashed-then-resumed one, a stream with a backfill)."""

from __future__ import annotations

from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index

DIM = 384
"""The packaged all-MiniLM-L6-v2's dimension (the tests' default model)."""


def chunk_ids_by_store(settings: Settings, tenant: str = "default", dim: int = DIM) -> dict[str, set[str]]:
    """Chunk ids of ``tenant`` in the catalog, and every chunk id in the
    vector and keyword indexes: ``{"catalog": ..., "vector": ..., "keyword": ...}``."""
    cat = open_catalog(settings)
    vec = open_vector_index(settings, dim)
    kw = open_keyword_index(settings)
    try:
        return {
            "catalog": set(cat.chunks.chunk_ids_for_tenant(tenant)),
            "vector": set(vec.chunk_ids()),
            "keyword": set(kw.chunk_ids()),
        }
    finally:
        kw.close()
        vec.close()
        cat.close()


def document_statuses(settings: Settings) -> dict[str, int]:
    """Documents by status (``Catalog.document_counts_by_status``)."""
    cat = open_catalog(settings)
    try:
        return dict(cat.documents.document_counts_by_status())
    finally:
        cat.close()
