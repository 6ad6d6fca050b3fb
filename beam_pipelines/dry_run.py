"""Dry runs: what ``ragsync backfill`` or ``ragsync sync`` would change,
without writing anything anywhere.

A full listing is read on this process (``connectors.base.list_all``) and
every listed object is read and hashed through the source's connector (the
same bounded reader the pipeline uses), then compared with its catalog row by
the pipeline's own decision (``ragsync.ingest.change_plan.classify_listed``); the
catalog's documents the listing no longer holds are the deletes, behind the
same partial-listing guard. An incremental sync reads the change feed from
the stored cursor without saving the cursor or queuing anything.

Nothing is written: no catalog row (a catalog that does not exist yet is not
created: everything is then an add), no cursor, no queued event, no raw copy,
no index row, no source registration, no pause.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from beam_pipelines.quick import source_id_for
from connectors.base import list_all
from connectors.location import register_location
from connectors.sources import check_source
from ragsync import ids
from ragsync.catalog.queue import EventScope
from ragsync.config import Settings, missing_catalog, open_catalog
from ragsync.decisions import listing_verdict, plan_sync
from ragsync.errors import ConfigurationError, RagsyncError
from ragsync.ingest.change_plan import DELETE, ChangePlan, PlannedChange, classify_event, classify_listed
from ragsync.source_types import SourceSpec
from transforms.io import BeamFileSystem
from transforms.listing import connector_for

DEFAULT_MAX_DELETE_SHARE = 0.5


def _existing_catalog(settings: Settings) -> Any | None:
    """The catalog, or None when its SQLite file does not exist (opening
    would create it)."""
    return None if missing_catalog(settings) is not None else open_catalog(settings)


def plan_backfill(
    uri: str,
    settings: Settings,
    *,
    tenant_id: str = "default",
    source_id: str = "",
    acl_groups: Sequence[str] = ("everyone",),
    max_delete_share: float | None = None,
) -> ChangePlan:
    """The plan of ``ragsync backfill URI`` (a full listing), written nowhere
    (``beam_pipelines.backfill.run_backfill`` with ``dry_run`` returns it).

    Raises:
        ConfigurationError: the folder does not exist or the location is unusable.
        RagsyncError: the listing failed.
    """
    if "://" not in uri:
        if not os.path.isdir(uri):
            raise ConfigurationError(
                f"source folder {uri!r} does not exist (give a folder, gs://... or s3://...)"
            )
        uri = os.path.abspath(uri)
    location = register_location(uri, reserved=settings.reserved_locations).uri
    spec = SourceSpec(
        source_id=source_id or source_id_for(uri),
        tenant_id=tenant_id,
        type="object_store",
        uri=location,
        options={"acl_groups": [g for g in acl_groups if g]},
    )
    catalog = _existing_catalog(settings)
    try:
        share = DEFAULT_MAX_DELETE_SHARE if max_delete_share is None else max_delete_share
        return _plan_listing(spec, settings, catalog, share)
    finally:
        if catalog is not None:
            catalog.close()


def plan_source_sync(
    source_id: str,
    settings: Settings,
    *,
    full: bool = False,
    tenant_id: str | None = None,
    max_delete_share: float | None = None,
) -> ChangePlan:
    """The plan of ``ragsync sync SOURCE_ID`` (full listing or change feed,
    as the real sync would choose), written nowhere.

    Raises:
        ConfigurationError: unknown source or no usable location.
        RagsyncError: the listing or the change feed failed.
    """
    catalog = _existing_catalog(settings)
    if catalog is None:
        raise ConfigurationError(f"unknown source {source_id!r}: register it with `ragsync sources add`")
    try:
        checked = check_source(catalog, settings, source_id, tenant_id=tenant_id)
        state, spec = checked.state, checked.spec
        share = max_delete_share
        if share is None:
            share = float(spec.options.get("max_delete_share", DEFAULT_MAX_DELETE_SHARE))
        connector = checked.open(settings, BeamFileSystem())
        try:
            sync = plan_sync(
                source_id,
                supports_changes=connector.supports_changes,
                cursor=state.cursor,
                full_requested=full,
                max_delete_share=share,
            )
            if sync.mode.value == "incremental":
                plan = _plan_feed(spec, connector, catalog, sync.cursor)
            else:
                plan = _plan_listing(spec, settings, catalog, share, connector=connector)
        finally:
            connector.close()
        # What the sync's apply step would take: its own source's queued events.
        plan.queued = catalog.queue.unfinished_events(scope=EventScope(spec.tenant_id, source_id))
        return plan
    finally:
        catalog.close()


def _plan_listing(
    spec: SourceSpec, settings: Settings, catalog: Any | None, max_share: float, *, connector: Any = None
) -> ChangePlan:
    own = connector is None
    connector = connector or connector_for(spec, settings)
    plan = ChangePlan(source_id=spec.source_id, tenant_id=spec.tenant_id, mode="full")
    listed: set[str] = set()
    try:
        for item in list_all(connector):
            doc_id = ids.doc_id(spec.tenant_id, spec.source_id, item.source_object_id)
            listed.add(doc_id)
            change = PlannedChange(item.source_object_id, item.uri)
            if not item.acl_groups:
                plan.dead_letters.append(PlannedChange(item.source_object_id, item.uri, "no_permissions"))
                continue
            try:
                data = connector.fetch(item)
            except RagsyncError as exc:
                plan.dead_letters.append(PlannedChange(item.source_object_id, item.uri, exc.error_class))
                continue
            if not data or len(data) > settings.max_bytes:
                reason = "empty" if not data else "too_large"
                plan.dead_letters.append(PlannedChange(item.source_object_id, item.uri, reason))
                continue
            stored = catalog.documents.get_document(doc_id) if catalog is not None else None
            rows = (
                len(catalog.chunks.chunk_ids_for_doc(doc_id))
                if stored is not None and stored.status == "indexed" and catalog is not None
                else None
            )
            kind, reason = classify_listed(
                stored,
                content_hash=ids.content_hash(data),
                acl_id=ids.acl_id(spec.tenant_id, item.acl_groups),
                parser_version=settings.parser_version,
                chunker_id=settings.chunker.config_id,
                stored_chunk_rows=rows,
            )
            plan.add(kind, PlannedChange(change.object_id, change.uri, reason))
    finally:
        if own:
            connector.close()
    if catalog is None:
        return plan
    known = list(
        catalog.documents.iter_source_documents(spec.source_id, spec.tenant_id, updated_before=float("inf"))
    )
    vanished = [(doc_id, object_id) for doc_id, object_id, _ in known if doc_id not in listed]
    verdict = listing_verdict(
        known=len(known), vanished=len(vanished), max_delete_share=max_share, listed=len(listed)
    )
    plan.deletes_held = not verdict.delete
    for _, object_id in vanished:
        plan.add(
            DELETE,
            PlannedChange(object_id, "", "not in the listing" + ("" if verdict.delete else " (held back)")),
        )
    return plan


def _plan_feed(spec: SourceSpec, connector: Any, catalog: Any, cursor: str) -> ChangePlan:
    plan = ChangePlan(source_id=spec.source_id, tenant_id=spec.tenant_id, mode="incremental")
    while True:
        page = connector.changes(cursor)
        for event in page.events:
            doc_id = ids.doc_id(spec.tenant_id, spec.source_id, event.doc_id)
            kind, reason = classify_event(event.op, catalog.documents.get_document(doc_id))
            plan.add(kind, PlannedChange(event.doc_id, event.content_uri, reason))
        if not page.more or page.cursor == cursor:
            return plan
        cursor = page.cursor


def format_plan(plan: ChangePlan, *, limit: int = 200) -> str:
    """Human lines: each change by object id, then the totals."""
    d = plan.to_dict()
    lines = [f"dry run of {plan.source_id} ({plan.mode}): nothing was written"]
    for name, label in (
        ("adds", "add"),
        ("updates", "update"),
        ("permission_changes", "permissions"),
        ("deletes", "delete"),
        ("dead_letters", "dead letter"),
    ):
        for c in d[name][:limit]:
            lines.append(f"  {label:12s} {c['object_id']}" + (f"  ({c['reason']})" if c["reason"] else ""))
        if len(d[name]) > limit:
            lines.append(f"  ... {len(d[name]) - limit} more {label} (--json lists all)")
    t = d["totals"]
    lines.append(
        f"  totals: {t['adds']} adds, {t['updates']} updates, {t['permission_changes']} permission changes, "
        f"{t['deletes']} deletes{' (HELD BACK by the partial-listing guard)' if plan.deletes_held else ''}, "
        f"{t['dead_letters']} dead letters, {t['unchanged']} unchanged"
    )
    if plan.queued:
        lines.append(f"  and {plan.queued} events already queued would be applied")
    return "\n".join(lines)
