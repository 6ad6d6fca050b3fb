"""Incremental sync under a steady change stream ("Incremental sync").

Replays a synthetic change stream against the local stack (catalog event
queue, FnApiRunner ``--streaming``, the packaged all-MiniLM-L6-v2 on CPU,
Milvus Lite, tantivy, SQLite) and reports whether it keeps up.

Steps, all in a temporary home:

1. **base load**: ``--base`` generated Markdown documents (4-8 paragraphs in
   2-4 sections, deterministic from ``--seed``) are enqueued as upsert events
   and applied by ``python -m cli.main stream --until-idle``.
2. **live stream**: a long-running ``python -m cli.main stream --quiet``
   (no ``--until-idle``) is started in its own process group. One warm-up
   upsert is pushed and waited for, so the model load and runner start-up are
   outside the measured window (a restarted worker pays them once).
3. **producer**: this process enqueues events one at a time with Poisson
   arrivals at ``--rate`` events/s for ``--seconds``: ~80% small edits (one
   paragraph rewritten, version+1), ~8% new documents, ~7% permission changes
   (``acl``, version+1), ~5% deletes (of base documents). Each version of a
   document is its own immutable file (``docs/<doc>/v<N>.md``), so an event
   never reads a later version's bytes. ``event_time`` = the time it is
   enqueued.
4. **drain**: the producer stops; the script waits (at most ``--drain-timeout``
   seconds) for the queue to empty, then stops the stream with SIGINT (then
   SIGTERM, then SIGKILL of the whole process group).

Why a long-running stream and not ``--until-idle`` waves: freshness is
``applied_at - event_time``; waves would add a process start and model load
(~10 s) to every wave and measure batch latency, not a running service.

Reported (``freshness`` table rows with ``applied_at`` after the window
start; nearest-rank percentiles like ``Catalog.freshness_stats``):
achieved applied rate over the production window and including the drain,
freshness p50/p95 for content (upserts) and permission changes (acl; deletes
shown apart), queue depth and oldest pending age when the producer stops and
at the end, chunks embedded per edit (new ``embedding_cache`` rows minus the
chunks of the new documents, over the edits applied), stale/superseded
events, dead letters. Targets: keep up with 4.6/s, content p95 < 300 s,
permission p95 < 60 s.

Usage: ``python benchmarks/bench_stream.py [--rate 4.6] [--seconds 120] [--base 200] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SOURCE = "bench-wiki"
TENANT = "bench"
MIX = (("edit", 0.80), ("new", 0.08), ("acl", 0.07), ("delete", 0.05))
GROUPS = ["everyone", "eng", "sales", "hr", "finance", "legal", "support", "ops"]
_WORD_TEXT = (
    "account budget calendar contract customer deadline deploy design document employee expense "
    "feature finance hardware hiring holiday invoice laptop leave manager meeting network office "
    "onboarding password payroll policy printer project quarter release report request review "
    "roadmap salary schedule security server service software support team ticket training travel "
    "vendor warranty workflow approve archive assign backup book cancel change check close confirm "
    "create delete deliver escalate estimate explain file follow handle install list measure merge "
    "migrate notify order plan prepare publish record renew reply reset restore resolve submit "
    "track update upgrade verify weekly monthly annual urgent internal external remote shared "
    "regional central legacy default primary secondary manual automatic quarterly pending final "
    "draft approved rejected open closed new old minor major critical optional required"
)
WORDS = _WORD_TEXT.split()


# --------------------------------------------------------------------------- documents


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 5)))


@dataclass
class Doc:
    """A generated document: its paragraphs, section layout, version and groups."""

    name: str
    title: str
    paragraphs: list[str]
    sections: list[int]  # paragraphs per section
    version: int = 1
    groups: list[str] = field(default_factory=lambda: ["everyone"])

    def markdown(self) -> str:
        """The document's Markdown text at its current version."""
        out = [f"# {self.title}"]
        i = 0
        for s, count in enumerate(self.sections):
            out.append(f"## Section {s + 1}")
            out += self.paragraphs[i : i + count]
            i += count
        return "\n\n".join(out) + "\n"


