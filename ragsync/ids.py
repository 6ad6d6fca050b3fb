"""Identity derivation: every id ragsync derives, decided once and versioned.

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


def acl_id(tenant_id: str, allow_groups: Iterable[str], deny_groups: Iterable[str] = ()) -> str:
    """Content-addressed ACL id: one row per distinct (tenant, allowed set,
    denied set). An ACL without denials keeps the id it always had."""
    groups = sorted({g.strip() for g in allow_groups if g.strip()})
    denied = sorted({"!" + g.strip() for g in deny_groups if g.strip()})
    return "acl" + _digest(ID_VERSION, "acl", tenant_id, *groups, *denied, size=12)


_UNSAFE_IN_MEMBER = frozenset("%#") | {chr(c) for c in range(32)} | {"\x7f"}


def child_object_id(parent_object_id: str, attachment_name: str) -> str:
    """The ``source_object_id`` of a child document (an e-mail attachment, an archive member).

    ``parent_object_id + "#" + name``, with ``%``, ``#`` and control
    characters of the name percent-encoded. The name is the attachment's
    ``ragsync.model.Attachment.name``, which parsing keeps unique within one
    parent. Pass the result to ``doc_id`` with the parent's tenant and source
    (the child also takes the parent's groups).

    Stable: the same parent id and name give the same id on every run, so a
    re-parsed parent updates its children in place. Collision-safe among
    children: the name part never holds a raw ``#``, so splitting at the last
    ``#`` recovers (parent, name) and different pairs never share an id; a
    child of a child is ``root#a.zip#b.txt``. The one id a child could share is
    a top-level object id that itself contains ``#`` and spells exactly such a
    path.

    Args:
        parent_object_id: the parent's ``source_object_id`` (itself a child id
            for nested containers).
        attachment_name: the attachment's name (hostile text; never a path).

    Returns:
        The child's source object id.
    """
    escaped = "".join(f"%{ord(c):02X}" if c in _UNSAFE_IN_MEMBER else c for c in attachment_name)
    return f"{parent_object_id}#{escaped}"
