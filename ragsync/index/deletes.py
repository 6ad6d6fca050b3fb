"""Deletes: tombstone first, then every trace of the document.

:func:`delete_document` is what a delete event, a document gone from a full
listing and a child document its edited parent no longer has all come to
(``IndexService.delete_document``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragsync.errors import WriteError
from ragsync.index.copies import sync_copies

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.index.core import IndexCore


def delete_document(
    service: IndexCore,
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
    (``sync_copies``: a copy's groups leave its holder's chunks; a holder's
    chunks are first re-keyed to a live copy), chunks from the vector index,
    the keyword index and the chunks table, then the parsed elements and the
    raw copy (unless another live document has the same bytes). Completion
    is recorded only after each store is checked and holds nothing of the
    document.

    Args:
        service: the index service.
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
    cat = service.catalog
    doc = cat.documents.get_document(doc_id)
    children = cat.documents.children_of(doc_id)  # before the tombstone; a retry finds them deleted
    cat.gate_state.put_tombstone(
        doc_id, tenant_id, source_version, version_domain=version_domain, observed_at=observed_at
    )
    if doc is not None and (doc.canonical_doc_id or doc_id) != doc_id:
        # An exact copy: its holder's chunks lose its groups.
        sync_copies(service, str(doc.canonical_doc_id))
    else:
        # A holder: a live copy left takes over its chunks (no re-embedding).
        sync_copies(service, doc_id)
    chunk_ids = sorted(cat.chunks.chunk_ids_for_doc(doc_id))
    if chunk_ids:
        service.remove_chunks(tenant_id, chunk_ids)
        service.count("chunks_deleted", len(chunk_ids))
    settings = service.settings
    if doc is not None and doc.content_hash and not cat.documents.content_in_use(doc.content_hash, doc_id):
        service.remove_object(settings.parsed_uri(doc.content_hash, settings.parser_version))
        service.remove_object(settings.raw_uri(doc.content_hash))
    left = {**service.stores.left(tenant_id, chunk_ids), "catalog": len(cat.chunks.chunk_ids_for_doc(doc_id))}
    if any(left.values()):
        raise WriteError(f"delete of {doc_id} left chunks behind: {left}")
    cat.copies.remove_near_dup(doc_id)
    cat.paragraphs.forget(doc_id)
    deleted = 1
    for child in children:
        deleted += delete_document(
            service,
            child.doc_id,
            tenant_id,
            source_version,
            version_domain=version_domain,
            observed_at=observed_at,
        )
    cat.gate_state.complete_tombstone(doc_id)
    return deleted
