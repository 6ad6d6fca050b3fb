"""The operator's query: hybrid (vector + BM25) search, permission-filtered.

Permissions are checked twice: the stores filter by the ACL ids the user's
groups resolve to (and exclude every chunk carrying an ACL that denies one
of the groups: a deny entry wins over any allow), and every hit is checked
again against the catalog's chunk row before it is shown, so a store that
missed an ACL update cannot leak a chunk.

A reader is caller groups (valid in every source) or a user named in the
query, whose groups are per source (``ragsync.query.identity.Reader``): the
stores filter by every ACL id the user's groups allow in some source, and
the catalog check then shows a document only when its ACL is allowed by the
groups the user holds in the document's own source (or the source its
``identities_from`` option names), over-fetching like a filter to fill ``k``.

Results are deterministic: each store's hits are ordered by score then chunk
id before fusion (stores return tied scores in no fixed order), and fused
ties are broken by chunk id, so identical inputs give identical rankings.

Only chunks of each document's live version are returned: a new version's
chunks are written to the stores and the catalog as *pending* and become
visible in the same catalog transaction that flips the document's version
(``flip_indexed_version``), which also hides the replaced version's chunks
until they are deleted. So a query never mixes two versions of a document,
and a crash between the write and the flip (or before the old chunks are
deleted) leaves nothing extra searchable, even before ``reconcile --repair``.
A chunk both versions share keeps its id and is shown once throughout.

Filters (:class:`QueryFilters`: source ids, formats, modified-date range) are
applied in this same path. The stores hold tenant, ACL ids, doc id and text
per chunk. A source filter whose sources hold at most
:data:`MAX_PUSHED_DOCS` live documents is pushed into both stores' search as
a filter on those documents' ids (and the holders of their exact copies'
chunks), so a rare source fills ``k`` from its own chunks. Every filter is
also checked against the catalog's document rows after fusion (a
post-filter); to still fill ``k`` results, a filtered query over-fetches: it
asks each store for more hits (x4 each round, up to
:data:`MAX_FILTER_DEPTH`) until ``k`` hits pass or the stores run out. A
format or date filter, or a source filter over more documents, that matches
few documents of a large tenant may therefore return fewer than ``k`` hits
(the stores do not carry source, format or date).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ragsync.catalog.documents import LIVE_STATUSES
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import ModelSpec
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.base import SearchFilter
from ragsync.ingest.boilerplate import BoilerplateRule
from ragsync.query.identity import Reader, ReadGrant
from ragsync.query.ranking import RERANK_DEPTH, demote_boilerplate, rerank, source_boilerplate
from ragsync.query.rerank import Reranker, reranker_for
from ragsync.query.results import QueryResult

RRF_K = 60

MAX_FILTER_DEPTH = 4096
"""The most hits a filtered query asks each store for (over-fetch cap)."""

MAX_PUSHED_DOCS = 2000
"""A source filter matching at most this many documents is pushed into the
stores' search (a ``doc_id`` filter); a larger one is post-filtered."""


_REDMINE_ISSUE = re.compile(r"^(.*)/issues/([0-9]+)\.json$")


def page_link(uri: str) -> str:
    """Where a reader opens a hit: a MediaWiki page's rendered-content
    address (the Action API's ``api.php?action=parse&pageid=N``, what the
    connector fetches) becomes the page itself (``index.php?curid=N`` next to
    ``api.php``, which MediaWiki serves as the page under any article path);
    a Redmine issue's REST address (``issues/N.json?include=...``) becomes the
    issue's page (``issues/N``), and an attachment of it (a child document,
    ``...#ID-name``) the attachment's page (``attachments/ID``); any other
    address is returned unchanged."""
    parts = urlsplit(uri)
    params = parse_qs(parts.query)
    issue = _REDMINE_ISSUE.match(parts.path)
    if issue is not None and params.get("include") == ["journals,attachments"]:
        attachment = re.match(r"^([0-9]+)-", parts.fragment)
        path = f"{issue[1]}/attachments/{attachment[1]}" if attachment else f"{issue[1]}/issues/{issue[2]}"
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    if not parts.path.endswith("/api.php"):
        return uri
    if params.get("action") != ["parse"] or len(params.get("pageid", [])) != 1:
        return uri
    path = parts.path[: -len("api.php")] + "index.php"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode({"curid": params["pageid"][0]}), ""))


