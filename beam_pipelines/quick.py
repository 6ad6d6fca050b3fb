"""``ragsync backfill`` of a folder or prefix that has not changed, without a pipeline.

:func:`quick_backfill` lists the source on the launcher with the connector
the pipeline's workers use (``FolderConnector``: a walk of a local folder;
one Beam ``FileSystems.match`` of the whole prefix for ``gs://``/``s3://``) and
compares it with the catalog in batches of :data:`BATCH`
(``Catalog.unread_states`` and ``ragsync.decisions.skip_unread``, the same
rule the pipeline's ``SkipUnread`` step applies). It stops at the first
object that would be read. When every listed object would be skipped unread
and the listing holds as many objects as the catalog holds live documents of
the source (so none vanished), it records the full listing on the source and
returns the summary with ``pipeline_skipped`` 1: no model, no stores opened,
no pipeline. Otherwise it returns None and its caller
(``beam_pipelines.backfill.run_backfill``, the one entry point of a backfill)
runs the normal pipeline (which still skips the unchanged objects unread).

A local folder is checked without importing Beam. An object store needs
Beam's file systems (the import costs seconds, not a pipeline's minutes) and
is checked only up to ``Settings.quick_check_max_objects``: a source with
more known documents is not listed at all, and the listing stops one object
past the cap (``transforms.io.BeamFileSystem(max_objects=...)``), so the
launcher never holds more than the cap.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from connectors.base import FileInfo, FileSystem, stamp_listed
from connectors.files import FolderConnector
from connectors.location import register_location
from connectors.reader import FetchLimits
from ragsync import ids
from ragsync.catalog.queue import EventScope
from ragsync.config import Settings, open_catalog
from ragsync.decisions import skip_unread
from ragsync.errors import ConfigurationError, RagsyncError
from ragsync.model import SourceFile
from ragsync.source_types import SourceSpec

if TYPE_CHECKING:
    from ragsync.catalog import Catalog

#: Objects compared with the catalog per query.
BATCH = 500


@dataclass(frozen=True)
class BackfillSummary:
    """What a backfill did. Field names are the ``--json`` keys.

    ``documents_unread``: listed objects skipped without reading their bytes
    (they count as seen and unchanged too); ``pipeline_skipped``: 1 when
    nothing had changed and no pipeline ran (:func:`quick_backfill`).
    """

    documents_listed: int
    documents_seen: int
    documents_indexed: int
    documents_unchanged: int
    documents_duplicate: int
    documents_acl_updated: int
    documents_deleted: int
    dead_lettered: int
    chunks_embedded: int
    embedding_cache_hits: int
    chunks_written: int
    chunks_deleted: int
    orphans_removed: int
    seconds: float
    #: ``ragsync.ops.cost.cost_report`` of the listing run: CPU seconds per stage
    #: per 1,000 documents, the embedding-cache hit rate, the Dataflow estimate.
    cost: dict[str, Any] = field(default_factory=dict)
    documents_unread: int = 0
    pipeline_skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_id_for(uri: str) -> str:
    """Default source id of a folder or prefix: stable for the same location."""
    norm = uri if "://" in uri else os.path.abspath(uri)
    return "files-" + hashlib.sha256(norm.rstrip("/").encode()).hexdigest()[:12]


class _LocalOnly:
    """The file system a local folder's connector is given: never used
    (``FolderConnector`` walks local folders itself)."""

    def match(self, pattern: str) -> list[FileInfo]:
        raise ConfigurationError(f"no object-store file system on the launcher: {pattern}")

    def open(self, path: str) -> BinaryIO:
        raise ConfigurationError(f"no object-store file system on the launcher: {path}")

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)


def _batches(items: Iterator[SourceFile]) -> Iterator[list[SourceFile]]:
    batch: list[SourceFile] = []
    for item in items:
        batch.append(item)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _object_store_fs(beam_args: Sequence[str], max_objects: int | None) -> FileSystem:
    """Beam's file systems on the launcher, configured from the Beam options
    (``--s3_endpoint_url``, credentials, ...), listing at most ``max_objects``."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.io import BeamFileSystem

    FileSystems.set_options(PipelineOptions(list(beam_args)))
    return BeamFileSystem(max_objects=max_objects)


def _count(items: Iterable[object], limit: int | None) -> int:
    """How many ``items`` there are, counting no further than ``limit`` + 1."""
    return sum(1 for _ in (items if limit is None else itertools.islice(items, limit + 1)))


def _listed_unread(
    connector: FolderConnector, catalog: Catalog, chunker_id: str, parser_version: str
) -> int | None:
    """How many objects the connector lists (one shard over the whole
    source: the workers' 63 object-store shards would cost the launcher one
    S3 client and one listing call each), when every one of them would be
    skipped unread; None at the first that would be read (the listing stops).

    Raises:
        RagsyncError, OSError: the listing failed or went past its cap.
    """
    listed = 0
    for batch in _batches(connector.list_shard(connector.whole_shard())):
        doc_ids = [ids.doc_id(f.tenant_id, f.source_id, f.source_object_id) for f in batch]
        known = catalog.syncs.unread_states(doc_ids)
        for item, doc_id in zip(batch, doc_ids, strict=True):
            listed_item = stamp_listed(item)
            if not skip_unread(
                listed_item, known.get(doc_id), parser_version=parser_version, chunker_id=chunker_id
            ):
                return None
        listed += len(batch)
    return listed


