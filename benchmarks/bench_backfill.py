"""Backfill throughput ("Walking skeleton"): cold run, embed stage vs raw encode, unchanged re-run.

A FIXED, deterministic set of files from the shared corpus (``../shared/corpus``)
is copied into a temporary folder: by default 60 files, 36 wiki Markdown pages
(``documents/wiki-18f-handbook``, every k-th page in path order), 10 HTML and
8 DOCX files from ``documents/docling`` and 6 PDFs with a text layer from
``documents/docling/pdf``. ``--files N`` keeps those proportions.

One run of this script measures, in one process:

1. **cold run**: ``run_backfill`` into an empty home (FnApiRunner, the packaged
   all-MiniLM-L6-v2 on CPU): wall time, documents/s (documents_indexed / wall)
   and chunks/s (chunks_written / wall). The wall time includes the model load.
2. **embed stage vs raw encode** on the same chunk texts:

   * *pipeline model time*: ``transforms.embed._LazyModel.encode`` is wrapped
     (class attribute; FnApiRunner runs the SDK worker in this process) to
     time each model call, excluding the lazy model load (the first call in
     the process loads the model; it is timed apart by encoding one warm-up
     text first);
   * *embed stage time*: model time + the cache lookup (``_CacheLookupFn._lookup``)
     + the cache store (``_CacheStoreFn.process``), each wrapped the same way;
   * *RunInference latency*: Beam's own ``ragsync_embed`` /
     ``inference_batch_latency_micro_secs`` distribution (sum over batches;
     it includes the lazy model load, which is subtracted for the "net" figure;
     ``inference_request_batch_size`` counts documents, not chunks);
   * *raw encode*: ``SentenceTransformer.encode`` on every chunk text read back
     from the catalog's chunks table (``Chunk.embedding_text()``), batch_size
     64, ``normalize_embeddings=True``, ``max_seq_length`` from
     ``default_model()``, model loaded and warmed up before timing;
   * *interleaved, same batches*: outside the pipeline, for each batch the
     pipeline formed, the project's ``PlanEmbeddingHandler.run_inference``
     (``_LazyModel`` -> ``get_model().encode_passages``) and raw ``encode``
     alternate (which goes first alternates too), so both see the same load
     from other jobs; this separates handler overhead from runner effects.

   ratio = embed stage chunks/s / raw encode chunks/s (target >= 0.9).
3. **unchanged re-run**: ``run_backfill`` again on the same folder and home
   (in process; the model is never loaded, and like the CLI it starts no
   pipeline for an unchanged folder), and the same through the CLI in a
   fresh process (``python -m cli.main backfill``, imports included).
   ratio = re-run wall / cold wall (target <= 0.05); chunks_embedded and
   chunks_written must be 0.

Figures are wall-clock: on a shared machine other jobs inflate them; the load
average before and after is printed with the results.

Usage: ``python benchmarks/bench_backfill.py [--files N] [--keep DIR] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus"
WIKI = "documents/wiki-18f-handbook/pages"
HTML = "documents/docling/html/sources"
DOCX = "documents/docling/docx/sources"
PDF = "documents/docling/pdf/sources"
# Text-layer PDFs (checked with pypdfium2: every page has a text layer), small to mid size.
PDFS = [
    "multi_page.pdf",
    "normal_4pages.pdf",
    "2305.03393v1-pg9.pdf",
    "code_and_formula.pdf",
    "amt_handbook_sample.pdf",
    "picture_classification.pdf",
]
# Left out to keep the cold run to minutes: a 3 MB DOCX and a 245 KB HTML page; and Strict.docx
# (ISO OOXML Strict: the parser dead-letters it as corrupt, which says nothing about throughput).
EXCLUDED = {"docx_rich_tables_01.docx", "wiki_duck.html", "Strict.docx"}
SHARES = (("wiki", 0.60), ("html", 0.17), ("docx", 0.13), ("pdf", 0.10))


# --------------------------------------------------------------------------- corpus


def _every_kth(items: list[Path], n: int) -> list[Path]:
    """``n`` items spread evenly over ``items`` (deterministic)."""
    if n >= len(items):
        return items
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def select_files(corpus: Path, total: int) -> list[tuple[str, Path]]:
    """The fixed file set: ``(category, path)`` pairs, ``total`` in all."""
    pools: dict[str, list[Path]] = {
        "wiki": sorted((corpus / WIKI).rglob("*.md")),
        "html": sorted(p for p in (corpus / HTML).glob("*.html") if p.name not in EXCLUDED),
        "docx": sorted(p for p in (corpus / DOCX).glob("*.docx") if p.name not in EXCLUDED),
        "pdf": [corpus / PDF / name for name in PDFS if (corpus / PDF / name).exists()],
    }
    counts = {cat: max(1, round(total * share)) for cat, share in SHARES}
    counts["wiki"] = max(1, total - sum(v for k, v in counts.items() if k != "wiki"))
    chosen: list[tuple[str, Path]] = []
    for cat, _ in SHARES:
        chosen += [(cat, p) for p in _every_kth(pools[cat], min(counts[cat], len(pools[cat])))]
    return chosen[:total] if total >= len(SHARES) else chosen


def stage_files(files: list[tuple[str, Path]], corpus: Path, dest: Path) -> int:
    """Copy the files under ``dest/<category>/<path relative to its pool>``; returns bytes copied."""
    roots = {"wiki": corpus / WIKI, "html": corpus / HTML, "docx": corpus / DOCX, "pdf": corpus / PDF}
    size = 0
    for cat, path in files:
        target = dest / cat / path.relative_to(roots[cat])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        size += target.stat().st_size
    return size


def stage_aged_set(corpus: Path, total: int, dest: Path) -> list[tuple[str, Path]]:
    """Stage ``total`` files under ``dest``: the fixed set of :func:`select_files`,
    topped up with more wiki pages (next in path order) where the set has
    fewer PDFs than its shares ask for, each file's times an hour back (so an
    unchanged re-run is outside the racy window). Returns the files chosen."""
    files = select_files(corpus, total)
    wiki = sorted((corpus / WIKI).rglob("*.md"))
    chosen = {p for _, p in files}
    files += [("wiki", p) for p in wiki if p not in chosen][: max(0, total - len(files))]
    stage_files(files, corpus, dest)
    old = time.time() - 3600
    for path in dest.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    return files


# --------------------------------------------------------------------------- instrumentation


@dataclass
class EmbedProbe:
    """What the wrapped embed-stage methods saw during the cold run."""

    loaded: bool = False
    load_s: float = 0.0
    batches: list[list[str]] = field(default_factory=list)
    encode_s: list[float] = field(default_factory=list)
    encode_cpu_s: float = 0.0
    lookup_s: float = 0.0
    store_s: float = 0.0
    results: list[Any] = field(default_factory=list)


def _timed_generator(fn: Callable[..., Iterator[Any]], add: Callable[[float], None]) -> Callable[..., Any]:
    """Wrap a generator method: run it to the end under a timer, then yield its items."""

    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        start = time.perf_counter()
        items = list(fn(*args, **kwargs))
        add(time.perf_counter() - start)
        yield from items

    return wrapper


def install_probe(probe: EmbedProbe) -> Callable[[], None]:
    """Wrap the embed stage's methods and ``Pipeline.run``; returns a function that undoes it."""
    import apache_beam as beam

    from transforms import embed

    orig_encode = embed._LazyModel.encode
    orig_lookup = embed._CacheLookupFn._lookup
    orig_store = embed._CacheStoreFn.process
    orig_run = beam.Pipeline.run

    def encode(self: Any, texts: Any) -> Any:
        if not probe.loaded:  # the first call loads the model: time that apart
            start = time.perf_counter()
            orig_encode(self, ["warm-up"])
            probe.load_s += time.perf_counter() - start
            probe.loaded = True
        start, cpu = time.perf_counter(), time.process_time()
        out = orig_encode(self, texts)
        probe.encode_s.append(time.perf_counter() - start)
        probe.encode_cpu_s += time.process_time() - cpu
        probe.batches.append(list(texts))
        return out

    def add_lookup(s: float) -> None:
        probe.lookup_s += s

    def store(self: Any, batch: list[Any]) -> Iterator[Any]:
        # Same parameters as the original (a batch of model results): Beam inspects them.
        start = time.perf_counter()
        items = list(orig_store(self, batch))
        probe.store_s += time.perf_counter() - start
        yield from items

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = orig_run(self, *args, **kwargs)
        probe.results.append(result)
        return result

    embed._LazyModel.encode = encode  # type: ignore[method-assign]
    embed._CacheLookupFn._lookup = _timed_generator(orig_lookup, add_lookup)  # type: ignore[method-assign]
    embed._CacheStoreFn.process = store  # type: ignore[method-assign]
    beam.Pipeline.run = run  # type: ignore[method-assign]

    def undo() -> None:
        embed._LazyModel.encode = orig_encode  # type: ignore[method-assign]
        embed._CacheLookupFn._lookup = orig_lookup  # type: ignore[method-assign]
        embed._CacheStoreFn.process = orig_store  # type: ignore[method-assign]
        beam.Pipeline.run = orig_run  # type: ignore[method-assign]

    return undo


