"""The write path, without Beam: one ``IndexWriter`` owns the catalog, the
keyword index and the vector index (and every index version being built
beside the live one) and applies every change to them: a batch of embedded
documents, a document's new permissions, exact copies, a document that
becomes a copy.

The pipeline's steps (``transforms.write``, ``transforms.acl``,
``transforms.copies``, ``transforms.delete``, ``transforms.fetch``) open one
writer in ``setup()``, call it in ``process()`` and close it in
``teardown()``; tests call it directly.

Exact copies: every document with the same bytes (same tenant, same content
hash) is an *identity* of that content and keeps its own ACL id in the
catalog. One of them, the *holder*, owns the chunk rows; the others have
status ``duplicate`` and point at it (``canonical_doc_id``). The chunks carry
the union of the live identities' ACL ids. Whenever an identity is added,
deleted, edited into other content or re-permissioned,
:meth:`IndexWriter.sync_copies` recomputes that union from the catalog
(``ragsync.decisions.plan_copies``) and rewrites the ACL ids in both indexes
and the chunk rows (a metadata update, never an embedding). When the holder
itself goes, another identity is promoted: the chunk rows are re-keyed to it
with the vectors from the embedding cache (the model runs only for a vector
missing from the cache).

Fault injection: a writer calls its :class:`WriteHooks` at the points a
crash test stops a run (default: nothing). ``RAGSYNC_WRITE_HOOKS`` names a
factory of hooks (``module:function``) that :func:`hooks_from_environment`
imports where the writer is opened (each worker process).
"""

from __future__ import annotations

import importlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ragsync import ids, near_dup
from ragsync.counters import declared
from ragsync.decisions import (
    CopiesPlan,
    CopyIdentity,
    CopyLink,
    Order,
    compare_versions,
    copy_lost_its_holder,
    document_stamp,
    plan_copies,
    row_stamp,
    source_file_stamp,
)
from ragsync.errors import ConfigurationError, WriteError
from ragsync.model import Chunk, DocumentPlan, FetchedDocument

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.config import Settings

HOOKS_ENV = "RAGSYNC_WRITE_HOOKS"
"""Environment variable naming a factory of :class:`WriteHooks`
(``package.module:function``, called without arguments); empty = no hooks."""


@dataclass(frozen=True)
class EmbeddedPlan:
    """A plan with a vector for each of its new chunks.

    Attributes:
        plan: the document plan.
        vectors: chunk id -> vector, for every id in ``plan.new_ids``.
    """

    plan: DocumentPlan
    vectors: dict[str, np.ndarray]


def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class WriteHooks:
    """Callables a writer calls at fixed points of :meth:`IndexWriter.write_batch`
    (fault injection for crash tests; every default does nothing). A hook may
    stop the process; whatever it raises fails the documents of that step.

    Attributes:
        after_index_writes: ``(n)``, once the index upsert of a batch is done
            and before any catalog row of that batch is written, once per
            document the upsert wrote, ``n`` its running number in this
            writer (1, 2, ...).
        before_flip: ``(n, plan)``, before the ``n``-th version flip of this
            writer, once the document's new chunks are in both indexes and
            its chunk rows pending in the catalog.
        after_flip: ``(n, plan)``, after the ``n``-th version flip, before the
            document's vanished chunks are deleted.
        after_reembedded_documents: ``(n)``, after a re-embedding batch is in
            the target version's stores and its progress recorded, ``n`` the
            documents this process has re-embedded so far
            (``beam_pipelines.reembed``).
    """

    after_index_writes: Callable[[int], None] = _nothing
    before_flip: Callable[[int, DocumentPlan], None] = _nothing
    after_flip: Callable[[int, DocumentPlan], None] = _nothing
    after_reembedded_documents: Callable[[int], None] = _nothing


