"""The operator's query: hybrid (vector + BM25) search, permission-filtered.

Permissions are checked twice: the stores filter by the ACL ids the user's
groups resolve to (and exclude every chunk carrying an ACL that denies one
of the groups: a deny entry wins over any allow), and every hit is checked
again against the catalog's chunk row before it is shown, so a store that
missed an ACL update cannot leak a chunk.

Results are deterministic: each store's hits are ordered by score then chunk
id before fusion (stores return tied scores in no fixed order), and fused
ties are broken by chunk id, so identical inputs give identical rankings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ragsync.catalog.documents import LIVE_STATUSES
from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from ragsync.embedding import ModelSpec

RRF_K = 60


def page_link(uri: str) -> str:
    """Where a reader opens a hit: a MediaWiki page's rendered-content
    address (the Action API's ``api.php?action=parse&pageid=N``, what the
    connector fetches) becomes the page itself (``index.php?curid=N`` next to
    ``api.php``, which MediaWiki serves as the page under any article path);
    any other address is returned unchanged."""
    parts = urlsplit(uri)
    if not parts.path.endswith("/api.php"):
        return uri
    params = parse_qs(parts.query)
    if params.get("action") != ["parse"] or len(params.get("pageid", [])) != 1:
        return uri
    path = parts.path[: -len("api.php")] + "index.php"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode({"curid": params["pageid"][0]}), ""))


@dataclass(frozen=True)
class QueryResult:
    doc_id: str
    chunk_id: str
    uri: str
    heading_path: list[str]
    page: int
    score: float
    text: str
    parent_doc_id: str | None = None  # a child document's container (e-mail, archive)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(id) = sum 1 / (k + rank). Ties by id."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, cid in enumerate(ranking, start=1):
            scores[cid] = scores.get(cid, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def ranked_ids(hits: Sequence[Any]) -> list[str]:
    """A store's chunk ids best first, equal scores by chunk id (a store may
    return ties in any order, which would change their fused ranks)."""
    return [h.chunk_id for h in sorted(hits, key=lambda h: (-h.score, h.chunk_id))]


def embed_query(spec: ModelSpec, text: str) -> list[float]:
    """The query vector, by the same model (and query prefix) as the index."""
    from ragsync.embedding import model_for

    return [float(x) for x in model_for(spec).encode_queries([text])[0]]


def hybrid_query(
    settings: Settings,
    text: str,
    *,
    groups: Sequence[str],
    tenant_id: str = "default",
    k: int = 10,
    spec: ModelSpec | None = None,
) -> list[QueryResult]:
    """Top ``k`` chunks for ``text`` that a member of ``groups`` may read.

    Returns [] when the groups grant nothing (fail closed).
    """
    if k <= 0:
        raise ValueError("k must be positive")
    if spec is None:
        from ragsync.index_versions import live_spec

        spec = live_spec(settings)
    catalog = open_catalog(settings)
    try:
        acl_ids = catalog.acl_ids_for_groups(tenant_id, list(groups))
        if not acl_ids:
            return []
        denied = catalog.acl_ids_denying(tenant_id, list(groups))
        vectors = open_vector_index(settings, spec.dim)
        keywords = open_keyword_index(settings)
        try:
            depth = max(k * 4, 20)
            vhits = vectors.search(tenant_id, embed_query(spec, text), acl_ids, depth, deny_acl_ids=denied)
            khits = keywords.search(tenant_id, text, acl_ids, depth, deny_acl_ids=denied)
        finally:
            keywords.close()
            vectors.close()
        fused = reciprocal_rank_fusion([ranked_ids(vhits), ranked_ids(khits)])
        rows = catalog.chunks_by_ids([cid for cid, _ in fused])
        allowed, refused = set(acl_ids), set(denied)
        # Near duplicates (drafts of one file): only the newest of a group.
        newest = catalog.newest_of_groups(sorted({c.doc_id for c in rows.values()}), acl_ids)
        docs: dict[str, Any] = {}
        results: list[QueryResult] = []
        for cid, score in fused:
            chunk = rows.get(cid)
            if chunk is None or chunk.tenant_id != tenant_id or not allowed.intersection(chunk.acl_ids):
                continue
            if refused.intersection(chunk.acl_ids):
                continue
            if newest.get(chunk.doc_id, chunk.doc_id) != chunk.doc_id:
                continue
            if chunk.doc_id not in docs:
                docs[chunk.doc_id] = _shown_copy(catalog, catalog.get_document(chunk.doc_id), allowed)
            doc = docs[chunk.doc_id]
            if doc is None:
                continue
            results.append(
                QueryResult(
                    doc_id=doc.doc_id,
                    chunk_id=cid,
                    uri=page_link(doc.uri),
                    heading_path=list(chunk.heading_path),
                    page=chunk.page,
                    score=round(score, 6),
                    text=chunk.text,
                    parent_doc_id=doc.parent_doc_id,
                )
            )
            if len(results) >= k:
                break
        return results
    finally:
        catalog.close()


def _shown_copy(catalog: Any, holder: Any, allowed: set[str]) -> Any:
    """The document a hit on ``holder``'s chunks is shown as: None when the
    holder has no live version; else, of the holder and its exact copies
    (``transforms.copies``), the smallest doc id the reader may read through
    its own permissions, so a reader never sees the path of a copy they may
    not read and the answer does not depend on which copy holds the chunks.
    None too when no live copy lets the reader in (chunks whose ACL ids lag
    behind a permission change: fail closed).
    """
    if holder is None or holder.status not in LIVE_STATUSES or holder.deleted_at:
        return None
    readable = [d for d in [holder, *catalog.duplicates_of(holder.doc_id)] if d.acl_id in allowed]
    return min(readable, key=lambda d: d.doc_id) if readable else None
