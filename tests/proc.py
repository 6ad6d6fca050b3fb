"""Helpers for tests that kill processes."""

from __future__ import annotations

import os
import signal
import time


def kill_group(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGKILL a process group and wait until every member is gone (they
    hold file locks, e.g. Milvus Lite's, until they exit)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process group {pgid} did not exit")
