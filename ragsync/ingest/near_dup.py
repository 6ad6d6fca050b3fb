"""Near-duplicate documents: MinHash over word shingles with LSH banding.

Drafts of one file (v1, v2-final, "copy of ...") share most of their text but
not their bytes, so exact-hash linking misses them. Each document gets a
MinHash signature of its 5-word shingles; signatures are cut into bands and a
document whose band matches another's is a candidate; candidates whose
estimated Jaccard similarity reaches the threshold join the same group.
Queries then show only the newest document of a group.

The MinHash is datasketch's (``MinHash(num_perm=64, seed=1,
scheme="affine64")``: sha1 per shingle, 64 affine permutations mod 2^64,
uint64 values); it replaced a hand-written numpy/Python one about 12x
slower (``benchmarks/bench_near_dup.py``, figures in ``benchmarks/README.md``).
Stored signatures carry :data:`ALGORITHM`; signatures of another algorithm
are never compared (catalog revision 0008 re-signed the old ones).

Pure functions; the catalog stores signatures and band keys.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np
from datasketch import MinHash

NUM_PERM = 64
BANDS = 16  # 16 bands x 4 rows: a pair at Jaccard 0.8 shares a band with p ~ 0.9996
THRESHOLD = 0.8
SEED = 1  # datasketch's permutation seed: part of the stored format
SCHEME = "affine64"  # datasketch's permutation scheme (uint64 values): part of the stored format
#: Names the signature format in ``doc_signatures.algorithm``: change it with
#: any change above (or a datasketch release that changes its digests) and
#: add a catalog revision that re-signs (``ragsync.catalog.copies.resign_near_dups``).
ALGORITHM = f"datasketch-{SCHEME}-sha1-seed{SEED}-{NUM_PERM}"
_BATCH = 10_000  # shingles hashed per numpy step: bounds memory to ~5 MB for any document
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


def signature_of_shingles(sh: Iterable[str]) -> np.ndarray:
    """MinHash signature of a shingle set (see :func:`signature`): the
    element-wise minimum over all shingles, hashed ``_BATCH`` at a time."""
    m = MinHash(num_perm=NUM_PERM, seed=SEED, scheme=SCHEME)
    batch: list[bytes] = []
    for s in sh:
        batch.append(s.encode("utf-8"))
        if len(batch) == _BATCH:
            m.update_batch(batch)
            batch = []
    m.update_batch(batch)
    return np.asarray(m.hashvalues, dtype=np.uint64)


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


def choose_group(doc_id: str, sig: np.ndarray, candidates: Iterable[tuple[np.ndarray, str]]) -> str:
    """The near-duplicate group a document joins: that of its most similar
    candidate at >= :data:`THRESHOLD` (ties: the smallest group id), else its
    own id.

    Args:
        doc_id: the document.
        sig: its signature.
        candidates: (signature, group id) of the band-sharing documents.
    """
    group, best = doc_id, 0.0
    for other_sig, other_group in candidates:
        sim = similarity(sig, other_sig)
        if sim >= THRESHOLD and (sim > best or (sim == best and other_group < group)):
            best, group = sim, other_group
    return group
