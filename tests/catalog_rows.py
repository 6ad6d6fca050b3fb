"""Catalog rows written directly, for tests that need a document in a given
state without running a pipeline."""

from __future__ import annotations

from typing import Any

from ragsync.catalog import make_indexed_version


def flip(
    cat: Any,
    doc_id: str,
    *,
    version: str = "v1",
    content_hash: str = "h1",
    indexed_version: str = "",
    chunk_count: int = 3,
    indexed_at: float = 1000.5,
    **kw: Any,
) -> bool:
    """``cat.flip_indexed_version`` of a fetched document: ``content_hash`` at
    source ``version`` goes live (``indexed_version`` defaults to
    ``make_indexed_version(content_hash, version)``), chunked by
    ``chunker-1``/``parser-1`` into ``chunk_count`` chunks; ``kw`` passes the
    guard and the other options through. Returns what the catalog returns."""
    return bool(
        cat.documents.flip_indexed_version(
            doc_id,
            content_hash=content_hash,
            source_version=version,
            indexed_version=indexed_version or make_indexed_version(content_hash, version),
            chunker_id="chunker-1",
            parser_version="parser-1",
            chunk_count=chunk_count,
            indexed_at=indexed_at,
            **kw,
        )
    )
