"""The one adapter from any connector to Beam: a full listing read by workers,
and the documents that listing no longer holds.

``ListSource`` turns a connector into a bounded source. The launcher only
asks the connector for its shards (a pure, network-free call: namespaces,
key prefixes, projects); workers list each shard (``Connector.list_shard``:
Beam ``FileSystems.match`` for object stores, API pages for the others) and
stream the records on, so no process holds the whole listing. A failing or
timed-out shard fails the pipeline: the run exits non-zero and nothing is
deleted.

``FindVanished`` compares the listing with the catalog's documents of the
source and, unless the partial-listing guard trips, turns each document the
listing no longer holds into a delete event, queued on the same queue as
``ragsync events push`` (the streaming pipeline's version gate and delete
path apply it). Documents written after the listing started are never
candidates (something else is updating them now).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from connectors.base import Connector, make_event, stamp_listed
from connectors.sources import connector_of
from ragsync import ids
from ragsync.config import Settings
from ragsync.decisions import ListingVerdict, listing_verdict, skip_unread
from ragsync.errors import FetchTimeoutError
from ragsync.model import Event, SourceFile
from ragsync.ops.display import listing_line
from ragsync.source_types import SourceSpec
from transforms.io import BeamFileSystem
from transforms.metrics import StageMetrics, counter
from transforms.progress import ListingTally
from transforms.steps import CatalogDoFn

DEFAULT_LISTING_TIMEOUT_S = 6 * 3600.0


def connector_for(spec: SourceSpec, settings: Settings) -> Connector:
    """The connector of ``spec`` with Beam's file systems and the settings'
    read limits (``connectors.sources.connector_of``)."""
    return connector_of(spec, settings, BeamFileSystem())


def listing_shards(spec: SourceSpec, settings: Settings) -> list[str]:
    """The shards of a full listing (computed on the launcher, no network)."""
    connector = connector_for(spec, settings)
    try:
        return connector.list_shards()
    finally:
        connector.close()


class _ListShardFn(beam.DoFn):
    """shard -> every ``SourceFile`` of it, streamed.

    Raises whatever the connector raises (the run fails: an incomplete
    listing is never used), or ``FetchTimeoutError`` past ``timeout_s``.
    """

    def __init__(
        self,
        spec: SourceSpec,
        settings: Settings,
        timeout_s: float,
        show_progress: bool,
        tally: ListingTally | None = None,
        shards: int = 1,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.timeout_s = timeout_s
        self.show_progress = show_progress
        self.tally = tally
        self.shards = shards
        self._connector: Connector | None = None

    def setup(self) -> None:
        self._connector = connector_for(self.spec, self.settings)
        self._listed = counter("documents_listed")
        self._stage = StageMetrics("list")

    def teardown(self) -> None:
        if self._connector is not None:
            self._connector.close()
            self._connector = None

    def process(self, shard: str) -> Iterator[SourceFile]:
        assert self._connector is not None
        started = last = time.monotonic()
        # What a listing shows was true at the source when it was listed: the
        # version's observation time, and the permissions' evidence time for
        # connectors that return current permissions (a folder times its own
        # from its ACL sidecar).
        listed_at = time.time()
        current = bool(getattr(self._connector, "permissions_current", True))
        cpu0, n = time.thread_time(), 0
        label = shard if self.shards > 1 else None  # lines name the shard when there are several
        for n, item in enumerate(self._connector.list_shard(shard), start=1):
            self._listed.inc()
            if not item.observed_at or (current and not item.acl_observed_at):
                item = dataclasses.replace(
                    item,
                    observed_at=item.observed_at or listed_at,
                    acl_observed_at=item.acl_observed_at or (listed_at if current else 0.0),
                )
            yield item
            now = time.monotonic()
            if now - started > self.timeout_s:
                raise FetchTimeoutError(
                    f"listing {self.spec.source_id} shard {shard!r} ran past {self.timeout_s:g} s "
                    f"({n} objects): an incomplete listing is not used"
                )
            if self.show_progress and now - last >= 2.0:
                last = now
                print(
                    listing_line(n, now - started, complete=False, shard=label), file=sys.stderr, flush=True
                )
        # One latency sample per shard (its records are streamed on as they come).
        now = time.monotonic()
        wall = now - started
        self._stage.record(elements=n, cpu_s=time.thread_time() - cpu0, wall_s=wall)
        if self.tally is not None:
            self.tally.shard_listed(shard, n)
        if not self.show_progress:
            return
        if self.shards == 1:
            print(listing_line(n, wall, complete=True), file=sys.stderr, flush=True)
            return
        if n:
            # Most shards of a prefix (one per leading key character) are
            # empty: only those that held something get a line.
            print(listing_line(n, wall, complete=True, shard=label), file=sys.stderr, flush=True)
        listed = self.tally.listed() if self.tally is not None else None
        if listed is not None and self.tally is not None:  # this was the last shard to finish
            print(listing_line(listed, now - self.tally.started, complete=True), file=sys.stderr, flush=True)


class ListSource(beam.PTransform):
    """A connector's full listing, listed by workers shard by shard.

    Input: the pipeline (``PBegin``). Output: ``SourceFile``, redistributed
    so fetching runs in parallel whatever the shard count.

    Args:
        spec: the source.
        settings: read limits (and the file systems' configuration).
        shards: from :func:`listing_shards` (the launcher's only listing work).
        timeout_s: longest time one shard may take.
        show_progress: print the count listed so far and the rate to stderr,
            and each shard's total when it is listed.
        tally: where each listed shard's count goes (for the later steps'
            totals), or None.
    """

    def __init__(
        self,
        spec: SourceSpec,
        settings: Settings,
        shards: list[str],
        *,
        timeout_s: float = DEFAULT_LISTING_TIMEOUT_S,
        show_progress: bool = False,
        tally: ListingTally | None = None,
    ) -> None:
        super().__init__()
        if not shards:
            raise ValueError("a listing needs at least one shard")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.spec = spec
        self.settings = settings
        self.shards = list(shards)
        self.timeout_s = timeout_s
        self.show_progress = show_progress
        self.tally = tally

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        fn = _ListShardFn(
            self.spec, self.settings, self.timeout_s, self.show_progress, self.tally, len(self.shards)
        )
        return (
            pbegin
            | "Shards" >> beam.Create(self.shards)
            | "SpreadShards" >> beam.Reshuffle()
            | "ListShard" >> beam.ParDo(fn)
            | "SpreadListing" >> beam.Reshuffle()
        )


class _SkipUnreadFn(CatalogDoFn):
    """[SourceFile] -> the ones to read; the others (``decisions.skip_unread``)
    count as seen and unchanged (and ``documents_unread``) and stop here.
    One catalog query per batch."""

    def __init__(self, settings: Settings, reread: bool, tally: ListingTally | None = None) -> None:
        super().__init__(settings)
        self.reread = reread
        self.tally = tally

    def process(self, batch: list[SourceFile]) -> Iterator[SourceFile]:
        doc_ids = [ids.doc_id(f.tenant_id, f.source_id, f.source_object_id) for f in batch]
        known = {} if self.reread else self._catalog.syncs.unread_states(doc_ids)
        chunker_id, parser_version = self.settings.chunker.config_id, self.settings.parser_version
        skipped = 0
        for item, doc_id in zip(batch, doc_ids, strict=True):
            listed = stamp_listed(item)
            if skip_unread(
                listed,
                known.get(doc_id),
                parser_version=parser_version,
                chunker_id=chunker_id,
                reread=self.reread,
            ):
                for name in ("documents_seen", "documents_unchanged", "documents_unread"):
                    self.count(name)
                skipped += 1
            else:
                yield item
        if self.tally is not None:
            self.tally.add_unread(skipped)


class SkipUnread(beam.PTransform):
    """Listed objects whose listing metadata matches the catalog and whose
    last outcome is final are not read (``ragsync.decisions.skip_unread``).

    Input and output: ``SourceFile`` (the ones to fetch). The listing itself
    still goes to ``FindVanished``, so skipped objects count as listed.

    Args:
        settings: where the catalog is; the chunker's id.
        reread: read every object (``--reread``).
        tally: where the count of objects not read goes (they leave the
            backfill's total), or None.
    """

    def __init__(
        self, settings: Settings, *, reread: bool = False, tally: ListingTally | None = None
    ) -> None:
        super().__init__()
        self.settings = settings
        self.reread = reread
        self.tally = tally

    def expand(self, listed: beam.PCollection) -> beam.PCollection:
        return (
            listed
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=500)
            | "Skip" >> beam.ParDo(_SkipUnreadFn(self.settings, self.reread, self.tally))
        )


class _KnownDocumentsFn(CatalogDoFn):
    """source id -> (doc_id, (object id, version)) of every live document of
    the source last written before the listing started (streamed in pages)."""

    def __init__(self, settings: Settings, spec: SourceSpec, listing_started_at: float) -> None:
        super().__init__(settings)
        self.spec = spec
        self.started_at = listing_started_at

    def process(self, _: Any) -> Iterator[tuple[str, tuple[str, str]]]:
        for doc_id, object_id, version in self._catalog.documents.iter_source_documents(
            self.spec.source_id, self.spec.tenant_id, updated_before=self.started_at
        ):
            self.count("documents_known")
            yield doc_id, (object_id, version)


def _vanished(joined: tuple[str, dict[str, list[Any]]]) -> Iterator[tuple[str, str]]:
    _, groups = joined
    if groups["known"] and not groups["listed"]:
        yield groups["known"][0]


def _verdict(known: int, vanished: int, listed: int, max_share: float) -> ListingVerdict:
    verdict = listing_verdict(known=known, vanished=vanished, max_delete_share=max_share, listed=listed)
    if not verdict.delete:
        counter("listing_guard_tripped").inc()
    return verdict


class _DeleteEventFn(beam.DoFn):
    """(object id, stored version) -> a delete event, unless the guard tripped."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec

    def setup(self) -> None:
        self._vanished = counter("documents_vanished")

    def process(self, item: tuple[str, str], verdict: ListingVerdict) -> Iterator[Event]:
        self._vanished.inc()
        if verdict.delete:
            object_id, version = item
            # The stored version: a delete ties with what is applied (ties go
            # to the delete) and loses to anything newer an event brought.
            yield make_event(self.spec, object_id, "delete", version or "0")


class FindVanished(beam.PTransform):
    """Documents of the source that a complete listing no longer holds, as
    delete events, behind the partial-listing guard.

    Input: the listing (``SourceFile``). Output: ``Event`` (op ``delete``).
    Counters: ``documents_known``, ``documents_vanished`` and
    ``listing_guard_tripped`` (1 when the guard held the deletes back).

    Args:
        spec: the source listed.
        settings: where the catalog is.
        listing_started_at: epoch seconds when the listing began.
        max_delete_share: largest share of the known documents one listing
            may delete (``ragsync.decisions.listing_verdict``).
    """

    def __init__(
        self, spec: SourceSpec, settings: Settings, *, listing_started_at: float, max_delete_share: float
    ) -> None:
        super().__init__()
        if not 0.0 <= max_delete_share <= 1.0:
            raise ValueError("max_delete_share must be within 0..1")
        self.spec = spec
        self.settings = settings
        self.started_at = listing_started_at
        self.max_share = max_delete_share

    def expand(self, listed: beam.PCollection) -> beam.PCollection:
        p = listed.pipeline
        seen = listed | "KeyListed" >> beam.Map(
            lambda f: (ids.doc_id(f.tenant_id, f.source_id, f.source_object_id), True)
        )
        known = (
            p
            | "SourceId" >> beam.Create([self.spec.source_id])
            | "KnownDocuments" >> beam.ParDo(_KnownDocumentsFn(self.settings, self.spec, self.started_at))
        )
        vanished = (
            {"listed": seen, "known": known}
            | "JoinListing" >> beam.CoGroupByKey()
            | "NotListed" >> beam.FlatMap(_vanished)
        )
        n_known = known | "CountKnown" >> beam.combiners.Count.Globally()
        n_vanished = vanished | "CountVanished" >> beam.combiners.Count.Globally()
        n_listed = seen | "CountListed" >> beam.combiners.Count.Globally()
        verdict = n_known | "Guard" >> beam.Map(
            _verdict, beam.pvalue.AsSingleton(n_vanished), beam.pvalue.AsSingleton(n_listed), self.max_share
        )
        to_deletes = _DeleteEventFn(self.spec)
        return vanished | "ToDeletes" >> beam.ParDo(to_deletes, beam.pvalue.AsSingleton(verdict))


class _QueueEventsFn(CatalogDoFn):
    """[Event] -> events durably queued (counter ``events_queued``)."""

    def process(self, batch: list[Event]) -> Iterator[int]:
        # Events of a listing carry their source's tenant (see _DeleteEventFn).
        queued, _ = self._catalog.queue.enqueue_events(batch)
        self.count("events_queued", queued)
        yield queued


class QueueEvents(beam.PTransform):
    """Input: ``Event``. Output: counts queued per batch. Events go to the
    catalog's queue (idempotent on ``event_id``) in batches of up to 500."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, events: beam.PCollection) -> beam.PCollection:
        return (
            events
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=500)
            | "Enqueue" >> beam.ParDo(_QueueEventsFn(self.settings))
        )
