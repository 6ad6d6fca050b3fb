"""Permission changes: metadata updates only, never a fetch, parse or embed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync import ids
from ragsync.config import Settings
from ragsync.model import FetchedDocument, QueuedEvent
from transforms.common import StageMetrics, StoresDoFn, ToDeadLetters, counter


def apply_document_acl(
    catalog: Any, vectors: Any, keywords: Any, doc_id: str, tenant_id: str, acl_id: str, on_chunks: Any = None
) -> int:
    """Give ``doc_id`` the ACL ``acl_id`` everywhere its chunks are served.

    The chunks belong to the document's canonical copy (itself, or the
    document it duplicates); they carry the union of the canonical copy's and
    every live duplicate's ACL ids. The stores that answer queries are updated
    before the catalog rows, so a removal is enforced as early as possible;
    a failure part-way leaves the document row on its old ACL id and the
    change is applied again on retry.

    Args:
        on_chunks: optional ``(tenant_id, chunks, acl_ids)`` callback run
            with the rewritten chunks before the catalog rows change.

    Returns:
        Number of chunks whose ACL ids were rewritten.
    """
    doc = catalog.get_document(doc_id)
    if doc is None:
        return 0
    canonical_id = doc.canonical_doc_id or doc_id
    canonical = catalog.get_document(canonical_id) if canonical_id != doc_id else doc
    acl_ids = {acl_id if canonical_id == doc_id else (canonical.acl_id if canonical else acl_id)}
    for dup in catalog.duplicates_of(canonical_id):
        acl_ids.add(acl_id if dup.doc_id == doc_id else dup.acl_id)
    if canonical_id != doc_id:
        acl_ids.add(acl_id)
    acl_list = sorted(a for a in acl_ids if a)
    chunk_ids = sorted(catalog.chunk_ids_for_doc(canonical_id))
    if chunk_ids:
        vectors.set_acl_ids(tenant_id, chunk_ids, acl_list)
        chunks = [
            c.__class__(**{**c.__dict__, "acl_ids": tuple(acl_list)})
            for c in catalog.chunks_by_ids(chunk_ids).values()
        ]
        keywords.set_acl_ids(tenant_id, chunks)
        if on_chunks is not None:  # e.g. the index versions being built
            on_chunks(tenant_id, chunks, acl_list)
        catalog.set_chunk_acl_ids(canonical_id, acl_list)
    catalog.set_document_acl(doc_id, acl_id)
    return len(chunk_ids)


class _AclFnBase(StoresDoFn):
    def setup(self) -> None:
        super().setup()
        self._count = counter("documents_acl_updated")
        self._stage = StageMetrics("acl")


class _ApplyAclFn(_AclFnBase):
    """FetchedDocument with unchanged bytes and new permissions -> doc id."""

    def process(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        yield from self._stage.run(self._apply, doc)

    def _apply(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        apply_document_acl(
            self._catalog,
            self._vectors,
            self._keywords,
            doc.doc_id,
            doc.source.tenant_id,
            doc.acl_id,
            self.shadow_set_acl,
        )
        self._count.inc()
        yield doc


class _ApplyAclEventFn(_AclFnBase):
    """QueuedEvent (acl) -> the event once applied. No groups means nobody
    may read the document (fail closed): its chunks get an ACL no user holds."""

    def process(self, qe: QueuedEvent) -> Iterator[QueuedEvent]:
        yield from self._stage.run(self._apply, qe)

    def _apply(self, qe: QueuedEvent) -> Iterator[QueuedEvent]:
        groups = list(qe.event.acl_groups)
        acl_id = ids.acl_id(qe.tenant_id, groups)
        self._catalog.upsert_acl(acl_id, qe.tenant_id, groups)
        apply_document_acl(
            self._catalog, self._vectors, self._keywords, qe.doc_id, qe.tenant_id, acl_id, self.shadow_set_acl
        )
        self._catalog.set_acl_version(qe.doc_id, qe.tenant_id, qe.event.source_version, acl_id)
        self._count.inc()
        yield qe


class ApplyAclChanges(beam.PTransform):
    """Apply permission changes.

    Input: ``FetchedDocument`` (a backfill found new permissions on unchanged
    bytes) or, with ``events=True``, ``QueuedEvent`` (an acl event).
    Outputs: ``updated`` (the input records, once applied) and ``dead``.
    """

    def __init__(self, settings: Settings, dim: int, *, events: bool = False) -> None:
        super().__init__()
        self.settings = settings
        self.dim = dim
        self.events = events

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        fn = _ApplyAclEventFn if self.events else _ApplyAclFn
        out = docs | "ApplyAcl" >> beam.ParDo(fn(self.settings, self.dim)).with_exception_handling()
        return {"updated": out["good"], "dead": out["bad"] | "AclDeadLetters" >> ToDeadLetters("acl")}
