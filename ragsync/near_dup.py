"""Near-duplicate documents: MinHash over word shingles with LSH banding.

Drafts of one file (v1, v2-final, "copy of ...") share most of their text but
not their bytes, so exact-hash linking misses them. Each document gets a
MinHash signature of its 5-word shingles; signatures are cut into bands and a
document whose band matches another's is a candidate; candidates whose
estimated Jaccard similarity reaches the threshold join the same group.
Queries then show only the newest document of a group.

Pure functions; the catalog stores signatures and band keys. datasketch and
rensa were measured against this (``benchmarks/bench_near_dup.py``, figures and
the decision in ``benchmarks/README.md``): faster, equally good, but not the
same signatures, and stored signatures cannot change without re-signing every
catalog document.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

NUM_PERM = 64
BANDS = 16  # 16 bands x 4 rows: a pair at Jaccard 0.8 shares a band with p ~ 0.9996
THRESHOLD = 0.8
_MAX_SHINGLES = 20_000
_PRIME = (1 << 61) - 1
_rng = np.random.default_rng(20261202)
_A = _rng.integers(1, _PRIME, size=NUM_PERM, dtype=np.uint64)
_B = _rng.integers(0, _PRIME, size=NUM_PERM, dtype=np.uint64)
_WORD = re.compile(r"\w+", re.UNICODE)


def shingles(text: str, k: int = 5) -> set[str]:
    """Lower-cased word k-grams (the whole text when it has fewer words)."""
    words = _WORD.findall(text.lower())
    if len(words) <= k:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


def signature(text: str) -> np.ndarray:
    """MinHash signature (``NUM_PERM`` uint64 values) of ``text``'s shingles.

    An empty text gives all-max values (similar to nothing but another
    empty text).
    """
    return signature_of_shingles(shingles(text))


def signature_of_shingles(sh: set[str]) -> np.ndarray:
    """MinHash signature of a shingle set (see :func:`signature`)."""
    if not sh:
        return np.full(NUM_PERM, np.iinfo(np.uint64).max, dtype=np.uint64)
    hashed = sorted(
        int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "big") % _PRIME for s in sh
    )
    # Very long documents: keep the smallest hashes (a bottom-k sample, the
    # same for equal texts) so one signature stays well under a second.
    base = np.array(hashed[:_MAX_SHINGLES], dtype=np.uint64)
    # (a * x + b) mod p per permutation, in Python ints to avoid overflow.
    a = [int(v) for v in _A]
    b = [int(v) for v in _B]
    xs = [int(v) for v in base]
    return np.array(
        [min((ai * x + bi) % _PRIME for x in xs) for ai, bi in zip(a, b, strict=True)], dtype=np.uint64
    )


def band_keys(sig: np.ndarray, bands: int = BANDS) -> list[str]:
    """LSH band keys: documents sharing any key are candidates."""
    rows = len(sig) // bands
    return [
        f"{i}:{hashlib.blake2b(sig[i * rows : (i + 1) * rows].tobytes(), digest_size=8).hexdigest()}"
        for i in range(bands)
    ]


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated Jaccard similarity of two signatures."""
    return float(np.mean(a == b))
