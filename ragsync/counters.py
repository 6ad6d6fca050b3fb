"""Every counter a run reports, declared once: its name and what it counts.

The pipeline's steps count into Beam counters of these names
(``transforms.metrics.counter``, which refuses a name not declared here);
the run summaries (``ragsync backfill|sync|stream|reembed --json``) and the
catalog's run records read them back by the same names. The tuples below
say which counters each kind of run reports; the summary dataclasses'
fields are checked against them by ``tests/test_counters.py``.

Adding a counter: add it to :data:`COUNTERS` with one line saying what it
counts, to the run tuple(s) that report it, and count it in the step.
"""

from __future__ import annotations

COUNTERS: dict[str, str] = {
    # listing and fetching
    "documents_listed": "objects a full listing saw under the source's location",
    "documents_seen": "documents that reached the fetch step (listed or named by an event)",
    "documents_unread": "listed objects skipped without reading their bytes (size and time unchanged)",
    "documents_unchanged": "documents whose bytes (or listing stamp) matched the indexed version",
    "documents_duplicate": "documents whose bytes equal another document's (an exact copy)",
    "documents_known": "catalog documents a full listing compared against what it listed",
    "documents_vanished": "catalog documents a full listing no longer found (queued as deletes)",
    "listing_guard_tripped": "full listings whose deletes exceeded --max-delete-share (none applied)",
    "bytes_fetched": "bytes read from sources",
    "lane_fast": "documents routed to the fast lane (text layer, markup, office files)",
    "lane_slow": "documents routed to the slow lane (OCR)",
    # writing
    "documents_indexed": "documents whose new version was written and flipped live",
    "documents_acl_updated": "documents whose permissions changed without re-embedding",
    "documents_deleted": "documents removed from the catalog and both indexes",
    "children_deleted": "attachments and archive members removed with their parent",
    "dead_lettered": "documents or events that ended in the dead-letter table",
    "paragraphs_boilerplate": "paragraphs left out as a source's boilerplate (disclaimers, signatures)",
    "chunks_new": "chunks whose id the indexed version did not have",
    "chunks_kept": "chunks whose id the indexed version already had (not embedded again)",
    "chunks_embedded": "chunks the model embedded (cache misses)",
    "embedding_cache_hits": "chunks whose vector came from the embedding cache",
    "embedding_cache_misses": "chunks the embedding cache did not hold",
    "chunks_written": "chunks written to both indexes",
    "chunks_deleted": "chunks deleted from both indexes",
    "chunks_failed": "chunks a re-embedding could not write",
    "documents_written": "documents a re-embedding wrote into the new index version",
    "documents_reindexed": "documents a parser or chunker backfill wrote again from what was stored of them",
    "documents_reindex_failed": "documents a parser or chunker backfill left behind (see their dead letters)",
    "documents_reindex_skipped": "documents a parser or chunker backfill found gone before reading them",
    "copies_promoted": "exact copies that became the holder of their content when it left",
    "copies_relinked": "exact copies pointed at a new holder",
    # events
    "events_queued": "events put on the catalog's queue",
    "events_applied": "events whose change is in the indexes (acknowledged)",
    "events_stale": "events older than what the catalog already holds (skipped)",
    "events_duplicate": "events delivered again (same event id)",
    "events_retried": "events that failed and were queued again with backoff",
    "events_to_slow_lane": "events handed to the slow (OCR) lane",
}
"""Counter name -> what it counts."""

LISTING: tuple[str, ...] = (
    "documents_listed",
    "documents_seen",
    "documents_indexed",
    "documents_unchanged",
    "documents_unread",
    "documents_duplicate",
    "documents_acl_updated",
    "dead_lettered",
    "chunks_embedded",
    "embedding_cache_hits",
    "chunks_written",
    "chunks_deleted",
    "documents_known",
    "documents_vanished",
    "events_queued",
    "listing_guard_tripped",
)
"""What a listing run (a backfill or full sync) reports."""

STREAM: tuple[str, ...] = (
    "events_applied",
    "events_stale",
    "events_duplicate",
    "events_retried",
    "documents_indexed",
    "documents_unchanged",
    "documents_deleted",
    "documents_acl_updated",
    "chunks_embedded",
    "embedding_cache_hits",
    "chunks_written",
    "chunks_deleted",
    "dead_lettered",
)
"""What a stream run (events from the queue or a bus) reports."""

REEMBED: tuple[str, ...] = ("chunks_written", "chunks_embedded", "embedding_cache_hits", "chunks_failed")
"""What a re-embedding pass reports."""

REINDEX: tuple[str, ...] = (
    "documents_reindexed",
    "documents_reindex_failed",
    "documents_reindex_skipped",
    "events_stale",
    "chunks_embedded",
    "embedding_cache_hits",
    "chunks_written",
    "chunks_deleted",
    "dead_lettered",
)
"""What a parser or chunker backfill reports (``events_stale``: documents a
newer version overtook while they were re-read, written by that version)."""


def declared(name: str) -> str:
    """``name`` when it is a declared counter.

    Raises:
        ValueError: it is not in :data:`COUNTERS` (declare it there first).
    """
    if name not in COUNTERS:
        raise ValueError(f"counter {name!r} is not declared in ragsync.counters.COUNTERS")
    return name
