"""After fusion: a source's boilerplate ranked below unique text, then the reranker.

``hybrid_query`` fuses the stores' hits and checks them against the catalog;
this module orders what passed:

1. **Boilerplate** (``ragsync.ingest.boilerplate``): the paragraphs of each
   hit that a sizeable share of its source's documents hold (the catalog's
   counts, looked up per source for the hits at hand). A boilerplate
   paragraph is shown by the first hit that holds it only; the others show
   their own text (``source_text`` keeps the chunk whole), their score
   multiplied by the share of their text that is not that paragraph, and a
   hit with no text of its own left is dropped. So a disclaimer copied into
   every memo is shown once, and its copies rank below unique text.
2. **Reranking** (``ragsync.query.rerank``): the first :data:`RERANK_DEPTH`
   hits scored again by the reranker on the document's identity, the heading
   path and the hit's own text; the final score mixes the fused score and the
   reranker's (each scaled to 0-1 over the candidates) with the reranker's
   weight.

Pure ordering over results and catalog counts; the stores are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragsync.ingest.boilerplate import BoilerplateRule, boilerplate_of, boilerplate_share, text_paragraphs
from ragsync.ingest.chunking import MIN_BOILERPLATE_CHARS, paragraph_hash
from ragsync.query.results import QueryResult

if TYPE_CHECKING:
    from ragsync.query.rerank import Reranker

RERANK_DEPTH = 50
"""Hits scored by the reranker (the rest keep their fused order after them)."""


def source_boilerplate(
    catalog: Any, tenant_id: str, results: Sequence[QueryResult], rule: BoilerplateRule
) -> dict[str, frozenset[str]]:
    """The boilerplate paragraphs among the hits' texts, per source.

    Returns:
        ``{source_id: paragraph hashes}`` (sources with none left out).
    """
    if not rule.enabled:
        return {}
    by_source: dict[str, set[str]] = {}
    for r in results:
        by_source.setdefault(r.source_id, set()).update(h for h, _ in text_paragraphs(r.text))
    out: dict[str, frozenset[str]] = {}
    for source_id, hashes in sorted(by_source.items()):
        if not hashes:
            continue
        held = catalog.paragraphs.holders(tenant_id, source_id, sorted(hashes))
        if not held:
            continue
        total = catalog.paragraphs.source_documents(tenant_id, source_id)
        found = boilerplate_of(sorted(held), held, total, rule)
        if found:
            out[source_id] = found
    return out


def _own_text(text: str, hide: set[str]) -> str:
    """``text`` without its paragraphs whose hash is in ``hide``."""
    kept = []
    for para in text.split("\n\n"):
        body = para.strip()
        body = body[2:] if body.startswith("- ") else body
        if len(body) >= MIN_BOILERPLATE_CHARS and paragraph_hash(body) in hide:
            continue
        kept.append(para)
    return "\n\n".join(kept).strip()


def demote_boilerplate(
    results: Sequence[QueryResult], boilerplate: dict[str, frozenset[str]]
) -> list[QueryResult]:
    """Step 1 of the module docstring over fused, checked hits (best first).

    The first hit holding a boilerplate paragraph shows it and keeps its
    score; every later hit holding it shows its own text only and its score
    is multiplied by the share of its text that is not that boilerplate (what
    it matched with was already shown); one with no text of its own left is
    dropped.

    Returns:
        The hits re-ordered by their scores (ties keep their order).
    """
    if not boilerplate:
        return list(results)
    shown: set[tuple[str, str]] = set()
    out: list[tuple[float, int, QueryResult]] = []
    for i, r in enumerate(results):
        found = boilerplate.get(r.source_id, frozenset())
        share, _ = boilerplate_share(r.text, found)
        if not share:
            out.append((r.score, i, r))
            continue
        mine = {h for h, _ in text_paragraphs(r.text) if h in found}
        hide = {h for h in mine if (r.source_id, h) in shown}
        shown.update((r.source_id, h) for h in mine)
        if not hide:
            out.append((r.score, i, replace(r, boilerplate=round(share, 4))))
            continue
        text = _own_text(r.text, hide)
        if not text:
            continue
        hidden, _ = boilerplate_share(r.text, frozenset(hide))
        demoted = replace(
            r, score=r.score * (1.0 - hidden), text=text, boilerplate=round(share, 4), source_text=r.text
        )
        out.append((demoted.score, i, demoted))
    out.sort(key=lambda t: (-t[0], t[1]))
    return [r for _, _, r in out]


def _scaled(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]


def rerank(
    reranker: Reranker, query: str, results: Sequence[QueryResult], weight: float
) -> list[QueryResult]:
    """Step 2 of the module docstring.

    Args:
        reranker: scores (query, passage) pairs.
        query: the query text.
        results: the hits best first.
        weight: the reranker's share of the final score (0-1).

    Returns:
        The first :data:`RERANK_DEPTH` hits by their mixed score (ties keep
        their order), then the rest as they were.
    """
    head, tail = list(results[:RERANK_DEPTH]), list(results[RERANK_DEPTH:])
    if len(head) < 2 or weight <= 0:
        return list(results)
    passages = [(r.context, " > ".join(r.heading_path), r.text) for r in head]
    scores = reranker.scores(query, passages)
    fused = _scaled([r.score for r in head])
    mixed = [(1 - weight) * f + weight * s for f, s in zip(fused, _scaled(scores), strict=True)]
    order = sorted(range(len(head)), key=lambda i: (-mixed[i], i))
    return [replace(head[i], score=mixed[i], rerank_score=round(scores[i], 6)) for i in order] + tail
