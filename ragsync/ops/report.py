"""``ragsync report --out DIR``: one self-contained HTML page with plots.

The page (``DIR/index.html``) holds everything inline: the plots are PNGs
drawn by matplotlib (Agg backend, no display) embedded as ``data:`` URIs, the
style is an inline stylesheet, and there is no script at all, so it opens
offline and from a mail attachment. Plots:

* freshness over time by lane (``freshness``: applied_at vs applied_at - event_time);
* queue depth over time by lane (``events``: enqueued_at .. finished_at);
* coverage by source against the 99.5% target (``ragsync.ops.coverage``);
* open dead letters by error class;
* OCR confidence distribution (``parsed_docs.ocr_confidence`` of every
  parse that ran OCR).

A plot without data says so inside its image (the page layout never changes).
"""

from __future__ import annotations

import base64
import html
import io
import os
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ragsync.errors import ConfigurationError
from ragsync.ops.coverage import COVERAGE_TARGET, coverage_by_source

LANE_COLORS = {"priority": "#d62728", "fast": "#1f77b4", "slow": "#2ca02c"}
_SIZE = (8.0, 3.6)
_DPI = 100


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError("ragsync report needs matplotlib: pip install 'ragsync[report]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gather(catalog: Any, *, now: float | None = None) -> dict[str, Any]:
    """Everything the page shows, read from an open catalog."""
    ts = time.time() if now is None else now
    return {
        "generated_at": ts,
        "documents": catalog.documents.document_counts_by_status(),
        "dead_letters": catalog.dead_letters.dead_letter_counts(),
        "queue": catalog.queue_views.queue_stats(now=ts),
        "freshness_stats": catalog.freshness.freshness_stats(),
        "freshness": catalog.freshness.freshness_series(),
        "queue_intervals": catalog.queue_views.queue_intervals(),
        "coverage": coverage_by_source(catalog.runs.document_outcomes()),
        "ocr_confidence": catalog.runs.ocr_confidences(),
    }


def queue_depth_series(
    intervals: Sequence[tuple[str, float, float | None]], now: float
) -> dict[str, tuple[list[float], list[int]]]:
    """Per lane, the queue's depth as a step series ``(times, depths)``: +1 at
    each enqueue, -1 at each finish; a still-pending event counts until ``now``."""
    changes: dict[str, list[tuple[float, int]]] = {}
    for lane, enqueued, finished in intervals:
        points = changes.setdefault(lane, [])
        points.append((enqueued, 1))
        if finished is not None:
            points.append((finished, -1))
    out: dict[str, tuple[list[float], list[int]]] = {}
    for lane, points in sorted(changes.items()):
        points.sort(key=lambda p: (p[0], p[1]))  # a finish before an enqueue at the same instant
        times, depths, depth = [], [], 0
        for at, delta in points:
            depth += delta
            times.append(at)
            depths.append(depth)
        times.append(max(now, times[-1]))
        depths.append(depth)
        out[lane] = (times, depths)
    return out


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    _pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(title: str) -> tuple[Any, Any]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=_SIZE, layout="constrained")
    ax.set_title(title, fontsize=11)
    return fig, ax


