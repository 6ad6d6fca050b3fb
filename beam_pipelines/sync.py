"""One sync of one source: ``ragsync sync SOURCE_ID``, the control plane's
worker, and ``ragsync backfill`` (``beam_pipelines.backfill.run_backfill``: a
full sync of a folder or prefix registered as an ``object_store`` source) all
run this.

1. Plan (``ragsync.decisions.plan_sync``): a full listing when asked for,
   when the source has no change feed or no cursor yet; otherwise the
   changes since the stored cursor.
2. Incremental: every page of changes is queued (the queue ``ragsync events
   push`` uses), then its cursor saved (``connectors.feed.read_feed``). A
   cursor the source no longer reaches back to falls back to a full listing.
3. Full: the change feed's position is taken first; the listing pipeline
   (``beam_pipelines.listing.run_listing``) lists on workers, indexes what
   it lists and queues deletes for what vanished, unless the partial-listing
   guard trips: then nothing is deleted, the source is paused with the
   reason and the sync fails. The feed position is saved after a complete
   listing.
4. Apply: the streaming pipeline runs until the source's own queued events
   (this tenant's, this source's) are drained; every other event stays queued
   for its own sync or the stream, and the counts reported are the source's
   (skipped with ``apply=False``, for a long-running ``ragsync stream``).

Failures are counted on the source (a connector that cannot be built, e.g.
broken credentials, included): a rate limit sets when to retry; other failures
back off (``ragsync.decisions.after_failure``: 1, 2, 4 ... minutes, at most an
hour) and the N-th in a row (option ``pause_after_failures``, default 5)
pauses the source, with a reason free of host details (paths, process ids).
A run refused because another run holds the stores is not counted. A paused
source is not synced until ``ragsync sources resume``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from connectors.api import RateLimitedError
from connectors.base import Connector, CursorExpiredError
from connectors.feed import FeedResult, read_feed
from connectors.sources import CheckedSource, check_source
from ragsync.catalog.queue import EventScope
from ragsync.config import Settings, open_catalog
from ragsync.decisions import SyncMode, SyncPlan, after_failure, listing_verdict, plan_sync
from ragsync.embedding.models import ModelSpec
from ragsync.errors import (
    STORE_BUSY,
    ConfigurationError,
    ListingFailedError,
    RagsyncError,
    StoreBusyError,
    SyncError,
    WorkerLostError,
    root_cause,
)
from ragsync.index.versions import prepare_stores
from ragsync.model import Event
from ragsync.ops import lifecycle
from ragsync.ops.display import host_free, safe_text
from ragsync.source_types import SourceSpec

DEFAULT_MAX_DELETE_SHARE = 0.5
DEFAULT_PAUSE_AFTER = 5


class ListingGuardError(SyncError):
    """The partial-listing guard held a full listing's deletes back."""


@dataclass(frozen=True)
class SyncResult:
    """What one sync did (``--json`` of ``ragsync sync``; the API's counts).

    Attributes:
        source_id: the source.
        mode: ``incremental`` or ``full``.
        reason: why that mode.
        listing: counters of the listing pipeline (full syncs).
        feed: what reading the change feed did (incremental syncs).
        applied: the streaming run that applied the queue, when one ran.
        seconds: wall time.
        identities: counts of the identity refresh (:func:`sync_identities`);
            None when the connector lists no identities.
    """

    source_id: str
    mode: str
    reason: str
    listing: dict[str, Any] | None
    feed: dict[str, Any] | None
    applied: dict[str, Any] | None
    seconds: float
    identities: dict[str, int] | None = None

    def totals(self) -> dict[str, int]:
        """The counts an operator asks for first, over every part of the sync."""
        listing, feed, applied = self.listing or {}, self.feed or {}, self.applied or {}

        def both(name: str) -> int:
            return int(listing.get(name, 0)) + int(applied.get(name, 0))

        return {
            "documents_listed": int(listing.get("documents_listed", 0)),
            "documents_vanished": int(listing.get("documents_vanished", 0)),
            "changes_read": int(feed.get("events_read", 0)),
            "events_queued": int(feed.get("events_queued", 0)) + int(listing.get("events_queued", 0)),
            "documents_indexed": both("documents_indexed"),
            "documents_unchanged": both("documents_unchanged"),
            "documents_deleted": int(applied.get("documents_deleted", 0)),
            "dead_lettered": both("dead_lettered"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "totals": self.totals()}


class _QueueSink:
    """``connectors.feed.EventSink`` on the catalog's event queue (the
    events are the source's tenant's)."""

    def __init__(self, catalog: Any, tenant_id: str) -> None:
        self.catalog = catalog
        self.tenant_id = tenant_id

    def queue(self, events: Sequence[Event]) -> int:
        mine = [replace(e, tenant_id=self.tenant_id) for e in events]
        queued, _ = self.catalog.queue.enqueue_events(mine)
        return int(queued)


def _option_float(spec: SourceSpec, name: str, default: float) -> float:
    value = spec.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"source option {name!r} must be a number")
    return float(value)


