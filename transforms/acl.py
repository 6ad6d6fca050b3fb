"""Permission changes: metadata updates only, never a fetch, parse or embed
(``ragsync.index.service.IndexService.apply_document_acl``)."""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from ragsync import ids
from ragsync.config import Settings
from ragsync.model import FetchedDocument, QueuedEvent
from transforms.dead_letters import GuardedStep
from transforms.steps import WriterDoFn


class _AclFnBase(WriterDoFn):
    metrics_stage = "acl"


class _ApplyAclFn(_AclFnBase):
    """FetchedDocument with unchanged bytes and new permissions -> doc id."""

    def process(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        yield from self._stage.run(self._apply, doc)

    def _apply(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        self.writer.apply_document_acl(doc.doc_id, doc.source.tenant_id, doc.acl_id)
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
        self.writer.apply_document_acl(qe.doc_id, qe.tenant_id, acl_id)
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
