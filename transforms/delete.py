"""Deletes (priority path): tombstone first, then every trace of the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.errors import WriteError
from ragsync.model import QueuedEvent
from ragsync.parsing import PARSER_VERSION
from transforms.common import StageMetrics, ToDeadLetters, counter
from transforms.copies import CopiesDoFn, sync_copies
from transforms.io import delete_if_exists


class _DeleteFn(CopiesDoFn):
    """QueuedEvent (delete) -> the event once the document is gone everywhere.

    Order: tombstone (blocks older upserts at once), the exact copies
    (``transforms.copies``: a copy's groups leave its holder's chunks; a
    holder's chunks are first re-keyed to a live copy), chunks from the vector
    index, the keyword index and the chunks table, then the parsed elements
    and the raw copy (unless another live document has the same bytes).
    Completion is recorded only after each store is checked and holds
    nothing of the document; otherwise the event is retried.
    """

    def setup(self) -> None:
        super().setup()
        self._deleted = counter("chunks_deleted")
        self._docs = counter("documents_deleted")
        self._stage = StageMetrics("delete")

    def process(self, qe: QueuedEvent) -> Iterator[Any]:
        yield from self._stage.run(self._delete, qe)

    def _delete(self, qe: QueuedEvent) -> Iterator[Any]:
        cat = self._catalog
        doc = cat.get_document(qe.doc_id)
        cat.put_tombstone(
            qe.doc_id,
            qe.tenant_id,
            qe.event.source_version,
            version_domain=qe.version_domain,
            observed_at=qe.event.event_time,
        )
        if doc is not None and (doc.canonical_doc_id or qe.doc_id) != qe.doc_id:
            # An exact copy: its holder's chunks lose its groups.
            sync_copies(self, str(doc.canonical_doc_id))
        else:
            # A holder: a live copy left takes over its chunks (no re-embedding).
            sync_copies(self, qe.doc_id)
        chunk_ids = sorted(cat.chunk_ids_for_doc(qe.doc_id))
        if chunk_ids:
            self._vectors.delete(qe.tenant_id, chunk_ids)
            self._keywords.delete(qe.tenant_id, chunk_ids)
            self.shadow_delete(qe.tenant_id, chunk_ids)
            cat.delete_chunks(chunk_ids)
            self._deleted.inc(len(chunk_ids))
        if doc is not None and doc.content_hash and not cat.content_in_use(doc.content_hash, qe.doc_id):
            delete_if_exists(self.settings.parsed_uri(doc.content_hash, PARSER_VERSION))
            delete_if_exists(self.settings.raw_uri(doc.content_hash))
        left = {
            "vector": self._vectors.count_by_doc(qe.tenant_id).get(qe.doc_id, 0),
            "keyword": self._keywords.count_by_doc(qe.tenant_id).get(qe.doc_id, 0),
            "catalog": len(cat.chunk_ids_for_doc(qe.doc_id)),
        }
        if any(left.values()):
            raise WriteError(f"delete of {qe.doc_id} left chunks behind: {left}")
        cat.remove_near_dup(qe.doc_id)
        cat.complete_tombstone(qe.doc_id)
        self._docs.inc()
        yield qe


class DeleteDocuments(beam.PTransform):
    """Input: delete ``QueuedEvent``. Outputs: ``deleted`` (QueuedEvent) and
    ``dead`` (``DeadLetter``; transient ones are retried by the sink)."""

    def __init__(self, settings: Settings, dim: int) -> None:
        super().__init__()
        self.settings = settings
        self.dim = dim

    def expand(self, events: beam.PCollection) -> dict[str, beam.PCollection]:
        out = events | "Delete" >> beam.ParDo(_DeleteFn(self.settings, self.dim)).with_exception_handling()
        return {"deleted": out["good"], "dead": out["bad"] | "DeleteDeadLetters" >> ToDeadLetters("delete")}