def make_doc(rng: random.Random, name: str) -> Doc:
    """A Markdown document of 4-8 paragraphs in 2-4 sections."""
    n = rng.randint(4, 8)
    k = rng.randint(2, min(4, n))
    cuts = sorted(rng.sample(range(1, n), k - 1))
    sections = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    title = " ".join(w.capitalize() for w in rng.sample(WORDS, 3))
    return Doc(name, title, [_paragraph(rng) for _ in range(n)], sections)


def write_version(docs_dir: Path, doc: Doc) -> str:
    """Write ``doc`` at its current version as an immutable file; returns its path."""
    path = docs_dir / doc.name / f"v{doc.version}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc.markdown(), encoding="utf-8")
    return str(path)


def event(doc: Doc, op: str, uri: str = "") -> dict[str, Any]:
    """The wire event for ``doc`` at its current version, stamped now."""
    data: dict[str, Any] = {
        "source_id": SOURCE,
        "doc_id": doc.name,
        "op": op,
        "source_version": doc.version,
        "acl_groups": list(doc.groups) if op != "delete" else [],
        "event_time": time.time(),
        "event_id": f"{doc.name}-v{doc.version}-{op}",
    }
    if uri:
        data["content_uri"] = uri
    return data


# --------------------------------------------------------------------------- catalog helpers


def enqueue(catalog: Any, events: list[dict[str, Any]]) -> None:
    """Validate and enqueue events (one transaction)."""
    from connectors.events import parse_event

    catalog.queue.enqueue_events([parse_event(e) for e in events])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, as ``Catalog.freshness_stats`` computes it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 1)))
    return round(float(ordered[min(rank, len(ordered)) - 1]), 3)


def _finished(by_state: dict[str, int]) -> int:
    """Events no longer pending (done, stale, duplicate or dead)."""
    return sum(n for state, n in by_state.items() if state != "pending")


def events_by_op_state(catalog: Any) -> dict[str, int]:
    """Queue rows of the run counted by ``op/state``."""
    return {f"{op}/{state}": n for (op, state), n in sorted(catalog.queue_views.event_counts().items())}


def delete_check(catalog: Any) -> dict[str, int]:
    """Tombstones, how many were completed, and catalog chunks still held by deleted documents."""
    rows = catalog.gate_state.list_tombstones()
    left = sum(len(catalog.chunks.chunk_ids_for_doc(row["doc_id"])) for row in rows)
    return {
        "tombstones": len(rows),
        "completed": sum(1 for row in rows if row["completed_at"] is not None),
        "chunks_left_in_catalog": left,
    }


def chunks_of(catalog: Any, names: list[str]) -> int:
    """Chunks in the catalog for the given source document names."""
    from ragsync import ids

    return sum(len(catalog.chunks.chunk_ids_for_doc(ids.doc_id(TENANT, SOURCE, n))) for n in names)


# --------------------------------------------------------------------------- processes


def stream_cmd(home: Path, until_idle: bool) -> list[str]:
    """The ``ragsync stream`` command line."""
    cmd = [sys.executable, "-m", "cli.main", "stream", "--home", str(home), "--quiet", "--json"]
    return cmd + (["--until-idle"] if until_idle else [])