def runinference_metrics(result: Any) -> dict[str, Any]:
    """Beam's RunInference distributions and counters in the ``ragsync_embed`` namespace."""
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, Any] = {}
    query = result.metrics().query(MetricsFilter().with_namespace("ragsync_embed"))
    for d in query["distributions"]:
        v = d.committed or d.attempted
        if v is not None and v.count:
            out[d.key.metric.name] = {"count": v.count, "sum": v.sum, "min": v.min, "max": v.max}
    for c in query["counters"]:
        out[c.key.metric.name] = c.committed or c.attempted
    return out


# --------------------------------------------------------------------------- raw encode


def catalog_texts(settings: Any) -> list[str]:
    """``Chunk.embedding_text()`` of every chunk row in the catalog."""
    from ragsync.config import open_catalog

    catalog = open_catalog(settings)
    try:
        texts: list[str] = []
        for source in catalog.sources.source_ids():
            for doc in catalog.documents.documents_for_source(source):
                texts += [c.embedding_text() for c in catalog.chunks.chunks_for_doc(doc.doc_id)]
        return texts
    finally:
        catalog.close()


def dead_letters(settings: Any) -> list[str]:
    """``file: error class`` of each dead letter of the run."""
    from ragsync.config import open_catalog

    catalog = open_catalog(settings)
    try:
        return [
            f"{Path(d.uri).name}: {d.error_class}" for d in catalog.dead_letters.list_dead_letters(limit=100)
        ]
    finally:
        catalog.close()


