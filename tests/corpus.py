"""Where the shared real-document corpus is, for the tests that use it.

``$RAGSYNC_CORPUS`` when set (e.g. from a git worktree, whose ``../shared``
is not the project's), else ``../shared/corpus`` next to the project. Tests
that need it skip with ``CORPUS_MISSING`` as the reason when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

_DEFAULT = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
CORPUS = Path(os.environ.get("RAGSYNC_CORPUS") or _DEFAULT)
CORPUS_MISSING = f"shared corpus not present at {CORPUS} (set RAGSYNC_CORPUS or place it at ../shared/corpus)"


def have_corpus(sub: str = "documents") -> bool:
    """Whether the corpus (its ``sub`` folder) is present."""
    return (CORPUS / sub).is_dir()


def corpus_dir() -> Path:
    """The corpus folder (it may not exist: callers skip then)."""
    return CORPUS
