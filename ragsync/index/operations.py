"""What the pipeline asks of the index service, one operation per kind of
change, in the shape of Beam's ``ModelHandler``.

Beam's ``RunInference`` is one generic transform; what differs between
models is a Beam-free ``ModelHandler`` (load the model, run a batch, say how
to batch). ragsync's writes follow the same shape: one generic step,
``transforms.index.UpdateIndex``, opens an
:class:`~ragsync.index.service.IndexService` once per worker
(:meth:`IndexOperation.open`, like ``load_model``), batches its input as
:attr:`IndexOperation.batch_size` says, and hands each batch to
:meth:`IndexOperation.apply` (like ``run_inference``). Nothing here imports
Beam; tests call the operations with a service directly.

==================== ============================ ==================== =====================
operation            input                        main output          stage (dead letters)
==================== ============================ ==================== =====================
WriteDocuments       ``EmbeddedPlan`` (batched)   ``written`` plans    write
ApplyPermissions     ``FetchedDocument``          ``updated``          acl
ApplyAclEvents       ``QueuedEvent`` (acl)        ``updated``          acl
RecordDuplicates     ``FetchedDocument`` (copy)   ``recorded``         copies
RefreshCopies        ``(holder id, document)``    ``refreshed``        copies
DeleteDocuments      ``QueuedEvent`` (delete)     ``deleted``          delete
DeleteStaleChildren  ``SourceFile`` (a child)     ``deleted``          delete
==================== ============================ ==================== =====================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ragsync import ids
from ragsync.model import FetchedDocument, QueuedEvent, SourceFile

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.config import Settings
    from ragsync.index.hooks import WriteHooks
    from ragsync.index.service import EmbeddedPlan, IndexService

WRITE_BATCH_CHUNKS = 256
"""New chunks per write batch: the documents of one batch share one vector
upsert and one keyword-index commit (a commit syncs files to disk: ~10 ms,
more than the rest of a small document's write)."""


@dataclass
class Applied:
    """What an operation did with one batch.

    Attributes:
        done: records for the main output (each input once it is applied).
        tagged: ``(output name, record)`` for the other outputs.
        failed: ``(input, exception)`` of each input that failed on its own
            (the others of the batch went on); each becomes a dead letter.
    """

    done: list[Any] = field(default_factory=list)
    tagged: list[tuple[str, Any]] = field(default_factory=list)
    failed: list[tuple[Any, Exception]] = field(default_factory=list)


class IndexOperation:
    """One kind of change to the index, applied by the generic step.

    Class attributes:
        stage: the step's stage (its metrics, and the stage of its dead letters).
        output: the name of the main output.
        outputs: names of the other outputs (``Applied.tagged``).
        counter: the ragsync counter added to once per input done ('' for none).
        batch_size: inputs per batch: 1 calls :meth:`apply_one` for each
            input (what it raises is that input's dead letter); more batches
            by :meth:`size`, up to ``batch_size``, and calls :meth:`apply`.
    """

    stage: ClassVar[str] = ""
    output: ClassVar[str] = "done"
    outputs: ClassVar[tuple[str, ...]] = ()
    counter: ClassVar[str] = ""
    batch_size: ClassVar[int] = 1

    def open(
        self,
        settings: Settings,
        dim: int,
        *,
        hooks: WriteHooks,
        count: Callable[[str, int], None],
        remove_object: Callable[[str], object],
    ) -> IndexService:
        """The service this operation applies changes through (once per worker)."""
        from ragsync.index.service import IndexService

        return IndexService.open(settings, dim, hooks=hooks, count=count, remove_object=remove_object)

    def size(self, item: Any) -> int:
        """How much of a batch ``item`` fills (default 1)."""
        return 1

    def apply(self, service: IndexService, batch: Sequence[Any]) -> Applied:
        """Apply a batch (default: :meth:`apply_one` for each input, a failing
        input recorded on its own)."""
        out = Applied()
        for item in batch:
            try:
                out.done.append(self.apply_one(service, item))
            except Exception as exc:
                out.failed.append((item, exc))
        return out

    def apply_one(self, service: IndexService, item: Any) -> Any:
        """Apply one input; returns the record for the main output.

        Raises:
            Exception: anything; the input becomes a dead letter of :attr:`stage`.
        """
        raise NotImplementedError


class WriteDocuments(IndexOperation):
    """Embedded documents -> indexed, flipped, vanished chunks deleted
    (``IndexService.write_batch``). ``superseded``: plans overtaken by a
    newer version or a delete (nothing written)."""

    stage = "write"
    output = "written"
    outputs = ("superseded",)
    batch_size = WRITE_BATCH_CHUNKS

    def size(self, item: EmbeddedPlan) -> int:
        return max(1, len(item.plan.new_ids))

    def apply(self, service: IndexService, batch: Sequence[EmbeddedPlan]) -> Applied:
        outcome = service.write_batch(batch)
        return Applied(
            done=[e.plan for e in outcome.written],
            tagged=[("superseded", plan) for plan in outcome.superseded],
            failed=list(outcome.failed),
        )


class ApplyPermissions(IndexOperation):
    """A document with unchanged bytes and new permissions (a listing found
    them) -> the same, once every store serves its new ACL id."""

    stage, output, counter = "acl", "updated", "documents_acl_updated"

    def apply_one(self, service: IndexService, doc: FetchedDocument) -> FetchedDocument:
        service.apply_document_acl(doc.doc_id, doc.source.tenant_id, doc.acl_id)
        return doc


class ApplyAclEvents(IndexOperation):
    """An ``acl`` event -> the same, once applied with its evidence
    (``IndexService.apply_permission_event``). No groups means nobody may
    read the document (fail closed)."""

    stage, output, counter = "acl", "updated", "documents_acl_updated"

    def apply_one(self, service: IndexService, qe: QueuedEvent) -> QueuedEvent:
        service.apply_permission_event(
            qe.doc_id,
            qe.tenant_id,
            list(qe.event.acl_groups),
            list(qe.event.deny_groups),
            source_version=qe.event.source_version,
            version_domain=qe.version_domain,
            observed_at=qe.event.event_time,
        )
        return qe


class RecordDuplicates(IndexOperation):
    """An exact copy -> the same, once linked to its canonical copy, whose
    chunks then carry the copy's groups too (``IndexService.record_duplicate``)."""

    stage, output = "copies", "recorded"

    def apply_one(self, service: IndexService, doc: FetchedDocument) -> FetchedDocument:
        service.record_duplicate(doc)
        return doc


class RefreshCopies(IndexOperation):
    """``(holder doc id, document that left it)`` -> the same pair, once the
    holder's chunks carry the union of its remaining copies' ACL ids (the
    copy was edited into other bytes)."""

    stage, output = "copies", "refreshed"

    def apply_one(
        self, service: IndexService, left: tuple[str, FetchedDocument]
    ) -> tuple[str, FetchedDocument]:
        service.sync_copies(left[0])
        return left


class DeleteDocuments(IndexOperation):
    """A ``delete`` event -> the same, once the document and its children are
    gone everywhere (``IndexService.delete_document``); otherwise retried."""

    stage, output, counter = "delete", "deleted", "documents_deleted"

    def apply_one(self, service: IndexService, qe: QueuedEvent) -> QueuedEvent:
        service.delete_document(
            qe.doc_id,
            qe.tenant_id,
            qe.event.source_version,
            version_domain=qe.version_domain,
            observed_at=qe.event.event_time,
        )
        return qe


class DeleteStaleChildren(IndexOperation):
    """A child its edited parent no longer has (an attachment, an archive
    member) -> the same, once deleted everywhere."""

    stage, output, counter = "delete", "deleted", "children_deleted"

    def apply_one(self, service: IndexService, child: SourceFile) -> SourceFile:
        service.delete_document(
            ids.doc_id(child.tenant_id, child.source_id, child.source_object_id),
            child.tenant_id,
            child.source_version,
            version_domain=child.version_domain,
            observed_at=child.observed_at or child.event_time or None,
        )
        return child