def _settled_source(
    catalog: Any, settings: Settings, uri: str, source_id: str, tenant_id: str, acl_groups: Sequence[str]
) -> SourceSpec | None:
    """The registered source of ``uri`` when nothing but a listing can have
    changed it: an ``object_store`` source fully listed before, not paused,
    registered with this location and these groups, none of its own events
    queued. None otherwise (the pipeline runs)."""
    state = catalog.sources.get_source(source_id, tenant_id=tenant_id)
    if state is None or state.paused or state.type != "object_store" or state.last_full_at is None:
        return None
    try:
        location = register_location(uri, reserved=settings.reserved_locations).uri
    except ConfigurationError:
        return None
    spec: SourceSpec = state.spec()
    if state.uri != location or spec.options.get("acl_groups") != [g for g in acl_groups if g]:
        return None
    if catalog.queue.unfinished_events(scope=EventScope(state.tenant_id, source_id)) > 0:
        return None  # the source's own queued events: the sync applies them
    return spec


def _unchanged(listed: int, seconds: float) -> BackfillSummary:
    """The summary of a backfill that found ``listed`` objects, every one unchanged."""
    return BackfillSummary(
        documents_listed=listed,
        documents_seen=listed,
        documents_indexed=0,
        documents_unchanged=listed,
        documents_duplicate=0,
        documents_acl_updated=0,
        documents_deleted=0,
        dead_lettered=0,
        chunks_embedded=0,
        embedding_cache_hits=0,
        chunks_written=0,
        chunks_deleted=0,
        orphans_removed=0,
        seconds=round(seconds, 3),
        documents_unread=listed,
        pipeline_skipped=1,
    )


def quick_backfill(
    uri: str,
    settings: Settings,
    *,
    tenant_id: str = "default",
    source_id: str = "",
    acl_groups: Sequence[str] = ("everyone",),
    reread: bool = False,
    beam_args: Sequence[str] = (),
) -> BackfillSummary | None:
    """The backfill of an unchanged folder or object-store prefix, without a pipeline.

    Args:
        uri: the folder or ``gs://``/``s3://`` prefix (as
            ``beam_pipelines.backfill.run_backfill`` takes it).
        settings: where the catalog is; the chunker's id;
            ``quick_check_max_objects`` (object stores only).
        tenant_id, source_id, acl_groups: as ``run_backfill`` takes them; the
            source must already be registered with the same location and
            groups (else the pipeline runs and registers it).
        reread: always None (the pipeline reads everything).
        beam_args: Beam's options (an object store's endpoint and
            credentials), as the pipeline gets them.

    Returns:
        The summary (``pipeline_skipped`` 1) when the source was listed and
        nothing is new, changed or vanished; None when the pipeline must run
        (an unknown or paused source, other groups, the source's own queued events, anything
        to read or delete, an empty object-store listing, more objects or
        known documents than ``quick_check_max_objects``, a listing that
        failed: the pipeline reports that failure itself).
    """
    start = time.monotonic()
    object_store = uri.startswith(("gs://", "s3://"))
    if reread or (object_store and settings.quick_check_max_objects <= 0):
        return None
    if not object_store:
        if "://" in uri or not os.path.isdir(uri):
            return None
        uri = os.path.abspath(uri)
    source_id = source_id or source_id_for(uri)
    catalog = open_catalog(settings)
    try:
        spec = _settled_source(catalog, settings, uri, source_id, tenant_id, acl_groups)
        if spec is None:
            return None
        cap = settings.quick_check_max_objects if object_store else None
        # Every listed object must be a known live document; any other known one vanished.
        known = catalog.documents.iter_source_documents(source_id, tenant_id, updated_before=float("inf"))
        known_total = _count(known, cap)
        if cap is not None and known_total > cap:
            return None
        limits = FetchLimits(max_bytes=settings.max_bytes, timeout_s=settings.fetch_timeout_s)
        try:
            fs = _object_store_fs(beam_args, cap) if object_store else _LocalOnly()
            listed = _listed_unread(
                FolderConnector(spec, fs, limits),
                catalog,
                settings.chunker.config_id,
                settings.parser_version,
            )
        except (RagsyncError, OSError):
            return None
        if listed is None or listed != known_total or (object_store and listed == 0):
            # An empty object-store listing may be a missing bucket: the pipeline says so.
            return None
        catalog.syncs.sync_started(source_id, tenant_id=tenant_id)
        catalog.syncs.sync_succeeded(source_id, full=True, listed=listed, tenant_id=tenant_id)
    finally:
        catalog.close()
    return _unchanged(listed, time.monotonic() - start)