def _file_system() -> Any:
    """Beam's file systems (``transforms.io.BeamFileSystem``) for a source's
    connector. Beam is imported here, once the source is known and checked:
    an unknown id or a paused source is answered in a fraction of a second,
    not after the seconds an import of Beam takes."""
    from transforms.io import BeamFileSystem

    return BeamFileSystem()


def run_sync(
    source_id: str,
    settings: Settings,
    *,
    full: bool = False,
    beam_args: Sequence[str] = (),
    show_progress: bool = True,
    model_spec: ModelSpec | None = None,
    max_delete_share: float | None = None,
    apply: bool = True,
    tenant_id: str | None = None,
    reread: bool = False,
    source: CheckedSource | None = None,
) -> SyncResult:
    """Sync ``source_id`` once (see the module docstring).

    Args:
        source_id: a registered source with a location.
        settings: stores and limits.
        full: list everything instead of reading the change feed.
        beam_args: Beam options for the listing pipeline.
        show_progress: progress lines on stderr.
        model_spec: the embedding model (default: the live index version's).
        max_delete_share: the partial-listing guard's limit (default: the
            source's option ``max_delete_share``, else 0.5).
        apply: run the streaming pipeline until the source's own queued
            events are drained (never another tenant's or source's).
        tenant_id: the source's tenant (source ids are unique per tenant;
            without it the id must be unique across tenants).
        reread: a full listing reads every object, even those its listing
            metadata shows unchanged.
        source: the source as the caller just registered it
            (``connectors.sources.register_source``): not read or checked again.

    Raises:
        ConfigurationError: unknown source, no usable location, bad options.
        SourcePausedError: the source is paused.
        ListingGuardError: a full listing would have deleted too much (the
            source is now paused).
        SyncError: the listing or the change feed failed (counted; the N-th
            failure in a row pauses the source).
    """
    start = time.monotonic()
    catalog = open_catalog(settings)
    try:
        checked = check_source(
            catalog, settings, source_id, tenant_id=tenant_id, registered=source, syncing=True
        )
        plan, listing, feed, identities = _read_checked(
            checked,
            catalog,
            settings,
            full=full,
            max_delete_share=max_delete_share,
            read_all=lambda p, connector: _full_listing(
                p, connector, checked.spec, catalog, settings, beam_args, show_progress, model_spec, reread
            ),
            show_progress=show_progress,
        )
        applied = None
        scope = EventScope(checked.state.tenant_id, source_id)
        if apply and catalog.queue.unfinished_events(scope=scope) > 0:
            applied = _apply_queue(settings, show_progress, model_spec, scope)
        listed = listing.get("documents_listed") if listing is not None else None
        catalog.syncs.sync_succeeded(
            source_id, full=plan.mode == SyncMode.FULL, listed=listed, tenant_id=scope.tenant_id
        )
    finally:
        catalog.close()
    return SyncResult(
        source_id=source_id,
        mode=plan.mode.value,
        reason=plan.reason,
        listing=listing,
        feed=asdict(feed) if feed is not None else None,
        applied=applied,
        seconds=round(time.monotonic() - start, 3),
        identities=identities,
    )


