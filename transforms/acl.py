"""Permission-only changes: metadata updates, never a re-embed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from ragsync.model import FetchedDocument
from transforms.common import ToDeadLetters, counter


class _ApplyAclFn(beam.DoFn):
    """FetchedDocument with new permissions -> its chunks carry the new ACL id
    in both indexes and the catalog, then the document row records it."""

    def __init__(self, settings: Settings, dim: int) -> None:
        self.settings = settings
        self.dim = dim
        self._stores: list[Any] = []

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)
        self._vectors = open_vector_index(self.settings, self.dim)
        self._keywords = open_keyword_index(self.settings)
        self._stores = [self._keywords, self._vectors, self._catalog]
        self._count = counter("documents_acl_updated")

    def teardown(self) -> None:
        for store in self._stores:
            store.close()

    def process(self, doc: FetchedDocument) -> Iterator[str]:
        tenant = doc.source.tenant_id
        shared = self._catalog.duplicate_acl_ids(doc.doc_id)
        acl_ids = sorted({doc.acl_id, *shared})
        ids = sorted(self._catalog.chunk_ids_for_doc(doc.doc_id))
        # Narrow first: the new ACL goes to the indexes before the catalog,
        # so a removal is enforced by the stores that answer queries.
        self._vectors.set_acl_ids(tenant, ids, acl_ids)
        chunks = [
            c.__class__(**{**c.__dict__, "acl_ids": tuple(acl_ids)})
            for c in self._catalog.chunks_by_ids(ids).values()
        ]
        self._keywords.set_acl_ids(tenant, chunks)
        self._catalog.set_chunk_acl_ids(doc.doc_id, acl_ids)
        self._catalog.set_document_acl(doc.doc_id, doc.acl_id)
        self._count.inc()
        yield doc.doc_id


class ApplyAclChanges(beam.PTransform):
    """Input: ``FetchedDocument`` whose bytes are unchanged but whose
    permissions changed. Outputs: ``updated`` (doc ids), ``dead``."""

    def __init__(self, settings: Settings, dim: int) -> None:
        super().__init__()
        self.settings = settings
        self.dim = dim

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        out = docs | "ApplyAcl" >> beam.ParDo(_ApplyAclFn(self.settings, self.dim)).with_exception_handling()
        return {"updated": out["good"], "dead": out["bad"] | "AclDeadLetters" >> ToDeadLetters("acl")}
