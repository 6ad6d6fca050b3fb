"""A module-level lock for tests/test_parse_isolation.py: a pool child
imports this module and tries to take the lock a thread of its parent holds."""

from __future__ import annotations

import threading

LOCK = threading.Lock()


def take(seconds: float) -> bool:
    """True when this process could take ``LOCK`` within ``seconds``."""
    if LOCK.acquire(timeout=seconds):
        LOCK.release()
        return True
    return False
