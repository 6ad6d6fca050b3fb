"""Exact copies across runs and events: one indexed set of chunks per content,
readable by the union of its live copies' groups.

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
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ragsync import ids, near_dup
from ragsync.decisions import CopiesPlan, CopyIdentity, plan_copies
from ragsync.model import Chunk, FetchedDocument
from transforms.dead_letters import GuardedStep
from transforms.metrics import counter
from transforms.steps import StoresDoFn


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
    for dup in catalog.duplicates_of(owner.doc_id):
        out.append(CopyIdentity(dup.doc_id, acl(dup), dup.content_hash or "", True))
    return out


def sync_copies(
    step: Any,
    owner_id: str,
    *,
    acl_overrides: Mapping[str, str] | None = None,
    leaving: bool = False,
) -> CopiesPlan:
    """Bring the chunks ``owner_id`` holds in line with its live identities.

    Steps: read the owner and its linked copies; decide (``plan_copies``);
    when the holder changes, re-key the chunk rows to the new holder (both
    indexes first, then the chunk rows, then the document rows in one
    transaction; the old rows stay for the caller to delete or rewrite);
    otherwise rewrite the ACL ids of every chunk whose ids differ from the
    union (indexes first, so a narrowing is enforced as early as possible,
    then the chunk rows). Idempotent: a replay after a crash anywhere
    converges to the same rows.

    Args:
        step: a ``StoresDoFn`` (its catalog, indexes, building index
            versions and settings are used).
        owner_id: the document whose chunk rows hold the content.
        acl_overrides: see :func:`copy_identities`.
        leaving: see :func:`copy_identities`.

    Returns:
        The plan that was applied. ``holder`` None means no live identity
        is left: nothing was changed and the caller deletes the chunks.
    """
    catalog = step._catalog
    owner = catalog.get_document(owner_id)
    if owner is None or not owner.content_hash:
        return CopiesPlan(None, False, (), ())
    identities = copy_identities(catalog, owner, acl_overrides=acl_overrides, leaving=leaving)
    plan = plan_copies(owner_id, owner.content_hash, identities)
    if plan.holder is None:
        return plan
    chunks = catalog.chunks_for_doc(owner_id)
    tenant = owner.tenant_id
    if plan.promote:
        if chunks:  # nothing to hand over: the copy is processed on its own next time
            _promote(step, owner, plan, chunks)
        return plan
    acl = tuple(plan.acl_ids)
    moved = [replace(c, acl_ids=acl) for c in chunks if tuple(c.acl_ids) != acl]
    if moved:
        step._vectors.set_acl_ids(tenant, [c.chunk_id for c in moved], list(acl))
        step._keywords.set_acl_ids(tenant, moved)
        step.shadow_set_acl(tenant, moved, list(acl))
        catalog.set_chunk_acl_ids(owner_id, list(acl))
    return plan


def _promote(step: Any, owner: Any, plan: CopiesPlan, chunks: list[Chunk]) -> None:
    """Re-key ``owner``'s chunks to ``plan.holder`` without re-embedding."""
    catalog = step._catalog
    holder = str(plan.holder)
    chunker_id = owner.chunker_id or ""
    acl = tuple(plan.acl_ids)
    rekeyed = [
        replace(c, chunk_id=ids.chunk_id(holder, chunker_id, c.text_hash), doc_id=holder, acl_ids=acl)
        for c in chunks
    ]
    if rekeyed:
        vectors = vectors_for(step, rekeyed)
        step._vectors.upsert(rekeyed, [vectors[c.text_hash] for c in rekeyed])
        step._keywords.upsert(rekeyed)
        step.shadow_upsert(rekeyed)
    # The live rows and the promotion commit together: never rows of a copy
    # still marked duplicate, nor an indexed holder without its rows.
    catalog.promote_copy(
        holder,
        from_doc_id=owner.doc_id,
        chunker_id=chunker_id,
        parser_version=owner.parser_version or "",
        indexed_at=time.time(),
        chunks=rekeyed,
    )
    if rekeyed:
        sig = near_dup.signature("\n\n".join(c.text for c in rekeyed))
        catalog.set_near_dup(holder, owner.tenant_id, sig, near_dup.band_keys(sig))
    step.count("copies_promoted")


def vectors_for(step: Any, chunks: list[Chunk]) -> dict[str, list[float]]:
    """Vectors of ``chunks`` by text hash for the live model, from the
    embedding cache (``ragsync.embedding.cached_vectors``; a vector missing
    there is computed and counted as ``chunks_embedded``)."""
    from ragsync.embedding import cached_vectors
    from ragsync.index_versions import live_spec

    vectors, fresh = cached_vectors(step._catalog, live_spec(step.settings), chunks)
    if fresh:
        counter("chunks_embedded").inc(fresh)
    return vectors


def retire_holder(step: Any, doc_id: str) -> int:
    """``doc_id`` stops holding its chunks (it became a copy of other
    content): promote one of its copies if any is left, then delete its own
    chunk rows everywhere. Returns the number of chunks deleted."""
    sync_copies(step, doc_id, leaving=True)
    catalog = step._catalog
    doc = catalog.get_document(doc_id)
    chunk_ids = sorted(catalog.chunk_ids_for_doc(doc_id))
    if chunk_ids and doc is not None:
        step._vectors.delete(doc.tenant_id, chunk_ids)
        step._keywords.delete(doc.tenant_id, chunk_ids)
        step.shadow_delete(doc.tenant_id, chunk_ids)
        catalog.delete_chunks(chunk_ids)
    return len(chunk_ids)


class CopiesDoFn(StoresDoFn):
    """Base of the steps that call :func:`sync_copies` (counts promotions)."""


class _RefreshCopiesFn(CopiesDoFn):
    """(holder doc id, FetchedDocument that left it) -> the same pair once the
    holder's chunks carry the union of its remaining live copies' ACL ids
    (the copy was edited into other bytes)."""

    def process(self, left: tuple[str, FetchedDocument]) -> Iterator[tuple[str, FetchedDocument]]:
        sync_copies(self, left[0])
        yield left


class RefreshCopies(GuardedStep):
    """Input: ``(holder doc id, FetchedDocument)``: a copy that left the
    holder. Outputs: ``refreshed`` (the pairs) and ``dead`` (``DeadLetter``
    of the copy that left)."""

    fn = _RefreshCopiesFn
    label_, output, stage, dead_label = "RefreshCopies", "refreshed", "copies", "CopiesDeadLetters"