def _no_data(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _integer_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _dates(values: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(v, tz=timezone.utc) for v in values]


def plot_freshness(series: Sequence[tuple[str, str, float, float]]) -> str:
    """Freshness (seconds, log scale) of each applied event over time, by lane."""
    fig, ax = _figure("Freshness over time by lane (indexed_at - event_time)")
    if not series:
        _no_data(ax, "no applied events yet")
        return _png(fig)
    for lane in sorted({s[0] for s in series}):
        mine = [s for s in series if s[0] == lane]
        ax.scatter(
            _dates([s[2] for s in mine]),
            [max(s[3], 0.01) for s in mine],
            s=14,
            label=f"{lane} ({len(mine)})",
            color=LANE_COLORS.get(lane),
        )
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_xlabel("applied at (UTC)")
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    return _png(fig)


def plot_queue_depth(intervals: Sequence[tuple[str, float, float | None]], now: float) -> str:
    """Pending events over time, one step line per lane."""
    fig, ax = _figure("Queue depth over time by lane")
    series = queue_depth_series(intervals, now)
    if not series:
        _no_data(ax, "no queued events yet")
        return _png(fig)
    for lane, (times, depths) in series.items():
        ax.step(_dates(times), depths, where="post", label=lane, color=LANE_COLORS.get(lane), linewidth=2)
    ax.set_ylabel("pending events")
    ax.set_xlabel("time (UTC)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    return _png(fig)


def plot_coverage(coverage: Sequence[dict[str, Any]]) -> str:
    """Coverage per source as horizontal bars, the target as a line."""
    fig, ax = _figure(f"Coverage by source (target {COVERAGE_TARGET:.1%})")
    if not coverage:
        _no_data(ax, "no sources with documents yet")
        return _png(fig)
    names = [f"{c['tenant_id']}/{c['source_id']}" for c in coverage]
    values = [c["coverage"] * 100 for c in coverage]
    colors = ["#2ca02c" if c["meets_target"] else "#d62728" for c in coverage]
    ax.barh(names, values, color=colors)
    ax.axvline(COVERAGE_TARGET * 100, color="#333333", linestyle="--", linewidth=1, label="target")
    for i, c in enumerate(coverage):
        ax.text(
            min(values[i], 97),
            i,
            f" {c['coverage']:.2%} ({c['indexed']}/{c['seen']})",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, 100)
    ax.set_xlabel("% indexed of (seen - excluded by rule)")
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def plot_dead_letters(counts: dict[str, int]) -> str:
    """Open dead letters by error class."""
    fig, ax = _figure("Open dead letters by error class")
    if not counts:
        _no_data(ax, "no open dead letters")
        return _png(fig)
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ax.bar([k for k, _ in items], [v for _, v in items], color="#ff7f0e", width=0.6)
    ax.set_xlim(-0.8, max(len(items), 4) - 0.2)
    ax.set_ylabel("dead letters")
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    return _png(fig)


def plot_ocr_confidence(values: Sequence[float]) -> str:
    """Histogram of the mean OCR confidence of OCR'd documents."""
    fig, ax = _figure("OCR confidence of OCR'd documents (mean word confidence)")
    if not values:
        _no_data(ax, "no OCR'd documents yet")
        return _png(fig)
    ax.hist(values, bins=[i * 5 for i in range(21)], color="#9467bd", edgecolor="white")
    ax.set_xlim(0, 100)
    ax.set_xlabel("confidence (0-100)")
    ax.set_ylabel("documents")
    return _png(fig)


def _table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    if not rows:
        return "<p class=muted>none</p>"
    out = ["<table><tr>", *(f"<th>{html.escape(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def render_html(data: dict[str, Any]) -> str:
    """The page (a string of HTML) for :func:`gather`'s data."""
    when = datetime.fromtimestamp(data["generated_at"], tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    plots = [
        ("freshness", "Freshness over time by lane", plot_freshness(data["freshness"])),
        ("queue", "Queue depth", plot_queue_depth(data["queue_intervals"], data["generated_at"])),
        ("coverage", "Coverage by source", plot_coverage(data["coverage"])),
        ("dead-letters", "Dead letters by class", plot_dead_letters(data["dead_letters"])),
        ("ocr", "OCR confidence distribution", plot_ocr_confidence(data["ocr_confidence"])),
    ]
    width, height = int(_SIZE[0] * _DPI), int(_SIZE[1] * _DPI)
    figures = "".join(
        f'<figure id="{key}"><img alt="{html.escape(alt)}" width="{width}" height="{height}" '
        f'src="data:image/png;base64,{png}"></figure>'
        for key, alt, png in plots
    )
    q = data["queue"]
    fresh_rows = [
        (f["source_id"], f["lane"], f["kind"], f["events"], f["p50_s"], f["p95_s"])
        for f in data["freshness_stats"]
    ]
    cov_rows = [
        (
            c["tenant_id"],
            c["source_id"],
            f"{c['coverage']:.2%}",
            "ok" if c["meets_target"] else "BELOW",
            c["indexed"],
            c["seen"],
            ", ".join(f"{k} {v}" for k, v in c["not_indexed"].items()),
        )
        for c in data["coverage"]
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ragsync report</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#222;
max-width:1700px}}
h1{{font-size:20px}} h2{{font-size:16px;margin-top:20px}}
.grid{{display:flex;flex-wrap:wrap;gap:12px}} figure{{margin:0;border:1px solid #ddd}}
table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
.muted{{color:#777}}
</style></head><body>
<h1>ragsync report</h1>
<p class=muted>generated {html.escape(when)} from the catalog; no scripts, every plot inline.</p>
<div class=grid>{figures}</div>
<h2>Documents by state</h2>{_table(sorted(data["documents"].items()), ["state", "documents"])}
<h2>Queue</h2><p>{q["depth"]} pending, oldest {q["oldest_pending_age_s"]:.0f} s;
by lane: {html.escape(", ".join(f"{k} {v}" for k, v in sorted(q["by_lane"].items())) or "empty")}</p>
<h2>Freshness</h2>{_table(fresh_rows, ["source", "lane", "kind", "events", "p50 s", "p95 s"])}
<h2>Coverage</h2>{
        _table(cov_rows, ["tenant", "source", "coverage", "target", "indexed", "seen", "not indexed"])
    }
<h2>Dead letters</h2>{_table(sorted(data["dead_letters"].items()), ["error class", "open"])}
</body></html>
"""


def write_report(catalog: Any, out_dir: str, *, now: float | None = None) -> str:
    """Write ``out_dir/index.html`` and return its path.

    Raises:
        ConfigurationError: matplotlib is not installed.
        OSError: the directory cannot be written.
    """
    page = render_html(gather(catalog, now=now))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