def _read_checked(
    checked: CheckedSource,
    catalog: Any,
    settings: Settings,
    *,
    full: bool,
    max_delete_share: float | None,
    read_all: Callable[[SyncPlan, Connector], dict[str, Any]],
    show_progress: bool,
) -> tuple[SyncPlan, dict[str, Any] | None, Any, dict[str, int] | None]:
    """Open the checked source's connector and read it once: its change feed
    into the queue, or a full listing (``read_all``), then its identities.
    A failure is counted against the source (the N-th in a row pauses it)
    unless a stop, a dead worker or a busy store caused it.

    Returns:
        The plan as it ran, the listing's counters (full), the feed's
        (incremental), and the identities synced (None: none listed).
    ``max_delete_share`` None: the source's option, else the default.
    """
    state, spec = checked.state, checked.spec
    source_id = spec.source_id
    pause_after = int(_option_float(spec, "pause_after_failures", DEFAULT_PAUSE_AFTER))
    if max_delete_share is None:
        max_delete_share = _option_float(spec, "max_delete_share", DEFAULT_MAX_DELETE_SHARE)
    try:
        connector = checked.open(settings, _file_system())
    except ConfigurationError as exc:
        # Broken credentials or options fail every sync the same way:
        # counted (backed off, then paused), never retried forever.
        _count_failure(catalog, spec, state.failures, pause_after, exc, listing=False)
        raise
    plan = plan_sync(
        source_id,
        supports_changes=connector.supports_changes,
        cursor=state.cursor,
        full_requested=full,
        max_delete_share=max_delete_share,
    )
    catalog.syncs.sync_started(source_id, tenant_id=state.tenant_id)
    try:
        listing, feed, plan = _read_source(
            plan, connector, spec, catalog, show_progress, lambda p: read_all(p, connector)
        )
        return plan, listing, feed, sync_identities(catalog, connector, spec)
    except Exception as exc:
        if lifecycle.stop_signal() is not None or isinstance(exc, WorkerLostError):
            raise  # stopped by Ctrl-C or SIGTERM, or a worker process died: not the source's failure
        if _store_busy(exc):
            # Another run holds the stores: this run is refused, the
            # source did nothing wrong (not counted, never paused).
            raise SyncError(
                f"sync of {source_id} refused: the indexes are {STORE_BUSY}; it was not counted "
                "as a failure of the source, request it again when that run has ended"
            ) from exc
        in_listing = isinstance(exc, ListingGuardError | ListingFailedError)
        _count_failure(catalog, spec, state.failures, pause_after, exc, listing=in_listing)
        wrapped = _as_sync_error(source_id, exc)
        if wrapped is exc:
            raise
        raise wrapped from exc
    finally:
        connector.close()


def sync_identities(catalog: Any, connector: Connector, spec: SourceSpec) -> dict[str, int] | None:
    """Replace the source's users, groups and memberships in the catalog with what it lists now.

    Part of every sync of a source whose connector lists identities
    (``Connector.list_identities()`` is not None), and of ``ragsync
    identities sync``. The listing goes through the
    connector's own client: the source's credentials, its rate-limit and
    backoff handling. The replacement is one transaction, so a membership
    removed at the source is gone once this returns.

    Args:
        catalog: the catalog.
        connector: the source's open connector.
        spec: the source.

    Returns:
        ``{"users", "groups", "memberships"}`` counts, or None when the
        connector lists no identities (nothing is changed).

    Raises:
        Whatever the connector's listing raises; the catalog is then unchanged.
    """
    found = connector.list_identities()
    if found is None:
        return None
    catalog.identities.replace_identities(spec.tenant_id, spec.source_id, found)
    return {
        "users": len(found.users),
        "groups": len(found.groups),
        "memberships": len(found.user_groups) + len(found.group_groups),
    }


