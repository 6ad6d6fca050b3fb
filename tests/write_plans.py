"""Embedded plans and empty homes for the write path's tests (``ragsync.index.service``
and ``transforms.index``), without the model: vectors are constants of the
stores' dimension."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.service import EmbeddedPlan
from ragsync.model import Chunk, DocumentPlan, FetchedDocument, SourceFile

DIM = 8
ACL = ("acl",)


def embedded(plan: DocumentPlan, *, dim: int = DIM) -> EmbeddedPlan:
    """``plan`` with a constant vector per chunk (0.1, 0.2, ... by position)."""
    vectors = {c.chunk_id: np.full(dim, 0.1 * (i + 1), dtype=np.float32) for i, c in enumerate(plan.chunks)}
    return EmbeddedPlan(plan, vectors)


def new_document(
    name: str, n_chunks: int, *, dim: int = DIM, version: str = "", event_id: str = ""
) -> EmbeddedPlan:
    """A new document ``name`` of tenant ``t``, source ``s``: ``n_chunks`` new
    chunks readable by ACL ``acl``, at source version ``version`` from event
    ``event_id`` ('' for a backfill)."""
    source = SourceFile(
        tenant_id="t",
        source_id="s",
        source_object_id=name,
        uri=f"/corpus/{name}",
        source_version=version,
        event_id=event_id,
    )
    doc_id = ids.doc_id("t", "s", name)
    doc = FetchedDocument(doc_id, source, "h-" + name, "raw", 1, "acl", doc_id)
    chunks = tuple(
        Chunk(
            f"{name}-{i}".ljust(32, "0"),
            doc_id,
            "t",
            f"{name}-th{i}",
            i,
            (),
            0,
            f"{name} text {i}",
            3,
            ("acl",),
        )
        for i in range(n_chunks)
    )
    plan = DocumentPlan(doc, "p1", "c1", chunks, tuple(c.chunk_id for c in chunks), (), ("acl",))
    return embedded(plan, dim=dim)


def empty_home(tmp_path: Path, dim: int = DIM) -> Settings:
    """A home under ``tmp_path`` with an empty catalog and both indexes created."""
    s = Settings(home=str(tmp_path / "home"))
    open_catalog(s).close()
    open_vector_index(s, dim, create=True).close()
    open_keyword_index(s, create=True).close()
    return s
