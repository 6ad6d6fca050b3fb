"""Stage 10: write both indexes, flip the version, delete what vanished; and
the dead-letter sink."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from ragsync.errors import RagsyncError
from ragsync.model import DeadLetter, DocumentPlan, FetchedDocument
from transforms.common import Progress, ToDeadLetters, counter, dead_letter_from_exception
from transforms.embed import EmbeddedPlan


class EmbedFailedError(RagsyncError):
    error_class = "embed_failed"


class _WriteFn(beam.DoFn):
    """EmbeddedPlan -> the DocumentPlan once written, or a DeadLetter.

    Timeline for one document (each step idempotent, so a crash anywhere and a
    replay of the same plan converge):
      1. upsert the new chunks into the vector index, then the keyword index;
      2. write every chunk row to the catalog;
      3. flip the document's indexed version (one transaction) - from here a
         query sees the new version complete;
      4. delete the vanished chunks from both indexes, then their rows.
    A crash after 1 leaves index rows with no catalog row; the next run
    writes the same ids again (or the end-of-run sweep removes them).
    """

    def __init__(self, settings: Settings, dim: int, total: int, show_progress: bool) -> None:
        self.settings = settings
        self.dim = dim
        self.total = total
        self.show_progress = show_progress
        self._catalog: Any = None
        self._vectors: Any = None
        self._keywords: Any = None

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)
        self._vectors = open_vector_index(self.settings, self.dim)
        self._keywords = open_keyword_index(self.settings)
        self._indexed = counter("documents_indexed")
        self._written = counter("chunks_written")
        self._deleted = counter("chunks_deleted")
        self._progress = Progress("write", "docs", self.total, enabled=self.show_progress)
        self._docs_written = 0
        # Fault injection for crash tests: RAGSYNC_CRASH_AFTER_INDEX_WRITES=N
        # SIGKILLs this process after the N-th document's index upsert, before
        # its catalog rows exist - the worst place to die.
        self._crash_after = int(os.environ.get("RAGSYNC_CRASH_AFTER_INDEX_WRITES", "0") or 0)

    def teardown(self) -> None:
        for store in (self._keywords, self._vectors, self._catalog):
            if store is not None:
                store.close()

    def process(self, embedded: EmbeddedPlan) -> Iterator[Any]:
        plan = embedded.plan
        if embedded.failures:
            msgs = "; ".join(f"{cid}: {m}" for cid, m in embedded.failures[:3])
            err = EmbedFailedError(f"{len(embedded.failures)} chunks could not be embedded: {msgs}")
            yield beam.pvalue.TaggedOutput("dead", dead_letter_from_exception("embed", plan.doc, err))
            return
        missing = [cid for cid in plan.new_ids if cid not in embedded.vectors]
        if missing:
            err = EmbedFailedError(f"{len(missing)} chunks have no vector")
            yield beam.pvalue.TaggedOutput("dead", dead_letter_from_exception("embed", plan.doc, err))
            return
        self._write(plan, embedded.vectors)
        self._progress.add()
        yield plan

    def _write(self, plan: DocumentPlan, vectors: dict[str, np.ndarray]) -> None:
        doc = plan.doc
        tenant = doc.source.tenant_id
        by_id = {c.chunk_id: c for c in plan.chunks}
        new = [by_id[cid] for cid in plan.new_ids]
        if new:
            self._vectors.upsert(new, [vectors[c.chunk_id] for c in new])
            self._keywords.upsert(new)
        self._docs_written += 1
        if self._crash_after and self._docs_written >= self._crash_after:
            os.kill(os.getpid(), signal.SIGKILL)
        # Kept chunks whose permissions changed with the content get the new
        # ACL ids in place (no re-embedding).
        new_ids = set(plan.new_ids)
        stored = self._catalog.chunks_by_ids([c.chunk_id for c in plan.chunks if c.chunk_id not in new_ids])
        moved = [c for c in plan.chunks if c.chunk_id in stored and stored[c.chunk_id].acl_ids != c.acl_ids]
        if moved:
            self._vectors.set_acl_ids(tenant, [c.chunk_id for c in moved], list(plan.acl_ids))
            self._keywords.set_acl_ids(tenant, moved)
        self._catalog.write_chunks(list(plan.chunks))
        self._written.inc(len(new))
        self._catalog.flip_indexed_version(
            doc.doc_id,
            content_hash=doc.content_hash,
            source_version=doc.source.source_version,
            indexed_version=doc.source.source_version,
            chunker_id=plan.chunker_id,
            parser_version=plan.parser_version,
            chunk_count=len(plan.chunks),
            indexed_at=time.time(),
            mime=doc.mime,
        )
        if plan.vanished_ids:
            vanished = list(plan.vanished_ids)
            self._vectors.delete(tenant, vanished)
            self._keywords.delete(tenant, vanished)
            self._catalog.delete_chunks(vanished)
            self._deleted.inc(len(vanished))
        self._indexed.inc()


class WriteIndexes(beam.PTransform):
    """Write planned documents to both indexes and the catalog.

    Input: ``EmbeddedPlan``. Outputs: ``written`` (the ``DocumentPlan`` of
    each document now live) and ``dead`` (``DeadLetter``).
    """

    def __init__(self, settings: Settings, dim: int, *, total: int = 0, show_progress: bool = False) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.settings = settings
        self.dim = dim
        self.total = total
        self.show_progress = show_progress

    def expand(self, embedded: beam.PCollection) -> dict[str, beam.PCollection]:
        out = embedded | "Write" >> beam.ParDo(
            _WriteFn(self.settings, self.dim, self.total, self.show_progress)
        ).with_outputs("dead", main="written").with_exception_handling(main_tag="written")
        dead = (out["dead"], out["bad"] | "WriteDeadLetters" >> ToDeadLetters("write")) | beam.Flatten()
        return {"written": out["written"], "dead": dead}


class _RecordDuplicateFn(beam.DoFn):
    """FetchedDocument (exact copy) -> its catalog row marks the canonical copy."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._catalog: Any = None

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def process(self, doc: FetchedDocument) -> Iterator[str]:
        self._catalog.mark_duplicate(doc.doc_id, doc.canonical_doc_id)
        yield doc.doc_id


class RecordDuplicates(beam.PTransform):
    """Input: ``FetchedDocument`` copies. Output: their doc ids."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return docs | "RecordDuplicate" >> beam.ParDo(_RecordDuplicateFn(self.settings))


class _DeadLetterSinkFn(beam.DoFn):
    """DeadLetter -> a row in the dead-letter table (once per failure: a
    replay adds none); the document's status becomes ``dead_letter``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._catalog: Any = None

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)
        self._count = counter("dead_lettered")

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def process(self, dl: DeadLetter) -> Iterator[str]:
        source_id = ""
        if dl.payload.startswith("{"):
            try:
                source_id = FetchedDocument.from_json(dl.payload).source.source_id
            except (KeyError, TypeError, ValueError):
                import json

                source_id = str(json.loads(dl.payload).get("source_id", ""))
        self._catalog.record_dead_letter(dl, source_id=source_id)
        self._count.inc()
        yield dl.error_class


class WriteDeadLetters(beam.PTransform):
    """Input: ``DeadLetter``. Output: error classes written (for counting)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, dead: beam.PCollection) -> beam.PCollection:
        return dead | "WriteDeadLetter" >> beam.ParDo(_DeadLetterSinkFn(self.settings))
