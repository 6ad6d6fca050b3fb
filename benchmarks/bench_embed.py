"""Embedding backends side by side: chunks/s of torch, onnx and onnx-int8 on
the same real chunks, and Recall@10 of each on the CISI golden set.

    .venv/bin/python benchmarks/bench_embed.py                 # Markdown tables
    .venv/bin/python benchmarks/bench_embed.py --json          # one JSON object
    .venv/bin/python benchmarks/bench_embed.py --no-recall     # throughput only (about a minute)

Needs ``../shared/corpus`` (exits with a message otherwise).

1. **Throughput.** Chunks are made by the project's own parser and chunker
   (``ragsync.parsing.parse``, ``chunk_elements`` with the default
   ``ChunkerConfig``) from every k-th Markdown page of
   ``documents/wiki-18f-handbook`` (``--pages``, default 60) and embedded as
   the pipeline embeds them (``Chunk.embedding_text()``, ``encode_passages``).
   The chunks are cut into the pipeline's batches (``--batch``, default 64 =
   ``Settings.embed_batch_size``); for every batch the three backends run in
   turn, the order rotating from batch to batch, so all three see the same
   load from other jobs. Every backend runs with the same number of threads
   (``--threads``, default 1 = what ``OMP_THREAD_LIMIT=1`` gives torch in the
   CLI): torch ``set_num_threads``, onnxruntime ``intra_op_num_threads``.
   Model loading and the ONNX export happen before timing (one warm-up
   batch each); the export's own time is reported apart. Ratios are
   backend chunks/s / torch chunks/s. The vectors of each backend are
   compared with torch's (least and mean cosine).
2. **Recall@10** (``ragsync.query.evaluation``, vector and hybrid modes) on the
   CISI collection converted by ``benchmarks/cisi_to_golden.py`` (1,460
   abstracts, 76 judged queries): one ``run_backfill`` with torch builds
   index v1; ``run_reembed`` with the ``onnx`` and the ``onnx-int8`` settings
   builds one more index version each from the same chunks (no flip); each
   version is scored with its own backend encoding the queries. Differences
   are backend - torch (goal: within 0.01).

Figures are wall-clock on a shared 2-core machine: the load average before
and after is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus"
WIKI = "documents/wiki-18f-handbook"
CISI = "retrieval_golden/cisi"
BACKENDS = ("torch", "onnx", "onnx-int8")


def _loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def corpus_chunks(corpus: Path, pages: int) -> tuple[list[str], int]:
    """Embedding texts of the chunks of every k-th wiki page (k chosen so
    that ``pages`` pages are taken), made by the project's parser and chunker."""
    from ragsync.embedding.models import default_model, load_tokenizer
    from ragsync.ingest.chunking import ChunkerConfig, chunk_elements
    from ragsync.parsing import parse

    files = sorted((corpus / WIKI).rglob("*.md"))
    step = max(1, len(files) // max(1, pages))
    chosen = files[::step][:pages]
    tokenizer = load_tokenizer(default_model().path)
    texts: list[str] = []
    for i, path in enumerate(chosen):
        try:
            result = parse(path.read_bytes(), "text/markdown", filename=path.name)
        except Exception:  # noqa: BLE001 - a page the parser refuses is left out
            continue
        chunks = chunk_elements(
            result.elements, ChunkerConfig(), tokenizer, doc_id=f"d{i}", tenant_id="t", acl_ids=("a",)
        )
        texts += [c.embedding_text() for c in chunks]
    return texts, len(chosen)


def make_models(home: str, threads: int) -> tuple[dict[str, Any], dict[str, float]]:
    """One model per backend (same files, same thread count), loaded and
    warmed up; returns them and each one's load (+ export) seconds."""
    import torch

    from ragsync.config import Settings
    from ragsync.embedding.models import SentenceTransformerModel, spec_for
    from ragsync.embedding.onnx import OnnxModel

    torch.set_num_threads(threads)
    models: dict[str, Any] = {}
    load: dict[str, float] = {}
    for backend in BACKENDS:
        spec = spec_for("", Settings(home=home, embed_backend=backend, embed_device="cpu"))
        t0 = time.perf_counter()
        model = SentenceTransformerModel(spec) if backend == "torch" else OnnxModel(spec, threads=threads)
        model.encode_passages(["warm up", "a second warm-up text"])
        load[backend] = round(time.perf_counter() - t0, 2)
        models[backend] = model
    return models, load


def throughput(models: dict[str, Any], texts: list[str], batch: int) -> dict[str, Any]:
    """Interleaved, rotating order: seconds per backend over the same batches,
    and the cosine of each backend's vectors to torch's."""
    import numpy as np

    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    seconds = dict.fromkeys(BACKENDS, 0.0)
    vectors: dict[str, list[Any]] = {b: [] for b in BACKENDS}
    for n, chunk_batch in enumerate(batches):
        order = BACKENDS[n % 3 :] + BACKENDS[: n % 3]
        for backend in order:
            t0 = time.perf_counter()
            out = models[backend].encode_passages(chunk_batch)
            seconds[backend] += time.perf_counter() - t0
            vectors[backend].append(out)
    ref = np.concatenate(vectors["torch"])
    out: dict[str, Any] = {}
    for backend in BACKENDS:
        got = np.concatenate(vectors[backend])
        cos = np.sum(got * ref, axis=1)
        rate = len(texts) / seconds[backend]
        out[backend] = {
            "seconds": round(seconds[backend], 2),
            "chunks_per_s": round(rate, 2),
            "ratio_to_torch": round(rate / (len(texts) / seconds["torch"]), 3),
            "cosine_min": round(float(cos.min()), 4),
            "cosine_mean": round(float(cos.mean()), 5),
        }
    return out


def recall(corpus: Path, work: Path, groups: tuple[str, ...] = ("everyone",)) -> dict[str, Any]:
    """Recall@10 of each backend on CISI (module docstring, step 2)."""
    import cisi_to_golden

    from beam_pipelines.backfill import run_backfill
    from beam_pipelines.reembed import run_reembed
    from ragsync.config import Settings
    from ragsync.embedding.models import DEFAULT_MODEL, backend_of
    from ragsync.index import versions as iv
    from ragsync.query.evaluation import evaluate, load_golden

    n_docs, n_queries = cisi_to_golden.convert(str(corpus / CISI), str(work / "cisi"))
    golden = load_golden(str(work / "cisi" / "golden.jsonl"))
    home = str(work / "home")
    out: dict[str, Any] = {"documents": n_docs, "queries": n_queries, "backends": {}}
    t0 = time.perf_counter()
    # torch explicitly: a new home's default backend is onnx-int8.
    summary = run_backfill(
        str(work / "cisi" / "docs"), Settings(home=home, embed_backend="torch"), show_progress=False
    )
    out["backfill_torch_s"] = round(time.perf_counter() - t0, 1)
    out["chunks"] = summary.to_dict().get("chunks_written")
    print(f"[bench_embed] CISI backfill (torch): {out['backfill_torch_s']} s", file=sys.stderr, flush=True)
    for backend in BACKENDS:
        settings = Settings(home=home, embed_backend=backend)
        if backend == "torch":
            version = iv.live_version(settings)
            if backend_of(version.model_version) != "torch":
                raise RuntimeError(f"index v1 was built with {version.model_version}, not torch")
        else:
            t0 = time.perf_counter()
            result = run_reembed(settings, DEFAULT_MODEL)
            out[f"reembed_{backend}_s"] = round(time.perf_counter() - t0, 1)
            version = iv.get_version(settings, result.version)
        report = evaluate(settings, golden, version=version, groups=groups)
        print(f"[bench_embed] {backend}: {json.dumps(report.recall)}", file=sys.stderr, flush=True)
        out["backends"][backend] = {
            "version": version.version,
            "model_version": version.model_version,
            "recall_at_10": report.recall,
        }
    base = out["backends"]["torch"]["recall_at_10"]
    for backend in BACKENDS[1:]:
        got = out["backends"][backend]["recall_at_10"]
        out["backends"][backend]["minus_torch"] = {
            mode: round(got[mode]["all"] - base[mode]["all"], 4) for mode in base
        }
    return out


def markdown(r: dict[str, Any]) -> str:
    lines: list[str] = []
    if "throughput" in r:
        lines += _throughput_table(r)
    if r.get("recall"):
        lines += _recall_table(r["recall"])
    return "\n".join(lines)


def _throughput_table(r: dict[str, Any]) -> list[str]:
    t = r["throughput"]
    lines = [
        f"Throughput: {r['chunks']} chunks from {r['pages']} wiki pages, batches of {r['batch']}, "
        f"{r['threads']} thread(s) each, interleaved; load {r['load_before']} -> {r['load_after']}",
        "",
        "| backend | chunks/s | ratio to torch | cosine to torch min / mean | load (+export) s |",
        "|---|---|---|---|---|",
    ]
    for b in BACKENDS:
        x = t[b]
        lines.append(
            f"| {b} | {x['chunks_per_s']} | {x['ratio_to_torch']} | {x['cosine_min']} / {x['cosine_mean']} "
            f"| {r['load_s'][b]} |"
        )
    return lines


def _recall_table(rc: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"Recall@10 on CISI ({rc['documents']} documents, {rc['queries']} queries, {rc['chunks']} chunks)",
        "",
        "| backend | vector | hybrid | vector - torch | hybrid - torch |",
        "|---|---|---|---|---|",
    ]
    for b in BACKENDS:
        x = rc["backends"][b]
        d = x.get("minus_torch", {"vector": 0.0, "hybrid": 0.0})
        rec = x["recall_at_10"]
        lines.append(
            f"| {b} | {rec['vector']['all']:.4f} | {rec['hybrid']['all']:.4f} "
            f"| {d['vector']:+.4f} | {d['hybrid']:+.4f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the shared corpus (../shared/corpus)")
    parser.add_argument("--pages", type=int, default=60, help="wiki pages to chunk (default 60)")
    parser.add_argument("--batch", type=int, default=64, help="chunks per model call (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="threads per backend (default 1)")
    parser.add_argument("--no-recall", action="store_true", help="skip the CISI Recall@10 part")
    parser.add_argument("--no-throughput", action="store_true", help="only the CISI Recall@10 part")
    parser.add_argument("--keep", help="keep the work folder (exports, CISI home) here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).resolve()
    if not (corpus / WIKI).is_dir() or not (corpus / CISI).is_dir():
        sys.exit(f"bench_embed: the shared corpus is not at {corpus} (expected ../shared/corpus)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-embed-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result: dict[str, Any] = {"load_before": _loadavg(), "batch": args.batch, "threads": args.threads}
        if not args.no_throughput:
            texts, pages = corpus_chunks(corpus, args.pages)
            result.update(chunks=len(texts), pages=pages)
            models, result["load_s"] = make_models(str(work / "home"), args.threads)
            result["throughput"] = throughput(models, texts, args.batch)
            print(
                f"[bench_embed] throughput: {json.dumps(result['throughput'])}", file=sys.stderr, flush=True
            )
        if not args.no_recall:
            result["recall"] = recall(corpus, work)
        result["load_after"] = _loadavg()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
