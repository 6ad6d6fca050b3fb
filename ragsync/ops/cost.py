"""Cost figures of a pipeline run: CPU seconds per stage per 1,000 documents,
the embedding-cache hit rate, and an estimated cost per 1,000 documents on
Dataflow from vCPU-hour and GPU-hour prices.

Pure functions over a run's counters (``transforms.metrics.stage_metrics_of``
collects them; ``pipeline_runs`` stores them). The estimate prices the CPU
the stages measured (the thread's CPU for most stages, the whole process's
for the embedding model, whose library runs its own threads; the parse
child's own and its OCR subprocesses' CPU for parsing) at the vCPU-hour
price, and the embedding stage's wall time at the GPU-hour price when the
model ran on a GPU. Worker memory, disks, shuffle and idle workers are not
in it: it is a floor to compare runs and configurations, not a bill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragsync.errors import ConfigurationError

#: Defaults: Dataflow batch worker vCPU and an NVIDIA T4, us-central1 list
#: prices when this was written (check https://cloud.google.com/dataflow/pricing).
DEFAULT_VCPU_HOUR_USD = 0.056
DEFAULT_GPU_HOUR_USD = 0.35


@dataclass(frozen=True)
class Prices:
    """Prices the estimate uses (USD per hour).

    Raises:
        ConfigurationError: a negative price.
    """

    vcpu_hour_usd: float = DEFAULT_VCPU_HOUR_USD
    gpu_hour_usd: float = DEFAULT_GPU_HOUR_USD

    def __post_init__(self) -> None:
        if self.vcpu_hour_usd < 0 or self.gpu_hour_usd < 0:
            raise ConfigurationError("vCPU-hour and GPU-hour prices must not be negative")


def cache_hit_rate(hits: int, misses: int) -> float | None:
    """Share of chunk embeddings served from the cache (None when nothing was looked up)."""
    total = hits + misses
    return round(hits / total, 4) if total else None


def cost_report(
    stages: Mapping[str, Mapping[str, float]],
    *,
    documents: int,
    cache_hits: int,
    cache_misses: int,
    prices: Prices,
    gpu: bool = False,
) -> dict[str, Any]:
    """The cost figures of one run (or a sum of runs).

    Args:
        stages: ``{stage: {"cpu_us", "latency_us_sum", ...}}`` (microseconds).
        documents: documents the run handled (the denominator).
        cache_hits, cache_misses: embedding-cache lookups.
        prices: the prices.
        gpu: the embedding model ran on a GPU (its wall time is priced as
            GPU time and its CPU is not counted again).

    Returns:
        ``documents``, ``cpu_s_per_1k_docs`` (per stage, and ``total``),
        ``stage_wall_s`` (per stage: wall seconds its work took in this run
        or these runs, summed over threads; a stage's figure leaves out the
        stages fused after it, so a cold run's figures show where its time
        went), ``embedding_cache_hit_rate``, ``gpu_s_per_1k_docs``,
        ``est_usd_per_1k_docs`` (``vcpu``, ``gpu``, ``total``) and the
        prices used. Per-1,000 figures are None when no document was handled.
    """
    per_k = 1000.0 / documents if documents > 0 else None
    cpu_s = {
        stage: float(v.get("cpu_us", 0)) / 1e6
        for stage, v in sorted(stages.items())
        if not (gpu and stage == "embed")
    }
    gpu_s = float(stages.get("embed", {}).get("latency_us_sum", 0)) / 1e6 if gpu else 0.0
    total_cpu = sum(cpu_s.values())

    def scaled(x: float) -> float | None:
        return None if per_k is None else round(x * per_k, 4)

    vcpu_usd = total_cpu / 3600.0 * prices.vcpu_hour_usd
    gpu_usd = gpu_s / 3600.0 * prices.gpu_hour_usd
    wall_s = {stage: round(float(v.get("latency_us_sum", 0)) / 1e6, 3) for stage, v in sorted(stages.items())}
    return {
        "documents": documents,
        "cpu_s_per_1k_docs": {**{k: scaled(v) for k, v in cpu_s.items()}, "total": scaled(total_cpu)},
        "stage_wall_s": wall_s,
        "gpu_s_per_1k_docs": scaled(gpu_s),
        "embedding_cache_hit_rate": cache_hit_rate(cache_hits, cache_misses),
        "est_usd_per_1k_docs": {
            "vcpu": None if per_k is None else round(vcpu_usd * per_k, 6),
            "gpu": None if per_k is None else round(gpu_usd * per_k, 6),
            "total": None if per_k is None else round((vcpu_usd + gpu_usd) * per_k, 6),
        },
        "prices": {"vcpu_hour_usd": prices.vcpu_hour_usd, "gpu_hour_usd": prices.gpu_hour_usd},
    }


def sum_stages(runs: list[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Add up the ``stages`` of several runs' counters (max of maxima)."""
    out: dict[str, dict[str, float]] = {}
    for counters in runs:
        for stage, values in (counters.get("stages") or {}).items():
            entry = out.setdefault(stage, {})
            for key, value in values.items():
                if key.endswith("_max"):
                    entry[key] = max(entry.get(key, 0), value)
                else:
                    entry[key] = entry.get(key, 0) + value
    return out


def format_cost(cost: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """Human lines for a :func:`cost_report` (empty when there is none)."""
    if not cost:
        return []
    per_stage = cost.get("cpu_s_per_1k_docs") or {}
    stages = ", ".join(f"{k} {v:.1f}" for k, v in per_stage.items() if k != "total" and v is not None)
    rate = cost.get("embedding_cache_hit_rate")
    usd = (cost.get("est_usd_per_1k_docs") or {}).get("total")
    prices = cost.get("prices") or {}
    lines = [
        f"{indent}CPU s per 1,000 documents: total {per_stage.get('total') or 0:.1f} "
        f"({stages or 'no stage reported'})",
        f"{indent}embedding cache hit rate: {'-' if rate is None else f'{rate:.1%}'}",
    ]
    wall = cost.get("stage_wall_s") or {}
    if wall:
        busiest = sorted(wall.items(), key=lambda kv: -kv[1])
        lines.insert(1, f"{indent}wall s per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in busiest))
    if usd is not None:
        lines.append(
            f"{indent}est. Dataflow cost per 1,000 documents: ${usd:.4f} "
            f"(vCPU-hour ${prices.get('vcpu_hour_usd')}, GPU-hour ${prices.get('gpu_hour_usd')})"
        )
    return lines


def run_cost(run: Mapping[str, Any], prices: Prices) -> dict[str, Any]:
    """:func:`cost_report` of a stored ``pipeline_runs`` row (counters decoded),
    with the run's ``kind``, ``source_id`` and ``finished_at``."""
    counters = run.get("counters") or {}
    report = cost_report(
        counters.get("stages") or {},
        documents=int(run.get("documents") or 0),
        cache_hits=int(counters.get("embedding_cache_hits", 0)),
        cache_misses=int(counters.get("embedding_cache_misses", 0)),
        prices=prices,
    )
    return {
        "kind": run.get("kind"),
        "source_id": run.get("source_id"),
        "finished_at": run.get("finished_at"),
        **report,
    }
