"""Convert the CISI test collection into a folder of documents and a golden file.

    python benchmarks/cisi_to_golden.py ../shared/corpus/retrieval_golden/cisi OUT [--max-queries N]

Writes ``OUT/docs/cisi_0001.txt`` ... (title, then abstract; one file per
CISI document) and ``OUT/golden.jsonl``, one line per query that has
relevance judgments::

    {"query": "...", "relevant": ["cisi_0028.txt", ...], "format": "txt", "id": "1"}

``relevant`` holds ``source_object_id``s (paths relative to ``OUT/docs``),
so ``ragsync backfill OUT/docs`` followed by ``ragsync eval-retrieval
--golden OUT/golden.jsonl`` scores the collection. Queries without
judgments (36 of 112) are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence


def records(path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """CISI's ``.I id`` records as ``(id, {field letter: text})``."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    for block in re.split(r"^\.I\s+", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        fields: dict[str, str] = {}
        current = ""
        for line in body.splitlines():
            m = re.match(r"^\.([A-Z])\s*$", line)
            if m:
                current = m.group(1)
                fields.setdefault(current, "")
                continue
            if current:
                fields[current] += line.strip() + " "
        yield head.strip(), {k: " ".join(v.split()) for k, v in fields.items()}


def doc_name(doc_id: str) -> str:
    """File name of a CISI document id."""
    return f"cisi_{int(doc_id):04d}.txt"


def convert(cisi_dir: str, out: str, *, max_queries: int = 0) -> tuple[int, int]:
    """Write the documents and the golden file.

    Returns:
        (documents written, golden queries written).

    Raises:
        FileNotFoundError: CISI.ALL, CISI.QRY or CISI.REL is missing.
    """
    docs_dir = os.path.join(out, "docs")
    os.makedirs(docs_dir, exist_ok=True)
    n_docs = 0
    for doc_id, f in records(os.path.join(cisi_dir, "CISI.ALL")):
        title, abstract = f.get("T", ""), f.get("W", "")
        with open(os.path.join(docs_dir, doc_name(doc_id)), "w", encoding="utf-8") as fh:
            fh.write(f"{title}\n\n{abstract}\n")
        n_docs += 1
    relevant: dict[str, list[str]] = {}
    with open(os.path.join(cisi_dir, "CISI.REL"), encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 2:
                relevant.setdefault(str(int(parts[0])), []).append(doc_name(parts[1]))
    n_queries = 0
    with open(os.path.join(out, "golden.jsonl"), "w", encoding="utf-8") as fh:
        for qid, f in records(os.path.join(cisi_dir, "CISI.QRY")):
            rel = relevant.get(str(int(qid)))
            query = f.get("W") or f.get("T") or ""
            if not rel or not query:
                continue
            record = {"query": query, "relevant": sorted(set(rel)), "format": "txt", "id": qid}
            fh.write(json.dumps(record) + "\n")
            n_queries += 1
            if max_queries and n_queries >= max_queries:
                break
    return n_docs, n_queries


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cisi_dir", help="folder holding CISI.ALL, CISI.QRY, CISI.REL")
    parser.add_argument("out", help="output folder (docs/ and golden.jsonl)")
    parser.add_argument("--max-queries", type=int, default=0, help="keep only the first N judged queries")
    args = parser.parse_args(argv)
    docs, queries = convert(args.cisi_dir, args.out, max_queries=args.max_queries)
    print(f"wrote {docs} documents to {args.out}/docs and {queries} queries to {args.out}/golden.jsonl")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
