"""Identity derivation (DESIGN section 4). Decided once and versioned.

Every id is a hash over typed fields separated by a 0x1f byte, so that no two
different field tuples can produce the same input bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

# Bump when the derivation changes; it is part of every chunk id.
ID_VERSION = "v1"
_SEP = b"\x1f"


def _digest(*fields: str, size: int = 16) -> str:
    h = hashlib.blake2b(digest_size=size)
    for i, f in enumerate(fields):
        if i:
            h.update(_SEP)
        h.update(f.encode("utf-8"))
    return h.hexdigest()


def content_hash(data: bytes) -> str:
    """sha256 hex of the fetched bytes."""
    return hashlib.sha256(data).hexdigest()


def text_hash(text: str) -> str:
    """sha256 hex of a chunk's text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def doc_id(tenant_id: str, source_id: str, source_object_id: str) -> str:
    """Stable document id: never a title; renames keep the source object id."""
    return "d" + _digest(ID_VERSION, "doc", tenant_id, source_id, source_object_id)


def chunk_id(canonical_doc_id: str, chunker_config_id: str, chunk_text_hash: str) -> str:
    """128-bit chunk id: same text in the same document under the same chunker
    config always gets the same id; edits elsewhere do not change it."""
    return _digest(ID_VERSION, "chunk", canonical_doc_id, chunker_config_id, chunk_text_hash)


def acl_id(tenant_id: str, allow_groups: Iterable[str]) -> str:
    """Content-addressed ACL id: one row per distinct (tenant, group set)."""
    groups = sorted({g.strip() for g in allow_groups if g.strip()})
    return "acl" + _digest(ID_VERSION, "acl", tenant_id, *groups, size=12)
