"""Permission changes: metadata updates only, never a fetch, parse or embed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync import ids
from ragsync.config import Settings
from ragsync.model import FetchedDocument, QueuedEvent
from transforms.copies import CopiesDoFn, sync_copies
from transforms.dead_letters import GuardedStep


def apply_document_acl(step: Any, doc_id: str, tenant_id: str, acl_id: str) -> int:
    """Give ``doc_id`` (and its child documents) the ACL ``acl_id`` everywhere their chunks are served.

    The chunks belong to the document's canonical copy (itself, or the
    document it duplicates); they carry the union of the live copies' ACL ids
    (``transforms.copies.sync_copies``, with this document's new ACL id). The
    stores that answer queries are updated before the catalog rows, so a
    removal is enforced as early as possible; a failure part-way leaves the
    document row on its old ACL id and the change is applied again on retry.

    Args:
        step: the ``StoresDoFn`` running the change (catalog, indexes and
            the index versions being built).
        doc_id: the document.
        tenant_id: its tenant.
        acl_id: its new ACL id.

    Returns:
        Number of chunks that now carry the union (0 when the document is unknown).
    """
    catalog = step._catalog
    doc = catalog.get_document(doc_id)
    if doc is None:
        return 0
    holder = doc.canonical_doc_id or doc_id
    sync_copies(step, holder, acl_overrides={doc_id: acl_id})
    catalog.set_document_acl(doc_id, acl_id)
    for child in catalog.children_of(doc_id):  # attachments and members take the parent's groups
        apply_document_acl(step, child.doc_id, tenant_id, acl_id)
    return len(catalog.chunk_ids_for_doc(holder))


class _AclFnBase(CopiesDoFn):
    metrics_stage = "acl"


class AclStep(_AclFnBase):
    """The stores of a permission change, for a step that is not one itself
    (the fetch stage applies new permissions to a live version): call
    ``setup()`` and ``teardown()`` like Beam would."""


class _ApplyAclFn(_AclFnBase):
    """FetchedDocument with unchanged bytes and new permissions -> doc id."""

    def process(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        yield from self._stage.run(self._apply, doc)

    def _apply(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        apply_document_acl(self, doc.doc_id, doc.source.tenant_id, doc.acl_id)
        self.count("documents_acl_updated")
        yield doc


class _ApplyAclEventFn(_AclFnBase):
    """QueuedEvent (acl) -> the event once applied. No groups means nobody
    may read the document (fail closed): its chunks get an ACL no user holds."""

    def process(self, qe: QueuedEvent) -> Iterator[QueuedEvent]:
        yield from self._stage.run(self._apply, qe)

    def _apply(self, qe: QueuedEvent) -> Iterator[QueuedEvent]:
        groups, deny = list(qe.event.acl_groups), list(qe.event.deny_groups)
        acl_id = ids.acl_id(qe.tenant_id, groups, deny)
        self._catalog.upsert_acl(acl_id, qe.tenant_id, groups, deny)
        apply_document_acl(self, qe.doc_id, qe.tenant_id, acl_id)
        self._catalog.set_acl_version(
            qe.doc_id,
            qe.tenant_id,
            qe.event.source_version,
            acl_id,
            version_domain=qe.version_domain,
            observed_at=qe.event.event_time,
        )
        self.count("documents_acl_updated")
        yield qe


class ApplyAclChanges(GuardedStep):
    """Apply permission changes.

    Input: ``FetchedDocument`` (a backfill found new permissions on unchanged
    bytes) or, with ``events=True``, ``QueuedEvent`` (an acl event).
    Outputs: ``updated`` (the input records, once applied) and ``dead``.
    """

    label_, output, stage, dead_label = "ApplyAcl", "updated", "acl", "AclDeadLetters"

    def __init__(self, settings: Settings, dim: int, *, events: bool = False) -> None:
        super().__init__(settings, dim)
        self.events = events

    def make_fn(self) -> beam.DoFn:
        return (_ApplyAclEventFn if self.events else _ApplyAclFn)(self.settings, self.dim)
