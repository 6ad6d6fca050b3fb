"""Page-level retrieval on real documents: the right page of the right document, with and without each stage.

Question set (``benchmarks/page_questions/``, built by ``--build`` from the
shared corpus, deterministic): for each document of ``docs.json`` (government
table PDFs, filings, papers, handbooks; the name a person would use for it,
written by hand from its first page) up to four pages are picked, evenly
spread; from each page's own text layer (PDFium's raw text, not ragsync's
parse) one question is made:

* a page of prose: its sentence of rarest words (inverse page frequency over
  every page of the set), asked as "In <name>, what is said about w1, w2, w3
  and w4?" (that sentence's four rarest words, in its order);
* a page of figures (more than a third of its tokens numbers): a line holding
  a label and figures, asked as "In <name>, what are the figures for <label>?".

Its evidence is that page, plus every page of any indexed document whose text
holds the same sentence or line (a document's copy). Questions are split by
document, a third of each class's documents into TUNE (``tune.jsonl``: what
thresholds and weights were chosen on), the rest into REPORT (``report.jsonl``:
what is reported).

Measured (each split apart; ``--split`` to ask one only): every document of ``docs.json``,
with its distractors, backfilled in process into one index (twice: with the
document's identity in the chunks' text, and without), then each question
asked through ``hybrid_query`` (the CLI's and API's path) for the top 10:

* ``doc@10``: a hit of an evidence document;
* ``page@10``: a hit of an evidence document *starting* on an evidence page
  (the issue's measure); ``range@10``: one whose page range holds one;
  ``near@10``: starting within one page of one;

per class and over all, for each stage combination: contextual text
(identity in the chunks), the reranker (``windows``), boilerplate (the
query-side demotion; ``boilerplate_min_docs`` 50 vs 0), and "BM25 over each
page's perfect text" (tantivy over the raw page texts) for reference.
Latency: ``hybrid_query`` with the reranker (50 candidates) against fusion
alone, interleaved on the same questions, p50/p95 and their ratio, with the
load average.

Usage::

    python benchmarks/eval_pages.py --corpus ../shared/corpus [--build] [--split report|tune|all]
        [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = ROOT / "benchmarks" / "page_questions"
_WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)
_TOKEN = re.compile(r"\S+")
_NUMBER = re.compile(r"^[\d.,%()$€£-]+$")
PAGES_PER_DOC = 4
K = 10


def page_texts(path: Path) -> list[str]:
    """Each page's raw text layer (PDFium), whitespace collapsed."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    try:
        out = []
        for i in range(len(doc)):
            page = doc[i]
            tp = page.get_textpage()
            out.append(tp.get_text_range().replace("\r", ""))
            tp.close()
            page.close()
        return out
    finally:
        doc.close()


def splits(docs: dict[str, list[str]]) -> dict[str, str]:
    """TUNE or REPORT for each document, by class: of a class's documents in
    the order of their path's hash, every third from the first (a third of
    each class, rounded up) is TUNE, the rest REPORT."""
    out: dict[str, str] = {}
    by_class: dict[str, list[str]] = {}
    for rel, (_, cls) in docs.items():
        by_class.setdefault(cls, []).append(rel)
    for rels in by_class.values():
        for i, rel in enumerate(sorted(rels, key=lambda r: hashlib.sha256(r.encode()).hexdigest())):
            out[rel] = "tune" if i % 3 == 0 else "report"
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _question(name: str, text: str, df: Counter[str], n_pages: int) -> tuple[str, str] | None:
    """(question, evidence snippet) for one page's text, or None."""
    tokens = _TOKEN.findall(text)
    if len(" ".join(tokens)) < 300:
        return None
    numeric = sum(1 for t in tokens if _NUMBER.match(t))

    def idf(w: str) -> float:
        return math.log(n_pages / (1 + df[w.lower()]))

    if numeric > len(tokens) / 3:
        best = None
        for line in text.split("\n"):
            words = _WORD.findall(line)
            figures = [t for t in line.split() if _NUMBER.match(t) and any(c.isdigit() for c in t)]
            if len(words) >= 2 and figures:
                score = sum(idf(w) for w in words[:6])
                if best is None or score > best[0]:
                    best = (score, " ".join(words[:6]), line.strip())
        if best is None:
            return None
        return f"In {name}, what are the figures for {best[1]}?", best[2]
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]
    best = None
    for s in sentences:
        words = _WORD.findall(s)
        if not 8 <= len(s.split()) <= 45 or len(words) < 5:
            continue
        rare = sorted(set(w.lower() for w in words), key=lambda w: -idf(w))[:4]
        score = sum(idf(w) for w in rare)
        if best is None or score > best[0]:
            ordered = [w for w in dict.fromkeys(w.lower() for w in words) if w in rare]
            best = (score, ordered, s)
    if best is None:
        return None
    w = best[1]
    return f"In {name}, what is said about {w[0]}, {w[1]}, {w[2]} and {w[3]}?", best[2]