def load_hooks(spec: str) -> WriteHooks:
    """The hooks a ``module:function`` factory returns.

    Args:
        spec: ``package.module:function`` (a function without arguments that
            returns a ``WriteHooks``), or '' for the default hooks.

    Raises:
        ConfigurationError: ``spec`` is malformed, cannot be imported, or its
            factory returns something else than ``WriteHooks``. What the
            factory itself raises is raised as is.
    """
    if not spec.strip():
        return WriteHooks()
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r}: expected module:function")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r} cannot be loaded: {exc}") from exc
    hooks = factory()
    if not isinstance(hooks, WriteHooks):
        raise ConfigurationError(f"{HOOKS_ENV}={spec!r} returned {type(hooks).__name__}, not WriteHooks")
    return hooks


def hooks_from_environment() -> WriteHooks:
    """:func:`load_hooks` of ``$RAGSYNC_WRITE_HOOKS`` (no hooks when unset)."""
    return load_hooks(os.environ.get(HOOKS_ENV, ""))


@dataclass
class BatchOutcome:
    """What :meth:`IndexWriter.write_batch` did with each item of a batch.

    Attributes:
        written: items whose document is now live, in batch order.
        superseded: plans not written because a newer version (or a delete)
            was accepted meanwhile.
        failed: ``(item, exception)`` of each document that failed on its own
            (the others of the batch went on).
    """

    written: list[EmbeddedPlan] = field(default_factory=list)
    superseded: list[DocumentPlan] = field(default_factory=list)
    failed: list[tuple[EmbeddedPlan, Exception]] = field(default_factory=list)


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