def run_identity_sync(source_id: str, settings: Settings, *, tenant_id: str | None = None) -> dict[str, Any]:
    """``ragsync identities sync``: refresh one source's identities only (no documents).

    Args:
        source_id: a registered source.
        settings: the catalog and limits.
        tenant_id: the source's tenant (needed when several tenants have this id).

    Returns:
        ``{"source_id", "tenant_id", "users", "groups", "memberships", "seconds"}``.

    Raises:
        ConfigurationError: unknown source, no location, bad credentials, or a
            connector that lists no identities.
    """
    start = time.monotonic()
    catalog = open_catalog(settings)
    try:
        checked = check_source(catalog, settings, source_id, tenant_id=tenant_id)
        state, spec = checked.state, checked.spec
        connector = checked.open(settings, _file_system())
        try:
            counts = sync_identities(catalog, connector, spec)
        finally:
            connector.close()
        if counts is None:
            raise ConfigurationError(
                f"source {source_id!r} ({spec.type}) lists no identities (a drive or tickets source "
                "lists them with option identities=true)"
            )
    finally:
        catalog.close()
    return {
        "source_id": source_id,
        "tenant_id": state.tenant_id,
        **counts,
        "seconds": round(time.monotonic() - start, 3),
    }


def _read_source(
    plan: SyncPlan,
    connector: Any,
    spec: SourceSpec,
    catalog: Any,
    show_progress: bool,
    full_listing: Callable[[SyncPlan], dict[str, Any]],
) -> tuple[dict[str, Any] | None, FeedResult | None, SyncPlan]:
    """Run the plan's reading step: the change feed, or ``full_listing(plan)``
    for a full plan or when the feed's cursor expired; returns (listing
    counters, feed result, the plan run)."""
    if plan.mode == SyncMode.INCREMENTAL:
        started = time.monotonic()
        try:
            feed = read_feed(
                connector,
                plan.cursor,
                _QueueSink(catalog, spec.tenant_id),
                lambda c: catalog.syncs.save_cursor(spec.source_id, c, tenant_id=spec.tenant_id),
            )
            if show_progress:
                elapsed = time.monotonic() - started
                rate = feed.events_read / max(elapsed, 1e-6)
                line = (
                    f"[sync] {spec.source_id}: {feed.events_read} changes in {feed.pages} pages, "
                    f"{feed.events_queued} queued, {elapsed:.1f}s ({rate:.1f} changes/s)"
                )
                print(safe_text(line), file=sys.stderr, flush=True)
            return None, feed, plan
        except CursorExpiredError as exc:
            plan = replace(
                plan, mode=SyncMode.FULL, reason=f"the cursor expired ({exc}): full listing", cursor=""
            )
    return full_listing(plan), None, plan


