"""Where the shared real-document corpus is, for tests that use it.

``../shared/corpus`` beside the checkout (as CI lays it out), or the folder
named by ``$RAGSYNC_CORPUS`` (a git worktree elsewhere). Tests that need it
skip with a reason when neither exists.
"""

from __future__ import annotations

import os
from pathlib import Path


def corpus_dir() -> Path:
    """The corpus folder (it may not exist: callers skip then)."""
    beside = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
    override = os.environ.get("RAGSYNC_CORPUS", "")
    return Path(override) if override and not beside.is_dir() else beside
