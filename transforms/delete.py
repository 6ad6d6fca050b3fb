"""Deletes (priority path): tombstone first, then every trace of the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ragsync import ids
from ragsync.errors import WriteError
from ragsync.index.service import IndexService
from ragsync.model import QueuedEvent, SourceFile
from transforms.dead_letters import GuardedStep
from transforms.io import delete_if_exists
from transforms.steps import WriterDoFn


def delete_document(
    writer: IndexService,
    doc_id: str,
    tenant_id: str,
    source_version: str,
    *,
    version_domain: str = "",
    observed_at: float | None = None,
) -> int:
    """Delete one document everywhere, then its child documents (attachments,
    archive members) the same way, with the same version.

    Order: tombstone (blocks older upserts at once), the exact copies
    (``IndexService.sync_copies``: a copy's groups leave its holder's chunks; a
    holder's chunks are first re-keyed to a live copy), chunks from the vector
    index, the keyword index and the chunks table, then the parsed elements
    and the raw copy (unless another live document has the same bytes).
    Completion is recorded only after each store is checked and holds
    nothing of the document.

    Args:
        writer: the stores' writer (``ragsync.index.service.IndexService``).
        doc_id: the document.
        tenant_id: its tenant.
        source_version: the delete's version (the tombstone's).
        version_domain: its domain ('' when undeclared).
        observed_at: when the delete happened at the source.

    Returns:
        Documents deleted (1 + its descendants).

    Raises:
        WriteError: a store still holds chunks of a deleted document (the
            caller retries; every step is idempotent).
    """
    cat = writer.catalog
    doc = cat.get_document(doc_id)
    children = cat.children_of(doc_id)  # before the tombstone; a retry finds them deleted
    cat.put_tombstone(
        doc_id, tenant_id, source_version, version_domain=version_domain, observed_at=observed_at
    )
    if doc is not None and (doc.canonical_doc_id or doc_id) != doc_id:
        # An exact copy: its holder's chunks lose its groups.
        writer.sync_copies(str(doc.canonical_doc_id))
    else:
        # A holder: a live copy left takes over its chunks (no re-embedding).
        writer.sync_copies(doc_id)
    chunk_ids = sorted(cat.chunk_ids_for_doc(doc_id))
    if chunk_ids:
        writer.remove_chunks(tenant_id, chunk_ids)
        writer.count("chunks_deleted", len(chunk_ids))
    if doc is not None and doc.content_hash and not cat.content_in_use(doc.content_hash, doc_id):
        delete_if_exists(writer.settings.parsed_uri(doc.content_hash, writer.settings.parser_version))
        delete_if_exists(writer.settings.raw_uri(doc.content_hash))
    left = {
        "vector": writer.vectors.count_ids(tenant_id, chunk_ids),
        "keyword": writer.keywords.count_ids(tenant_id, chunk_ids),
        "catalog": len(cat.chunk_ids_for_doc(doc_id)),
    }
    if any(left.values()):
        raise WriteError(f"delete of {doc_id} left chunks behind: {left}")
    cat.remove_near_dup(doc_id)
    deleted = 1
    for child in children:
        deleted += delete_document(
            writer,
            child.doc_id,
            tenant_id,
            source_version,
            version_domain=version_domain,
            observed_at=observed_at,
        )
    cat.complete_tombstone(doc_id)
    return deleted


class _DeleteFn(WriterDoFn):
    """QueuedEvent (delete) -> the event once the document and its child
    documents are gone everywhere (``delete_document``); otherwise the event
    is retried."""

    metrics_stage = "delete"

    def process(self, qe: QueuedEvent) -> Iterator[Any]:
        yield from self._stage.run(self._delete, qe)

    def _delete(self, qe: QueuedEvent) -> Iterator[Any]:
        delete_document(
            self.writer,
            qe.doc_id,
            qe.tenant_id,
            qe.event.source_version,
            version_domain=qe.version_domain,
            observed_at=qe.event.event_time,
        )
        self.count("documents_deleted")
        yield qe


class _DeleteStaleChildFn(_DeleteFn):
    """SourceFile of a child its edited parent no longer has -> the same once deleted."""

    def process(self, child: SourceFile) -> Iterator[Any]:  # type: ignore[override]
        yield from self._stage.run(self._delete_child, child)

    def _delete_child(self, child: SourceFile) -> Iterator[Any]:
        doc_id = ids.doc_id(child.tenant_id, child.source_id, child.source_object_id)
        delete_document(
            self.writer,
            doc_id,
            child.tenant_id,
            child.source_version,
            version_domain=child.version_domain,
            observed_at=child.observed_at or child.event_time or None,
        )
        self.count("children_deleted")
        yield child


class DeleteStaleChildren(GuardedStep):
    """Input: ``SourceFile`` of stale child documents (``transforms.parse.STALE_CHILDREN``).
    Outputs: ``deleted`` (the same) and ``dead`` (``DeadLetter``)."""

    fn = _DeleteStaleChildFn
    label_, output, stage, dead_label = "DeleteChild", "deleted", "delete", "ChildDeleteDeadLetters"


class DeleteDocuments(GuardedStep):
    """Input: delete ``QueuedEvent``. Outputs: ``deleted`` (QueuedEvent) and
    ``dead`` (``DeadLetter``; transient ones are retried by the sink)."""

    fn = _DeleteFn
    label_, output, stage, dead_label = "Delete", "deleted", "delete", "DeleteDeadLetters"
