"""Stage 9: embed each document's new chunks with RunInference, cache first.

The unit that travels is the document plan, not the chunk: plans are batched
by their number of chunks to embed (``element_size_fn``), so one model call
embeds up to 64 chunks of several documents, and the write stage receives
each document whole without a join. That keeps the backfill and the
streaming pipeline on one chain (no GroupByKey that would need triggers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from ragsync.config import Settings, open_catalog
from ragsync.embedding import ModelSpec
from ragsync.model import DocumentPlan
from transforms.common import Progress, counter

_LOOKUP_BATCH = 256


class _LazyModel:
    """The model named by the spec, loaded on first use, so a run with
    nothing to embed (an unchanged re-run) never pays for loading it."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from ragsync.embedding import get_model

        return get_model(self.spec.name).encode_passages(list(texts))


def encode_isolating_failures(model: Any, texts: Sequence[str]) -> list[np.ndarray | Exception]:
    """Encode ``texts``; when a batch fails, split it in halves until the
    failing texts are found. Returns one vector or one exception per text.
    """
    try:
        vectors = model.encode(texts)
        return [vectors[i] for i in range(len(texts))]
    except Exception as exc:  # noqa: BLE001 - any model failure is isolated below
        if len(texts) == 1:
            return [exc]
        mid = len(texts) // 2
        return encode_isolating_failures(model, texts[:mid]) + encode_isolating_failures(model, texts[mid:])


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


@dataclass(frozen=True)
class EmbeddedPlan:
    """A plan with a vector for each new chunk, or the chunks that failed.

    Attributes:
        plan: the document plan.
        vectors: chunk id -> vector for the new chunks that embedded.
        failures: (chunk_id, message) for chunks the model rejected alone.
    """

    plan: DocumentPlan
    vectors: dict[str, np.ndarray]
    failures: tuple[tuple[str, str], ...] = ()


class PlanEmbeddingHandler(ModelHandler[PlanToEmbed, PredictionResult, _LazyModel]):
    """RunInference handler: embeds the missing chunks of a batch of plans in
    one model call.

    Each prediction's ``inference`` is a list with, per missing chunk, a
    float32 vector or the exception the model raised for that text alone (a
    failing batch is split until the bad texts are found).
    """

    def __init__(
        self, spec: ModelSpec, max_batch_size: int = 64, max_batch_duration_secs: float | None = None
    ):
        super().__init__()
        self.spec = spec
        self._max_batch_size = max_batch_size
        self._max_batch_duration_secs = max_batch_duration_secs

    def load_model(self) -> _LazyModel:
        return _LazyModel(self.spec)

    def run_inference(
        self, batch: Sequence[PlanToEmbed], model: _LazyModel, inference_args: dict[str, Any] | None = None
    ) -> Iterable[PredictionResult]:
        texts = [text for item in batch for _, _, text in item.misses]
        # An all-cached batch never touches (or loads) the model.
        results = encode_isolating_failures(model, texts) if texts else []
        out: list[PredictionResult] = []
        start = 0
        for item in batch:
            n = len(item.misses)
            out.append(PredictionResult(item, results[start : start + n]))
            start += n
        return out

    def batch_elements_kwargs(self) -> dict[str, Any]:
        # Batches are counted in chunks to embed, not in documents.
        return {
            "min_batch_size": 1,
            "max_batch_size": self._max_batch_size,
            **(
                {"max_batch_duration_secs": self._max_batch_duration_secs}
                if self._max_batch_duration_secs
                else {}
            ),
            "element_size_fn": _misses_count,
        }

    def get_metrics_namespace(self) -> str:
        return "ragsync_embed"


def _misses_count(item: PlanToEmbed) -> int:
    return max(1, len(item.misses))


