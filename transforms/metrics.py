"""Beam metrics of the steps: ragsync's counters (:func:`counter`, each
declared in ``ragsync.counters``) and the per-stage figures
(:class:`StageMetrics` over :data:`STAGES`), and reading both back from a
finished pipeline's result (:func:`stage_metrics_of`, :func:`counter_value`,
:func:`counters_of`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from apache_beam.metrics import Metrics

from ragsync.counters import declared

NAMESPACE = "ragsync"


def counter(name: str) -> Any:
    """A counter in the ragsync namespace (exact in batch runs).

    Raises:
        ValueError: ``name`` is not declared in ``ragsync.counters.COUNTERS``.
    """
    return Metrics.counter(NAMESPACE, declared(name))


#: Namespace of the per-stage metrics (``StageMetrics``): on Dataflow they
#: appear as job metrics ``ragsync_stage/<stage>_elements`` and so on.
STAGE_NAMESPACE = "ragsync_stage"

#: The stages that report ``StageMetrics``, in pipeline order.
STAGES = (
    "list",
    "resolve",
    "gate",
    "fetch",
    "detect",
    "route",
    "parse",
    "chunk",
    "embed",
    "write",
    "acl",
    "delete",
)


class StageMetrics:
    """Beam metrics of one stage: ``<stage>_elements`` (counter),
    ``<stage>_cpu_us`` (counter: CPU microseconds of the thread doing the
    work, or of the process where noted), ``<stage>_latency_us``
    (distribution: wall microseconds per element or batch); errors are
    counted by ``transforms.dead_letters.ToDeadLetters`` as ``<stage>_errors``.

    Create in ``DoFn.setup()`` (metric objects are cheap handles; the values
    live in the runner).
    """

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._elements = Metrics.counter(STAGE_NAMESPACE, f"{stage}_elements")
        self._cpu = Metrics.counter(STAGE_NAMESPACE, f"{stage}_cpu_us")
        self._latency = Metrics.distribution(STAGE_NAMESPACE, f"{stage}_latency_us")

    def record(self, *, elements: int, cpu_s: float, wall_s: float) -> None:
        """Count ``elements`` that took ``cpu_s`` CPU and ``wall_s`` wall seconds."""
        self._elements.inc(elements)
        self._cpu.inc(int(round(cpu_s * 1e6)))
        self._latency.update(int(round(wall_s * 1e6)))

    def run(self, fn: Any, *args: Any, elements: int = 1, process_cpu: bool = False) -> list[Any]:
        """Call ``fn(*args)``, drain what it yields into a list, and record it.

        The outputs are returned, not yielded, so the time of downstream
        steps fused after this one is not counted here. ``process_cpu``
        counts the whole process's CPU (steps whose library runs its own
        threads, e.g. the model); otherwise the calling thread's. Nothing is
        recorded when ``fn`` raises (the dead letter counts the error).
        """
        cpu_clock = time.process_time if process_cpu else time.thread_time
        wall0, cpu0 = time.perf_counter(), cpu_clock()
        out = list(fn(*args))
        self.record(elements=elements, cpu_s=cpu_clock() - cpu0, wall_s=time.perf_counter() - wall0)
        return out


def stage_metrics_of(result: Any) -> dict[str, dict[str, float]]:
    """Per-stage figures of a finished pipeline: ``{stage: {"elements",
    "errors", "cpu_us", "latency_us_sum", "latency_us_count", "latency_us_max"}}``
    for every stage that reported anything."""
    from apache_beam.metrics.metric import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_namespace(STAGE_NAMESPACE))
    out: dict[str, dict[str, float]] = {}

    def slot(name: str) -> tuple[dict[str, float], str]:
        stage, _, kind = name.partition("_")
        entry = out.setdefault(
            stage,
            {
                "elements": 0,
                "errors": 0,
                "cpu_us": 0,
                "latency_us_sum": 0,
                "latency_us_count": 0,
                "latency_us_max": 0,
            },
        )
        return entry, kind

    for c in found["counters"]:
        entry, kind = slot(c.key.metric.name)
        if kind in ("elements", "errors", "cpu_us"):
            entry[kind] += int(c.committed or c.attempted or 0)
    for d in found["distributions"]:
        entry, _ = slot(d.key.metric.name)
        value = d.committed or d.attempted
        if value is not None and value.count:
            entry["latency_us_sum"] += value.sum
            entry["latency_us_count"] += value.count
            entry["latency_us_max"] = max(entry["latency_us_max"], value.max)
    return out


def counter_value(result: Any, name: str) -> int:
    """The value of a ragsync counter in a finished pipeline's result."""
    from apache_beam.metrics.metric import MetricsFilter

    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))["counters"]
    return int(sum(c.committed or c.attempted or 0 for c in counters))


def counters_of(result: Any, summary: Any, **others: Any) -> dict[str, Any]:
    """The fields of a summary dataclass: ``others`` as given, every other
    field the ragsync counter of the same name in a finished pipeline's result."""
    names = [f.name for f in dataclasses.fields(summary) if f.name not in others]
    return {**{name: counter_value(result, name) for name in names}, **others}