def raw_encode(texts: list[str], batches: list[list[str]]) -> dict[str, float]:
    """Time ``SentenceTransformer.encode`` on ``texts`` (batch 64, globally length-sorted by
    sentence-transformers), then, batch by batch and alternating which goes first, the
    project's ``PlanEmbeddingHandler.run_inference`` against raw ``encode`` on each batch the
    pipeline formed (same conditions for both: fair on a shared machine)."""
    import types

    import torch
    from sentence_transformers import SentenceTransformer

    from ragsync.embedding.models import default_model
    from transforms.embed import PlanEmbeddingHandler

    spec = default_model()
    model = SentenceTransformer(spec.path, device="cpu")
    model.max_seq_length = spec.max_seq_length
    kwargs: dict[str, Any] = {
        "normalize_embeddings": True,
        "convert_to_numpy": True,
        "show_progress_bar": False,
    }
    model.encode(texts[:8], batch_size=64, **kwargs)  # warm-up, not timed
    start, cpu = time.perf_counter(), time.process_time()
    model.encode(texts, batch_size=64, **kwargs)
    raw_s, raw_cpu = time.perf_counter() - start, time.process_time() - cpu

    handler = PlanEmbeddingHandler(spec)
    project_model = handler.load_model()
    handler.run_inference([types.SimpleNamespace(misses=(("w", "w", "warm-up"),))], project_model)  # type: ignore[list-item]
    pair_raw_s = pair_handler_s = 0.0
    for i, batch in enumerate(batches):
        # run_inference reads only ``.misses`` of each item: one item per batch is enough.
        item = types.SimpleNamespace(plan=None, cached={}, misses=tuple(("c", "h", t) for t in batch))
        for which in ("handler", "raw") if i % 2 == 0 else ("raw", "handler"):
            start = time.perf_counter()
            if which == "raw":
                model.encode(batch, batch_size=64, **kwargs)
                pair_raw_s += time.perf_counter() - start
            else:
                handler.run_inference([item], project_model)  # type: ignore[list-item]
                pair_handler_s += time.perf_counter() - start
    return {
        "raw_s": raw_s,
        "raw_cpu_s": raw_cpu,
        "pair_raw_s": pair_raw_s,
        "pair_handler_s": pair_handler_s,
        "torch_threads": torch.get_num_threads(),
    }