def _full_listing(
    plan: SyncPlan,
    connector: Any,
    spec: SourceSpec,
    catalog: Any,
    settings: Settings,
    beam_args: Sequence[str],
    show_progress: bool,
    model_spec: ModelSpec | None,
    reread: bool = False,
) -> dict[str, Any]:
    if model_spec is None:
        from ragsync.index.versions import live_spec

        model_spec = live_spec(settings)
    prepare_stores(settings, model_spec)
    # The feed's position before listing: changes made while listing are
    # read by the next incremental sync.
    try:
        cursor = connector.start_cursor() if connector.supports_changes else ""
        shards = connector.list_shards()
    except RagsyncError as exc:
        message = f"full listing of {spec.source_id} failed: [{exc.error_class}] {exc}"
        raise ListingFailedError(message) from exc
    if show_progress:
        print(
            safe_text(f"[sync] {spec.source_id}: full listing ({plan.reason})"), file=sys.stderr, flush=True
        )
    from beam_pipelines.listing import run_listing  # Beam: only a full listing loads it

    counters = run_listing(
        spec,
        settings,
        model_spec,
        shards=shards,
        max_delete_share=plan.max_delete_share,
        beam_args=beam_args,
        show_progress=show_progress,
        reread=reread,
    )
    if counters["listing_guard_tripped"]:
        verdict = listing_verdict(
            known=counters["documents_known"],
            vanished=counters["documents_vanished"],
            max_delete_share=plan.max_delete_share,
            listed=counters["documents_listed"],
        )
        raise ListingGuardError(
            f"source {spec.source_id}: {verdict.reason}; the source is paused. If the deletions are "
            f"real, run `ragsync sources resume {spec.source_id}` and `ragsync sync {spec.source_id} "
            "--full --max-delete-share 1`"
        )
    if counters["documents_listed"] == 0 and spec.uri.startswith(("gs://", "s3://")):
        # Beam's object-store file systems answer a missing bucket, a denied
        # listing and an empty prefix alike: an empty listing is not trusted.
        raise ListingFailedError(
            f"full listing of {spec.source_id} failed: no object under {spec.uri} (a missing bucket or a "
            "denied listing look the same as an empty prefix); nothing was deleted"
        )
    if cursor:
        catalog.syncs.save_cursor(spec.source_id, cursor, tenant_id=spec.tenant_id)
    return counters


def _apply_queue(
    settings: Settings, show_progress: bool, model_spec: ModelSpec | None, scope: EventScope
) -> dict[str, Any]:
    """Apply the queued events of ``scope`` (one tenant's source) until they
    are drained; returns the stream's counters (those events only). Raises
    SyncError when a signal interrupted the run."""
    from beam_pipelines.streaming import run_stream

    summary = run_stream(settings, until_idle=True, show_progress=show_progress, spec=model_spec, scope=scope)
    if summary is None:
        raise SyncError("applying the queued events was interrupted")
    return summary.to_dict()


def _count_failure(
    catalog: Any, spec: SourceSpec, previous: int, pause_after: int, exc: BaseException, *, listing: bool
) -> None:
    """Record a failed sync on its source (and pause it when due)."""
    key = {"tenant_id": spec.tenant_id}
    limited = _rate_limit_in(exc)
    if limited is not None:
        # The source asked us to wait: not the connector failing.
        retry_at = time.time() + limited.retry_after_s
        catalog.syncs.sync_failed(spec.source_id, failures=previous, retry_at=retry_at, **key)
        return
    # The reason is shown to the tenant (GET /v1/sources): no host details.
    error = host_free(_message(exc))
    outcome = after_failure(previous, error=error, pause_after=pause_after, listing_failed=listing)
    reason = outcome.reason if outcome.pause else ""
    backoff_until = None if outcome.pause else time.time() + outcome.retry_after_s
    catalog.syncs.sync_failed(
        spec.source_id, failures=outcome.failures, pause_reason=reason, retry_at=backoff_until, **key
    )


def _store_busy(exc: BaseException) -> bool:
    """Whether a failure is another run holding the stores (Beam may wrap
    the :class:`StoreBusyError` a step raised in its own error: its text is
    checked too)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        if isinstance(cur, StoreBusyError) or STORE_BUSY in str(cur):
            return True
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return False


def _rate_limit_in(exc: BaseException) -> RateLimitedError | None:
    """The rate-limit answer behind a failure (Beam wraps what a step raised)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        if isinstance(cur, RateLimitedError):
            return cur
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return None


def _message(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, RagsyncError) else root_cause(exc)


def _as_sync_error(source_id: str, exc: BaseException) -> BaseException:
    if isinstance(exc, SyncError | ConfigurationError):
        return exc
    if isinstance(exc, ListingFailedError):
        return SyncError(str(exc))
    if isinstance(exc, RagsyncError):
        return SyncError(f"sync of {source_id} failed: [{exc.error_class}] {exc}")
    return SyncError(f"sync of {source_id} failed: {_message(exc)}")
