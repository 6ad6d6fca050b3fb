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


class GateAction(str, Enum):
    """What the version gate does with an event."""

    APPLY = "apply"
    STALE = "stale"  # older than what is applied or in flight: drop, count
    DUPLICATE = "duplicate"  # this exact version is already applied: drop, count


@dataclass(frozen=True)
class DocVersions:
    """The versions the catalog (the authority) holds for one document.

    Attributes:
        indexed: content version that is live (``documents.indexed_version``).
        accepted: newest content version fetched, live or in flight
            (``documents.source_version``).
        deleted: version of the tombstone, if the document was deleted.
        acl: version of the last applied permission change.
        complete: the live version's chunk rows are all there (False after a
            crash between flipping the version and deleting vanished chunks:
            a redelivered event must then run again to finish the delete).
        delete_complete: the tombstone's delete finished everywhere (False
            while a failed delete is retried: the retry must run again).
    """

    indexed: str | None = None
    accepted: str | None = None
    deleted: str | None = None
    acl: str | None = None
    complete: bool = True
    delete_complete: bool = True


def version_key(version: str) -> tuple[int, int, str]:
    """Sort key for source versions: numbers numerically, then text (e.g.
    ISO timestamps, which sort correctly as text)."""
    v = version.strip()
    if v.isdigit():
        return (0, int(v), "")
    return (1, 0, v)


_vk = version_key


def gate_event(op: str, version: str, known: DocVersions) -> GateAction:
    """Version gate: apply only what is newer than what the document holds.

    Content (upsert, delete) and permissions (acl) are versioned separately,
    so a late content event never rolls back a newer permission change and a
    late permission event never blocks newer content. A tombstone blocks every
    upsert and permission change at or below its version; an upsert above it
    recreates the document. Ties between a delete and an upsert of the same
    version go to the delete (fail closed).

    Args:
        op: upsert, delete or acl.
        version: the event's source version.
        known: what the catalog holds.

    Returns:
        APPLY, STALE or DUPLICATE.
    """
    v = _vk(version)
    if op == "acl":
        if known.acl is not None and v == _vk(known.acl):
            return GateAction.DUPLICATE
        if known.acl is not None and v < _vk(known.acl):
            return GateAction.STALE
        if known.deleted is not None and v <= _vk(known.deleted):
            return GateAction.STALE
        return GateAction.APPLY
    if op == "delete":
        if known.deleted is not None and v == _vk(known.deleted):
            return GateAction.DUPLICATE if known.delete_complete else GateAction.APPLY
        if known.deleted is not None and v < _vk(known.deleted):
            return GateAction.STALE
        for other in (known.indexed, known.accepted):
            if other is not None and v < _vk(other):
                return GateAction.STALE
        return GateAction.APPLY
    if op == "upsert":
        if known.deleted is not None and v <= _vk(known.deleted):
            return GateAction.STALE
        if known.indexed is not None and v == _vk(known.indexed) and known.complete:
            return GateAction.DUPLICATE
        for other in (known.indexed, known.accepted):
            if other is not None and v < _vk(other):
                return GateAction.STALE
        return GateAction.APPLY
    raise ValueError(f"unknown op {op!r}")


def backoff_delay(attempt: int, *, base_s: float = 2.0, cap_s: float = 300.0, jitter: float = 0.5) -> float:
    """Exponential backoff with jitter for retry number ``attempt`` (1-based).

    ``jitter`` in [0, 1] is the random share: the delay is drawn uniformly from
    [(1 - jitter) * d, d] where d = min(cap, base * 2**(attempt-1)).
    """
    import random

    if attempt < 1:
        raise ValueError("attempt is 1-based")
    d = min(cap_s, base_s * 2 ** (attempt - 1))
    return d * (1 - jitter * random.random())
