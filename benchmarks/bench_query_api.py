"""Latency of ``POST /v1/query`` against the raw stores, at 10k and 100k chunks.

A home is built with ``tests.query_home`` (one chunk per document, written
straight into the catalog, Milvus Lite and tantivy) with precomputed random
unit vectors (embedding 100k texts is too slow here); texts are a few words
of a small vocabulary so every query hits. Documents are spread over two
sources, two formats and two years, all readable by group ``staff``.

At each size, per query (``--queries`` of them, same texts for every row):

* ``api``: ``POST /v1/query`` through the ASGI app in process (FastAPI's
  ``TestClient``: auth, validation, ``hybrid_query`` with its catalog ACL
  resolution, the query embedding, both store searches, fusion, catalog
  checks of every hit, highlights, JSON);
* ``api+filter``: the same with ``filters.source_ids`` = one of the two
  sources (post-filtered with over-fetch in ``hybrid_query``);
* ``raw``: the stores alone: Milvus Lite vector search + tantivy BM25 with
  the same tenant, ACL ids and depth as the API's first round
  (``max(4k, 20)``), the query vector precomputed, no catalog. The stores hold
  no source/format/date, so the raw side of a filtered query is the same call;
* ``embed``: the query embedding alone (part of ``api``, not of ``raw``).

ratio = api p50 / raw p50. Figures are wall-clock on a shared machine: the
load average before and after is printed with them.

Usage: ``python benchmarks/bench_query_api.py [--sizes 10000,100000]
[--queries 50] [--k 10] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.query_home import Doc, QueryHome  # noqa: E402

TENANT = "bench"
WORDS = (
    "hotel",
    "night",
    "travel",
    "budget",
    "invoice",
    "receipt",
    "meeting",
    "policy",
    "contract",
    "vendor",
    "report",
    "quarter",
    "expense",
    "approval",
    "flight",
    "train",
    "taxi",
    "meal",
    "limit",
    "refund",
)
SOURCES = ("wiki", "files")
FORMATS = ("text/html", "application/pdf")
YEARS = (1_700_000_000.0, 1_740_000_000.0)


def docs_of(n: int, seed: int = 7) -> list[Doc]:
    """``n`` one-chunk documents of 6..12 vocabulary words each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12)))
        source, mime, mtime = SOURCES[i % 2], FORMATS[i % 2], YEARS[(i // 2) % 2]
        out.append(Doc(TENANT, source, f"doc-{i:07d}", text, ("staff",), mime=mime, mtime=mtime))
    return out


def unit_vectors(n: int, dim: int, seed: int = 11) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.tolist()  # type: ignore[no-any-return]


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p95/p99 in milliseconds (nearest rank)."""
    s = sorted(samples)

    def at(p: float) -> float:
        return round(1000 * s[min(len(s) - 1, int(round(p * (len(s) - 1))))], 2)

    return {"p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99), "n": len(s)}


def timed(calls: list[Callable[[], Any]]) -> list[float]:
    out = []
    for call in calls:
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def run_size(size: int, queries: int, k: int, workdir: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from control_plane.app import create_app
    from ragsync.config import open_catalog
    from ragsync.index.backends import open_keyword_index, open_vector_index
    from ragsync.index.versions import live_spec
    from ragsync.query.search import embed_query

    home = QueryHome(workdir / f"home-{size}")
    spec = live_spec(home.settings)
    t0 = time.perf_counter()
    home.write(docs_of(size), unit_vectors(size, spec.dim), batch=5000)
    build_s = time.perf_counter() - t0

    rng = random.Random(3)
    texts = [" ".join(rng.sample(WORDS, 3)) for _ in range(queries)]
    app = create_app(home.settings.catalog_url, settings=home.settings, allow_caller_groups=True)
    _, key = app.state.keys.create_tenant(TENANT)
    client = TestClient(app, headers={"X-API-Key": key})

    def post(text: str, filters: dict[str, Any] | None) -> Callable[[], Any]:
        body: dict[str, Any] = {"text": text, "groups": ["staff"], "k": k}
        if filters:
            body["filters"] = filters

        def call() -> None:
            r = client.post("/v1/query", json=body)
            assert r.status_code == 200 and len(r.json()["hits"]) == k, r.text

        return call

    cat = open_catalog(home.settings)
    acl_ids = cat.acls.acl_ids_for_groups(TENANT, ["staff"])
    cat.close()
    vectors = {t: embed_query(spec, t) for t in texts}  # also warms the model
    vindex = open_vector_index(home.settings, spec.dim)
    kindex = open_keyword_index(home.settings)
    depth = max(4 * k, 20)

    def raw(text: str) -> Callable[[], Any]:
        def call() -> None:
            v = vindex.search(TENANT, vectors[text], acl_ids, depth)
            kw = kindex.search(TENANT, text, acl_ids, depth)
            assert len(v) == depth and len(kw) == depth

        return call

    for t in texts[:3]:  # warm-up: caches, first-call costs
        post(t, None)()
        raw(t)()
    rows = {
        "api": percentiles(timed([post(t, None) for t in texts])),
        "api+filter": percentiles(timed([post(t, {"source_ids": ["wiki"]}) for t in texts])),
        "raw": percentiles(timed([raw(t) for t in texts])),
        "embed": percentiles(timed([(lambda t=t: embed_query(spec, t)) for t in texts])),
    }
    kindex.close()
    vindex.close()
    client.close()
    app.state.catalog.close()
    return {
        "chunks": size,
        "build_s": round(build_s, 1),
        "rows": rows,
        "ratio_p50": round(rows["api"]["p50_ms"] / rows["raw"]["p50_ms"], 1),
        "ratio_filter_p50": round(rows["api+filter"]["p50_ms"] / rows["raw"]["p50_ms"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="chunk counts, comma-separated")
    ap.add_argument("--queries", type=int, default=50, help="timed queries per row")
    ap.add_argument("--k", type=int, default=10, help="hits per query")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-query-") as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            results.append(run_size(size, args.queries, args.k, Path(tmp)))
            if not args.json:
                r = results[-1]
                print(f"{size} chunks (built in {r['build_s']} s):")
                for name, p in r["rows"].items():
                    figures = f"p50 {p['p50_ms']:8.2f}  p95 {p['p95_ms']:8.2f}  p99 {p['p99_ms']:8.2f} ms"
                    print(f"  {name:11s} {figures}")
                print(f"  api/raw p50 {r['ratio_p50']}x, filtered {r['ratio_filter_p50']}x", flush=True)
    out = {
        "k": args.k,
        "queries": args.queries,
        "client": "fastapi.testclient.TestClient (ASGI in process)",
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"load {out['load_before']} -> {out['load_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
