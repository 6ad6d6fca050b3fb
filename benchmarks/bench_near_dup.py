"""Near-duplicate detection: ragsync's MinHash (datasketch) beside the hand-written one and rensa.

```
.venv/bin/python benchmarks/bench_near_dup.py            # Markdown table
.venv/bin/python benchmarks/bench_near_dup.py --json     # one JSON object
.venv/bin/python benchmarks/bench_near_dup.py --repeat 5 --corpus ../shared/corpus
```

Needs ``../shared/corpus`` (exits with a message otherwise). Texts: the 18F
handbook wiki pages, docling's Markdown ground truth, the CISI abstracts and the
GitHub issue records (title and body) of the shared corpus, plus drafts made
from every 8th text of at least 60 words (``v2``: 3 % of the words replaced;
``copy``: a sentence appended), so the set holds both natural and known
near-duplicates.

Each implementation turns a text into a 64-value MinHash of the same 5-word
shingles (``ragsync.ingest.near_dup.shingles``); the same banding (16 bands of 4 rows,
``ragsync.ingest.near_dup.band_keys``) and the same grouping rule as
``Catalog.set_near_dup`` (``near_dup.choose_group``: join the most similar
earlier document at estimated Jaccard >= 0.8) then assign groups, so only the
MinHash differs:

* ``hand-written (before)``: the numpy/Python MinHash ragsync used until
  catalog revision 0007 (``tests/near_dup_legacy.py``: blake2b per shingle,
  64 universal hashes mod 2^61-1 in Python integers);
* ``ragsync (datasketch)``: ``ragsync.ingest.near_dup.signature_of_shingles``
  (``datasketch.MinHash(num_perm=64, seed=1, scheme="affine64").update_batch``);
* ``rensa``: ``rensa.RMinHash(num_perm=64).update`` (Rust), when installed.

Reported per implementation: seconds to sign every text (best of ``--repeat``
rounds, shingling included, the same for all), the ratio to the hand-written
one's, the non-singleton groups and linked pairs, how many links have an exact
shingle Jaccard >= 0.8 (precision) and >= 0.7, recall of the known drafts whose
exact Jaccard is >= 0.8, agreement of the co-grouped pairs with the
hand-written one's (Jaccard of the two pair sets: how much the switch changed
the groups), the exact Jaccard (median) of the pairs only one of the two
groups, and the slowest single document. Timing runs on a
shared machine: read ratios, not absolute seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragsync.ingest import near_dup  # noqa: E402
from tests.near_dup_legacy import legacy_signature_of_shingles  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
NUM_PERM = near_dup.NUM_PERM
Signer = Callable[[set[str]], np.ndarray]


# --------------------------------------------------------------------------- texts


def _cisi(path: Path) -> list[str]:
    docs, current, in_text = [], [], False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(".I "):
            if current:
                docs.append(" ".join(current))
            current, in_text = [], False
        elif line.startswith("."):
            in_text = line.startswith((".W", ".T"))
        elif in_text:
            current.append(line.strip())
    if current:
        docs.append(" ".join(current))
    return docs


def load_texts(corpus: Path) -> list[tuple[str, str]]:
    """(name, text) of the corpus's text sources, in a fixed order."""
    out: list[tuple[str, str]] = []
    for path in sorted((corpus / "documents" / "wiki-18f-handbook").rglob("*.md")):
        out.append((f"wiki/{path.name}", path.read_text(encoding="utf-8", errors="replace")))
    for path in sorted((corpus / "parse_groundtruth" / "docling").rglob("*.md")):
        out.append((f"docling/{path.name}", path.read_text(encoding="utf-8", errors="replace")))
    for i, text in enumerate(_cisi(corpus / "retrieval_golden" / "cisi" / "CISI.ALL")):
        out.append((f"cisi/{i + 1}", text))
    issues = corpus / "documents" / "tickets-github-issues-hf-datasets" / "datasets-issues.first400.jsonl"
    for line in issues.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        out.append(
            (f"issue/{record['number']}", f"{record.get('title') or ''}\n\n{record.get('body') or ''}")
        )
    return [(name, text) for name, text in out if text.strip()]