# --------------------------------------------------------------------------- runs


def _loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def cli_backfill(
    folder: Path | str,
    home: Path,
    *,
    backend: str = "",
    beam_args: list[str] | None = None,
    timeout: float = 7200,
) -> dict[str, Any]:
    """One ``ragsync backfill FOLDER --home HOME [-- BEAM_ARGS]`` through the
    CLI in a fresh process (imports included), with
    ``RAGSYNC_EMBED_BACKEND=backend`` when given (``default``: the variable
    unset, what a user gets): ``{"wall_s": seconds, "cpu_s": its CPU
    seconds, "summary": its JSON summary}``. ``folder`` may be a
    ``gs://``/``s3://`` prefix.

    Raises:
        RuntimeError: the command failed (the end of its stderr).
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
    """
    cmd = [sys.executable, "-m", "cli.main", "backfill", str(folder), "--home", str(home)]
    cmd += ["--quiet", "--json"]
    if beam_args:
        cmd += ["--", *beam_args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    if backend == "default":
        env.pop("RAGSYNC_EMBED_BACKEND", None)
    elif backend:
        env["RAGSYNC_EMBED_BACKEND"] = backend
    run = timed_json_run(cmd, env, what="ragsync backfill", cwd=ROOT, timeout=timeout)
    return {"wall_s": run["wall_s"], "cpu_s": run["cpu_s"], "summary": run["json"]}


def timed_json_run(
    cmd: list[str], env: dict[str, str], *, what: str, cwd: Path | None = None, timeout: float = 7200
) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process: ``{"wall_s", "cpu_s", "json": its last
    stdout line parsed}``.

    Raises:
        RuntimeError: the command failed (``what`` and the end of its stderr).
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
    """
    start, cpu = time.monotonic(), children_cpu()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall, cpu = time.monotonic() - start, children_cpu() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "json": last}


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (a run's
    own CPU: a load-robust companion of wall time on a shared machine)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Stage the files, run cold, compare with raw encode, re-run; returns every figure."""
    from beam_pipelines.backfill import run_backfill
    from ragsync.config import Settings

    corpus = Path(args.corpus).resolve()
    if not (corpus / WIKI).is_dir() or not (corpus / HTML).is_dir():
        sys.exit(f"bench_backfill: the shared corpus is not at {corpus} (expected ../shared/corpus)")
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="bench_backfill_"))
    folder, home = work / "docs", work / "home"
    if folder.exists() or home.exists():
        sys.exit(f"bench_backfill: {work} already holds docs/ or home/; give an empty --keep folder")
    try:
        files = select_files(corpus, args.files)
        size = stage_files(files, corpus, folder)
        mix = {cat: sum(1 for c, _ in files if c == cat) for cat, _ in SHARES}
        settings = Settings(home=str(home))
        probe = EmbedProbe()
        undo = install_probe(probe)
        load_before = _loadavg()
        cpu0 = time.process_time()
        try:
            cold = run_backfill(str(folder), settings, show_progress=not args.quiet)
        finally:
            undo()
        cold_cpu = time.process_time() - cpu0
        metrics = runinference_metrics(probe.results[-1]) if probe.results else {}
        dead = dead_letters(settings)
        texts = catalog_texts(settings)
        raw = raw_encode(texts, probe.batches)
        load_mid = _loadavg()
        rerun = run_backfill(str(folder), settings, show_progress=False)
        cli = cli_backfill(folder, home, timeout=600)
        load_after = _loadavg()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    pipeline_chunks = sum(len(b) for b in probe.batches)
    model_s = sum(probe.encode_s)
    stage_s = model_s + probe.lookup_s + probe.store_s
    latency = metrics.get("inference_batch_latency_micro_secs", {})
    ri_s = latency.get("sum", 0) / 1e6
    sizes = sorted(len(b) for b in probe.batches)
    raw_cps = len(texts) / raw["raw_s"] if raw["raw_s"] else 0.0
    stage_cps = pipeline_chunks / stage_s if stage_s else 0.0

    def rate(n: float, s: float) -> float:
        return round(n / s, 2) if s else 0.0

    return {
        "files": len(files),
        "mix": mix,
        "bytes": size,
        "cold": {
            **cold.to_dict(),
            "wall_s": cold.seconds,
            "cpu_s": round(cold_cpu, 1),
            "documents_per_s": rate(cold.documents_indexed, cold.seconds),
            "chunks_per_s": rate(cold.chunks_written, cold.seconds),
            "dead_letters": dead,
        },
        "embed": {
            "chunks_in_catalog": len(texts),
            "chunks_sent_to_model": pipeline_chunks,
            "model_calls": len(probe.batches),
            "batch_size_min_median_max": [sizes[0], sizes[len(sizes) // 2], sizes[-1]] if sizes else [],
            "batches_under_16": sum(1 for n in sizes if n < 16),
            "model_load_s": round(probe.load_s, 2),
            "pipeline_model_s": round(model_s, 2),
            "cache_lookup_s": round(probe.lookup_s, 3),
            "cache_store_s": round(probe.store_s, 3),
            "embed_stage_s": round(stage_s, 2),
            "runinference_latency_s": round(ri_s, 2),
            "runinference_latency_net_s": round(ri_s - probe.load_s, 2),
            "runinference_batches": latency.get("count", 0),
            "pipeline_model_cpu_s": round(probe.encode_cpu_s, 2),
            "raw_encode_cpu_s": round(raw["raw_cpu_s"], 2),
            "model_cpu_ratio": round(
                (pipeline_chunks / probe.encode_cpu_s) / (len(texts) / raw["raw_cpu_s"]), 3
            )
            if probe.encode_cpu_s and raw["raw_cpu_s"]
            else 0.0,
            "raw_encode_s": round(raw["raw_s"], 2),
            "interleaved_raw_encode_s": round(raw["pair_raw_s"], 2),
            "interleaved_run_inference_s": round(raw["pair_handler_s"], 2),
            "interleaved_ratio": round(raw["pair_raw_s"] / raw["pair_handler_s"], 3)
            if raw["pair_handler_s"]
            else 0.0,
            "embed_stage_chunks_per_s": round(stage_cps, 2),
            "pipeline_model_chunks_per_s": rate(pipeline_chunks, model_s),
            "runinference_net_chunks_per_s": rate(pipeline_chunks, ri_s - probe.load_s),
            "raw_encode_chunks_per_s": round(raw_cps, 2),
            "interleaved_raw_chunks_per_s": rate(pipeline_chunks, raw["pair_raw_s"]),
            "interleaved_run_inference_chunks_per_s": rate(pipeline_chunks, raw["pair_handler_s"]),
            "ratio": round(stage_cps / raw_cps, 3) if raw_cps else 0.0,
            "ratio_target": 0.9,
            "torch_threads": raw["torch_threads"],
            "beam_metrics": metrics,
        },
        "rerun": {
            **rerun.to_dict(),
            "wall_s": rerun.seconds,
            "ratio": round(rerun.seconds / cold.seconds, 4) if cold.seconds else 0.0,
            "cli_wall_s": cli["wall_s"],
            "cli_ratio": round(cli["wall_s"] / cold.seconds, 4) if cold.seconds else 0.0,
            "cli_chunks_embedded": cli["summary"]["chunks_embedded"],
            "cli_chunks_written": cli["summary"]["chunks_written"],
            "ratio_target": 0.05,
        },
        "loadavg_1m": {"before": load_before, "after_cold": load_mid, "after_rerun": load_after},
        "cpus": os.cpu_count(),
        "kept": str(work) if args.keep else "",
    }


def markdown(r: dict[str, Any]) -> str:
    """A small Markdown table of the headline figures."""
    c, e, u = r["cold"], r["embed"], r["rerun"]
    rows = [
        ("files (wiki/html/docx/pdf)", f"{r['files']} ({'/'.join(str(r['mix'][k]) for k, _ in SHARES)})"),
        ("cold: wall s", f"{c['wall_s']:.1f}"),
        (
            "cold: documents indexed / dead-lettered",
            f"{c['documents_indexed']} / {c['dead_lettered']} {c.get('dead_letters', '')}",
        ),
        ("cold: documents/s", f"{c['documents_per_s']:.2f}"),
        ("cold: chunks written, chunks/s", f"{c['chunks_written']}, {c['chunks_per_s']:.2f}"),
        ("embed: model load s (inside the run)", f"{e['model_load_s']:.1f}"),
        (
            "embed: model calls, batch size min/median/max",
            f"{e['model_calls']}, {e['batch_size_min_median_max']}",
        ),
        ("embed stage chunks/s (model + cache lookup/store)", f"{e['embed_stage_chunks_per_s']:.1f}"),
        ("RunInference latency (net of load) chunks/s", f"{e['runinference_net_chunks_per_s']:.1f}"),
        ("raw encode chunks/s (batch 64, same texts)", f"{e['raw_encode_chunks_per_s']:.1f}"),
        (
            "same batches, interleaved: run_inference / raw encode chunks/s",
            f"{e['interleaved_run_inference_chunks_per_s']:.1f} / {e['interleaved_raw_chunks_per_s']:.1f}"
            f" (ratio {e['interleaved_ratio']:.3f})",
        ),
        ("ratio embed stage / raw (target >= 0.9)", f"{e['ratio']:.3f}"),
        ("ratio by CPU time, model calls / raw encode", f"{e['model_cpu_ratio']:.3f}"),
        ("re-run: wall s (in process)", f"{u['wall_s']:.2f}"),
        ("re-run / cold (target <= 0.05)", f"{u['ratio']:.3f}"),
        ("re-run via CLI (fresh process): wall s, / cold", f"{u['cli_wall_s']:.2f}, {u['cli_ratio']:.3f}"),
        ("re-run: chunks embedded / written", f"{u['chunks_embedded']} / {u['chunks_written']}"),
        (
            "load average 1 min before / after",
            f"{r['loadavg_1m']['before']} / {r['loadavg_1m']['after_rerun']}",
        ),
    ]
    lines = ["| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run the benchmark, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=60, help="files to backfill (default 60)")
    parser.add_argument("--keep", help="work in this (empty) folder and keep it (default: a temp folder)")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the shared corpus (../shared/corpus)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no pipeline progress lines on stderr")
    args = parser.parse_args(argv)
    if args.files < 1:
        parser.error("--files must be at least 1")
    result = run(args)
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
