"""``POST /v1/query``: hybrid retrieval with the CLI's permission rules.

The one query path is :func:`ragsync.query.search.hybrid_query` (what ``ragsync
query`` runs): vector + BM25 fused, the stores filtered by the ACL ids the
reader's groups resolve to, deny entries honoured (a deny wins over any
allow), every hit checked again against the catalog (tenant, ACL ids, a live
version, the newest of near duplicates, a readable copy). This router only
validates the body, takes the tenant from the API key (never from the body)
and shapes the answer.

Identity: a body names the reader as ``user``, a user synced from the
tenant's sources (``ragsync identities sync``); the groups are the catalog's
memberships of that user, nested groups expanded; a user no sync listed reads
nothing. Naming the reader's ``groups`` directly is trusting the caller: it
is off unless the server runs with ``--allow-caller-groups``
(``RAGSYNC_ALLOW_CALLER_GROUPS=1``); without it such a body gets 422.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from control_plane.deps import Tenant
from control_plane.errors import ERRORS, ApiError, ErrorOut
from ragsync.query.search import QueryFilters, QueryResult, hybrid_query
from ragsync.query.search import highlight as mark_terms

router = APIRouter()

MAX_K = 100
MAX_GROUPS = 1000
MAX_TEXT = 4000

_Name = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class QueryFiltersIn(BaseModel):
    """Restrict the hits to some documents (every given filter must hold)."""

    model_config = ConfigDict(extra="forbid")

    source_ids: list[_Name] | None = Field(
        None, max_length=100, description="only documents of these sources (the caller's source ids)"
    )
    formats: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] | None = Field(
        None,
        max_length=50,
        description="only documents of these detected content types (MIME, e.g. application/pdf, text/html)",
    )
    modified_after: datetime | None = Field(
        None,
        description=(
            "only documents modified at or after this time (ISO 8601 or epoch seconds; no zone = UTC). "
            "Modified = the file's mtime for timestamp-versioned sources, else when the source showed "
            "the version; documents of unknown time are left out when a date bound is given"
        ),
    )
    modified_before: datetime | None = Field(None, description="only documents modified before this time")

    @model_validator(mode="after")
    def _ordered(self) -> QueryFiltersIn:
        if (
            self.modified_after
            and self.modified_before
            and _epoch(self.modified_after) >= _epoch(self.modified_before)
        ):
            raise ValueError("modified_after must be before modified_before")
        return self


class QueryIn(BaseModel):
    """A query: the text, how many hits, who reads, and optional filters."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT, description="the question or keywords")
    k: int = Field(10, ge=1, le=MAX_K, description=f"hits wanted, 1..{MAX_K}")
    groups: list[_Name] | None = Field(
        None,
        max_length=MAX_GROUPS,
        description="the reader's groups (caller-supplied; only when the server runs with "
        "--allow-caller-groups); an empty list reads nothing (fail closed)",
    )
    user: _Name | None = Field(
        None,
        description="the reader: a user id synced from the tenant's sources (wiki user name, e-mail, "
        "accountId); an unknown user reads nothing",
    )
    filters: QueryFiltersIn | None = None

    @model_validator(mode="after")
    def _one_reader(self) -> QueryIn:
        if (self.groups is None) == (self.user is None):
            raise ValueError("name the reader: exactly one of user and groups")
        return self

    @field_validator("text")
    @classmethod
    def _has_words(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class ParentOut(BaseModel):
    """The document a child document (attachment, archive member) came from."""

    doc_id: str
    link: str | None = Field(description="the container's link; null when the reader may not read it")


class CitationOut(BaseModel):
    """Where a hit is in its document: what an application shows to let a reader check it."""

    page: int = Field(description="first page of the hit (1-based; 0 for formats without pages)")
    page_end: int = Field(description="last page of the hit")
    heading_path: list[str] = Field(description="the section the hit is in, outermost heading first")
    char_start: int = Field(
        description="where the hit starts in the document's text (its elements joined by blank lines, "
        "as GET /v1/documents/{doc_id}/pages/{page} returns them)"
    )
    char_end: int = Field(description="where it ends (exclusive)")
    boxes: list[list[float]] = Field(
        description="PDFs and scans: each line's [page, x0, y0, x1, y1], corners as fractions of the "
        "page (origin top left); [] for other formats"
    )


class HitOut(BaseModel):
    """One retrieved chunk."""

    chunk_id: str
    doc_id: str
    source_id: str
    score: float = Field(
        description="higher is better: the reciprocal-rank-fusion score, lowered by the hit's share of "
        "boilerplate; with the reranker on, its mix with the reranker's score (0-1)"
    )
    text: str
    highlight: str = Field(
        description="a snippet of the text, HTML-escaped, the query's words wrapped in <mark>...</mark>"
    )
    link: str = Field(description="where a reader opens the document (a wiki page's own address)")
    heading_path: list[str]
    page: int
    format: str = Field(description="the document's detected content type")
    modified_at: datetime | None
    parent: ParentOut | None = Field(description="for a child document: its container")
    citation: CitationOut
    document: str = Field(description="the document's identity as indexed: title | issuer | period | name")
    boilerplate: float = Field(
        description="share of the hit's text that its source repeats in many documents (0-1); a "
        "boilerplate paragraph is shown by its first hit only"
    )


class QueryOut(BaseModel):
    """The hits, best first (at most ``k``)."""

    hits: list[HitOut]


@router.post(
    "/v1/query",
    response_model=QueryOut,
    tags=["query"],
    responses={**ERRORS, 503: {"model": ErrorOut, "description": "query serving not configured"}},
    summary="Hybrid retrieval over the caller's tenant, permission-filtered",
)
def query(body: QueryIn, tenant_id: Tenant, request: Request) -> QueryOut:
    """The top ``k`` chunks for ``text`` that a member of ``groups`` may read.

    Inputs: the API key (the tenant); the body (:class:`QueryIn`): ``text``,
    ``k`` (1..100, default 10), ``groups``, optional ``filters``
    (``source_ids``, ``formats``, ``modified_after``, ``modified_before``).

    Outputs: ``{"hits": [...]}`` best first, each with chunk, document and
    source ids, score, text, highlight, link, format, modified time, the
    parent document of a child document and its citation (page range,
    heading path, character span in the document's text, line boxes). Only the tenant's chunks readable
    by ``groups`` (allowed by an ACL, denied by none) of live versions.
    No groups, or groups that grant nothing: ``{"hits": []}``.

    Failures: 401 no or bad key; 422 a bad body (the field named in the
    message; ``groups`` while caller groups are off); 413 a body too large; 503 the
    server was started without stores to query.
    """
    settings = request.app.state.settings
    if settings is None:
        raise ApiError(503, "query serving is not configured on this server (no stores)")
    if body.groups is not None and not request.app.state.allow_caller_groups:
        raise ApiError(
            422,
            "groups: caller-supplied groups are off on this server; name the reader as `user`, or start "
            "the server with --allow-caller-groups (RAGSYNC_ALLOW_CALLER_GROUPS=1)",
        )
    filters = None
    if body.filters is not None:
        f = body.filters
        filters = QueryFilters(
            source_ids=tuple(f.source_ids or ()),
            mimes=tuple(f.formats or ()),
            modified_after=_epoch(f.modified_after) if f.modified_after else None,
            modified_before=_epoch(f.modified_before) if f.modified_before else None,
        )
    results = hybrid_query(
        settings,
        body.text,
        groups=body.groups,
        user=body.user,
        tenant_id=tenant_id,
        k=body.k,
        filters=filters,
    )
    return QueryOut(hits=[_hit(r, body.text) for r in results])


def _hit(r: QueryResult, text: str) -> HitOut:
    parent = ParentOut(doc_id=r.parent_doc_id, link=r.parent_uri) if r.parent_doc_id else None
    modified = datetime.fromtimestamp(r.modified_at, UTC) if r.modified_at is not None else None
    return HitOut(
        chunk_id=r.chunk_id,
        doc_id=r.doc_id,
        source_id=r.source_id,
        score=r.score,
        text=r.text,
        highlight=mark_terms(r.text, text),
        link=r.uri,
        heading_path=r.heading_path,
        page=r.page,
        format=r.mime,
        modified_at=modified,
        parent=parent,
        citation=CitationOut(
            page=r.page,
            page_end=r.page_end,
            heading_path=r.heading_path,
            char_start=r.char_start,
            char_end=r.char_end,
            boxes=r.boxes,
        ),
        document=r.context,
        boilerplate=r.boilerplate,
    )


def _epoch(when: datetime) -> float:
    """Epoch seconds; a time without a zone is UTC."""
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
