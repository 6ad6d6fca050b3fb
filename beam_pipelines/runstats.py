"""What a finished pipeline run cost, recorded in the catalog.

``record_run`` sums the stage metrics (``transforms.metrics.StageMetrics``)
over the run's pipelines, computes the cost figures (``ragsync.ops.cost``) and
stores one ``pipeline_runs`` row, which ``ragsync status``, ``/metrics``
and ``ragsync report`` read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ragsync.config import Settings, open_catalog
from ragsync.ops.cost import Prices, cost_report, sum_stages
from transforms.metrics import counter_value, stage_metrics_of

log = logging.getLogger(__name__)


def record_run(
    kind: str,
    results: Sequence[Any],
    settings: Settings,
    *,
    started_at: float,
    documents: int,
    counters: Mapping[str, Any],
    tenant_id: str = "",
    source_id: str = "",
) -> dict[str, Any]:
    """Store a finished run and return its cost figures.

    Args:
        kind: ``listing`` or ``stream``.
        results: the finished pipelines' results.
        settings: the catalog and the prices.
        started_at: epoch seconds.
        documents: documents the run handled (cost denominator).
        counters: the run's summary counters (stored as they are).
        tenant_id, source_id: the source listed ('' for a stream).

    Returns:
        ``ragsync.ops.cost.cost_report`` of the run. A catalog failure while
        recording is logged, not raised: the run itself succeeded.
    """
    stages = sum_stages([{"stages": stage_metrics_of(r)} for r in results])
    hits = sum(counter_value(r, "embedding_cache_hits") for r in results)
    misses = sum(counter_value(r, "embedding_cache_misses") for r in results)
    prices = Prices(vcpu_hour_usd=settings.vcpu_hour_usd, gpu_hour_usd=settings.gpu_hour_usd)
    cost = cost_report(stages, documents=documents, cache_hits=hits, cache_misses=misses, prices=prices)
    stored = {
        **{k: v for k, v in counters.items() if k != "cost"},
        "stages": stages,
        "embedding_cache_hits": hits,
        "embedding_cache_misses": misses,
    }
    try:
        catalog = open_catalog(settings)
        try:
            catalog.runs.record_run(
                kind,
                started_at=started_at,
                documents=documents,
                counters=stored,
                tenant_id=tenant_id,
                source_id=source_id,
            )
        finally:
            catalog.close()
    except Exception:  # noqa: BLE001 - bookkeeping must not fail a finished run
        log.exception("could not record the %s run", kind)
    return cost
