"""Per-tenant budgets: one tenant's flood cannot starve the others.

A token bucket per tenant, in this process: ``burst`` events at once, then
``rate_per_s`` a second. ``POST /internal/events`` spends one token per event
of the request (all or nothing); when a tenant has too few, the request is
answered ``429`` with ``Retry-After`` (whole seconds until enough tokens are
back) and nothing is queued. Several ``ragsync serve`` processes behind a load
balancer each keep their own buckets (the budget is then per process).

Caps kept in the catalog (so they hold across processes): a tenant may have
``DEFAULT_MAX_PENDING_SYNCS`` syncs queued or running (another request is
answered ``429``) and ``DEFAULT_MAX_SOURCES`` sources (another is ``403``);
``ragsync serve --max-pending-syncs-per-tenant / --max-sources-per-tenant``
change them. The worker takes queued syncs round-robin by tenant.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_PENDING_SYNCS = 4
DEFAULT_MAX_SOURCES = 200


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TenantBudget:
    """Token buckets keyed by tenant.

    Args:
        rate_per_s: tokens added per second.
        burst: bucket size (and a new tenant's starting tokens).
        clock: monotonic seconds (tests pass a fake clock).
    """

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst <= 0:
            raise ValueError("rate_per_s and burst must be positive")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, tenant_id: str, n: int) -> float:
        """Spend ``n`` tokens of the tenant's bucket.

        Returns:
            0.0 when spent; otherwise the seconds until ``n`` tokens will be
            there (nothing is spent). A request larger than the bucket waits
            for a full bucket.
        """
        n = max(0, n)
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(tenant_id)
            if bucket is None:
                bucket = self._buckets[tenant_id] = _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate_per_s)
            bucket.updated = now
            need = min(n, self.burst)
            if bucket.tokens >= need:
                bucket.tokens -= need
                return 0.0
            return (need - bucket.tokens) / self.rate_per_s

    @staticmethod
    def retry_after(wait_s: float) -> str:
        """The ``Retry-After`` header value (whole seconds, at least 1)."""
        return str(max(1, math.ceil(wait_s)))
