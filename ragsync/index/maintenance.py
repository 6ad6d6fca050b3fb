"""Work on the stores beside the pipeline's writes: filling and pruning an
index version being built (re-embedding), the orphan sweep at the end of a
backfill, and the repair of what reconciliation finds.

Each function takes the index service (its base, :class:`ragsync.index.core.IndexCore`) whose
stores it changes (the service's methods of the same names call them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragsync.index.reconcile import RepairAction, RepairReport, reconcile_stores
from ragsync.model import Chunk

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.index.core import IndexCore

SWEEP_PAGE = 1000
"""Chunk ids compared with the catalog (and deleted) per step of the orphan sweep."""


def write_into_version(
    service: IndexCore, version: int, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]
) -> None:
    """Upsert ``chunks`` with ``vectors`` (of building version ``version``'s
    model) into that version's vector and keyword stores only.

    Raises:
        ConfigurationError: ``version`` is not being built.
    """
    _, vec, kw = service.stores.shadow(version)
    service.stores.upsert_one(vec, chunks, vectors)
    service.stores.upsert_one(kw, chunks)


def prune_version(service: IndexCore, version: int, orphans: set[str]) -> int:
    """Delete from building version ``version`` the rows whose chunk left the
    catalog (any tenant). Returns how many ids were deleted."""
    if not orphans:
        return 0
    _, vec, kw = service.stores.shadow(version)
    removed = 0
    for tenant in service.catalog.sources.tenant_ids():
        mine = sorted((vec.chunk_ids(tenant) | kw.chunk_ids(tenant)) & orphans)
        service.stores.delete_one(vec, tenant, mine)
        service.stores.delete_one(kw, tenant, mine)
        removed += len(mine)
    return removed


def sweep_orphans(service: IndexCore) -> int:
    """Delete live index rows that have no chunk row in the catalog; returns
    how many rows were removed over both indexes.

    Only safe when no writer runs (the end of a backfill): a crash between
    writing the indexes and the catalog leaves such rows behind. Ids are
    read page by page (``SWEEP_PAGE``): only the orphans found are kept,
    never every id.
    """
    catalog = service.catalog
    removed = 0
    for tenant in catalog.sources.tenant_ids():
        for store in service.stores.live().values():
            orphans: list[str] = []
            page: list[str] = []
            for chunk_id in itertools.chain(service.stores.ids_of(store, tenant), [None]):
                if chunk_id is not None:
                    page.append(chunk_id)
                if page and (chunk_id is None or len(page) == SWEEP_PAGE):
                    present = catalog.chunks.present_chunk_ids(tenant, page)
                    orphans += [c for c in page if c not in present]
                    page = []
            for i in range(0, len(orphans), SWEEP_PAGE):
                service.stores.delete_one(store, tenant, orphans[i : i + SWEEP_PAGE])
            removed += len(orphans)
    return removed


def repair(service: IndexCore) -> RepairReport:
    """Fix what reconciliation finds, comparing chunk ids per tenant
    (``ragsync.decisions.plan_repair``): chunks the catalog holds for a live
    document but a store lacks are written again from the catalog's chunk
    rows (vectors from the embedding cache; the model only for a vector
    missing there); store rows with no catalog row are deleted; chunk rows of
    deleted documents are deleted everywhere.

    Only safe when no pipeline writes at the same time (like the sweep at the
    end of a backfill): a writer between its index write and its catalog
    write looks like an orphan.

    Raises:
        ValueError: the service's vectors are not the live model's dimension.
    """
    from ragsync.decisions import plan_repair
    from ragsync.embedding.models import cached_vectors
    from ragsync.index.versions import live_spec

    spec = live_spec(service.settings)
    dim = getattr(service.vectors, "dim", spec.dim)
    if spec.dim != dim:
        raise ValueError(f"dim {dim} is not the live model's ({spec.name}: {spec.dim})")
    catalog, live = service.catalog, service.stores.live()
    actions: list[RepairAction] = []
    embedded = 0
    all_rows = catalog.chunks.chunk_docs()
    for tenant in catalog.sources.tenant_ids():
        ids = catalog.chunks.chunk_ids_for_tenant(tenant)
        rows = {cid: all_rows[cid] for cid in ids if cid in all_rows}
        gone = catalog.documents.gone_doc_ids(sorted(set(rows.values())))
        stored = {name: s.chunk_ids(tenant) for name, s in live.items()}
        plan = plan_repair(rows, gone, stored, catalog.chunks.pending_chunk_ids(tenant))
        if plan.dead_rows:
            service.remove_chunks(tenant, list(plan.dead_rows))
            actions.append(RepairAction("delete_dead_rows", "catalog", tenant, len(plan.dead_rows)))
        for name, orphans in plan.orphans.items():
            if orphans:
                service.stores.delete_one(live[name], tenant, list(orphans))
                actions.append(RepairAction("delete_orphans", name, tenant, len(orphans)))
        for name, missing in plan.rewrite.items():
            if not missing:
                continue
            chunks = [c for cid, c in sorted(catalog.chunks.chunks_by_ids(list(missing)).items())]
            vectors: Any = None
            if name == "vector":
                vecs, fresh = cached_vectors(catalog, spec, chunks)
                embedded += fresh
                vectors = [vecs[c.text_hash] for c in chunks]
            service.stores.upsert_one(live[name], chunks, vectors)
            actions.append(RepairAction("rewrite", name, tenant, len(chunks)))
    after = reconcile_stores(catalog, service.vectors, service.keywords)
    return RepairReport(actions=actions, chunks_embedded=embedded, after=after)
