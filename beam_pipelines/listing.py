"""The bounded pipeline: a full listing of any source, read by workers, then
the shared stage chain (fetch, route, parse, chunk, diff, embed, write), and
the documents the listing no longer holds queued as deletes.

``build_pipeline`` wires the stage chain onto any PCollection of
``SourceFile`` (tests call it with their own pipeline);
``build_listing_pipeline`` adds the listing (``transforms.listing``) and the
vanished-document deletes; ``run_listing`` runs it and returns its counters.
A home is set up before a run by ``ragsync.index.versions.prepare_stores``
and ``connectors.sources.register_source`` (both Beam-free);
``IndexService.sweep_orphans`` cleans up after a backfill. A full sync
(``beam_pipelines.sync.run_sync``) runs the listing; ``ragsync backfill`` is
one (``beam_pipelines.backfill.run_backfill``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from beam_pipelines.runners import refuse_single_process_stores, run_pipelines, worker_processes
from beam_pipelines.runstats import record_run
from ragsync.config import Settings
from ragsync.counters import LISTING
from ragsync.embedding.models import ModelSpec
from ragsync.errors import ListingFailedError, WorkerLostError, root_cause
from ragsync.ops import lifecycle
from ragsync.source_types import SourceSpec
from transforms.chain import IndexDocuments
from transforms.dead_letters import WriteDeadLetters
from transforms.listing import FindVanished, ListSource, QueueEvents, SkipUnread
from transforms.metrics import counter_value
from transforms.parse import warm_up_fork_server
from transforms.progress import ListingTally


def build_pipeline(
    p: beam.Pipeline,
    files: beam.PCollection,
    settings: Settings,
    spec: ModelSpec,
    *,
    total: int | ListingTally = 0,
    show_progress: bool = False,
) -> dict[str, list[beam.PCollection]]:
    """Wire the shared stage chain onto ``files`` (a PCollection of SourceFile)
    and write its dead letters.

    Returns the outputs of ``IndexDocuments`` (lists of PCollections).
    """
    out = files | "IndexDocuments" >> IndexDocuments(
        settings, spec, group_duplicates=True, total=total, show_progress=show_progress
    )
    for i, dead in enumerate(out["dead"]):
        dead | f"WriteDeadLetters{i}" >> WriteDeadLetters(settings)
    return out


def build_listing_pipeline(
    p: beam.Pipeline,
    source: SourceSpec,
    settings: Settings,
    spec: ModelSpec,
    *,
    shards: list[str],
    listing_started_at: float,
    max_delete_share: float,
    show_progress: bool = False,
    reread: bool = False,
    tally_dir: str = "",
) -> dict[str, Any]:
    """A full listing of ``source`` inside the pipeline, the stage chain on
    what it lists (objects whose listing metadata shows them unchanged are
    skipped unread unless ``reread``: ``transforms.listing.SkipUnread``), and
    delete events for what it no longer holds (behind the partial-listing
    guard), queued for the streaming pipeline. With ``show_progress`` and a
    ``tally_dir`` (an empty directory of this run), the listing leaves its
    counts there (``transforms.progress.ListingTally``), so the later steps'
    progress lines show count and rate while it lists, then total, percent
    and ETA.

    Returns:
        ``listed`` (the listing) and the chain's outputs under ``indexed``.
    """
    tally = ListingTally(tally_dir, len(shards)) if show_progress and tally_dir else None
    listed = p | "ListSource" >> ListSource(
        source, settings, shards, show_progress=show_progress, tally=tally
    )
    to_read = listed | "SkipUnread" >> SkipUnread(settings, reread=reread, tally=tally)
    indexed = build_pipeline(p, to_read, settings, spec, total=tally or 0, show_progress=show_progress)
    deletes = listed | "FindVanished" >> FindVanished(
        source, settings, listing_started_at=listing_started_at, max_delete_share=max_delete_share
    )
    deletes | "QueueDeletes" >> QueueEvents(settings)
    return {"listed": listed, "indexed": indexed}


def run_listing(
    source: SourceSpec,
    settings: Settings,
    spec: ModelSpec,
    *,
    shards: list[str],
    max_delete_share: float,
    beam_args: Sequence[str] = (),
    show_progress: bool = True,
    reread: bool = False,
) -> dict[str, Any]:
    """Run the listing pipeline once (FnApiRunner unless ``beam_args`` names
    another runner) and return its counters (``ragsync.counters.LISTING``) and
    ``cost`` (``ragsync.ops.cost.cost_report``; the run is recorded in the
    catalog's ``pipeline_runs``).

    Raises:
        ListingFailedError: the pipeline failed; the message names the cause.
    """
    started = time.time()
    options = PipelineOptions(list(beam_args) or ["--runner=FnApiRunner"])
    refuse_single_process_stores(settings, options)
    runner = options.view_as(StandardOptions).runner or "FnApiRunner"
    if runner in ("FnApiRunner", "DirectRunner") and not worker_processes(options):
        # This process parses: its parse children's fork server starts (and
        # imports the parsers) on the other core while the graph is built.
        warm_up_fork_server()
    p = beam.Pipeline(runner=runner, options=options)
    # The listing's counts for the progress lines: a directory on this
    # machine (workers elsewhere cannot reach it and show count and rate only).
    tally_dir = tempfile.TemporaryDirectory(prefix="ragsync-listing-", ignore_cleanup_errors=True)
    build_listing_pipeline(
        p,
        source,
        settings,
        spec,
        shards=shards,
        listing_started_at=started,
        max_delete_share=max_delete_share,
        show_progress=show_progress,
        reread=reread,
        tally_dir=tally_dir.name,
    )
    try:
        with tally_dir:
            (result,) = run_pipelines([p])
    except Exception as exc:  # noqa: BLE001 - any failure of the run fails the listing
        if lifecycle.stop_signal() is not None or isinstance(exc, WorkerLostError):
            raise  # a stop, or a dead worker process: not a failed listing of the source
        raise ListingFailedError(f"full listing of {source.source_id} failed: {root_cause(exc)}") from exc
    counters: dict[str, Any] = {name: counter_value(result, name) for name in LISTING}
    counters["cost"] = record_run(
        "listing",
        [result],
        settings,
        started_at=started,
        documents=counters["documents_seen"],
        counters=counters,
        tenant_id=source.tenant_id,
        source_id=source.source_id,
    )
    return counters