def document_modified_at(doc: Any) -> float | None:
    """When a document was last modified, as far as the catalog knows (epoch
    seconds): its source version when the source versions by timestamp (a
    file's mtime), else when the source showed that version (a change event's
    time or the listing's time: an upper bound), else None (unknown)."""
    if getattr(doc, "version_domain", None) == "timestamp" and doc.source_version:
        try:
            return float(doc.source_version)
        except ValueError:
            pass
    observed = getattr(doc, "version_observed_at", None)
    return float(observed) if observed else None


@dataclass(frozen=True)
class QueryFilters:
    """Optional restrictions of a query to some documents (all given ones
    must hold; an empty tuple or None means no restriction).

    Attributes:
        source_ids: the document's source is one of these.
        mimes: the document's detected content type is one of these
            (compared without parameters, case-insensitively).
        modified_after: :func:`document_modified_at` >= this (epoch seconds).
        modified_before: :func:`document_modified_at` < this (epoch seconds).
            With either bound, a document of unknown modification time is
            left out.
    """

    source_ids: tuple[str, ...] = ()
    mimes: tuple[str, ...] = ()
    modified_after: float | None = None
    modified_before: float | None = None

    @property
    def active(self) -> bool:
        return (
            bool(self.source_ids or self.mimes)
            or self.modified_after is not None
            or (self.modified_before is not None)
        )

    def matches(self, doc: Any) -> bool:
        """Whether a catalog document row passes every filter."""
        if self.source_ids and doc.source_id not in self.source_ids:
            return False
        if self.mimes:
            mime = (doc.mime or "").split(";")[0].strip().lower()
            if mime not in {m.split(";")[0].strip().lower() for m in self.mimes}:
                return False
        if self.modified_after is not None or self.modified_before is not None:
            when = document_modified_at(doc)
            if when is None:
                return False
            if self.modified_after is not None and when < self.modified_after:
                return False
            if self.modified_before is not None and when >= self.modified_before:
                return False
        return True


_WORD = re.compile(r"\w+", re.UNICODE)
_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    w = word.lower()
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w


