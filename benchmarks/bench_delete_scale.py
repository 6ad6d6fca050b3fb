"""Per-document delete cost as the index grows: 10k, 100k and 1M chunks.

One tenant's Milvus Lite collection and tantivy index are filled with
synthetic chunks (random unit vectors, 4 chunks per document) and grown step
by step to each size. At each size ``--deletes`` documents are deleted the way
``transforms.delete.delete_document`` does it on the stores: delete the
document's chunk ids, then verify with ``count_doc(tenant, doc)`` (a filter on
the doc id). The old verification, ``count_by_doc(tenant)`` (every row of the
tenant), is timed beside it up to ``--old-max`` chunks.

ratio = median delete at the largest size / median delete at the smallest
(target <= 1.5: flat). Figures are wall-clock on a shared machine: the load
average before and after is printed with them.

Usage: ``python benchmarks/bench_delete_scale.py [--sizes 10000,100000,1000000]
[--deletes 20] [--old-max 100000] [--dim 32] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragsync.index.milvus_vectors import MilvusVectorIndex  # noqa: E402
from ragsync.index.tantivy import TantivyKeywordIndex  # noqa: E402
from ragsync.model import Chunk  # noqa: E402

TENANT = "t1"
PER_DOC = 4
BATCH = 5000


def chunks_of(first_doc: int, docs: int) -> list[Chunk]:
    """Synthetic chunks of documents ``first_doc .. first_doc + docs - 1``."""
    out = []
    for d in range(first_doc, first_doc + docs):
        for n in range(PER_DOC):
            out.append(
                Chunk(
                    chunk_id=f"c{d:08d}{n:02d}",
                    doc_id=f"d{d:08d}",
                    tenant_id=TENANT,
                    text_hash=f"{d:064x}",
                    ordinal=n,
                    heading_path=(),
                    page=1,
                    token_count=5,
                    text=f"synthetic document {d} part {n}",
                    acl_ids=("acl-a",),
                )
            )
    return out


def grow(vec: MilvusVectorIndex, kw: TantivyKeywordIndex, have_docs: int, want_docs: int, dim: int) -> None:
    """Insert documents ``have_docs .. want_docs - 1`` in batches."""
    rng = np.random.default_rng(have_docs)
    step = BATCH // PER_DOC
    for start in range(have_docs, want_docs, step):
        chunks = chunks_of(start, min(step, want_docs - start))
        vectors = rng.normal(size=(len(chunks), dim))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vec.upsert(chunks, vectors.tolist())
        kw.upsert(chunks)


def time_deletes(store: Any, docs: list[int], *, old: bool) -> list[float]:
    """Seconds per document: delete its chunk ids, then verify none is left."""
    times = []
    for d in docs:
        chunk_ids = [c.chunk_id for c in chunks_of(d, 1)]
        doc_id = f"d{d:08d}"
        t0 = time.perf_counter()
        store.delete(TENANT, chunk_ids)
        left = store.count_by_doc(TENANT).get(doc_id, 0) if old else store.count_ids(TENANT, chunk_ids)
        times.append(time.perf_counter() - t0)
        if left:
            raise SystemExit(f"{doc_id}: {left} chunks left after delete")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="chunk counts, ascending")
    parser.add_argument("--deletes", type=int, default=20, help="documents deleted per size and method")
    parser.add_argument("--old-max", type=int, default=100_000, help="largest size timing count_by_doc")
    parser.add_argument("--dim", type=int, default=32, help="vector dimension")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        vec = MilvusVectorIndex(str(Path(tmp) / "milvus.db"), "chunks", args.dim, create=True)
        kw = TantivyKeywordIndex(str(Path(tmp) / "kw"), create=True)
        docs = 0
        for size in sizes:
            t0 = time.perf_counter()
            grow(vec, kw, docs, size // PER_DOC, args.dim)
            fill_s = time.perf_counter() - t0
            docs = size // PER_DOC
            row: dict[str, Any] = {"chunks": size, "fill_s": round(fill_s, 1)}
            # Documents spread over the whole collection (shifted by one per
            # size, so a document of an earlier size is not picked again).
            stride = max(1, docs // (3 * args.deletes + 1))
            picks = [(i + 1) * stride + len(rows) for i in range(3 * args.deletes)]
            new_vec, new_kw, old_vec = (
                picks[: args.deletes],
                picks[args.deletes : 2 * args.deletes],
                picks[2 * args.deletes :],
            )
            row["milvus_by_doc_ms"] = round(
                1000 * statistics.median(time_deletes(vec, new_vec, old=False)), 2
            )
            row["tantivy_by_doc_ms"] = round(1000 * statistics.median(time_deletes(kw, new_kw, old=False)), 2)
            if size <= args.old_max:
                old = time_deletes(vec, old_vec[: max(3, args.deletes // 4)], old=True)
                row["milvus_full_tenant_ms"] = round(1000 * statistics.median(old), 1)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        vec.close()
        kw.close()
    load_after = os.getloadavg()
    first, last = rows[0], rows[-1]
    result = {
        "rows": rows,
        "ratio_milvus": round(last["milvus_by_doc_ms"] / first["milvus_by_doc_ms"], 2),
        "ratio_tantivy": round(last["tantivy_by_doc_ms"] / first["tantivy_by_doc_ms"], 2),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        "| chunks | Milvus Lite delete, by id (ms) | tantivy delete, by id (ms) "
        "| Milvus Lite, old full-tenant count (ms) |"
    )
    print("|---|---|---|---|")
    for row in rows:
        old_ms = row.get("milvus_full_tenant_ms", "-")
        print(f"| {row['chunks']:,} | {row['milvus_by_doc_ms']} | {row['tantivy_by_doc_ms']} | {old_ms} |")
    print(
        f"ratio {last['chunks']:,} / {first['chunks']:,}: Milvus {result['ratio_milvus']}, tantivy "
        f"{result['ratio_tantivy']}; load {result['load_before']} -> {result['load_after']}"
    )


if __name__ == "__main__":
    main()
