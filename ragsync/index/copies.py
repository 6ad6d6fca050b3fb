"""Exact copies and permissions: keeping the chunks of a content in step with
every document that holds that content, and a document's new ACL.

Every document with the same bytes (same tenant, same content hash) is an
*identity* of that content and keeps its own ACL id in the catalog. One of
them, the *holder*, owns the chunk rows; the others have status
``duplicate`` and point at it (``canonical_doc_id``). The chunks carry the
union of the live identities' ACL ids. Whenever an identity is added,
deleted, edited into other content or re-permissioned, :func:`sync_copies`
recomputes that union from the catalog (``ragsync.decisions.plan_copies``)
and rewrites the ACL ids in both indexes and the chunk rows (a metadata
update, never an embedding). When the holder itself goes, another identity
is promoted: the chunk rows are re-keyed to it with the vectors from the
embedding cache (the model runs only for a vector missing from the cache).

Each function takes the index service (its base, :class:`ragsync.index.core.IndexCore`) whose
catalog and stores it changes (the service's methods of the same names call them).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragsync import ids
from ragsync.decisions import CopiesPlan, CopyIdentity, CopyLink, copy_lost_its_holder, plan_copies
from ragsync.decisions.gate import source_file_stamp
from ragsync.errors import WriteError
from ragsync.ingest import near_dup
from ragsync.model import Chunk, FetchedDocument

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.index.core import IndexCore


def copy_identities(
    catalog: Any, owner: Any, *, acl_overrides: Mapping[str, str] | None = None, leaving: bool = False
) -> list[CopyIdentity]:
    """The owner of some chunks and every live copy linked to it, as
    :class:`CopyIdentity` values.

    Args:
        catalog: the catalog.
        owner: the owner's ``DocumentRow``.
        acl_overrides: ACL ids to use instead of the stored ones (a
            permission change not yet recorded on the row).
        leaving: the owner no longer holds this content (it is being
            rewritten with other bytes, or turned into a copy of other
            content): it does not count.
    """
    overrides = dict(acl_overrides or {})
    # An owner not written yet still counts: its own write serves its copies.
    owner_live = not leaving and owner.deleted_at is None and bool(owner.content_hash)

    def acl(row: Any) -> str:
        return overrides.get(row.doc_id, row.acl_id or "")

    out = [CopyIdentity(owner.doc_id, acl(owner), owner.content_hash or "", owner_live)]
    for dup in catalog.copies.duplicates_of(owner.doc_id):
        out.append(CopyIdentity(dup.doc_id, acl(dup), dup.content_hash or "", True))
    return out


def apply_document_acl(service: IndexCore, doc_id: str, tenant_id: str, acl_id: str) -> int:
    """Give ``doc_id`` (and its child documents) the ACL ``acl_id``
    everywhere their chunks are served.

    The chunks belong to the document's canonical copy (itself, or the
    document it duplicates); they carry the union of the live copies' ACL
    ids (:meth:`sync_copies`, with this document's new ACL id). The
    stores that answer queries are updated before the catalog rows, so a
    removal is enforced as early as possible; a failure part-way leaves
    the document row on its old ACL id and the change is applied again
    on retry.

    Args:
        doc_id: the document.
        tenant_id: its tenant.
        acl_id: its new ACL id (its row must exist: ``Catalog.upsert_acl``).

    Returns:
        Number of chunks that now carry the union (0 when the document is unknown).
    """
    catalog = service.catalog
    doc = catalog.documents.get_document(doc_id)
    if doc is None:
        return 0
    holder = doc.canonical_doc_id or doc_id
    sync_copies(service, holder, acl_overrides={doc_id: acl_id})
    catalog.documents.set_document_acl(doc_id, acl_id)
    for child in catalog.documents.children_of(doc_id):  # attachments and members take the parent's groups
        apply_document_acl(service, child.doc_id, tenant_id, acl_id)
    return len(catalog.chunks.chunk_ids_for_doc(holder))


def sync_copies(
    service: IndexCore,
    owner_id: str,
    *,
    acl_overrides: Mapping[str, str] | None = None,
    leaving: bool = False,
) -> CopiesPlan:
    """Bring the chunks ``owner_id`` holds in line with its live identities.

    Steps: read the owner and its linked copies; decide (``plan_copies``);
    when the holder changes, re-key the chunk rows to the new holder
    (:meth:`promote`); otherwise rewrite the ACL ids of every chunk whose
    ids differ from the union (indexes first, so a narrowing is enforced
    as early as possible, then the chunk rows). Idempotent: a replay
    after a crash anywhere converges to the same rows.

    Args:
        owner_id: the document whose chunk rows hold the content.
        acl_overrides: see :func:`copy_identities`.
        leaving: see :func:`copy_identities`.

    Returns:
        The plan that was applied. ``holder`` None means no live identity
        is left: nothing was changed and the caller deletes the chunks.
    """
    catalog = service.catalog
    owner = catalog.documents.get_document(owner_id)
    if owner is None or not owner.content_hash:
        return CopiesPlan(None, False, (), ())
    identities = copy_identities(catalog, owner, acl_overrides=acl_overrides, leaving=leaving)
    plan = plan_copies(owner_id, owner.content_hash, identities)
    if plan.holder is None:
        return plan
    chunks = catalog.chunks.chunks_for_doc(owner_id)
    if plan.promote:
        if chunks:  # nothing to hand over: the copy is processed on its own next time
            promote(service, owner, plan, chunks)
        return plan
    acl = tuple(plan.acl_ids)
    moved = [replace(c, acl_ids=acl) for c in chunks if tuple(c.acl_ids) != acl]
    if moved:
        service.set_index_acl(owner.tenant_id, moved, list(acl))
        catalog.chunks.set_chunk_acl_ids(owner_id, list(acl))
    return plan


def promote(service: IndexCore, owner: Any, plan: CopiesPlan, chunks: list[Chunk]) -> None:
    """Re-key ``owner``'s chunks to ``plan.holder`` without re-embedding
    (vectors from :meth:`vectors_for`): both indexes first, then the
    chunk rows and the document rows in one transaction; the owner's old
    rows stay for the caller to delete or rewrite. Counts ``copies_promoted``.

    Args:
        owner: the ``DocumentRow`` that held the chunks.
        plan: ``sync_copies``' plan, ``holder`` set.
        chunks: the owner's chunk rows.
    """
    catalog = service.catalog
    holder = str(plan.holder)
    chunker_id = owner.chunker_id or ""
    acl = tuple(plan.acl_ids)
    rekeyed = [
        replace(c, chunk_id=ids.chunk_id(holder, chunker_id, c.text_hash), doc_id=holder, acl_ids=acl)
        for c in chunks
    ]
    if rekeyed:
        vectors = vectors_for(service, rekeyed)
        service.index_chunks(rekeyed, [vectors[c.text_hash] for c in rekeyed])
    # The live rows and the promotion commit together: never rows of a copy
    # still marked duplicate, nor an indexed holder without its rows.
    catalog.copies.promote_copy(
        holder,
        from_doc_id=owner.doc_id,
        chunker_id=chunker_id,
        parser_version=owner.parser_version or "",
        indexed_at=time.time(),
        chunks=rekeyed,
    )
    if rekeyed:
        sig = near_dup.signature("\n\n".join(c.text for c in rekeyed))
        catalog.copies.set_near_dup(holder, owner.tenant_id, sig, near_dup.band_keys(sig))
    service.count("copies_promoted")


def vectors_for(service: IndexCore, chunks: Iterable[Chunk]) -> dict[str, list[float]]:
    """Vectors of ``chunks`` by text hash for the live model, from the
    embedding cache (``ragsync.embedding.models.cached_vectors``; a vector
    missing there is computed and counted as ``chunks_embedded``)."""
    from ragsync.embedding.models import cached_vectors
    from ragsync.index.versions import live_spec

    vectors, fresh = cached_vectors(service.catalog, live_spec(service.settings), list(chunks))
    if fresh:
        service.count("chunks_embedded", fresh)
    return vectors


def retire_holder(service: IndexCore, doc_id: str) -> int:
    """``doc_id`` stops holding its chunks (it became a copy of other
    content): promote one of its copies if any is left, then delete its
    own chunk rows everywhere. Returns the number of chunks deleted."""
    sync_copies(service, doc_id, leaving=True)
    doc = service.catalog.documents.get_document(doc_id)
    chunk_ids = sorted(service.catalog.chunks.chunk_ids_for_doc(doc_id))
    if chunk_ids and doc is not None:
        service.remove_chunks(doc.tenant_id, chunk_ids)
    return len(chunk_ids)


def record_duplicate(service: IndexCore, doc: FetchedDocument) -> None:
    """Link ``doc``, an exact copy, to its canonical copy, whose chunks
    then carry the copy's groups too.

    A document that held chunks of its own (it was edited into bytes
    another document already serves) first hands them to one of its own
    copies, if any is left (:meth:`retire_holder`), and then loses them.

    Raises:
        WriteError: the holder was deleted between the fetch that found it
            and this link (``ragsync.decisions.copy_lost_its_holder``;
            counted as ``copies_relinked``): retryable, so the event runs
            again and the copy is processed on its own or linked to a
            live identity.
    """
    cat = service.catalog
    stored = cat.documents.get_document(doc.doc_id)
    if stored is not None and (stored.canonical_doc_id or doc.doc_id) == doc.doc_id:
        retire_holder(service, doc.doc_id)
    cat.copies.mark_duplicate(
        doc.doc_id,
        doc.canonical_doc_id,
        content_hash=doc.content_hash,
        written=source_file_stamp(doc.source),
        by_event=bool(doc.source.event_id),
    )
    sync_copies(service, doc.canonical_doc_id)
    row = cat.documents.get_document(doc.doc_id)
    if row is None:
        return
    holder = cat.documents.get_document(row.canonical_doc_id) if row.canonical_doc_id else None
    link = CopyLink(row.doc_id, row.status, row.canonical_doc_id, row.content_hash or "")
    held = (
        CopyIdentity(
            holder.doc_id,
            holder.acl_id or "",
            holder.content_hash or "",
            # A holder not written yet still serves its copies (its own write does).
            holder.deleted_at is None and holder.status != "deleted",
        )
        if holder is not None
        else None
    )
    if copy_lost_its_holder(link, held):
        service.count("copies_relinked")
        raise WriteError(
            f"{doc.doc_id} was linked as a copy of {row.canonical_doc_id}, which no longer "
            "serves its bytes (deleted meanwhile): processed again"
        )
