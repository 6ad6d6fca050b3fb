"""Stages 7-8: chunk by structure, then diff against the stored chunk ids."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.decisions import diff_chunks
from ragsync.embedding.models import default_model, load_tokenizer
from ragsync.errors import NoTextError
from ragsync.ingest.chunking import chunk_elements
from ragsync.model import Chunk, DocumentPlan, ParsedDocument
from transforms.dead_letters import GuardedStep
from transforms.progress import ListingTally, ProgressDoFn


class _ChunkAndDiffFn(ProgressDoFn):
    """ParsedDocument -> (doc_id, DocumentPlan): every chunk, and which are new or vanished.

    Raises NoTextError when a parsed document yields no chunk, so an empty
    result is a dead letter, never a silent skip.
    """

    metrics_stage = "chunk"
    progress_phase, progress_unit = "parse+chunk", "docs"

    def setup(self) -> None:
        super().setup()
        self._tokenizer = load_tokenizer(default_model().path)

    def _drop_boilerplate(self, doc_id: str, chunks: list[Chunk]) -> list[Chunk]:
        """Chunks whose text hash is already in ``boilerplate_min_docs`` other
        documents (signatures, disclaimers) are not indexed again."""
        limit = self.settings.boilerplate_min_docs
        if limit <= 0:
            return chunks
        seen = self._catalog.chunks.docs_per_text_hash([c.text_hash for c in chunks], exclude_doc_id=doc_id)
        kept = [c for c in chunks if seen.get(c.text_hash, 0) < limit]
        self.count("chunks_boilerplate", len(chunks) - len(kept))
        return kept

    def process(self, parsed: ParsedDocument) -> Iterator[Any]:
        yield from self._stage.run(self._chunk, parsed)

    def _chunk(self, parsed: ParsedDocument) -> Iterator[Any]:
        doc = parsed.doc
        acl_ids = doc.chunk_acl_ids
        chunks = chunk_elements(
            parsed.elements,
            self.settings.chunker,
            self._tokenizer,
            doc_id=doc.canonical_doc_id,
            tenant_id=doc.source.tenant_id,
            acl_ids=acl_ids,
        )
        self._progress.add()
        if not chunks:
            raise NoTextError(f"{doc.source.uri} ({doc.mime}) parsed to no indexable text")
        chunks = self._drop_boilerplate(doc.canonical_doc_id, chunks)
        if not chunks:
            raise NoTextError(f"{doc.source.uri}: every chunk is boilerplate seen in many other documents")
        diff = diff_chunks(self._catalog.chunks.chunk_ids_for_doc(doc.canonical_doc_id), chunks)
        self.count("chunks_new", len(diff.new))
        self.count("chunks_kept", len(diff.kept))
        plan = DocumentPlan(
            doc=doc,
            parser_version=parsed.parser_version,
            chunker_id=self.settings.chunker.config_id,
            chunks=tuple(chunks),
            new_ids=tuple(c.chunk_id for c in diff.new),
            vanished_ids=diff.vanished,
            acl_ids=acl_ids,
            pages_for_review=parsed.pages_for_review,
        )
        yield (doc.doc_id, plan)


class ChunkDocuments(GuardedStep):
    """Chunk parsed documents and diff against the catalog.

    Input: ``ParsedDocument``. Outputs: ``plans`` (``(doc_id, DocumentPlan)``)
    and ``dead`` (``DeadLetter``).
    """

    label_, output, stage, dead_label = "ChunkAndDiff", "plans", "chunk", "ChunkDeadLetters"

    def __init__(
        self, settings: Settings, *, total: int | ListingTally = 0, show_progress: bool = False
    ) -> None:
        super().__init__(settings)
        self.total = total
        self.show_progress = show_progress

    def make_fn(self) -> beam.DoFn:
        return _ChunkAndDiffFn(self.settings, total=self.total, show_progress=self.show_progress)