def make_drafts(texts: list[tuple[str, str]], every: int = 8, seed: int = 7) -> list[tuple[str, str, str]]:
    """(name, text, original name): a ``v2`` and a ``copy`` draft of every k-th long text."""
    rng = random.Random(seed)
    vocabulary = [w for _, t in texts[:200] for w in t.split()[:50]]
    drafts = []
    for name, text in texts[::every]:
        words = text.split()
        if len(words) < 60:
            continue
        v2 = list(words)
        for i in rng.sample(range(len(v2)), max(1, len(v2) * 3 // 100)):
            v2[i] = rng.choice(vocabulary)
        drafts.append((f"{name}#v2", " ".join(v2), name))
        drafts.append((f"{name}#copy", text + "\n\nThis copy was saved for review before the meeting.", name))
    return drafts


# -------------------------------------------------------------------- signatures


BEFORE = "hand-written (before)"
PRODUCT = "ragsync (datasketch)"


def _rensa_sign(shingles: set[str]) -> np.ndarray:
    from rensa import RMinHash

    m = RMinHash(num_perm=NUM_PERM, seed=42)
    m.update(list(shingles))
    return np.asarray(m.digest(), dtype=np.uint64)


def signers() -> dict[str, Signer | None]:
    """Each implementation's signer, None when its package is not installed."""
    out: dict[str, Signer | None] = {
        BEFORE: legacy_signature_of_shingles,
        PRODUCT: near_dup.signature_of_shingles,
    }
    try:
        importlib.import_module("rensa")
    except ImportError:
        out["rensa"] = None
    else:
        out["rensa"] = _rensa_sign
    return out


# ---------------------------------------------------------------------- grouping


def assign_groups(
    names: Sequence[str], sigs: Sequence[np.ndarray]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``Catalog.set_near_dup``'s rule in memory: each document, in order, joins
    the group of its most similar earlier band-sharing document at >= THRESHOLD.

    Returns:
        ({name: group}, [(name, the earlier document it joined)]).
    """
    buckets: dict[str, list[int]] = {}
    group: dict[str, str] = {}
    links: list[tuple[str, str]] = []
    for i, (name, sig) in enumerate(zip(names, sigs, strict=True)):
        keys = near_dup.band_keys(sig)
        ordered = sorted({j for k in keys for j in buckets.get(k, [])})
        group[name] = near_dup.choose_group(name, sig, [(sigs[j], group[names[j]]) for j in ordered])
        if group[name] != name:
            # The document it joined: the first most similar one of that group.
            members = [j for j in ordered if group[names[j]] == group[name]]
            links.append((name, names[max(members, key=lambda j: near_dup.similarity(sig, sigs[j]))]))
        for k in keys:
            buckets.setdefault(k, []).append(i)
    return group, links


def grouped_pairs(group: dict[str, str]) -> set[tuple[str, str]]:
    members: dict[str, list[str]] = {}
    for name, g in group.items():
        members.setdefault(g, []).append(name)
    return {tuple(sorted(p)) for m in members.values() for p in combinations(sorted(m), 2)}  # type: ignore[misc]


def exact_jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


# ------------------------------------------------------------------------- run


def run(corpus: Path, repeat: int) -> dict[str, Any]:
    texts = load_texts(corpus)
    drafts = make_drafts(texts)
    names = [n for n, _ in texts] + [n for n, _, _ in drafts]
    bodies = [t for _, t in texts] + [t for _, t, _ in drafts]
    t0 = time.perf_counter()
    shingle_sets = [near_dup.shingles(t) for t in bodies]
    shingle_s = time.perf_counter() - t0
    by_name = dict(zip(names, shingle_sets, strict=True))
    known = [(d, o) for d, _, o in drafts if exact_jaccard(by_name[d], by_name[o]) >= near_dup.THRESHOLD]

    results: dict[str, Any] = {}
    reference: set[tuple[str, str]] | None = None
    for label, signer in signers().items():
        if signer is None:
            results[label] = {"available": False}
            continue
        best, slowest = float("inf"), 0.0
        sigs: list[np.ndarray] = []
        for _ in range(repeat):
            sigs, times = [], []
            for shingles in shingle_sets:
                start = time.perf_counter()
                sigs.append(signer(shingles))
                times.append(time.perf_counter() - start)
            if sum(times) < best:
                best, slowest = sum(times), max(times)
        group, links = assign_groups(names, sigs)
        pairs = grouped_pairs(group)
        if reference is None:
            reference = pairs
        link_j = [exact_jaccard(by_name[a], by_name[b]) for a, b in links]
        only_here = [exact_jaccard(by_name[a], by_name[b]) for a, b in pairs - reference]
        only_ref = [exact_jaccard(by_name[a], by_name[b]) for a, b in reference - pairs]
        found = sum(1 for d, o in known if group[d] == group[o])
        results[label] = {
            "available": True,
            "sign_s": round(best, 3),
            "docs_per_s": round(len(names) / best, 1),
            "groups": len({g for n, g in group.items() if g != n}),
            "linked_docs": len(links),
            "pairs": len(pairs),
            "links_exact_ge_0_8": sum(1 for j in link_j if j >= 0.8),
            "links_exact_ge_0_7": sum(1 for j in link_j if j >= 0.7),
            "known_drafts_found": found,
            "pair_agreement_with_before": round(len(pairs & reference) / max(1, len(pairs | reference)), 4),
            "pairs_only_here": len(pairs - reference),
            "pairs_only_in_before": len(reference - pairs),
            "only_here_median_j": round(float(np.median(only_here)), 3) if only_here else None,
            "only_before_median_j": round(float(np.median(only_ref)), 3) if only_ref else None,
            "slowest_doc_ms": round(slowest * 1000, 1),
        }
    base = results[BEFORE]["sign_s"]
    for r in results.values():
        if r.get("available"):
            r["time_vs_before"] = round(r["sign_s"] / base, 3)
    return {
        "texts": len(texts),
        "drafts": len(drafts),
        "known_drafts_at_0_8": len(known),
        "shingling_s": round(shingle_s, 3),
        "repeat": repeat,
        "results": results,
    }


def _table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['texts']} corpus texts + {report['drafts']} drafts "
        f"({report['known_drafts_at_0_8']} drafts at exact Jaccard >= 0.8); "
        f"shingling {report['shingling_s']}s",
        "",
        "| implementation | sign s | vs before | docs/s | linked docs | pairs | links J>=0.8 | links J>=0.7 "
        "| known drafts found | pair agreement | only here (median J) | only before (median J) "
        "| slowest doc ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in report["results"].items():
        if not r.get("available"):
            lines.append(f"| {label} | not installed | | | | | | | | | | | |")
            continue
        lines.append(
            f"| {label} | {r['sign_s']} | {r['time_vs_before']} | {r['docs_per_s']} | {r['linked_docs']} "
            f"| {r['pairs']} | {r['links_exact_ge_0_8']} | {r['links_exact_ge_0_7']} "
            f"| {r['known_drafts_found']} "
            f"| {r['pair_agreement_with_before']} | {r['pairs_only_here']} ({r['only_here_median_j']}) "
            f"| {r['pairs_only_in_before']} ({r['only_before_median_j']}) | {r['slowest_doc_ms']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="timing rounds (best is kept)")
    parser.add_argument("--corpus", default=str(CORPUS), help="the shared corpus (../shared/corpus)")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        print(f"bench_near_dup: the shared corpus is not at {corpus} (give --corpus)", file=sys.stderr)
        return 2
    report = run(corpus, max(1, args.repeat))
    print(json.dumps(report, indent=1) if args.json else _table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
