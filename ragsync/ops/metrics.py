"""The operator's metrics, read from the catalog, in Prometheus text format.

One collector (:class:`CatalogCollector`) builds every series from the
catalog on each scrape, so ``ragsync serve`` (``GET /metrics``) and a
long-running ``ragsync stream --metrics-port N`` expose the same series
whatever process wrote the rows. Series (all prefixed ``ragsync_``; type,
labels):

* ``documents`` gauge {state}
* ``freshness_p50_seconds``, ``freshness_p95_seconds``, ``freshness_events``
  gauges {tenant_id, source_id, lane, kind: content | permissions}
* ``queue_depth``, ``queue_oldest_pending_age_seconds`` gauges {lane:
  priority | fast | slow}; ``queue_events`` gauge {state}
* ``dead_letters`` gauge {error_class} (open dead letters)
* ``coverage_ratio`` gauge {tenant_id, source_id}; ``coverage_target_ratio``
  gauge; ``source_documents`` gauge {tenant_id, source_id, outcome: indexed |
  excluded | not_indexed}
* ``embedding_cache_hit_ratio`` gauge; ``embedding_cache_lookups_total``
  counter {result: hit | miss}
* ``stage_elements_total``, ``stage_errors_total``,
  ``stage_cpu_seconds_total`` counters and ``stage_latency_seconds``
  summary (``_count``, ``_sum``) {stage, run: listing | stream};
  ``pipeline_runs_total`` counter {run}
* ``pages_for_review`` gauge

The stage series add up the runs recorded in ``pipeline_runs`` (a run is
recorded when it ends); the others are the catalog's state at the scrape.
On Dataflow the same stage metrics are Beam job metrics while the job runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from ragsync.ops.cost import cache_hit_rate, sum_stages
from ragsync.ops.coverage import COVERAGE_TARGET, coverage_by_source

#: The content type of :func:`render`'s output.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LANES = ("priority", "fast", "slow")


def _gauge(name: str, help_: str, *labels: str) -> GaugeMetricFamily:
    """An empty gauge family with these label names."""
    return GaugeMetricFamily(name, help_, labels=list(labels))


class CatalogCollector(Collector):
    """Builds the series from an open ``ragsync.catalog.Catalog`` on each
    scrape. A catalog error propagates (the scrape fails, so the target
    shows as down rather than reporting stale zeros)."""

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog

    def collect(self) -> Iterator[Metric]:
        cat = self.catalog
        docs = _gauge("ragsync_documents", "Documents in the catalog by state", "state")
        for state, n in sorted(cat.documents.document_counts_by_status().items()):
            docs.add_metric([state], n)
        yield docs

        by: tuple[str, ...] = ("tenant_id", "source_id", "lane", "kind")
        p50 = _gauge(
            "ragsync_freshness_p50_seconds", "Median of indexed_at - event_time of applied events", *by
        )
        p95 = _gauge(
            "ragsync_freshness_p95_seconds",
            "95th percentile of indexed_at - event_time of applied events",
            *by,
        )
        applied = _gauge("ragsync_freshness_events", "Applied events measured", *by)
        for f in cat.freshness.freshness_stats():
            labels = [f["tenant_id"], f["source_id"], f["lane"], f["kind"]]
            p50.add_metric(labels, f["p50_s"])
            p95.add_metric(labels, f["p95_s"])
            applied.add_metric(labels, f["events"])
        yield p50
        yield p95
        yield applied

        queue = cat.queue_views.queue_stats()
        depth = _gauge("ragsync_queue_depth", "Pending events by lane", "lane")
        oldest = _gauge(
            "ragsync_queue_oldest_pending_age_seconds", "Age of the oldest pending event by lane", "lane"
        )
        ages = queue.get("oldest_pending_age_s_by_lane", {})
        for lane in LANES:
            depth.add_metric([lane], queue["by_lane"].get(lane, 0))
            oldest.add_metric([lane], ages.get(lane, 0.0))
        yield depth
        yield oldest
        states = _gauge("ragsync_queue_events", "Queued events by state", "state")
        for state, n in sorted(queue["by_state"].items()):
            states.add_metric([state], n)
        yield states

        dead = _gauge("ragsync_dead_letters", "Open dead letters by error class", "error_class")
        for error_class, n in sorted(cat.dead_letters.dead_letter_counts().items()):
            dead.add_metric([error_class], n)
        yield dead

        by = ("tenant_id", "source_id")
        coverage = _gauge("ragsync_coverage_ratio", "indexed / (seen - excluded by rule) per source", *by)
        outcome = _gauge("ragsync_source_documents", "Documents of a source by outcome", *by, "outcome")
        for s in coverage_by_source(cat.runs.document_outcomes()):
            key = [s["tenant_id"], s["source_id"]]
            coverage.add_metric(key, s["coverage"])
            outcome.add_metric([*key, "indexed"], s["indexed"])
            outcome.add_metric([*key, "excluded"], sum(s["excluded"].values()))
            outcome.add_metric([*key, "not_indexed"], sum(s["not_indexed"].values()))
        yield coverage
        yield outcome
        yield GaugeMetricFamily("ragsync_coverage_target_ratio", "The coverage target", value=COVERAGE_TARGET)

        yield from _run_series(cat.runs.list_runs(limit=None))

        review = cat.parsed.pages_for_review(limit=0)
        yield GaugeMetricFamily(
            "ragsync_pages_for_review", "Pages below the OCR bar, listed for review", value=review["pages"]
        )


def _run_series(runs: list[dict[str, Any]]) -> Iterator[Metric]:
    """The cache and stage series, summed over recorded runs."""
    hits = sum(int(r["counters"].get("embedding_cache_hits", 0)) for r in runs)
    misses = sum(int(r["counters"].get("embedding_cache_misses", 0)) for r in runs)
    rate = cache_hit_rate(hits, misses)
    yield GaugeMetricFamily(
        "ragsync_embedding_cache_hit_ratio",
        "Chunk embeddings served from the cache, over every recorded run (0 before any lookup)",
        value=rate if rate is not None else 0.0,
    )
    lookups = CounterMetricFamily(
        "ragsync_embedding_cache_lookups", "Embedding-cache lookups of recorded runs", labels=["result"]
    )
    lookups.add_metric(["hit"], hits)
    lookups.add_metric(["miss"], misses)
    yield lookups

    labels = ["stage", "run"]
    elements = CounterMetricFamily("ragsync_stage_elements", "Elements a stage handled", labels=labels)
    errors = CounterMetricFamily("ragsync_stage_errors", "Elements a stage dead-lettered", labels=labels)
    cpu = CounterMetricFamily("ragsync_stage_cpu_seconds", "CPU seconds a stage used", labels=labels)
    latency = SummaryMetricFamily(
        "ragsync_stage_latency_seconds", "Wall seconds per element (or batch) of a stage", labels=labels
    )
    count = CounterMetricFamily("ragsync_pipeline_runs", "Recorded pipeline runs", labels=["run"])
    for kind in sorted({str(r["kind"]) for r in runs}):
        mine = [r["counters"] for r in runs if r["kind"] == kind]
        count.add_metric([kind], len(mine))
        for stage, v in sorted(sum_stages(mine).items()):
            key = [stage, kind]
            elements.add_metric(key, v.get("elements", 0))
            errors.add_metric(key, v.get("errors", 0))
            cpu.add_metric(key, v.get("cpu_us", 0) / 1e6)
            latency.add_metric(key, int(v.get("latency_us_count", 0)), v.get("latency_us_sum", 0) / 1e6)
    yield from (elements, errors, cpu, latency, count)


def registry_for(catalog: Any) -> CollectorRegistry:
    """A registry holding only the catalog collector (no process metrics:
    several ragsync processes may expose the same catalog)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CatalogCollector(catalog))
    return registry


def render(catalog: Any) -> bytes:
    """The series in Prometheus text format."""
    return bytes(generate_latest(registry_for(catalog)))


def serve_metrics(catalog: Any, port: int, host: str = "127.0.0.1") -> Any:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (``ragsync
    stream --metrics-port``). Returns the server (``shutdown()`` stops it).

    Raises:
        OSError: the port cannot be bound.
    """
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry_for(catalog))
    return server
