"""The index service: every change to the vector index, the keyword index
and the catalog rows that say what they hold, in one place.

One :class:`IndexService` owns the catalog and the open stores
(:class:`ragsync.index.stores.IndexStores`: the live indexes and every
index version being built beside them) and is the only code that changes
them:

* a batch of embedded documents: index, flip, delete what vanished
  (:meth:`IndexService.write_batch`);
* permissions: a document's new ACL id (:meth:`~IndexService.apply_document_acl`);
* exact copies: linking a copy, keeping the ACL union of a content's
  copies, promoting a copy when its holder goes (``ragsync.index.copies``);
* deletes: tombstone, copies, chunks, raw and parsed copies, verification
  (:meth:`~IndexService.delete_document`, ``ragsync.index.deletes``);
* re-embedding: writing into a version being built and pruning it
  (:meth:`~IndexService.write_into_version`, ``ragsync.index.maintenance``);
* the orphan sweep and the repair (``ragsync.index.maintenance``).

The pipeline reaches it through one generic Beam step
(``transforms.index.UpdateIndex`` with an operation of
``ragsync.index.operations``); the command line, the control plane and the
tests open it directly (``IndexService.open``). Index versions (create,
flip, roll back, drop) are ``ragsync.index.versions``; the backends it opens
are ``ragsync.index.backends``.

Fault injection: the service calls its :class:`ragsync.index.hooks.WriteHooks`
at the points a crash test stops a run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ragsync.decisions import (
    CopiesPlan,
    Order,
    compare_versions,
    document_stamp,
    row_stamp,
    source_file_stamp,
)
from ragsync.errors import WriteError
from ragsync.index import copies, deletes, maintenance
from ragsync.index.core import IndexCore
from ragsync.ingest import near_dup
from ragsync.model import Chunk, DocumentPlan, FetchedDocument

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(frozen=True)
class EmbeddedPlan:
    """A plan with a vector for each of its new chunks.

    Attributes:
        plan: the document plan.
        vectors: chunk id -> vector, for every id in ``plan.new_ids``.
    """

    plan: DocumentPlan
    vectors: dict[str, np.ndarray]


@dataclass
class BatchOutcome:
    """What :meth:`IndexService.write_batch` did with each item of a batch.

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