def build(corpus: Path) -> list[dict[str, Any]]:
    """The question set (see the module docstring), every split."""
    spec = json.loads((HERE / "docs.json").read_text())
    docs: dict[str, list[str]] = {}
    for rel in [*spec["documents"], *spec["distractors"]]:
        docs[rel] = page_texts(corpus / "documents" / rel)
    df: Counter[str] = Counter()
    for pages in docs.values():
        for text in pages:
            df.update({w.lower() for w in _WORD.findall(text)})
    n_pages = sum(len(p) for p in docs.values())
    out: list[dict[str, Any]] = []
    split = splits(spec["documents"])
    for rel, (name, cls) in spec["documents"].items():
        pages = docs[rel]
        made = []
        for i, text in enumerate(pages):
            q = _question(name, text, df, n_pages)
            if q is not None:
                made.append((i + 1, *q))
        step = max(1, len(made) / PAGES_PER_DOC)
        for j in range(min(PAGES_PER_DOC, len(made))):
            page, query, snippet = made[int(j * step)]
            key = _norm(snippet)
            evidence = sorted(
                {(d, p + 1) for d, ps in docs.items() for p, t in enumerate(ps) if key and key in _norm(t)}
                | {(rel, page)}
            )
            out.append(
                {
                    "query": query,
                    "doc": rel,
                    "class": cls,
                    "split": split[rel],
                    "evidence": [list(e) for e in evidence],
                }
            )
    return out


def load(split: str) -> list[dict[str, Any]]:
    """The stored questions of a split (``all`` = both)."""
    out: list[dict[str, Any]] = []
    for name in ("tune", "report"):
        if split in (name, "all"):
            out += [json.loads(line) for line in (HERE / f"{name}.jsonl").read_text().splitlines() if line]
    return out


def backfill(corpus: Path, home: Path, *, context: bool) -> dict[str, Any]:
    """Every document and distractor copied into a folder and backfilled into ``home``."""
    from beam_pipelines.backfill import run_backfill
    from ragsync.config import Settings

    spec = json.loads((HERE / "docs.json").read_text())
    folder = home / "docs"
    for rel in [*spec["documents"], *spec["distractors"]]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus / "documents" / rel, folder / rel)
    import transforms.chunk as chunk_step

    original = chunk_step.document_context
    if not context:
        chunk_step.document_context = lambda *a, **k: ""  # type: ignore[assignment]
    try:
        settings = Settings(home=str(home / "index"))
        t0 = time.monotonic()
        summary = run_backfill(str(folder), settings, show_progress=False)
    finally:
        chunk_step.document_context = original  # type: ignore[assignment]
    return {"backfill_s": round(time.monotonic() - t0, 1), "chunks": summary.chunks_written}


def ask(
    home: Path, questions: Sequence[dict[str, Any]], **overrides: Any
) -> tuple[list[list[Any]], list[float]]:
    """Each question's top hits through ``hybrid_query`` and the seconds each took."""
    from ragsync.config import Settings
    from ragsync.query.search import hybrid_query

    settings = Settings(home=str(home / "index"), **overrides)
    hits, took = [], []
    for q in questions:
        t0 = time.perf_counter()
        hits.append(hybrid_query(settings, q["query"], groups=["everyone"], k=K))
        took.append(time.perf_counter() - t0)
    return hits, took


def _rel(uri: str) -> str:
    return uri.split("/docs/", 1)[-1]


def score(questions: Sequence[dict[str, Any]], hits: Sequence[Sequence[Any]]) -> dict[str, dict[str, float]]:
    """doc@10, page@10, range@10, near@10 per class and ``all``."""
    sums: dict[str, Counter[str]] = {}
    for q, hs in zip(questions, hits, strict=True):
        ev = {(d, p) for d, p in q["evidence"]}
        docs = {d for d, _ in ev}
        got = {
            "doc@10": any(_rel(h.uri) in docs for h in hs),
            "page@10": any((_rel(h.uri), h.page) in ev for h in hs),
            "range@10": any(
                (_rel(h.uri), p) in ev for h in hs for p in range(h.page, max(h.page, h.page_end) + 1)
            ),
            "near@10": any((_rel(h.uri), p) in ev for h in hs for p in (h.page - 1, h.page, h.page + 1)),
        }
        for bucket in (q["class"], "all"):
            sums.setdefault(bucket, Counter())["n"] += 1
            sums[bucket].update({m: int(v) for m, v in got.items()})
    metrics = ("doc@10", "page@10", "range@10", "near@10")
    return {b: {m: round(c[m] / c["n"], 3) for m in metrics} | {"n": c["n"]} for b, c in sorted(sums.items())}