def start_stream(home: Path, log: Path, until_idle: bool) -> subprocess.Popen[bytes]:
    """Start the stream in its own process group (so everything it starts can be stopped)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with open(log, "ab") as fh:
        return subprocess.Popen(
            stream_cmd(home, until_idle), cwd=ROOT, env=env, stdout=fh, stderr=fh, start_new_session=True
        )


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> str:
    """SIGINT, then SIGTERM, then SIGKILL the process group; returns how it ended.

    The group is killed even when the leader exited, so a Milvus Lite server
    it started cannot keep the file lock.
    """
    how = "exited"
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            how = signal.Signals(sig).name
        except subprocess.TimeoutExpired:
            how = "SIGKILL"
    for _ in range(100):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    if proc.poll() is None:
        proc.wait(timeout=10)
    return how


def last_json(log: Path, offset: int = 0) -> dict[str, Any]:
    """The last JSON object line the stream printed after byte ``offset`` of its log (its
    summary), or {} (a stream stopped by SIGINT prints none: FnApiRunner runs the pipeline
    inside ``run()``, so the KeyboardInterrupt escapes ``run_stream``)."""
    from control_plane.worker import _last_json

    with open(log, "rb") as fh:
        fh.seek(offset)
        return _last_json(fh.read().decode(errors="replace")) or {}


def wait_drained(
    catalog: Any,
    proc: subprocess.Popen[bytes] | None,
    timeout_s: float,
    lanes: tuple[str, ...] = ("priority", "fast", "slow"),
) -> bool:
    """Wait until no event of ``lanes`` is pending (or ``proc`` died); True when drained."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if catalog.queue.unfinished_events(lanes) == 0:
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.5)
    return catalog.queue.unfinished_events(lanes) == 0