class IndexWriter:
    """The catalog, both indexes and the building index versions, and every
    write to them.

    Args:
        settings: the home (index versions, embedding cache, batch size).
        catalog: the catalog.
        vectors: the live vector index.
        keywords: the live keyword index.
        shadows: ``(IndexVersion, vector index, keyword index)`` of every
            index version being built (a re-embedding, ``ragsync reembed``):
            every change is written there too, embedded with that version's
            model, so the new version never falls behind the live one.
        hooks: fault-injection points (default: none).
        count: called as ``count(name, n)`` for every ragsync counter the
            writer adds to (a Beam step passes its own counters); the counts
            are also kept in :attr:`counts`.

    The writer owns what it is given: :meth:`close` closes it all.
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Any,
        vectors: Any,
        keywords: Any,
        *,
        shadows: Sequence[tuple[Any, Any, Any]] = (),
        hooks: WriteHooks | None = None,
        count: Callable[[str, int], None] | None = None,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.vectors = vectors
        self.keywords = keywords
        self.shadows = list(shadows)
        self.hooks = hooks or WriteHooks()
        self.counts: Counter[str] = Counter()
        self._on_count = count
        self._docs_indexed = 0
        self._flips = 0
        self._seen_versions: dict[str, str] = {}

    @classmethod
    def open(
        cls,
        settings: Settings,
        dim: int,
        *,
        hooks: WriteHooks | None = None,
        count: Callable[[str, int], None] | None = None,
    ) -> IndexWriter:
        """A writer on the stores of ``settings`` (``ragsync.config.open_*``)
        and on every index version in state ``building`` (read now).

        Args:
            settings: the home.
            dim: the live vectors' dimension.
            hooks, count: see the class.

        Raises:
            ConfigurationError: a store does not exist.
        """
        from ragsync.config import open_catalog, open_keyword_index, open_vector_index

        opened: list[Any] = [open_catalog(settings)]
        try:
            opened.append(open_vector_index(settings, dim))
            opened.append(open_keyword_index(settings))
            writer = cls(settings, *opened, hooks=hooks, count=count)
            writer.shadows = writer._open_shadows()
        except BaseException:
            for store in reversed(opened):
                store.close()
            raise
        return writer

    def _open_shadows(self) -> list[tuple[Any, Any, Any]]:
        from ragsync import index_versions as iv

        try:
            building = [v for v in iv.list_versions(self.settings) if v.state == iv.BUILDING]
        except ConfigurationError:
            return []
        return [
            (v, iv.open_version_vector(self.settings, v), iv.open_version_keyword(self.settings, v))
            for v in building
        ]

    def close(self) -> None:
        """Close every store: the building versions' and the live keyword
        index first (a keyword writer holds a lock), the catalog last."""
        stores: list[Any] = []
        for _, vec, kw in self.shadows:
            stores += [kw, vec]
        stores += [self.keywords, self.vectors]
        self.shadows = []
        for store in stores:
            store.close()
        self.catalog.close()

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the ragsync counter ``name``.

        Raises:
            ValueError: ``name`` is not declared in ``ragsync.counters.COUNTERS``.
        """
        self.counts[declared(name)] += n
        if self._on_count is not None:
            self._on_count(name, n)

    # -- the indexes: the live one and every building version ---------------------

    def _index_chunks(self, chunks: list[Chunk], vectors: list[list[float]]) -> None:
        """Upsert ``chunks`` (with their live-model ``vectors``) into both
        indexes, then into every building version, embedded with its model
        (``ragsync.embedding.embed_with_cache``: cache first).

        Raises:
            EmbedFailedError: a building version's model gave no vector.
        """
        if not chunks:
            return
        self.vectors.upsert(chunks, vectors)
        self.keywords.upsert(chunks)
        if not self.shadows:
            return
        from ragsync.embedding import embed_failure, embed_with_cache, get_model
        from ragsync.index_versions import settings_for_version

        for version, vec, kw in self.shadows:
            # The version's own backend (recorded in its model version), not the setting's.
            model = get_model(version.model_name, settings_for_version(self.settings, version))
            got = embed_with_cache(
                self.catalog,
                model,
                chunks,
                batch_size=self.settings.embed_batch_size,
                version=version.model_version,
            )
            if got.failures:
                raise embed_failure(got.failures)
            vec.upsert(chunks, [got.vectors[c.text_hash].tolist() for c in chunks])
            kw.upsert(chunks)

    def _set_index_acl(self, tenant_id: str, chunks: list[Chunk], acl_ids: list[str]) -> None:
        """Give ``chunks`` (already carrying ``acl_ids``) their new ACL in
        both indexes and every building version (not the chunk rows)."""
        if not chunks:
            return
        chunk_ids = [c.chunk_id for c in chunks]
        self.vectors.set_acl_ids(tenant_id, chunk_ids, acl_ids)
        self.keywords.set_acl_ids(tenant_id, chunks)
        for _, vec, kw in self.shadows:
            vec.set_acl_ids(tenant_id, chunk_ids, acl_ids)
            kw.set_acl_ids(tenant_id, chunks)

    def remove_chunks(self, tenant_id: str, chunk_ids: list[str]) -> None:
        """Delete ``chunk_ids`` from both indexes and every building version,
        then their chunk rows (in that order: a crash leaves rows that point
        at nothing, never a searchable chunk without its row)."""
        if not chunk_ids:
            return
        self.vectors.delete(tenant_id, chunk_ids)
        self.keywords.delete(tenant_id, chunk_ids)
        for _, vec, kw in self.shadows:
            vec.delete(tenant_id, chunk_ids)
            kw.delete(tenant_id, chunk_ids)
        self.catalog.delete_chunks(chunk_ids)

    # -- a batch of embedded documents --------------------------------------------

    def write_batch(self, batch: Sequence[EmbeddedPlan]) -> BatchOutcome:
        """Write a batch of embedded documents; each document on its own
        (one that fails does not stop the others).

        Timeline for one document (each step idempotent, so a crash anywhere
        and a replay of the same plan converge):
          1. upsert the new chunks into the vector index, then the keyword
             index (one upsert and one commit for all documents of the batch);
          2. write every chunk row to the catalog (a new row is pending:
             queries do not show it; a kept chunk's row stays live);
          3. flip the document's indexed version (one transaction, which makes
             exactly the new version's chunk rows live and the replaced ones
             pending) - from here a query sees the new version complete, and
             before it only the old one;
          4. delete the vanished chunks from both indexes, then their rows.
        Steps 2-4 run document by document once step 1 is done for the
        batch, so every document is still indexed before it is flipped and
        flipped before its old chunks go. A crash after 1 leaves index rows
        with no catalog row, after 2 pending rows; neither is searchable, and
        the next run writes the same ids again (or the end-of-run sweep and
        repair remove them). Documents of one batch are as independent as
        documents written by two workers at once.

        Args:
            batch: the documents, each with a vector for each new chunk.

        Returns:
            The outcome of each item: written, superseded (event-driven work
            overtaken by a newer version or a delete: nothing written,
            counted ``events_stale``) or failed with its exception.
        """
        out = BatchOutcome()
        ready: list[EmbeddedPlan] = []
        for embedded in batch:
            try:
                if self._superseded(embedded.plan):
                    # A newer version of this document was accepted (or it
                    # was deleted) while this one was being embedded: writing
                    # it now would roll the document back.
                    self.count("events_stale")
                    out.superseded.append(embedded.plan)
                    continue
                self._leave_old_content(embedded.plan)
                ready.append(embedded)
            except Exception as exc:
                out.failed.append((embedded, exc))
        indexed = self._index(ready, out.failed)
        for _ in indexed:
            self._docs_indexed += 1
            self.hooks.after_index_writes(self._docs_indexed)
        for embedded in indexed:
            try:
                self._publish(embedded.plan)
            except Exception as exc:
                out.failed.append((embedded, exc))
                continue
            out.written.append(embedded)
        return out

    def _superseded(self, plan: DocumentPlan) -> bool:
        """True when the catalog holds a newer content version or a tombstone
        at or above this plan's version (event-driven work and work re-read
        from a stored copy only; a backfill listing has no version order)."""
        src = plan.doc.source
        if not src.event_id and not src.stored_copy:
            return False
        version = source_file_stamp(src)
        tomb = row_stamp(self.catalog.get_tombstone(plan.doc.doc_id), "source_version")
        if tomb is not None and compare_versions(version, tomb) != Order.NEWER:
            return True
        doc = self.catalog.get_document(plan.doc.doc_id)
        held = document_stamp(doc, doc.source_version or None) if doc is not None else None
        if held is not None:
            # The flip is guarded by the version seen here: a newer version
            # flipped meanwhile (another lane's writer) refuses it.
            self._seen_versions[plan.doc.doc_id] = held.value
        return held is not None and compare_versions(version, held) == Order.OLDER

    def _leave_old_content(self, plan: DocumentPlan) -> None:
        """A document rewritten with other bytes: its old bytes may still be
        another document's, and that copy takes over the old chunks before
        they are rewritten (no re-embedding)."""
        stored = self.catalog.get_document(plan.doc.doc_id)
        if stored is not None and stored.content_hash not in (None, plan.doc.content_hash):
            self.sync_copies(plan.doc.doc_id, leaving=True)

    def _index(
        self, ready: list[EmbeddedPlan], failed: list[tuple[EmbeddedPlan, Exception]]
    ) -> list[EmbeddedPlan]:
        """Step 1 for the batch: one upsert into each index. When that fails,
        each document is tried alone, so only the ones that fail alone are
        added to ``failed``. Returns the documents indexed."""
        try:
            self._upsert_new_chunks(ready)
            return ready
        except Exception as exc:
            if len(ready) == 1:
                failed.append((ready[0], exc))
                return []
        indexed = []
        for embedded in ready:
            try:
                self._upsert_new_chunks([embedded])
            except Exception as exc:
                failed.append((embedded, exc))
                continue
            indexed.append(embedded)
        return indexed

    def _upsert_new_chunks(self, group: list[EmbeddedPlan]) -> None:
        new: list[Chunk] = []
        vectors: list[list[float]] = []
        for embedded in group:
            by_id = {c.chunk_id: c for c in embedded.plan.chunks}
            for cid in embedded.plan.new_ids:
                new.append(by_id[cid])
                vectors.append(embedded.vectors[cid].tolist())
        self._index_chunks(new, vectors)

    def _publish(self, plan: DocumentPlan) -> None:
        """Steps 2-4 for one document whose new chunks are indexed.

        Raises:
            WriteError: a newer version was flipped meanwhile (retried).
        """
        doc = plan.doc
        tenant = doc.source.tenant_id
        # Kept chunks whose permissions changed with the content get the new
        # ACL ids in place (no re-embedding).
        new_ids = set(plan.new_ids)
        stored = self.catalog.chunks_by_ids([c.chunk_id for c in plan.chunks if c.chunk_id not in new_ids])
        moved = [c for c in plan.chunks if c.chunk_id in stored and stored[c.chunk_id].acl_ids != c.acl_ids]
        self._set_index_acl(tenant, moved, list(plan.acl_ids))
        # New chunk rows stay pending (unseen by queries) until the flip
        # names the new version's chunk ids, in its own transaction.
        self.catalog.write_chunks(list(plan.chunks), pending=True)
        self.count("chunks_written", len(new_ids))
        self.hooks.before_flip(self._flips + 1, plan)
        flipped = self.catalog.flip_indexed_version(
            doc.doc_id,
            content_hash=doc.content_hash,
            source_version=doc.source.source_version,
            indexed_version=doc.source.source_version,
            chunker_id=plan.chunker_id,
            parser_version=plan.parser_version,
            chunk_count=len(plan.chunks),
            indexed_at=time.time(),
            mime=doc.mime,
            version_domain=doc.source.version_domain or None,
            version_observed_at=doc.source.observed_at or doc.source.event_time or None,
            expected_version_guard=self._seen_versions.pop(doc.doc_id, None),
            live_chunk_ids=[c.chunk_id for c in plan.chunks],
            by_event=bool(doc.source.event_id),
        )
        if not flipped:
            # Overtaken between the superseded check and here: the event runs
            # again and is then stale (its chunk rows are the next write's
            # vanished ones).
            raise WriteError(f"{doc.doc_id}: a newer version was written meanwhile; retried")
        self._flips += 1
        self.hooks.after_flip(self._flips, plan)
        # Near-duplicate grouping (MinHash over the document's chunk texts):
        # queries show only the newest document of a group.
        sig = near_dup.signature("\n\n".join(c.text for c in plan.chunks))
        self.catalog.set_near_dup(doc.doc_id, tenant, sig, near_dup.band_keys(sig))
        if plan.vanished_ids:
            vanished = list(plan.vanished_ids)
            self.remove_chunks(tenant, vanished)
            self.count("chunks_deleted", len(vanished))
        # Copies linked in earlier runs or by events read these chunks too.
        self.sync_copies(doc.canonical_doc_id)
        self.count("documents_indexed")

    # -- permissions ----------------------------------------------------------------

    def apply_document_acl(self, doc_id: str, tenant_id: str, acl_id: str) -> int:
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
        catalog = self.catalog
        doc = catalog.get_document(doc_id)
        if doc is None:
            return 0
        holder = doc.canonical_doc_id or doc_id
        self.sync_copies(holder, acl_overrides={doc_id: acl_id})
        catalog.set_document_acl(doc_id, acl_id)
        for child in catalog.children_of(doc_id):  # attachments and members take the parent's groups
            self.apply_document_acl(child.doc_id, tenant_id, acl_id)
        return len(catalog.chunk_ids_for_doc(holder))

    # -- exact copies -------------------------------------------------------------------

    def sync_copies(
        self, owner_id: str, *, acl_overrides: Mapping[str, str] | None = None, leaving: bool = False
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
        catalog = self.catalog
        owner = catalog.get_document(owner_id)
        if owner is None or not owner.content_hash:
            return CopiesPlan(None, False, (), ())
        identities = copy_identities(catalog, owner, acl_overrides=acl_overrides, leaving=leaving)
        plan = plan_copies(owner_id, owner.content_hash, identities)
        if plan.holder is None:
            return plan
        chunks = catalog.chunks_for_doc(owner_id)
        if plan.promote:
            if chunks:  # nothing to hand over: the copy is processed on its own next time
                self.promote(owner, plan, chunks)
            return plan
        acl = tuple(plan.acl_ids)
        moved = [replace(c, acl_ids=acl) for c in chunks if tuple(c.acl_ids) != acl]
        if moved:
            self._set_index_acl(owner.tenant_id, moved, list(acl))
            catalog.set_chunk_acl_ids(owner_id, list(acl))
        return plan

    def promote(self, owner: Any, plan: CopiesPlan, chunks: list[Chunk]) -> None:
        """Re-key ``owner``'s chunks to ``plan.holder`` without re-embedding
        (vectors from :meth:`vectors_for`): both indexes first, then the
        chunk rows and the document rows in one transaction; the owner's old
        rows stay for the caller to delete or rewrite. Counts ``copies_promoted``.

        Args:
            owner: the ``DocumentRow`` that held the chunks.
            plan: ``sync_copies``' plan, ``holder`` set.
            chunks: the owner's chunk rows.
        """
        catalog = self.catalog
        holder = str(plan.holder)
        chunker_id = owner.chunker_id or ""
        acl = tuple(plan.acl_ids)
        rekeyed = [
            replace(c, chunk_id=ids.chunk_id(holder, chunker_id, c.text_hash), doc_id=holder, acl_ids=acl)
            for c in chunks
        ]
        if rekeyed:
            vectors = self.vectors_for(rekeyed)
            self._index_chunks(rekeyed, [vectors[c.text_hash] for c in rekeyed])
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
        self.count("copies_promoted")

    def vectors_for(self, chunks: Iterable[Chunk]) -> dict[str, list[float]]:
        """Vectors of ``chunks`` by text hash for the live model, from the
        embedding cache (``ragsync.embedding.cached_vectors``; a vector
        missing there is computed and counted as ``chunks_embedded``)."""
        from ragsync.embedding import cached_vectors
        from ragsync.index_versions import live_spec

        vectors, fresh = cached_vectors(self.catalog, live_spec(self.settings), list(chunks))
        if fresh:
            self.count("chunks_embedded", fresh)
        return vectors

    def retire_holder(self, doc_id: str) -> int:
        """``doc_id`` stops holding its chunks (it became a copy of other
        content): promote one of its copies if any is left, then delete its
        own chunk rows everywhere. Returns the number of chunks deleted."""
        self.sync_copies(doc_id, leaving=True)
        doc = self.catalog.get_document(doc_id)
        chunk_ids = sorted(self.catalog.chunk_ids_for_doc(doc_id))
        if chunk_ids and doc is not None:
            self.remove_chunks(doc.tenant_id, chunk_ids)
        return len(chunk_ids)

    def record_duplicate(self, doc: FetchedDocument) -> None:
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
        cat = self.catalog
        stored = cat.get_document(doc.doc_id)
        if stored is not None and (stored.canonical_doc_id or doc.doc_id) == doc.doc_id:
            self.retire_holder(doc.doc_id)
        cat.mark_duplicate(
            doc.doc_id,
            doc.canonical_doc_id,
            content_hash=doc.content_hash,
            written=source_file_stamp(doc.source),
            by_event=bool(doc.source.event_id),
        )
        self.sync_copies(doc.canonical_doc_id)
        row = cat.get_document(doc.doc_id)
        if row is None:
            return
        holder = cat.get_document(row.canonical_doc_id) if row.canonical_doc_id else None
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
            self.count("copies_relinked")
            raise WriteError(
                f"{doc.doc_id} was linked as a copy of {row.canonical_doc_id}, which no longer "
                "serves its bytes (deleted meanwhile): processed again"
            )
