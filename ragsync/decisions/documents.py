"""Pure decisions about one document's bytes, chunks and exact copies. No I/O here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from ragsync.model import Chunk


class FetchAction(str, Enum):
    """What to do with a document after fetching and hashing it."""

    UNCHANGED = "unchanged"  # same bytes, same permissions, same pipeline versions: stop
    ACL_ONLY = "acl_only"  # same bytes, new permissions: update metadata, no re-embed
    PROCESS = "process"  # parse, chunk, diff, embed, write


class StoredDocument(Protocol):
    """The catalog fields the fetch decision reads."""

    status: str
    content_hash: str | None
    acl_id: str | None
    chunker_id: str | None
    parser_version: str | None
    chunk_count: int | None


def fetch_action(
    stored: StoredDocument | None,
    *,
    content_hash: str,
    acl_id: str,
    parser_version: str,
    chunker_id: str,
    stored_chunk_rows: int | None,
    copy_of_live: bool = False,
) -> FetchAction:
    """Decide whether a fetched document needs work.

    Args:
        stored: the catalog row, or None for a new document.
        content_hash: hash of the bytes just fetched.
        acl_id: ACL id of the permissions just read.
        parser_version: current parser version.
        chunker_id: current chunker config id.
        stored_chunk_rows: chunk rows the catalog holds for the document
            (None when not looked up). A mismatch with the row's
            ``chunk_count`` means an earlier run died between flipping the
            version and deleting vanished chunks: process again to finish.
        copy_of_live: the stored row is an exact copy (``duplicate``) linked
            to a holder that is live and holds the stored bytes.

    Returns:
        UNCHANGED only when the document is indexed from these exact bytes by
        the current parser and chunker with its chunk rows complete, or is
        a linked copy of a live holder with these bytes and permissions.
        ACL_ONLY for the same with other permissions (a copy's new
        permissions change the union its holder's chunks carry).
    """
    if stored is not None and stored.status == "duplicate" and copy_of_live:
        if stored.content_hash == content_hash:
            return FetchAction.ACL_ONLY if stored.acl_id != acl_id else FetchAction.UNCHANGED
        return FetchAction.PROCESS
    if stored is None or stored.status != "indexed" or stored.content_hash != content_hash:
        return FetchAction.PROCESS
    if stored.parser_version != parser_version or stored.chunker_id != chunker_id:
        return FetchAction.PROCESS
    if stored_chunk_rows is not None and stored_chunk_rows != (stored.chunk_count or 0):
        return FetchAction.PROCESS
    if stored.acl_id != acl_id:
        return FetchAction.ACL_ONLY
    return FetchAction.UNCHANGED


@dataclass(frozen=True)
class ChunkDiff:
    """Result of comparing a document's new chunks with the stored ones.

    Attributes:
        new: chunks whose ids are not stored: embed and write these.
        kept: chunks already stored: no embedding, no index write.
        vanished: stored ids no longer produced: delete after the flip.
    """

    new: tuple[Chunk, ...]
    kept: tuple[Chunk, ...]
    vanished: tuple[str, ...]


def diff_chunks(stored_ids: Iterable[str], chunks: Sequence[Chunk]) -> ChunkDiff:
    """Split ``chunks`` into new and kept and list the vanished stored ids.

    Vanished ids are sorted, so a replay deletes exactly the same ids.
    """
    stored = set(stored_ids)
    current = {c.chunk_id for c in chunks}
    new = tuple(c for c in chunks if c.chunk_id not in stored)
    kept = tuple(c for c in chunks if c.chunk_id in stored)
    return ChunkDiff(new=new, kept=kept, vanished=tuple(sorted(stored - current)))


def choose_canonical(candidates: Sequence[str], indexed_canonical: str | None) -> str:
    """The document that owns the chunks of content shared by ``candidates``.

    An already indexed canonical keeps the role (no re-embedding); otherwise
    the smallest doc id wins, so every run picks the same one.
    """
    if indexed_canonical:
        return indexed_canonical
    if not candidates:
        raise ValueError("no candidates")
    return min(candidates)


@dataclass(frozen=True)
class CopyIdentity:
    """One identity (document) that may serve some indexed content.

    Attributes:
        doc_id: the document.
        acl_id: its own permissions (each copy keeps its own).
        content_hash: hash of the content the identity holds now.
        live: False once the document is deleted (or being deleted).
    """

    doc_id: str
    acl_id: str
    content_hash: str
    live: bool = True


@dataclass(frozen=True)
class CopiesPlan:
    """Who serves a piece of indexed content and who may read it.

    Attributes:
        holder: the identity whose chunks serve the content after the
            change (None: no live identity is left; the chunks go).
        promote: True when ``holder`` is not the identity that owns the
            chunks now: the chunks are re-keyed to it (no re-embedding).
        acl_ids: the union of the live identities' ACL ids: what the
            chunks carry.
        duplicates: the other live identities, linked to ``holder``.
    """

    holder: str | None
    promote: bool
    acl_ids: tuple[str, ...]
    duplicates: tuple[str, ...]


def plan_copies(owner: str, content_hash: str, identities: Iterable[CopyIdentity]) -> CopiesPlan:
    """Decide who serves the content ``owner``'s chunks hold, after a copy
    was added, deleted, edited away or re-permissioned.

    Only live identities that still hold ``content_hash`` count. The owner
    keeps the role while it counts (nothing is re-keyed); otherwise the
    smallest doc id among the rest is promoted, so every replay and every
    order of events picks the same one (as a fresh backfill does).

    Args:
        owner: the document whose chunk rows hold the content now.
        content_hash: hash of that content.
        identities: the owner and every document linked to it as a copy
            (others are ignored when their hash or liveness rules them out).

    Returns:
        The plan; ``holder`` is None when no live identity holds the content.
    """
    members = {i.doc_id: i for i in identities if i.live and i.content_hash == content_hash}
    if not members:
        return CopiesPlan(None, False, (), ())
    holder = owner if owner in members else min(members)
    acl_ids = tuple(sorted({m.acl_id for m in members.values() if m.acl_id}))
    duplicates = tuple(sorted(d for d in members if d != holder))
    return CopiesPlan(holder, holder != owner, acl_ids, duplicates)


@dataclass(frozen=True)
class CopyLink:
    """A copy's catalog row as :func:`copy_lost_its_holder` reads it.

    Attributes:
        doc_id: the copy.
        status: its status (``duplicate`` while linked).
        canonical_doc_id: the document it links to.
        content_hash: its bytes.
    """

    doc_id: str
    status: str
    canonical_doc_id: str | None
    content_hash: str


def copy_lost_its_holder(copy: CopyLink, holder: CopyIdentity | None) -> bool:
    """After an exact copy was linked to a holder, is the link dangling?

    A copy is linked against the catalog as it was when the copy was
    fetched; the holder may be deleted (or edited into other bytes) before
    the link is recorded - a delete of the holder in the same stream run. The
    holder's delete then found no copy to promote, so the copy's content
    would vanish from search. Such a copy must be processed again (it is
    promoted to hold its own chunks, or linked to another live identity).

    Args:
        copy: the copy's row after the link was recorded.
        holder: the identity it links to (None: no such document).

    Returns:
        True when the copy still links to ``holder`` and ``holder`` does not
        serve the copy's bytes (gone, deleted or other content); False when
        the link holds, or the copy was already promoted or re-linked.
    """
    if copy.status != "duplicate" or copy.canonical_doc_id in (None, copy.doc_id):
        return False
    if holder is None or holder.doc_id != copy.canonical_doc_id:
        return True
    return not holder.live or holder.content_hash != copy.content_hash
