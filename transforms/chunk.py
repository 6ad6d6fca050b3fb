"""Stages 7-8: chunk by structure, then diff against the stored chunk ids."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.decisions import diff_chunks
from ragsync.embedding.models import default_model, load_tokenizer
from ragsync.errors import NoTextError
from ragsync.ingest.boilerplate import MIN_HOLDERS, boilerplate_of, indexing_rule
from ragsync.ingest.chunking import chunk_elements, countable_paragraphs
from ragsync.ingest.context import document_context
from ragsync.model import DocumentPlan, FetchedDocument, ParsedDocument
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

    def _boilerplate(self, doc: FetchedDocument, hashes: list[str]) -> frozenset[str]:
        """The paragraphs among ``hashes`` that ``boilerplate_min_docs``
        documents of the source already hold, counting this one: left out of
        its chunks (``ragsync.ingest.boilerplate.indexing_rule``)."""
        rule = indexing_rule(self.settings.boilerplate_min_docs)
        if not rule.enabled or not hashes:
            return frozenset()
        src = doc.source
        held = self._catalog.paragraphs.holders(
            src.tenant_id, src.source_id, hashes, exclude_doc_id=doc.doc_id
        )
        if not any(n + 1 >= MIN_HOLDERS for n in held.values()):
            return frozenset()
        total = self._catalog.paragraphs.source_documents(src.tenant_id, src.source_id)
        return boilerplate_of(hashes, held, total, rule, plus=1)

    def process(self, parsed: ParsedDocument) -> Iterator[Any]:
        yield from self._stage.run(self._chunk, parsed)

    def _chunk(self, parsed: ParsedDocument) -> Iterator[Any]:
        doc = parsed.doc
        acl_ids = doc.chunk_acl_ids
        paragraphs = countable_paragraphs(parsed.elements)
        boilerplate = self._boilerplate(doc, paragraphs)
        chunks = chunk_elements(
            parsed.elements,
            self.settings.chunker,
            self._tokenizer,
            doc_id=doc.canonical_doc_id,
            tenant_id=doc.source.tenant_id,
            acl_ids=acl_ids,
            context=document_context(parsed.elements, parsed.metadata, doc.source.source_object_id),
            boilerplate=boilerplate,
        )
        self._progress.add()
        self.count("paragraphs_boilerplate", len(boilerplate))
        if not chunks:
            if boilerplate:
                raise NoTextError(
                    f"{doc.source.uri}: every paragraph is boilerplate seen in many other documents"
                )
            raise NoTextError(f"{doc.source.uri} ({doc.mime}) parsed to no indexable text")
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
            paragraphs=tuple(paragraphs),
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