def bm25_perfect(corpus: Path, questions: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """BM25 (tantivy) over every indexed page's raw text: each question's top 10 pages as hits."""
    import tantivy

    from ragsync.index.tantivy import _user_query_text

    spec = json.loads((HERE / "docs.json").read_text())
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("doc", stored=True, tokenizer_name="raw")
    builder.add_integer_field("page", stored=True)
    builder.add_text_field("text", tokenizer_name="en_stem")
    index = tantivy.Index(builder.build())
    writer = index.writer()
    for rel in [*spec["documents"], *spec["distractors"]]:
        for i, text in enumerate(page_texts(corpus / "documents" / rel)):
            writer.add_document(tantivy.Document(doc=rel, page=i + 1, text=text))
    writer.commit()
    index.reload()
    searcher = index.searcher()

    class Hit:
        def __init__(self, doc: str, page: int) -> None:
            self.uri, self.page, self.page_end = "/docs/" + doc, page, page

    hits = []
    for q in questions:
        parsed, _ = index.parse_query_lenient(_user_query_text(q["query"]), ["text"])
        found = searcher.search(parsed, K).hits
        hits.append([Hit(searcher.doc(a)["doc"][0], searcher.doc(a)["page"][0]) for _, a in found])
    return hits


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--build", action="store_true", help="rebuild the question files from the corpus")
    parser.add_argument("--split", choices=("report", "tune", "all"), default="all")
    parser.add_argument("--keep", type=Path, help="keep the homes here (reused when present)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not (args.corpus / "documents").is_dir():
        print(f"no corpus at {args.corpus} (pass --corpus)", file=sys.stderr)
        return 2
    if args.build:
        questions = build(args.corpus)
        for name in ("tune", "report"):
            lines = [json.dumps(q, ensure_ascii=False) for q in questions if q["split"] == name]
            (HERE / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        print(f"built {len(questions)} questions", file=sys.stderr)
    questions = load(args.split)
    root = args.keep or Path(tempfile.mkdtemp(prefix="eval-pages-"))
    out: dict[str, Any] = {"split": args.split, "questions": len(questions), "load_before": os.getloadavg()}
    homes = {"context": root / "context", "plain": root / "plain"}
    for name, home in homes.items():
        if not (home / "index").exists():
            out[f"backfill_{name}"] = backfill(args.corpus, home, context=name == "context")
    off = {"rerank": "off", "boilerplate_min_docs": 0}
    runs = {
        "fusion (before: no context, no reranker, no boilerplate)": ("plain", off),
        "+ contextual text": ("context", off),
        "+ contextual text + reranker (= all but boilerplate)": ("context", {**off, "rerank": "windows"}),
        "all stages (context, reranker, boilerplate)": ("context", {"rerank": "windows"}),
        "all but contextual text": ("plain", {"rerank": "windows"}),
        "all but reranker": ("context", {"rerank": "off"}),
    }
    splits_asked = ("tune", "report") if args.split == "all" else (args.split,)
    out["figures"] = {split: {} for split in splits_asked}

    def per_split(label: str, hits: Sequence[Sequence[Any]]) -> None:
        for split in splits_asked:
            picked = [(q, h) for q, h in zip(questions, hits, strict=True) if q["split"] == split]
            out["figures"][split][label] = score([q for q, _ in picked], [h for _, h in picked])

    for label, (home, overrides) in runs.items():
        per_split(label, ask(homes[home], questions, **overrides)[0])
    per_split("BM25 over each page's perfect text", bm25_perfect(args.corpus, questions))
    fused, reranked = [], []
    for _ in range(2):  # interleaved, same questions, same home: a ratio within one run
        fused += ask(homes["context"], questions, rerank="off")[1]
        reranked += ask(homes["context"], questions, rerank="windows")[1]
    out["latency_s"] = {
        "fusion": {"p50": round(statistics.median(fused), 3), "p95": round(_p(fused, 0.95), 3)},
        "fusion + reranker (50 candidates)": {
            "p50": round(statistics.median(reranked), 3),
            "p95": round(_p(reranked, 0.95), 3),
        },
        "p95 ratio": round(_p(reranked, 0.95) / _p(fused, 0.95), 2),
    }
    out["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{len(questions)} questions ({args.split}); load {out['load_before']} -> {out['load_after']}")
        for split, figures in out["figures"].items():
            print(split.upper())
            for label, per in figures.items():
                a = per["all"]
                print(f"  {label:60s} doc {a['doc@10']:.3f}  page {a['page@10']:.3f}  "
                      f"range {a['range@10']:.3f}  near {a['near@10']:.3f}  (n={a['n']})")  # fmt: skip
                for cls, f in per.items():
                    if cls != "all":
                        print(f"      {cls:12s} n={f['n']:3d} doc {f['doc@10']:.3f} page {f['page@10']:.3f}")
        print(f"  latency: {out['latency_s']}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
