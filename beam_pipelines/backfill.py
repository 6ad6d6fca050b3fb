"""``ragsync backfill``: index a folder or an object-store prefix.

:func:`run_backfill` is the one way a backfill runs: the command line
(``cli.main``), the Dataflow Flex Template
(``beam_pipelines.template``), tests and benchmarks all call it and only
format what it returns. It decides between three outcomes:

1. ``dry_run``: the plan of what the backfill would change, written nowhere
   (``beam_pipelines.dry_run.plan_backfill``);
2. a folder or prefix the catalog shows unchanged (and no ``reread``): the
   listing is compared with the catalog on this process and recorded, no
   pipeline runs (``beam_pipelines.quick.quick_backfill``; the summary's
   ``pipeline_skipped`` is 1);
3. otherwise the folder or prefix is registered as an ``object_store``
   source (its location and groups) and fully synced
   (``beam_pipelines.sync.run_sync``: the listing pipeline, then the source's
   queued deletes applied), then index rows without a catalog row are swept
   (``ragsync.index.service.IndexService.sweep_orphans``).

This module imports no Beam: a backfill of an unchanged local folder never
loads it (the pipeline's modules are imported when a pipeline or a dry run
is needed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from beam_pipelines.quick import BackfillSummary, quick_backfill, source_id_for
from ragsync.config import Settings
from ragsync.errors import ConfigurationError
from ragsync.ops import lifecycle

if TYPE_CHECKING:
    from ragsync.embedding.models import ModelSpec
    from ragsync.ingest.change_plan import ChangePlan


def run_backfill(
    uri: str,
    settings: Settings,
    *,
    tenant_id: str = "default",
    source_id: str = "",
    acl_groups: Sequence[str] = ("everyone",),
    reread: bool = False,
    dry_run: bool = False,
    beam_args: Sequence[str] = (),
    show_progress: bool = True,
    spec: ModelSpec | None = None,
    max_delete_share: float | None = None,
) -> BackfillSummary | ChangePlan:
    """Backfill ``uri`` into the stores named by ``settings`` (see the module
    docstring for the three outcomes).

    Args:
        uri: a local folder, ``gs://bucket/prefix`` or ``s3://bucket/prefix``.
        settings: the stores, limits and ``quick_check_max_objects``.
        tenant_id: the tenant the documents belong to.
        source_id: the source's id (default: ``quick.source_id_for(uri)``,
            stable for the same location).
        acl_groups: the groups that may read every document.
        reread: read every object, even those whose listing metadata shows
            them unchanged (never the no-pipeline outcome; a dry run reads
            every object anyway).
        dry_run: return the plan instead of changing anything.
        beam_args: Beam's options (runner, an object store's endpoint and
            credentials), for the listing on this process and the pipeline.
        show_progress: progress lines on stderr while the pipeline runs.
        spec: the embedding model (default: the live index version's).
        max_delete_share: the partial-listing guard's limit (default 0.5).

    Returns:
        The plan (``ragsync.ingest.change_plan.ChangePlan``) of a dry run; else the
        summary (``BackfillSummary``).

    Raises:
        ConfigurationError: the folder does not exist, the location is
            unusable, or a store cannot be opened.
        SyncError (``ragsync.errors``): the listing failed, the source is
            paused, or the partial-listing guard held deletes back (the
            source is now paused).
        RagsyncError: a dry run's listing failed.
    """
    # Where the documents go and who may read them: the same for every path below.
    target: dict[str, Any] = {"tenant_id": tenant_id, "source_id": source_id, "acl_groups": acl_groups}
    if dry_run:
        from beam_pipelines.dry_run import plan_backfill

        return plan_backfill(uri, settings, **target, max_delete_share=max_delete_share)
    quick = quick_backfill(uri, settings, **target, reread=reread, beam_args=beam_args)
    if quick is not None:
        return quick
    return _sync_backfill(
        uri,
        settings,
        **target,
        reread=reread,
        beam_args=beam_args,
        show_progress=show_progress,
        spec=spec,
        max_delete_share=max_delete_share,
    )


def _sync_backfill(
    uri: str,
    settings: Settings,
    *,
    tenant_id: str,
    source_id: str,
    acl_groups: Sequence[str],
    reread: bool,
    beam_args: Sequence[str],
    show_progress: bool,
    spec: ModelSpec | None,
    max_delete_share: float | None,
) -> BackfillSummary:
    """Register ``uri`` as an ``object_store`` source and run a full sync,
    then sweep orphan index rows (outcome 3 of the module docstring)."""
    start = time.monotonic()
    if "://" not in uri:
        if not os.path.isdir(uri):
            raise ConfigurationError(
                f"source folder {uri!r} does not exist (give a folder, gs://... or s3://...)"
            )
        uri = os.path.abspath(uri)
    # Beam (the listing pipeline) is imported once the folder is known to exist.
    from beam_pipelines.sync import run_sync
    from connectors.sources import register_source
    from ragsync.index.service import IndexService

    lifecycle.install_child_watch()  # parse children never outlive this process
    if spec is None:
        from ragsync.index.versions import live_spec

        spec = live_spec(settings)
    source_id = source_id or source_id_for(uri)
    # The folder becomes the source's location before anything is read:
    # every fetch is confined to it. The sync prepares the stores.
    state = register_source(
        settings,
        source_id,
        tenant_id,
        "object_store",
        uri,
        options={"acl_groups": [g for g in acl_groups if g]},
    )
    result = run_sync(
        source_id,
        settings,
        full=True,
        beam_args=beam_args,
        show_progress=show_progress,
        model_spec=spec,
        max_delete_share=max_delete_share,
        reread=reread,
        tenant_id=tenant_id,
        source=state,
    )
    listing = result.listing or {}
    applied = result.applied or {}
    with IndexService.open(settings, spec.dim) as service:
        orphans = service.sweep_orphans()
    return BackfillSummary(
        documents_listed=listing.get("documents_listed", 0),
        documents_seen=listing.get("documents_seen", 0),
        documents_indexed=listing.get("documents_indexed", 0),
        documents_unchanged=listing.get("documents_unchanged", 0),
        documents_duplicate=listing.get("documents_duplicate", 0),
        documents_acl_updated=listing.get("documents_acl_updated", 0),
        documents_deleted=applied.get("documents_deleted", 0),
        dead_lettered=listing.get("dead_lettered", 0) + applied.get("dead_lettered", 0),
        chunks_embedded=listing.get("chunks_embedded", 0),
        embedding_cache_hits=listing.get("embedding_cache_hits", 0),
        chunks_written=listing.get("chunks_written", 0),
        chunks_deleted=listing.get("chunks_deleted", 0) + applied.get("chunks_deleted", 0),
        orphans_removed=orphans,
        seconds=round(time.monotonic() - start, 3),
        cost=listing.get("cost") or {},
        documents_unread=listing.get("documents_unread", 0),
    )
