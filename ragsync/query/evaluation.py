"""Golden-set retrieval evaluation: Recall@10 per document format, per index version.

Golden file (JSON lines, one query per line)::

    {"query": "hotel limit in London", "relevant": ["policies/handbook.md"], "format": "md"}

* ``query``: the user's text.
* ``relevant``: the documents that answer it, each a ``source_object_id``
  (the path relative to the backfilled folder or prefix), a full document
  ``uri``, or a ``doc_id``.
* ``format`` (optional): the bucket the query is reported in (``pdf``,
  ``html``, ``docx``, ...); default: the file extension of the first
  relevant id, else ``all``.
* ``tenant`` (optional, default ``default``) and ``groups`` (optional,
  default the caller's, ``["everyone"]``): whose permissions the query runs
  with.

Recall@k of a query = |relevant documents among the first k distinct
documents retrieved| / |relevant documents|; a format's figure is the mean
over its queries. Chunks are retrieved 50 deep and collapsed to documents in
rank order.

Two modes are computed against one version's *physical* stores with that
version's own model encoding the queries:

* ``vector``: vector search only. A re-embedding changes only the vectors
  (the keyword index is rebuilt from the same chunks), so this is the
  figure that shows a model regression; hybrid fusion would let BM25 hide it.
* ``hybrid``: vector + BM25 fused with reciprocal rank fusion, the same
  fusion as ``ragsync query`` (:func:`ragsync.query.search.reciprocal_rank_fusion`):
  what users get.

The re-embedding gate (:func:`compare`) requires both. Evaluating a version
directly, instead of through the aliases, is what lets the gate score a
candidate before anything points at it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import get_model
from ragsync.errors import ConfigurationError
from ragsync.index.versions import (
    IndexVersion,
    live_version,
    open_version_keyword,
    open_version_vector,
    settings_for_version,
)
from ragsync.query.search import reciprocal_rank_fusion

K = 10
DEPTH = 50
MODES = ("vector", "hybrid")


@dataclass(frozen=True)
class GoldenQuery:
    """One line of a golden file (see the module docstring)."""

    query: str
    relevant: tuple[str, ...]
    format: str = "all"
    tenant: str = "default"
    groups: tuple[str, ...] | None = None


def _default_format(relevant: Sequence[str]) -> str:
    if relevant:
        ext = os.path.splitext(relevant[0])[1].lstrip(".").lower()
        if ext:
            return ext
    return "all"


def load_golden(path: str) -> list[GoldenQuery]:
    """Read a golden JSONL file (blank lines and ``#`` lines are skipped).

    Raises:
        ConfigurationError: a line is not JSON, lacks ``query`` or has an
            empty ``relevant`` list.
        FileNotFoundError: no such file.
    """
    out: list[GoldenQuery] = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ConfigurationError(f"{path}:{n}: not JSON: {exc}") from exc
            relevant = tuple(str(r) for r in obj.get("relevant") or ())
            if not obj.get("query") or not relevant:
                raise ConfigurationError(f"{path}:{n}: needs a 'query' and a non-empty 'relevant' list")
            groups = obj.get("groups")
            out.append(
                GoldenQuery(
                    query=str(obj["query"]),
                    relevant=relevant,
                    format=str(obj.get("format") or _default_format(relevant)),
                    tenant=str(obj.get("tenant") or "default"),
                    groups=tuple(groups) if groups else None,
                )
            )
    return out


@dataclass
class EvalReport:
    """Recall@k of one version on one golden set.

    Attributes:
        version, model_name: what was evaluated.
        k: the cutoff.
        recall: ``{mode: {format: mean recall}}``, plus format ``all``.
        queries: ``{format: number of queries}``.
        missed: ``{mode: [query text]}``: the queries whose recall is below
            1 in that mode, in golden-file order (to look at what was lost).
    """

    version: int
    model_name: str
    k: int
    recall: dict[str, dict[str, float]] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)
    missed: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _matches(relevant: str, doc: Any) -> bool:
    uri = doc.uri or ""
    return relevant in (doc.doc_id, doc.source_object_id, uri) or uri.endswith("/" + relevant.lstrip("/"))


def _top_documents(ranking: list[str], chunk_doc: dict[str, str], k: int) -> list[str]:
    """The first ``k`` distinct documents of a ranking of chunk ids
    (``chunk_doc``: each known chunk's document; unknown chunks skipped)."""
    top: list[str] = []
    for cid in ranking:
        doc_id = chunk_doc.get(cid)
        if doc_id is not None and doc_id not in top:
            top.append(doc_id)
        if len(top) >= k:
            break
    return top


def evaluate(
    settings: Settings,
    golden: Sequence[GoldenQuery],
    *,
    version: IndexVersion | None = None,
    k: int = K,
    groups: Sequence[str] = ("everyone",),
) -> EvalReport:
    """Recall@k per format and mode of ``version`` (default: the live one).

    Args:
        settings: where the stores live.
        golden: the queries.
        version: the index version to score (any state but ``dropped``).
        k: documents counted per query.
        groups: groups the queries run as, unless a query names its own.

    Returns:
        The report (empty figures for an empty golden set).

    Raises:
        ConfigurationError: the version's model is not registered, or its
            stores are missing.
    """
    version = version or live_version(settings)
    model = get_model(version.model_name, settings_for_version(settings, version))
    if model.dim != version.dim:
        raise ConfigurationError(
            f"model {model.name} has dim {model.dim}, version {version.version} {version.dim}"
        )
    report = EvalReport(version=version.version, model_name=version.model_name, k=k)
    if not golden:
        return report
    vectors_q = model.encode_queries([g.query for g in golden])
    catalog = open_catalog(settings)
    vec = open_version_vector(settings, version)
    kw = open_version_keyword(settings, version)
    sums: dict[str, dict[str, float]] = {m: {} for m in MODES}
    docs: dict[str, Any] = {}
    chunk_doc: dict[str, str] = {}
    try:
        acl_cache: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for g, qv in zip(golden, vectors_q, strict=True):
            key = (g.tenant, tuple(g.groups or groups))
            if key not in acl_cache:
                acl_cache[key] = catalog.acls.acl_ids_for_groups(g.tenant, list(key[1]))
            acl_ids = acl_cache[key]
            vhits = [h.chunk_id for h in vec.search(g.tenant, [float(x) for x in qv], acl_ids, DEPTH)]
            khits = [h.chunk_id for h in kw.search(g.tenant, g.query, acl_ids, DEPTH)]
            rankings = {"vector": vhits, "hybrid": [cid for cid, _ in reciprocal_rank_fusion([vhits, khits])]}
            missing = [c for ids in rankings.values() for c in ids if c not in chunk_doc]
            for cid, chunk in catalog.chunks.chunks_by_ids(missing).items():
                chunk_doc[cid] = chunk.doc_id
            report.queries[g.format] = report.queries.get(g.format, 0) + 1
            for mode, ranking in rankings.items():
                top = _top_documents(ranking, chunk_doc, k)
                for doc_id in top:
                    if doc_id not in docs:
                        docs[doc_id] = catalog.documents.get_document(doc_id)
                found = sum(
                    1 for r in g.relevant if any(docs[d] is not None and _matches(r, docs[d]) for d in top)
                )
                score = found / len(g.relevant)
                if score < 1:
                    report.missed.setdefault(mode, []).append(g.query)
                sums[mode][g.format] = sums[mode].get(g.format, 0.0) + score
                sums[mode]["all"] = sums[mode].get("all", 0.0) + score
    finally:
        kw.close()
        vec.close()
        catalog.close()
    total = len(golden)
    for mode in MODES:
        report.recall[mode] = {
            fmt: round(s / (total if fmt == "all" else report.queries[fmt]), 4)
            for fmt, s in sums[mode].items()
        }
    return report


def compare(live: EvalReport, candidate: EvalReport, tolerance: float) -> tuple[bool, list[str]]:
    """The golden-set half of the re-embedding gate.

    Passes when, for every mode and every format of the live report,
    ``candidate >= live - tolerance``.

    Returns:
        ``(passed, reasons)``; reasons name each format and mode that dropped.
    """
    reasons: list[str] = []
    for mode, per_format in live.recall.items():
        for fmt, before in sorted(per_format.items()):
            after = candidate.recall.get(mode, {}).get(fmt, 0.0)
            if after < before - tolerance:
                reasons.append(f"{mode} Recall@{live.k} on {fmt}: {after:.3f} < {before:.3f} - {tolerance}")
    return (not reasons, reasons)


def format_report(report: EvalReport) -> str:
    """Human table: one line per format, one column per mode."""
    lines = [f"index v{report.version} ({report.model_name}) Recall@{report.k}"]
    lines.append(f"  {'format':10s} {'queries':>7s} " + " ".join(f"{m:>7s}" for m in MODES))
    formats = sorted(report.queries) + ["all"]
    for fmt in formats:
        n = sum(report.queries.values()) if fmt == "all" else report.queries[fmt]
        cells = " ".join(f"{report.recall.get(m, {}).get(fmt, 0.0):7.3f}" for m in MODES)
        lines.append(f"  {fmt:10s} {n:7d} {cells}")
    return "\n".join(lines)