def highlight(
    text: str, query: str, *, width: int = 300, mark: tuple[str, str] = ("<mark>", "</mark>")
) -> str:
    """A snippet of ``text`` with the query's words marked, safe to put in HTML.

    The text is HTML-escaped, then each word whose crude stem (a trailing
    ``s``/``es``/``ed``/``ing`` dropped) equals a query word's is wrapped in
    ``mark``; nothing else is added. The snippet is a ``width``-character
    window starting a little before the first marked word (``…`` where it
    was cut), or the start of the text when no word matches.

    Args:
        text: the chunk text (untrusted).
        query: the query text (untrusted; words only are used).
        width: the snippet's length in characters of ``text``.
        mark: opening and closing tags around a matched word.
    """
    terms = {_stem(w) for w in _WORD.findall(query) if len(w) >= 2}
    spans = [m.span() for m in _WORD.finditer(text) if _stem(m.group()) in terms]
    start = max(0, spans[0][0] - width // 5) if spans else 0
    if start:  # start at a word boundary
        space = text.find(" ", start, spans[0][0])
        start = space + 1 if space != -1 else start
    end = min(len(text), start + width)
    out: list[str] = ["…" if start else ""]
    pos = start
    for a, b in spans:
        if a < start or b > end:
            continue
        out.append(html.escape(text[pos:a]))
        out.append(mark[0] + html.escape(text[a:b]) + mark[1])
        pos = b
    out.append(html.escape(text[pos:end]))
    out.append("…" if end < len(text) else "")
    return "".join(out)


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
    from ragsync.embedding.models import model_for

    return [float(x) for x in model_for(spec).encode_queries([text])[0]]


def hybrid_query(
    settings: Settings,
    text: str,
    *,
    groups: Sequence[str] | None = None,
    user: str | None = None,
    tenant_id: str = "default",
    k: int = 10,
    spec: ModelSpec | None = None,
    filters: QueryFilters | None = None,
) -> list[QueryResult]:
    """Top ``k`` chunks for ``text`` that a member of ``groups`` (or ``user``) may read.

    Args:
        settings: the stores.
        text: the query.
        groups: the reader's groups; a chunk is returned only when one of
            them is allowed by the chunk's ACL and none is denied by it.
        user: instead of ``groups``: a user synced from the tenant's sources
            (``ragsync identities sync``); their groups are the catalog's
            memberships, nested groups expanded, per source
            (``Catalog.groups_of_user_by_source``): a document is read only
            through the groups the user holds in its source (or the source
            its ``identities_from`` option names). A user no sync listed
            reads nothing.
        tenant_id: the reader's tenant: nothing of another tenant is returned.
        k: the most hits returned.
        spec: the embedding model (default: the live index version's).
        filters: restrict to some sources, formats or a modified-date range
            (post-filtered with over-fetch: see the module's docstring).

    Returns:
        Hits, best first; [] when the groups grant nothing (fail closed).

    Raises:
        ValueError: ``k`` is not positive, or not exactly one of ``groups``
            and ``user`` is given.
    """
    if k <= 0:
        raise ValueError("k must be positive")
    if (groups is None) == (user is None):
        raise ValueError("give exactly one of groups and user")  # before loading the model
    if filters is not None and not filters.active:
        filters = None
    if spec is None:
        from ragsync.index.versions import live_spec

        spec = live_spec(settings)
    catalog = open_catalog(settings)
    try:
        reader = reader_of(catalog, tenant_id, groups=groups, user=user)
        acl_ids, denied = sorted(reader.any_allowed), sorted(reader.any_denied)
        if not acl_ids:
            return []
        vectors = open_vector_index(settings, spec.dim)
        keywords = open_keyword_index(settings)
        try:
            vector = embed_query(spec, text)
            where = _search_filter(catalog, tenant_id, denied, filters)
            reranker = reranker_for(settings.rerank, spec)
            want = max(k, RERANK_DEPTH) if reranker is not None else k  # the reranker's candidates
            depth = max(k * 4, 20, want)
            while True:
                vhits = vectors.search(tenant_id, vector, acl_ids, depth, where=where)
                khits = keywords.search(tenant_id, text, acl_ids, depth, where=where)
                results = _assemble(catalog, tenant_id, vhits, khits, reader, want, filters)
                exhausted = len(vhits) < depth and len(khits) < depth
                # A user's grant is per source (a post-filter too): over-fetch as for filters.
                post_filtered = filters is not None or reader.everywhere is None
                if not post_filtered or len(results) >= k or exhausted or depth >= MAX_FILTER_DEPTH:
                    return _ranked(settings, catalog, tenant_id, text, results, k, reranker)
                depth = min(depth * 4, MAX_FILTER_DEPTH)
        finally:
            keywords.close()
            vectors.close()
    finally:
        catalog.close()


def _search_filter(
    catalog: Any, tenant_id: str, denied: Sequence[str], filters: QueryFilters | None
) -> SearchFilter:
    """What both stores filter on: the denying ACL ids and, for a source filter
    over at most :data:`MAX_PUSHED_DOCS` documents, those documents' ids (a
    source of few documents: the stores search only its documents)."""
    pushed = None
    if filters is not None and filters.source_ids:
        pushed = catalog.copies.doc_ids_in_sources(tenant_id, filters.source_ids, limit=MAX_PUSHED_DOCS)
    return SearchFilter(tuple(denied), None if pushed is None else tuple(pushed))


def _ranked(
    settings: Settings,
    catalog: Any,
    tenant_id: str,
    text: str,
    results: list[QueryResult],
    k: int,
    reranker: Reranker | None,
) -> list[QueryResult]:
    """The first ``k`` of the checked hits after boilerplate and reranking
    (``ragsync.query.ranking``), scores rounded."""
    rule = BoilerplateRule(settings.boilerplate_share, settings.boilerplate_min_docs)
    results = demote_boilerplate(results, source_boilerplate(catalog, tenant_id, results, rule))
    if reranker is not None:
        results = rerank(reranker, text, results, settings.rerank_weight)
    return [replace(r, score=round(r.score, 6)) for r in results[:k]]


def reader_of(
    catalog: Any, tenant_id: str, *, groups: Sequence[str] | None = None, user: str | None = None
) -> Reader:
    """The reader of a query: caller ``groups`` (every source) or a ``user``
    (their groups per source, through the sources' ``identities_from``
    links; see ``ragsync.query.identity.Reader``).

    Raises:
        ValueError: not exactly one of ``groups`` and ``user``.
    """
    if (groups is None) == (user is None):
        raise ValueError("give exactly one of groups and user")

    def grant(held: Sequence[str]) -> ReadGrant:
        return ReadGrant(
            frozenset(catalog.acls.acl_ids_for_groups(tenant_id, list(held))),
            frozenset(catalog.acls.acl_ids_denying(tenant_id, list(held))),
        )

    if groups is not None:
        return Reader(everywhere=grant(sorted(set(groups))))
    assert user is not None
    per_source = catalog.identities.groups_of_user_by_source(tenant_id, user)
    return Reader(
        by_source={src: grant(sorted(held)) for src, held in per_source.items()},
        links=catalog.identities.identity_links(tenant_id) if per_source else {},
    )


def _assemble(
    catalog: Any,
    tenant_id: str,
    vhits: Sequence[Any],
    khits: Sequence[Any],
    reader: Reader,
    k: int,
    filters: QueryFilters | None,
) -> list[QueryResult]:
    """The first ``k`` fused hits that pass the catalog's checks (a chunk of
    the live version, tenant, ACL ids, deny entries, newest of near
    duplicates, a live copy ``reader`` may read in its source) and ``filters``."""
    fused = reciprocal_rank_fusion([ranked_ids(vhits), ranked_ids(khits)])
    rows = catalog.chunks.chunks_by_ids([cid for cid, _ in fused], live_only=True)
    allowed, refused = reader.any_allowed, reader.any_denied
    # Near duplicates (drafts of one file): only the newest of a group.
    newest = catalog.copies.newest_of_groups(sorted({c.doc_id for c in rows.values()}), sorted(allowed))
    docs: dict[str, Any] = {}
    parents: dict[str, str | None] = {}
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
            docs[chunk.doc_id] = _shown_copy(
                catalog, catalog.documents.get_document(chunk.doc_id), reader, filters
            )
        doc = docs[chunk.doc_id]
        if doc is None:
            continue
        parent = doc.parent_doc_id
        if parent and parent not in parents:
            parents[parent] = _parent_link(catalog, parent, tenant_id, reader)
        results.append(
            QueryResult(
                doc_id=doc.doc_id,
                chunk_id=cid,
                uri=page_link(doc.uri),
                heading_path=list(chunk.heading_path),
                page=chunk.page,
                score=score,
                text=chunk.text,
                parent_doc_id=parent,
                source_id=doc.source_id,
                mime=doc.mime,
                modified_at=document_modified_at(doc),
                parent_uri=parents.get(parent) if parent else None,
                page_end=max(chunk.page_end, chunk.page),
                char_start=chunk.char_start,
                char_end=chunk.char_end,
                boxes=[list(b) for b in chunk.boxes],
                context=chunk.context,
            )
        )
        if len(results) >= k:
            break
    return results


def _parent_link(catalog: Any, parent_doc_id: str, tenant_id: str, reader: Reader) -> str | None:
    """A child document's container's link, when the reader may read the
    container itself (else None: its address is not shown)."""
    parent = catalog.documents.get_document(parent_doc_id)
    if parent is None or parent.tenant_id != tenant_id:
        return None
    if not reader.may_read(parent.source_id, parent.acl_id):
        return None
    return page_link(parent.uri)


def _shown_copy(catalog: Any, holder: Any, reader: Reader, filters: QueryFilters | None = None) -> Any:
    """The document a hit on ``holder``'s chunks is shown as: None when the
    holder has no live version; else, of the holder and its exact copies
    (``ragsync.index.service``), the smallest doc id the reader may read through
    its own permissions in its own source (and that passes ``filters``), so a reader never sees
    the path of a copy they may not read and the answer does not depend on
    which copy holds the chunks. None too when no live copy lets the reader
    in (chunks whose ACL ids lag behind a permission change: fail closed).
    """
    if holder is None or holder.status not in LIVE_STATUSES or holder.deleted_at:
        return None
    copies = [holder, *catalog.copies.duplicates_of(holder.doc_id)]
    readable = [d for d in copies if reader.may_read(d.source_id, d.acl_id)]
    if filters is not None:
        readable = [d for d in readable if filters.matches(d)]
    return min(readable, key=lambda d: d.doc_id) if readable else None
