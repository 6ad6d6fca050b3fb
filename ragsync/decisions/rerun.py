"""Pure decisions about skipping unchanged objects unread on a re-run. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass

#: A file whose modification time lies this close to (or after) the time the
#: catalog recorded its listing may have changed again within the file
#: system's timestamp granularity without a new mtime: it is read again.
RACY_WINDOW_S = 2.0

#: Dead-letter classes decided by the bytes and the parser alone: the same
#: bytes fail the same way under the same parser version, so an unchanged
#: object is not read again. Classes decided by settings, permissions or
#: transient failures are always retried.
CONTENT_DEAD_CLASSES = frozenset({"empty", "encrypted", "corrupt", "unsupported", "no_text"})


@dataclass(frozen=True)
class ListedObject:
    """What a listing shows of an object (no bytes read).

    Attributes:
        size: bytes (-1 when the connector does not say).
        source_version: the connector's version (mtime, etag, revision).
        version_domain: ``timestamp`` for an mtime (the racy check applies).
        acl_id: ACL id of the listed permissions.
    """

    size: int
    source_version: str
    version_domain: str
    acl_id: str


@dataclass(frozen=True)
class KnownObject:
    """What the catalog holds of a document (``Catalog.unread_states``).

    Attributes:
        size, source_version, acl_id, status, error_class, parser_version,
        chunker_id, chunk_count, indexed_version: the document row's
            (``indexed_version`` is the source version that is live; another
            ``source_version`` means a newer fetch has not been written yet).
        observed_at: when the listing that recorded ``source_version`` ran
            (None: unknown).
        chunk_rows: chunk rows the catalog holds for it.
        holder_live: a ``duplicate``'s holder is live with the same bytes.
        open_dead_letter: an unresolved dead letter names the document (a
            resolved one was asked to be retried).
    """

    size: int
    source_version: str | None
    acl_id: str | None
    status: str
    error_class: str | None
    parser_version: str | None
    chunker_id: str | None
    observed_at: float | None
    chunk_count: int = 0
    chunk_rows: int = 0
    holder_live: bool = False
    open_dead_letter: bool = False
    indexed_version: str | None = None


def skip_unread(
    listed: ListedObject,
    known: KnownObject | None,
    *,
    parser_version: str,
    chunker_id: str,
    reread: bool = False,
) -> bool:
    """Whether a listed object can be left unread: its listing metadata
    matches what the catalog holds and its last outcome is final.

    True only when (all of): ``reread`` is off; the catalog knows the
    document with the listed size, version and ACL id; for a ``timestamp``
    version, the mtime lies more than :data:`RACY_WINDOW_S` before the
    recorded listing time; and the outcome is final: ``indexed`` by the
    current parser and chunker with its chunk rows complete and the listed
    version live (not one fetched and not yet written), a ``duplicate``
    of a live holder, or a ``dead_letter`` of a :data:`CONTENT_DEAD_CLASSES`
    class by the current parser, still open. An ``empty`` dead letter listed
    with size 0 is final whatever else the row holds (no bytes to misread).
    Anything else (new, changed, stale, pending, unknown order) is read.
    """
    if reread or known is None or listed.size < 0:
        return False
    dead = known.status == "dead_letter" and known.open_dead_letter
    if dead and known.error_class == "empty" and listed.size == 0:
        return True
    if known.size != listed.size or known.source_version != listed.source_version:
        return False
    if known.acl_id != listed.acl_id:
        return False
    if listed.version_domain == "timestamp":
        try:
            mtime = float(listed.source_version)
        except ValueError:
            return False
        if known.observed_at is None or mtime >= known.observed_at - RACY_WINDOW_S:
            return False
    if known.status == "indexed":
        return (
            known.parser_version == parser_version
            and known.chunker_id == chunker_id
            and known.chunk_rows == known.chunk_count
            and known.indexed_version == listed.source_version
        )
    if known.status == "duplicate":
        return known.holder_live
    return dead and known.error_class in CONTENT_DEAD_CLASSES and known.parser_version == parser_version