class IndexService(IndexCore):
    """The catalog, the open stores and every change to them (the module
    docstring lists them). Open with :meth:`IndexCore.open`
    (``IndexService.open(settings, dim)``); arguments as :class:`IndexCore`."""

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
        tomb = row_stamp(self.catalog.gate_state.get_tombstone(plan.doc.doc_id), "source_version")
        if tomb is not None and compare_versions(version, tomb) != Order.NEWER:
            return True
        doc = self.catalog.documents.get_document(plan.doc.doc_id)
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
        stored = self.catalog.documents.get_document(plan.doc.doc_id)
        if stored is not None and stored.content_hash not in (None, plan.doc.content_hash):
            copies.sync_copies(self, plan.doc.doc_id, leaving=True)

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
        self.index_chunks(new, vectors)

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
        stored = self.catalog.chunks.chunks_by_ids(
            [c.chunk_id for c in plan.chunks if c.chunk_id not in new_ids]
        )
        moved = [c for c in plan.chunks if c.chunk_id in stored and stored[c.chunk_id].acl_ids != c.acl_ids]
        self.set_index_acl(tenant, moved, list(plan.acl_ids))
        # New chunk rows stay pending (unseen by queries) until the flip
        # names the new version's chunk ids, in its own transaction.
        self.catalog.chunks.write_chunks(list(plan.chunks), pending=True)
        self.count("chunks_written", len(new_ids))
        self.hooks.before_flip(self._flips + 1, plan)
        flipped = self.catalog.documents.flip_indexed_version(
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
        self.catalog.copies.set_near_dup(doc.doc_id, tenant, sig, near_dup.band_keys(sig))
        # The paragraphs it holds count towards its source's boilerplate (ragsync.ingest.boilerplate).
        self.catalog.paragraphs.record(tenant, doc.source.source_id, doc.doc_id, plan.paragraphs)
        if plan.vanished_ids:
            vanished = list(plan.vanished_ids)
            self.remove_chunks(tenant, vanished)
            self.count("chunks_deleted", len(vanished))
        # Copies linked in earlier runs or by events read these chunks too.
        copies.sync_copies(self, doc.canonical_doc_id)
        self.count("documents_indexed")

    # -- permissions and exact copies (ragsync.index.copies) ---------------------------

    def apply_document_acl(self, doc_id: str, tenant_id: str, acl_id: str) -> int:
        """Give ``doc_id`` and its child documents the ACL ``acl_id`` everywhere
        their chunks are served (``ragsync.index.copies.apply_document_acl``).
        Returns the number of chunks that now carry it."""
        return copies.apply_document_acl(self, doc_id, tenant_id, acl_id)

    def apply_permission_event(
        self,
        doc_id: str,
        tenant_id: str,
        groups: Sequence[str],
        deny: Sequence[str],
        *,
        source_version: str,
        version_domain: str = "",
        observed_at: float | None = None,
    ) -> int:
        """Apply a permission change with its evidence: the ACL row of
        ``groups`` / ``deny``, the document's chunks everywhere
        (:meth:`apply_document_acl`), then the permission version it was
        true at (what later evidence is weighed against). No groups means
        nobody may read the document (fail closed). Returns the number of
        chunks that now carry it."""
        from ragsync import ids

        acl_id = ids.acl_id(tenant_id, list(groups), list(deny))
        self.catalog.acls.upsert_acl(acl_id, tenant_id, list(groups), list(deny))
        chunks = self.apply_document_acl(doc_id, tenant_id, acl_id)
        self.catalog.gate_state.set_acl_version(
            doc_id, tenant_id, source_version, acl_id, version_domain=version_domain, observed_at=observed_at
        )
        return chunks

    def sync_copies(
        self, owner_id: str, *, acl_overrides: Mapping[str, str] | None = None, leaving: bool = False
    ) -> CopiesPlan:
        """Bring the chunks ``owner_id`` holds in line with its live copies
        (``ragsync.index.copies.sync_copies``)."""
        return copies.sync_copies(self, owner_id, acl_overrides=acl_overrides, leaving=leaving)

    def record_duplicate(self, doc: FetchedDocument) -> None:
        """Link ``doc``, an exact copy, to its canonical copy
        (``ragsync.index.copies.record_duplicate``).

        Raises:
            WriteError: the holder was deleted meanwhile (retryable).
        """
        copies.record_duplicate(self, doc)

    def retire_holder(self, doc_id: str) -> int:
        """``doc_id`` stops holding its chunks (``ragsync.index.copies.retire_holder``);
        returns the number of chunks deleted."""
        return copies.retire_holder(self, doc_id)

    # -- deletes (ragsync.index.deletes) -------------------------------------------------

    def delete_document(
        self,
        doc_id: str,
        tenant_id: str,
        source_version: str,
        *,
        version_domain: str = "",
        observed_at: float | None = None,
    ) -> int:
        """Delete one document and its child documents everywhere
        (``ragsync.index.deletes.delete_document``). Returns the number of documents deleted.

        Raises:
            WriteError: a store still holds chunks of the document (retried).
        """
        return deletes.delete_document(
            self, doc_id, tenant_id, source_version, version_domain=version_domain, observed_at=observed_at
        )

    # -- re-embedding, sweep and repair (ragsync.index.maintenance) ----------------------

    def write_into_version(
        self, version: int, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
    ) -> None:
        """Upsert ``chunks`` with vectors of building version ``version``'s
        model into that version's stores only (a re-embedding).

        Raises:
            ConfigurationError: ``version`` is not being built.
        """
        maintenance.write_into_version(self, version, chunks, vectors)

    def prune_version(self, version: int, orphans: Iterable[str]) -> int:
        """Delete from building version ``version`` the rows in ``orphans``
        (chunks that left the catalog). Returns how many were deleted."""
        return maintenance.prune_version(self, version, set(orphans))

    def sweep_orphans(self) -> int:
        """Delete live index rows that have no chunk row in the catalog
        (``ragsync.index.maintenance.sweep_orphans``). Returns how many."""
        return maintenance.sweep_orphans(self)

    def repair(self) -> maintenance.RepairReport:
        """Fix what reconciliation finds (``ragsync.index.maintenance.repair``)."""
        return maintenance.repair(self)
