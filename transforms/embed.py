"""Stage 9: embed new chunks with RunInference, embedding cache first."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, PredictionResult, RunInference
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from ragsync.config import Settings, open_catalog
from ragsync.embedding import ModelSpec
from ragsync.errors import RagsyncError
from ragsync.model import Chunk
from transforms.common import Progress, counter

EMBED_FAILED = "embed_failed"
_LOOKUP_BATCH = 256


class EmbedError(RagsyncError):
    """The model failed on this chunk even when it was embedded alone."""

    error_class = "embed_failed"


class _LazyModel:
    """Loads the SentenceTransformer on first use, so a run with nothing to
    embed (an unchanged re-run) never pays for loading torch and the model."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self._model: Any = None

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._model is None:
            import os

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.spec.path, device="cpu")
            self._model.max_seq_length = self.spec.max_seq_length
        return np.asarray(
            self._model.encode(
                list(texts),
                batch_size=max(1, len(texts)),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )


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


class SentenceTransformerHandler(ModelHandler[str, PredictionResult, _LazyModel]):
    """RunInference handler for a local sentence-transformers model.

    Each prediction's ``inference`` is a float32 vector, or the exception the
    model raised for that one text (failing batches are split first).
    """

    def __init__(self, spec: ModelSpec, max_batch_size: int = 64, max_batch_duration_secs: float = 0.2):
        super().__init__()
        self.spec = spec
        self._max_batch_size = max_batch_size
        self._max_batch_duration_secs = max_batch_duration_secs

    def load_model(self) -> _LazyModel:
        return _LazyModel(self.spec)

    def run_inference(
        self, batch: Sequence[str], model: _LazyModel, inference_args: dict[str, Any] | None = None
    ) -> Iterable[PredictionResult]:
        results = encode_isolating_failures(model, batch)
        return [PredictionResult(text, r) for text, r in zip(batch, results, strict=True)]

    def batch_elements_kwargs(self) -> dict[str, Any]:
        return {
            "min_batch_size": 1,
            "max_batch_size": self._max_batch_size,
            "max_batch_duration_secs": self._max_batch_duration_secs,
        }

    def get_metrics_namespace(self) -> str:
        return "ragsync_embed"


class _CacheLookupFn(beam.DoFn):
    """Chunk -> cached (doc_id, (chunk_id, vector)) on the ``hit`` output, or
    (key, text) for RunInference on the main output. Looks up in batches."""

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
        self._buffer: list[Chunk] = []

    def process(self, chunk: Chunk) -> Iterator[Any]:
        self._buffer.append(chunk)
        if len(self._buffer) >= _LOOKUP_BATCH:
            yield from self._flush(windowed=False)

    def finish_bundle(self) -> Iterator[Any]:
        yield from self._flush(windowed=True)

    def _flush(self, windowed: bool) -> Iterator[Any]:
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        cached = self._catalog.get_embeddings([c.text_hash for c in batch], self.model_version)
        for c in batch:
            vec = cached.get(c.text_hash)
            if vec is not None:
                self._hits.inc()
                out: Any = beam.pvalue.TaggedOutput("hit", (c.doc_id, (c.chunk_id, vec)))
            else:
                self._misses.inc()
                out = (f"{c.doc_id}|{c.chunk_id}|{c.text_hash}", c.embedding_text())
            if windowed:
                if isinstance(out, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(out.tag, WindowedValue(out.value, 0, (GlobalWindow(),)))
                else:
                    yield WindowedValue(out, 0, (GlobalWindow(),))
            else:
                yield out


class _CacheStoreFn(beam.DoFn):
    """(key, PredictionResult) -> (doc_id, (chunk_id, vector)); stores each
    vector in the embedding cache, and sends failures to ``embed_failed``."""

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

    def process(self, keyed: tuple[str, PredictionResult]) -> Iterator[Any]:
        key, result = keyed
        doc_id, chunk_id, text_hash = key.split("|")
        inference: Any = result.inference
        if isinstance(inference, Exception):
            message = f"{type(inference).__name__}: {inference}"
            yield beam.pvalue.TaggedOutput(EMBED_FAILED, (doc_id, chunk_id, message))
            return
        vec = np.asarray(inference, dtype=np.float32)
        if vec.shape != (self.dim,) or not np.isfinite(vec).all():
            message = f"bad vector: shape {vec.shape}, finite={bool(np.isfinite(vec).all())}"
            yield beam.pvalue.TaggedOutput(EMBED_FAILED, (doc_id, chunk_id, message))
            return
        self._catalog.put_embeddings({text_hash: vec}, self.model_version)
        self._embedded.inc()
        self._progress.add()
        yield (doc_id, (chunk_id, vec))


class EmbedChunks(beam.PTransform):
    """Embed chunks: cache lookup by (text_hash, model_version), then
    RunInference on the misses in micro-batches (64 chunks or 200 ms).

    Input: ``Chunk``. Outputs: ``vectors`` (``(doc_id, (chunk_id, vector))``)
    and ``failed`` (``(doc_id, chunk_id, message)`` for chunks the model
    rejected even alone; the write stage dead-letters their documents).
    """

    def __init__(self, settings: Settings, spec: ModelSpec, *, show_progress: bool = False) -> None:
        super().__init__()
        self.settings = settings
        self.spec = spec
        self.show_progress = show_progress

    def expand(self, chunks: beam.PCollection) -> dict[str, beam.PCollection]:
        version = self.spec.version
        looked = chunks | "CacheLookup" >> beam.ParDo(_CacheLookupFn(self.settings, version)).with_outputs(
            "hit", main="miss"
        )
        handler: KeyedModelHandler[str, str, PredictionResult, _LazyModel] = KeyedModelHandler(
            SentenceTransformerHandler(self.spec, max_batch_size=self.settings.embed_batch_size)
        )
        embedded = (
            looked["miss"]
            | "RunInference" >> RunInference(handler)
            | "CacheStore"
            >> beam.ParDo(
                _CacheStoreFn(self.settings, version, self.spec.dim, self.show_progress)
            ).with_outputs(EMBED_FAILED, main="vectors")
        )
        vectors = (looked["hit"], embedded["vectors"]) | "MergeVectors" >> beam.Flatten()
        return {"vectors": vectors, "failed": embedded[EMBED_FAILED]}
