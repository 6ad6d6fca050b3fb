"""The hand-written MinHash ragsync signed documents with until catalog
revision 0007 (``ragsync/ingest/near_dup.py`` before datasketch): the format the
migration tests start from, and the "before" row of
``benchmarks/bench_near_dup.py``.

blake2b (8 bytes) per shingle mod 2^61-1, 64 universal hashes ``(a * x + b)
mod p`` with parameters from ``numpy.random.default_rng(20261202)``, in
Python integers; documents over 20,000 shingles keep their smallest hashes.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ragsync.ingest import near_dup

_MAX_SHINGLES = 20_000
_PRIME = (1 << 61) - 1
_rng = np.random.default_rng(20261202)
_A = [int(v) for v in _rng.integers(1, _PRIME, size=near_dup.NUM_PERM, dtype=np.uint64)]
_B = [int(v) for v in _rng.integers(0, _PRIME, size=near_dup.NUM_PERM, dtype=np.uint64)]


def legacy_signature_of_shingles(sh: set[str]) -> np.ndarray:
    """The old signature of a shingle set (all-max values when empty)."""
    if not sh:
        return np.full(near_dup.NUM_PERM, np.iinfo(np.uint64).max, dtype=np.uint64)
    hashed = sorted(
        int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "big") % _PRIME for s in sh
    )
    xs = hashed[:_MAX_SHINGLES]
    return np.array(
        [min((a * x + b) % _PRIME for x in xs) for a, b in zip(_A, _B, strict=True)], dtype=np.uint64
    )


def legacy_signature(text: str) -> np.ndarray:
    """The old signature of ``text`` (same shingles as ``ragsync.ingest.near_dup``)."""
    return legacy_signature_of_shingles(near_dup.shingles(text))
