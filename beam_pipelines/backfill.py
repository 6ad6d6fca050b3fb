"""The bounded backfill pipeline: list a folder or prefix, then the shared
stage chain (fetch, route, parse, chunk, diff, embed, write).

``build_pipeline`` wires the graph (tests call it with their own pipeline);
``run_backfill`` lists the source, runs the graph on the FnApiRunner (or the
runner named in ``beam_args``), sweeps index orphans, and returns a summary.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from connectors.files import FolderConnector
from connectors.location import source_location
from ragsync import lifecycle
from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from ragsync.display import safe_text
from ragsync.embedding import ModelSpec
from ragsync.errors import ConfigurationError
from ragsync.model import SourceFile
from transforms.chain import IndexDocuments
from transforms.common import counters_of
from transforms.io import BeamFileSystem
from transforms.write import WriteDeadLetters


@dataclass(frozen=True)
class BackfillSummary:
    """What a backfill did. Field names are the ``--json`` keys."""

    documents_seen: int
    documents_indexed: int
    documents_unchanged: int
    documents_duplicate: int
    documents_acl_updated: int
    dead_lettered: int
    chunks_embedded: int
    embedding_cache_hits: int
    chunks_written: int
    chunks_deleted: int
    orphans_removed: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_id_for(uri: str) -> str:
    """Default source id of a folder or prefix: stable for the same location."""
    norm = uri if "://" in uri else os.path.abspath(uri)
    return "files-" + hashlib.sha256(norm.rstrip("/").encode()).hexdigest()[:12]


def prepare_stores(settings: Settings, spec: ModelSpec) -> None:
    """Create the catalog, vector collection and keyword index if missing.

    Creation is this explicit step; the writers themselves fail fast on a
    missing collection.
    """
    open_catalog(settings).close()
    open_vector_index(settings, spec.dim, create=True).close()
    open_keyword_index(settings, create=True).close()


def register_source(settings: Settings, source_id: str, tenant_id: str, type_: str, uri: str = "") -> None:
    """Register a source (idempotent) with its location ``uri`` ('' for a
    source that takes no ``content_uri``).

    Raises:
        ValueError: the id belongs to another tenant.
        ConfigurationError: ``uri`` is not a usable location or overlaps
            ragsync's own home or object store.
    """
    if uri:
        uri = source_location(uri, reserved=settings.reserved_locations).uri
    catalog = open_catalog(settings)
    try:
        catalog.ensure_source(source_id, tenant_id, type_, uri)
    finally:
        catalog.close()


def build_pipeline(
    p: beam.Pipeline,
    files: beam.PCollection,
    settings: Settings,
    spec: ModelSpec,
    *,
    total: int = 0,
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


def list_source(uri: str, *, tenant_id: str, source_id: str, acl_groups: Sequence[str]) -> list[SourceFile]:
    """Full listing of a folder or prefix through Beam FileSystems."""
    connector = FolderConnector(
        BeamFileSystem(), uri, tenant_id=tenant_id, source_id=source_id, acl_groups=acl_groups
    )
    return list(connector.list_all())


def sweep_orphans(settings: Settings, dim: int) -> int:
    """Delete index rows that have no chunk row in the catalog; returns how
    many rows were removed over both indexes.

    Only safe when no writer runs (the end of a backfill): a crash between
    writing the indexes and the catalog leaves such rows behind.
    """
    catalog = open_catalog(settings)
    vectors = open_vector_index(settings, dim)
    keywords = open_keyword_index(settings)
    try:
        removed = 0
        for tenant in catalog.tenant_ids():
            known = catalog.chunk_ids_for_tenant(tenant)
            for store in (vectors, keywords):
                orphans = sorted(store.chunk_ids(tenant) - known)
                if orphans:
                    store.delete(tenant, orphans)
                    removed += len(orphans)
        return removed
    finally:
        keywords.close()
        vectors.close()
        catalog.close()


def run_backfill(
    uri: str,
    settings: Settings,
    *,
    tenant_id: str = "default",
    source_id: str = "",
    acl_groups: Sequence[str] = ("everyone",),
    beam_args: Sequence[str] = (),
    show_progress: bool = True,
    spec: ModelSpec | None = None,
) -> BackfillSummary:
    """Backfill ``uri`` into the stores named by ``settings``.

    Raises:
        ConfigurationError: the source is missing or a store cannot be opened.
    """
    start = time.monotonic()
    lifecycle.install_child_watch()  # parse children never outlive this process
    if "://" not in uri:
        if not os.path.isdir(uri):
            raise ConfigurationError(
                f"source folder {uri!r} does not exist (give a folder, gs://... or s3://...)"
            )
        uri = os.path.abspath(uri)
    if spec is None:
        from ragsync.index_versions import live_spec

        spec = live_spec(settings)
    source_id = source_id or source_id_for(uri)
    # The folder becomes the source's location before anything is read:
    # every fetch is confined to it.
    prepare_stores(settings, spec)
    register_source(settings, source_id, tenant_id, "object_store", uri)
    files = list_source(uri, tenant_id=tenant_id, source_id=source_id, acl_groups=acl_groups)
    if show_progress:
        print(safe_text(f"[list] {len(files)} files under {uri}"), file=sys.stderr, flush=True)
    options = PipelineOptions(list(beam_args) or ["--runner=FnApiRunner"])
    runner = options.view_as(StandardOptions).runner or "FnApiRunner"
    p = beam.Pipeline(runner=runner, options=options)
    listed = p | "ListSource" >> beam.Create(files)
    build_pipeline(p, listed, settings, spec, total=len(files), show_progress=show_progress)
    result = p.run()
    result.wait_until_finish()
    orphans = sweep_orphans(settings, spec.dim)
    seconds = round(time.monotonic() - start, 3)
    return BackfillSummary(**counters_of(result, BackfillSummary, orphans_removed=orphans, seconds=seconds))
