"""Pure decisions about syncing sources and repairing the indexes. No I/O here."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from ragsync.source_types import SYNC_KINDS


@dataclass(frozen=True)
class ListingVerdict:
    """The partial-listing guard's answer for one full listing.

    Attributes:
        delete: True when the documents the listing no longer holds may be deleted.
        reason: why not ('' when they may).
    """

    delete: bool
    reason: str = ""


def listing_verdict(
    *, known: int, vanished: int, max_delete_share: float, listed: int | None = None
) -> ListingVerdict:
    """May a complete listing delete the ``vanished`` of ``known`` documents?

    A listing that silently missed part of a source (a page an API dropped,
    a prefix it could not see) looks like mass deletion; so does a source
    emptied by mistake. Either way, deleting more than ``max_delete_share``
    of the source's documents in one listing is held back for an operator.

    Args:
        known: documents of the source before the listing.
        vanished: of those, the ones the listing did not return.
        max_delete_share: largest share (0..1) deleted without an operator;
            1.0 allows any.
        listed: objects the listing returned, when known. An empty listing
            of a source that has documents never deletes: a missing bucket, a
            denied listing or an unmounted share look exactly like that.

    Returns:
        A verdict; ``delete`` is False when the guard trips.
    """
    if not 0.0 <= max_delete_share <= 1.0:
        raise ValueError("max_delete_share must be within 0..1")
    if vanished < 0 or known < 0 or vanished > known:
        raise ValueError("need 0 <= vanished <= known")
    if known == 0 or vanished == 0:
        return ListingVerdict(True)
    if listed == 0:
        return ListingVerdict(
            False,
            f"the listing returned no object but the source has {known} documents (a missing bucket, a "
            "denied listing or an unmounted share look like that): nothing was deleted",
        )
    share = vanished / known
    if share > max_delete_share:
        return ListingVerdict(
            False,
            f"the listing would delete {vanished} of {known} documents ({share:.0%}, above the "
            f"{max_delete_share:.0%} limit): nothing was deleted",
        )
    return ListingVerdict(True)


class SyncMode(str, Enum):
    """How a sync reads its source."""

    INCREMENTAL = "incremental"  # changes since the cursor
    FULL = "full"  # a full listing; what vanished is deleted


@dataclass(frozen=True)
class SyncPlan:
    """What one sync of a source will do, decided before anything is read
    (``ragsync sync --dry-run`` can print it).

    Attributes:
        source_id: the source.
        mode: incremental or full.
        reason: why this mode.
        cursor: where an incremental sync starts ('' for a full one).
        max_delete_share: the partial-listing guard's limit (full syncs).
    """

    source_id: str
    mode: SyncMode
    reason: str
    cursor: str = ""
    max_delete_share: float = 0.5


def plan_sync(
    source_id: str,
    *,
    supports_changes: bool,
    cursor: str | None,
    full_requested: bool,
    max_delete_share: float = 0.5,
) -> SyncPlan:
    """Choose between reading the change feed and a full listing.

    Returns:
        FULL when asked for, when the source has no change feed, or when no
        cursor is stored yet (the first sync lists everything); otherwise
        INCREMENTAL from the stored cursor.
    """
    if full_requested:
        return SyncPlan(source_id, SyncMode.FULL, "a full listing was requested", "", max_delete_share)
    if not supports_changes:
        return SyncPlan(source_id, SyncMode.FULL, "the source has no change feed", "", max_delete_share)
    if not cursor:
        return SyncPlan(source_id, SyncMode.FULL, "first sync: no cursor yet", "", max_delete_share)
    return SyncPlan(
        source_id, SyncMode.INCREMENTAL, "changes since the stored cursor", cursor, max_delete_share
    )


@dataclass(frozen=True)
class FailureOutcome:
    """What a failed sync does to its source.

    Attributes:
        failures: consecutive failures now.
        pause: True when the source must be paused.
        reason: the pause reason ('' when not paused).
    """

    failures: int
    pause: bool
    reason: str = ""
    retry_after_s: float = 0.0


#: The first retry of a failed sync waits this long; each further failure in
#: a row doubles it, up to ``FAILURE_BACKOFF_MAX_S``.
FAILURE_BACKOFF_S = 60.0
FAILURE_BACKOFF_MAX_S = 3600.0


def failure_backoff_s(failures: int) -> float:
    """Seconds before the next sync of a source that failed ``failures``
    times in a row (>= 1): 60, 120, 240 ... capped at an hour."""
    if failures < 1:
        raise ValueError("failures must be >= 1")
    return min(FAILURE_BACKOFF_S * 2.0 ** min(failures - 1, 30), FAILURE_BACKOFF_MAX_S)


def after_failure(
    previous_failures: int, *, error: str, pause_after: int, listing_failed: bool
) -> FailureOutcome:
    """Count a failed sync and decide whether its source is paused.

    A full listing that failed (an error, a timeout, or the partial-listing
    guard) pauses the source at once: the next scheduled listing would most
    likely fail the same way, and an operator should look. Any other failure
    (the change feed, a connector that cannot be built) waits
    :func:`failure_backoff_s` before the next scheduled sync and pauses the
    source after ``pause_after`` failures in a row.
    """
    if pause_after < 1:
        raise ValueError("pause_after must be >= 1")
    failures = previous_failures + 1
    if listing_failed:
        return FailureOutcome(failures, True, error)
    if failures >= pause_after:
        return FailureOutcome(failures, True, f"{failures} syncs failed in a row; last error: {error}")
    return FailureOutcome(failures, False, retry_after_s=failure_backoff_s(failures))


@dataclass(frozen=True)
class SourceSchedule:
    """What the scheduler knows about one source.

    Attributes:
        source_id: the source.
        sync: ``poll``, ``webhook`` or None (syncs only on request).
        poll_interval_s: seconds between polls (``poll``).
        paused: paused sources are never scheduled.
        last_sync_at: when the last sync (of any mode) started, None if never.
        last_full_at: when the last full listing succeeded, None if never.
        retry_at: no sync before this time (a rate limit asked to wait).
        busy: a sync of this source is queued or running.
    """

    source_id: str
    sync: str | None
    poll_interval_s: int | None
    paused: bool
    last_sync_at: float | None
    last_full_at: float | None
    retry_at: float | None = None
    busy: bool = False


def due_syncs(
    sources: Iterable[SourceSchedule], now: float, *, full_every_s: float = 86_400.0
) -> list[tuple[str, SyncMode]]:
    """Syncs the scheduler should request now.

    Every source that syncs by poll or webhook gets a full listing every
    ``full_every_s`` (deletes are only seen by listings for most sources);
    polled sources get an incremental sync every ``poll_interval_s``.
    Paused sources, sources with a sync queued or running, and sources a
    rate limit asked to wait are skipped.
    """
    out: list[tuple[str, SyncMode]] = []
    for s in sources:
        if s.paused or s.busy or s.sync not in SYNC_KINDS:
            continue
        if s.retry_at is not None and now < s.retry_at:
            continue
        if s.last_full_at is None or now - s.last_full_at >= full_every_s:
            out.append((s.source_id, SyncMode.FULL))
        elif s.sync == "poll" and (
            s.last_sync_at is None or now - s.last_sync_at >= (s.poll_interval_s or 300)
        ):
            out.append((s.source_id, SyncMode.INCREMENTAL))
    return out


def next_tenant(
    waiting: Iterable[str], running: Mapping[str, int], last: str | None, *, max_running: int = 1
) -> str | None:
    """The tenant whose oldest queued sync runs next: round-robin by tenant.

    Args:
        waiting: tenants with a queued sync (any order, repeats allowed).
        running: syncs running now, per tenant.
        last: the tenant served last (None at start).
        max_running: a tenant with this many syncs running waits.

    Returns:
        The first eligible tenant after ``last`` in sorted order, wrapping
        around (``last`` itself only when no other is eligible); None when
        no tenant is eligible. One tenant's long queue therefore delays
        another's sync by at most one sync per waiting tenant, not by the
        length of the queue.
    """
    if max_running < 1:
        raise ValueError("max_running must be >= 1")
    eligible = sorted({t for t in waiting if running.get(t, 0) < max_running})
    if not eligible:
        return None
    if last is None:
        return eligible[0]
    return next((t for t in eligible if t > last), eligible[0])


# -- repairing the indexes ---------------------------------------------------------


@dataclass(frozen=True)
class RepairPlan:
    """What ``ragsync reconcile --repair`` does, per store.

    Attributes:
        rewrite: ``{store: chunk ids}`` held by the catalog for a document
            that is not deleted but missing from that store: written again
            from the catalog's chunk rows.
        orphans: ``{store: chunk ids}`` in that store with no chunk row in
            the catalog: deleted from that store.
        dead_rows: chunk rows of documents that are deleted or unknown (a
            delete that stopped part-way): deleted from every store and the
            catalog.
    """

    rewrite: dict[str, tuple[str, ...]]
    orphans: dict[str, tuple[str, ...]]
    dead_rows: tuple[str, ...]

    @property
    def empty(self) -> bool:
        """True when there is nothing to repair."""
        return not (any(self.rewrite.values()) or any(self.orphans.values()) or self.dead_rows)


def plan_repair(
    catalog_chunks: Mapping[str, str],
    gone_docs: Collection[str],
    stores: Mapping[str, Collection[str]],
    pending: Collection[str] = (),
) -> RepairPlan:
    """Compare chunk ids, not just counts, between the catalog and each store.

    Args:
        catalog_chunks: ``{chunk_id: doc_id}`` of the catalog's chunk rows.
        gone_docs: documents that are deleted or unknown to the catalog.
        stores: ``{store name: chunk ids it holds}``.
        pending: chunk ids of rows no live version holds (written for a
            version whose flip never came, or replaced by a flip and not yet
            deleted): dead rows too, as queries already ignore them.

    Returns:
        The plan; every id list is sorted, so a replay repairs the same ids.
    """
    gone = set(gone_docs)
    dead = {cid for cid, doc in catalog_chunks.items() if doc in gone} | (set(pending) & set(catalog_chunks))
    wanted = set(catalog_chunks) - dead
    rewrite = {name: tuple(sorted(wanted - set(ids))) for name, ids in stores.items()}
    orphans = {name: tuple(sorted(set(ids) - set(catalog_chunks))) for name, ids in stores.items()}
    return RepairPlan(rewrite=rewrite, orphans=orphans, dead_rows=tuple(sorted(dead)))