def write_scans(folder: Path, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` scanned pages (PNG images of text, what a scanner gives) and their
    upsert events (ids ``scan-…``, so their own freshness is kept apart)."""
    from PIL import Image, ImageDraw, ImageFont

    folder.mkdir(parents=True, exist_ok=True)
    try:
        font: Any = ImageFont.truetype("DejaVuSans.ttf", 34)
    except OSError:
        font = ImageFont.load_default(size=34)
    events = []
    for i in range(n):
        img = Image.new("L", (1654, 2339), 255)  # A4 at 200 dpi
        draw = ImageDraw.Draw(img)
        for line in range(40):
            draw.text((120, 140 + 52 * line), _paragraph(rng)[:80], fill=0, font=font)
        path = folder / f"scan-{i:04d}.png"
        img.save(path)
        doc = Doc(name=f"scan-{i:04d}", title="", paragraphs=[], sections=[])
        events.append(event(doc, "upsert", str(path)))
    return events


# --------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Base load, live stream with a producer, drain; returns every figure."""
    from connectors.sources import register_source
    from ragsync.config import Settings, open_catalog
    from ragsync.index.versions import live_spec, prepare_stores

    rng = random.Random(args.seed)
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="bench_stream_"))
    work.mkdir(parents=True, exist_ok=True)
    home, docs_dir, log = work / "home", work / "docs", work / "stream.log"
    settings = Settings(home=str(home))
    proc: subprocess.Popen[bytes] | None = None
    catalog: Any = None
    try:
        prepare_stores(settings, live_spec(settings))  # the product's backend for a new home
        register_source(settings, SOURCE, TENANT, "wiki", str(docs_dir))
        catalog = open_catalog(settings)

        # 1. base load through the event queue
        docs: dict[str, Doc] = {}
        base_events = []
        for i in range(args.base):
            doc = make_doc(rng, f"page-{i:05d}")
            docs[doc.name] = doc
            base_events.append(event(doc, "upsert", write_version(docs_dir, doc)))
        enqueue(catalog, base_events)
        start = time.monotonic()
        base_proc = start_stream(home, log, until_idle=True)
        try:
            base_code = base_proc.wait(timeout=args.base_timeout)
        finally:
            stop_group(base_proc)
        base_s = time.monotonic() - start
        base_summary = last_json(log)
        if base_code != 0:
            raise RuntimeError(f"base load failed ({base_code}): {log.read_text(errors='replace')[-2000:]}")
        base_chunks = catalog.count_rows("chunks")

        # 2. the live stream, warmed up with one new document
        live_offset = log.stat().st_size
        proc = start_stream(home, log, until_idle=False)
        warm = make_doc(rng, "warm-up")
        docs[warm.name] = warm
        start = time.monotonic()
        enqueue(catalog, [event(warm, "upsert", write_version(docs_dir, warm))])
        if not wait_drained(catalog, proc, args.warmup_timeout):
            raise RuntimeError(f"stream did not start: {log.read_text(errors='replace')[-2000:]}")
        warmup_s = time.monotonic() - start
        if args.slow_backlog:
            # A backlog of scanned pages for the slow lane, queued just before
            # the window: permission changes and edits must not wait for it.
            enqueue(catalog, write_scans(docs_dir / "scans", args.slow_backlog, rng))

        # 3. the producer
        cache_before = catalog.count_rows("embedding_cache")
        dead_before = sum(catalog.dead_letters.dead_letter_counts().values())
        live = sorted(n for n in docs if n != warm.name)
        base_names = set(live)
        new_names: list[str] = []
        produced = {op: 0 for op, _ in MIX}
        samples: list[dict[str, Any]] = []
        ops, weights = zip(*MIX, strict=True)
        before_states = catalog.queue_views.queue_stats()["by_state"]
        since = time.time()
        t0 = time.monotonic()
        next_at = t0
        next_sample = t0
        while True:
            next_at += rng.expovariate(args.rate)
            if next_at - t0 >= args.seconds:
                break
            while (now := time.monotonic()) < next_at:
                if now >= next_sample:
                    samples.append({"t_s": round(now - t0, 1), **catalog.queue_views.queue_stats()})
                    next_sample += 10.0
                time.sleep(min(0.05, next_at - now))
            op = rng.choices(ops, weights)[0]
            deletable = [n for n in live if n in base_names]
            if op == "delete" and len(deletable) < 2:
                op = "edit"
            if op == "new":
                doc = make_doc(rng, f"new-{len(new_names):05d}")
                docs[doc.name] = doc
                live.append(doc.name)
                new_names.append(doc.name)
                ev = event(doc, "upsert", write_version(docs_dir, doc))
            else:
                name = rng.choice(deletable if op == "delete" else live)
                doc = docs[name]
                doc.version += 1
                if op == "edit":
                    doc.paragraphs[rng.randrange(len(doc.paragraphs))] = _paragraph(rng)
                    ev = event(doc, "upsert", write_version(docs_dir, doc))
                elif op == "acl":
                    extra = rng.sample(GROUPS[1:], rng.randint(0, 2))
                    doc.groups = sorted({"everyone", *extra}) if rng.random() < 0.7 else sorted(set(extra))
                    doc.groups = doc.groups or ["hr"]
                    ev = event(doc, "acl")
                else:
                    live.remove(name)
                    ev = event(doc, "delete")
            enqueue(catalog, [ev])
            produced[op] += 1
        produce_s = time.monotonic() - t0
        end_of_production = catalog.queue_views.queue_stats()
        applied_in_window = len(catalog.freshness.freshness_rows(since=since))
        finished_in_window = _finished(end_of_production["by_state"]) - _finished(before_states)

        # 4. drain, then stop the stream
        start = time.monotonic()
        drain_lanes = ("priority", "fast") if args.slow_backlog else ("priority", "fast", "slow")
        drained = wait_drained(catalog, proc, args.drain_timeout, drain_lanes)
        scans_pending = catalog.queue.unfinished_events(("slow",))
        drain_s = time.monotonic() - start
        end = catalog.queue_views.queue_stats()
        stopped = stop_group(proc)
        proc = None
        summary = last_json(log, live_offset)

        all_rows = catalog.freshness.freshness_rows(since=since)
        rows = [r for r in all_rows if not r[0].startswith("scan-")]
        scans_applied = len(all_rows) - len(rows)
        by_op: dict[str, list[float]] = {}
        for _, op_name, event_time, applied_at in rows:
            by_op.setdefault(op_name, []).append(max(0.0, applied_at - event_time))
        content = by_op.get("upsert", [])
        perms = by_op.get("acl", [])
        last_applied = max((r[3] for r in rows), default=since)
        cache_added = catalog.count_rows("embedding_cache") - cache_before
        new_chunks = chunks_of(catalog, new_names)
        edits_applied = max(0, len(content) - len(new_names))
        dead = sum(catalog.dead_letters.dead_letter_counts().values()) - dead_before
        total = sum(produced.values())
        stats = catalog.freshness.freshness_stats(since=since)
        by_state = end["by_state"]
        finished_total = _finished(by_state) - _finished(before_states)
        by_op_state = events_by_op_state(catalog)
        deletes = delete_check(catalog)
    finally:
        if proc is not None:
            stop_group(proc)
        if catalog is not None:
            catalog.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    return {
        "slow_backlog": {
            "pages": args.slow_backlog,
            "applied_by_end": scans_applied,
            "pending_at_end": scans_pending,
        },
        "config": {
            "rate": args.rate,
            "seconds": args.seconds,
            "slow_backlog": args.slow_backlog,
            "base_documents": args.base,
            "seed": args.seed,
            "cpus": os.cpu_count(),
        },
        "base_load": {
            "seconds": round(base_s, 1),
            "documents_per_s": round(args.base / base_s, 2) if base_s else 0.0,
            "chunks": base_chunks,
            "chunks_embedded": base_summary.get("chunks_embedded"),
        },
        "warmup_s": round(warmup_s, 1),
        "produced": {**produced, "total": total, "seconds": round(produce_s, 1)},
        "produced_rate": round(total / produce_s, 2) if produce_s else 0.0,
        "applied": {
            "in_window": applied_in_window,
            "total": len(rows),
            "rate_in_window": round(applied_in_window / produce_s, 2) if produce_s else 0.0,
            "rate_to_last_apply": round(len(rows) / (last_applied - since), 2)
            if last_applied > since
            else 0.0,
            "by_op": {op: len(v) for op, v in sorted(by_op.items())},
            "finished_in_window": finished_in_window,
            "finished_rate_in_window": round(finished_in_window / produce_s, 2) if produce_s else 0.0,
            "finished_total": finished_total,
        },
        "events_by_op_and_state": by_op_state,
        "deletes": deletes,
        "freshness_s": {
            "content_p50": percentile(content, 0.50),
            "content_p95": percentile(content, 0.95),
            "content_max": round(max(content), 3) if content else 0.0,
            "permissions_p50": percentile(perms, 0.50),
            "permissions_p95": percentile(perms, 0.95),
            "permissions_max": round(max(perms), 3) if perms else 0.0,
            "delete_p50": percentile(by_op.get("delete", []), 0.50),
            "delete_p95": percentile(by_op.get("delete", []), 0.95),
            "catalog_freshness_stats": stats,
        },
        "queue": {
            "depth_at_producer_stop": end_of_production["depth"],
            "oldest_pending_age_at_producer_stop_s": end_of_production["oldest_pending_age_s"],
            "max_sampled_depth": max((s["depth"] for s in samples), default=0),
            "drained": drained,
            "drain_s": round(drain_s, 1),
            "depth_at_end": end["depth"],
            "oldest_pending_age_at_end_s": end["oldest_pending_age_s"],
            "by_state": by_state,
            "samples": [
                {"t_s": s["t_s"], "depth": s["depth"], "oldest_s": s["oldest_pending_age_s"]} for s in samples
            ],
        },
        "embedding": {
            "cache_rows_added": cache_added,
            "new_document_chunks": new_chunks,
            "edits_applied": edits_applied,
            "chunks_embedded_per_edit": round((cache_added - new_chunks) / edits_applied, 2)
            if edits_applied
            else 0.0,
        },
        "stale_or_superseded": by_state.get("stale", 0),
        "duplicates": by_state.get("duplicate", 0),
        "dead_letters": dead,
        "stream_stopped_by": stopped,
        "base_load_summary": base_summary,
        "live_stream_summary": summary,
        "targets": {"rate": 4.6, "content_p95_s": 300, "permissions_p95_s": 60},
        "kept": str(work) if args.keep else "",
    }


def markdown(r: dict[str, Any]) -> str:
    """A small Markdown table of the headline figures."""
    f, q, a, e = r["freshness_s"], r["queue"], r["applied"], r["embedding"]
    p = r["produced"]
    rows = [
        (
            "base load: documents, seconds, docs/s",
            f"{r['config']['base_documents']}, "
            f"{r['base_load']['seconds']}, {r['base_load']['documents_per_s']}",
        ),
        (
            "produced events (edit/new/acl/delete)",
            f"{p['total']} ({p['edit']}/{p['new']}/{p['acl']}/{p['delete']})",
        ),
        ("produced rate events/s (target 4.6)", f"{r['produced_rate']}"),
        ("applied during the window, events/s", f"{a['in_window']}, {a['rate_in_window']}"),
        ("applied in all, events/s up to the last apply", f"{a['total']}, {a['rate_to_last_apply']}"),
        (
            "content freshness p50 / p95 s (target p95 < 300)",
            f"{f['content_p50']} / {f['content_p95']} (n={a['by_op'].get('upsert', 0)})",
        ),
        (
            "permission freshness p50 / p95 s (target p95 < 60)",
            f"{f['permissions_p50']} / {f['permissions_p95']} (n={a['by_op'].get('acl', 0)})",
        ),
        (
            "delete freshness p50 / p95 s",
            f"{f['delete_p50']} / {f['delete_p95']} (n={a['by_op'].get('delete', 0)})",
        ),
        (
            "queue depth, oldest pending s at producer stop",
            f"{q['depth_at_producer_stop']}, {q['oldest_pending_age_at_producer_stop_s']}",
        ),
        ("drained, drain s", f"{q['drained']}, {q['drain_s']}"),
        (
            "queue depth, oldest pending s at the end",
            f"{q['depth_at_end']}, {q['oldest_pending_age_at_end_s']}",
        ),
        ("chunks embedded per edit", f"{e['chunks_embedded_per_edit']}"),
        (
            "finished events (applied+stale+duplicate+dead) in the window, events/s",
            f"{a['finished_in_window']}, {a['finished_rate_in_window']}",
        ),
        (
            "deletes: tombstones / completed / chunks left in catalog",
            f"{r['deletes']['tombstones']} / {r['deletes']['completed']} / "
            f"{r['deletes']['chunks_left_in_catalog']}",
        ),
        (
            "stale / duplicate events, dead letters",
            f"{r['stale_or_superseded']} / {r['duplicates']}, {r['dead_letters']}",
        ),
    ]
    return "\n".join(["| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows])


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run the benchmark, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=4.6, help="changed documents per second (default 4.6)")
    parser.add_argument("--seconds", type=float, default=120.0, help="production window (default 120)")
    parser.add_argument("--base", type=int, default=200, help="base documents (default 200)")
    parser.add_argument(
        "--slow-backlog",
        type=int,
        default=0,
        help="scanned pages queued for the slow lane just before the window (default 0)",
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed (documents and events)")
    parser.add_argument("--drain-timeout", type=float, default=180.0, help="longest wait for the queue")
    parser.add_argument("--base-timeout", type=float, default=600.0, help="longest wait for the base load")
    parser.add_argument("--warmup-timeout", type=float, default=180.0, help="longest wait for the warm-up")
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temp folder)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.base < 2:
        parser.error("--rate and --seconds must be positive, --base at least 2")
    result = run(args)
    print(json.dumps(result, sort_keys=True, default=str) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
