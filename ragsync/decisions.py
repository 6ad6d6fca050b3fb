"""Pure decisions, each returning a named action. No I/O here.

These are the rules that keep the indexes correct; the Beam steps only call
them and act on the answer.
"""

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

    Returns:
        UNCHANGED only when the document is indexed from these exact bytes by
        the current parser and chunker with its chunk rows complete.
    """
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