def _windowed(out: Any, timestamp: Any, window: Any) -> Any:
    """Outputs of ``finish_bundle`` need an explicit timestamp and window:
    the input's, so a streaming runner does not take them for late data."""
    if isinstance(out, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(out.tag, WindowedValue(out.value, timestamp, (window,)))
    return WindowedValue(out, timestamp, (window,))


class _CacheLookupFn(beam.DoFn):
    """(doc_id, DocumentPlan) -> PlanToEmbed with the cached vectors and the
    chunks still to embed. Looks up the cache in batches."""

    def __init__(self, settings: Settings, model_version: str) -> None:
        self.settings = settings
        self.model_version = model_version
        self._catalog: Any = None

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)
        self._hits = counter("embedding_cache_hits")
        self._misses = counter("embedding_cache_misses")

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def start_bundle(self) -> None:
        self._buffer: list[DocumentPlan] = []
        self._pending = 0
        self._last: tuple[Any, Any] = (0, GlobalWindow())

    def process(
        self,
        keyed: tuple[str, DocumentPlan],
        timestamp: Any = beam.DoFn.TimestampParam,
        window: Any = beam.DoFn.WindowParam,
    ) -> Iterator[Any]:
        plan = keyed[1]
        self._buffer.append(plan)
        self._pending += len(plan.new_ids)
        self._last = (timestamp, window)
        if self._pending >= _LOOKUP_BATCH:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[Any]:
        timestamp, window = self._last
        for out in self._flush():
            yield _windowed(out, timestamp, window)

    def _flush(self) -> Iterator[Any]:
        if not self._buffer:
            return
        plans, self._buffer, self._pending = self._buffer, [], 0
        hashes = {c.chunk_id: c.text_hash for p in plans for c in p.chunks}
        wanted = sorted({hashes[cid] for p in plans for cid in p.new_ids})
        cached = self._catalog.get_embeddings(wanted, self.model_version) if wanted else {}
        for plan in plans:
            by_id = {c.chunk_id: c for c in plan.chunks}
            hits = {cid: cached[hashes[cid]] for cid in plan.new_ids if hashes[cid] in cached}
            misses = tuple(
                (cid, hashes[cid], by_id[cid].embedding_text()) for cid in plan.new_ids if cid not in hits
            )
            self._hits.inc(len(hits))
            self._misses.inc(len(misses))
            # Plans with every vector cached go through RunInference too: the
            # model is never called (or loaded) for them, and no Flatten is
            # needed to merge two branches (FnApiRunner's streaming mode
            # stalls on Flatten).
            yield PlanToEmbed(plan, hits, misses)


class _CacheStoreFn(beam.DoFn):
    """PredictionResult -> EmbeddedPlan; good vectors go to the cache."""

    def __init__(self, settings: Settings, model_version: str, dim: int, show_progress: bool) -> None:
        self.settings = settings
        self.model_version = model_version
        self.dim = dim
        self.show_progress = show_progress
        self._catalog: Any = None

    def setup(self) -> None:
        self._catalog = open_catalog(self.settings)
        self._embedded = counter("chunks_embedded")
        self._progress = Progress("embed", "chunks", 0, enabled=self.show_progress)

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()

    def process(self, result: PredictionResult) -> Iterator[EmbeddedPlan]:
        item: Any = result.example
        raw: Any = result.inference
        inferences: list[Any] = list(raw)
        vectors = dict(item.cached)
        fresh: dict[str, np.ndarray] = {}
        failures: list[tuple[str, str]] = []
        for (cid, text_hash, _), inference in zip(item.misses, inferences, strict=True):
            if isinstance(inference, Exception):
                failures.append((cid, f"{type(inference).__name__}: {inference}"))
                continue
            vec = np.asarray(inference, dtype=np.float32)
            if vec.shape != (self.dim,) or not np.isfinite(vec).all():
                failures.append((cid, f"bad vector: shape {vec.shape}"))
                continue
            vectors[cid] = vec
            fresh[text_hash] = vec
        if fresh:
            self._catalog.put_embeddings(fresh, self.model_version)
        self._embedded.inc(len(fresh))
        self._progress.add(len(fresh))
        yield EmbeddedPlan(item.plan, vectors, tuple(failures))


class EmbedChunks(beam.PTransform):
    """Embed each plan's new chunks: cache lookup by (text_hash,
    model_version), then RunInference on the misses in micro-batches of up to
    64 chunks, or (streaming, ``max_batch_duration_s=0.2``) 64 chunks or
    200 ms. A bounded run batches within its large bundles and needs no
    timer (FnApiRunner's batch mode rejects the timer-based batcher).

    Input: ``(doc_id, DocumentPlan)``. Output: ``EmbeddedPlan`` (vectors for
    the new chunks, and the chunks the model rejected even alone; the write
    stage dead-letters documents with failures).
    """

    def __init__(
        self,
        settings: Settings,
        spec: ModelSpec,
        *,
        max_batch_duration_s: float | None = None,
        show_progress: bool = False,
    ) -> None:
        super().__init__()
        if max_batch_duration_s is not None and max_batch_duration_s <= 0:
            raise ValueError("max_batch_duration_s must be positive or None")
        self.settings = settings
        self.spec = spec
        self.max_batch_duration_s = max_batch_duration_s
        self.show_progress = show_progress

    def expand(self, plans: beam.PCollection) -> beam.PCollection:
        version = self.spec.version
        looked = plans | "CacheLookup" >> beam.ParDo(_CacheLookupFn(self.settings, version))
        handler = PlanEmbeddingHandler(
            self.spec,
            max_batch_size=self.settings.embed_batch_size,
            max_batch_duration_secs=self.max_batch_duration_s,
        )
        store = _CacheStoreFn(self.settings, version, self.spec.dim, self.show_progress)
        return looked | "RunInference" >> RunInference(handler) | "CacheStore" >> beam.ParDo(store)
