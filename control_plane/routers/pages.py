"""``GET /v1/documents/{doc_id}/pages/{page}``: a cited page, for display.

A hit of ``POST /v1/query`` cites its document's id, page range, character
span and line boxes; this returns that page: as JSON (its elements from the
stored parse, each with its span in the document's text and its line boxes)
or as a PNG (``format=png``: PDFs and images, the page rendered from the
document's bytes, read through the source's connector under its location and
checked against the indexed content hash). The reader is named as in a query
(``user``, or ``groups`` when the server allows caller groups) and must be
allowed to read the document; another tenant's document, an unreadable one
and a missing one all answer 404. Nothing in the request names a path.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from control_plane.deps import CatalogDep, Tenant, path_id
from control_plane.errors import ERRORS, ApiError, ErrorOut, not_found
from ragsync.catalog import Catalog
from ragsync.config import Settings
from ragsync.errors import RagsyncError, TooLargeError, UnsupportedFormatError
from ragsync.model import Element, SourceFile
from ragsync.query.pages import page_view, readable_document, render_page
from ragsync.query.search import reader_of

router = APIRouter()


class PageElementOut(BaseModel):
    """One element of the page."""

    type: str
    text: str
    char_start: int = Field(description="where it starts in the document's text")
    char_end: int
    boxes: list[list[float]] = Field(description="its lines' [page, x0, y0, x1, y1] as fractions of the page")


class PageOut(BaseModel):
    """A page of a document as the index holds it."""

    doc_id: str
    page: int
    pages: int = Field(description="the document's page count (0 for formats without pages)")
    char_start: int = Field(description="where the page starts in the document's text")
    char_end: int
    text: str = Field(description="the page's elements joined by blank lines")
    elements: list[PageElementOut]


@router.get(
    "/v1/documents/{doc_id}/pages/{page}",
    response_model=PageOut,
    tags=["documents"],
    responses={
        **ERRORS,
        200: {"content": {"image/png": {}}, "description": "the page as JSON, or a PNG with format=png"},
        409: {"model": ErrorOut, "description": "the document changed at its source since it was indexed"},
        503: {"model": ErrorOut, "description": "no stores on this server"},
    },
    summary="A cited page of a document the reader may read (JSON, or a PNG of a PDF or image page)",
)
def document_page(
    doc_id: str,
    page: int,
    request: Request,
    tenant_id: Tenant,
    catalog: CatalogDep,
    user: Annotated[str | None, Query(max_length=1024, description="the reader (a synced user id)")] = None,
    groups: Annotated[
        list[str] | None, Query(max_length=1000, description="the reader's groups (caller groups only)")
    ] = None,
    format: Annotated[Literal["json", "png"], Query(description="json (text and boxes) or png")] = "json",
) -> PageOut | Response:
    """One page of a document the reader may read.

    Inputs: the API key (the tenant); ``doc_id`` (a hit's) and ``page``
    (1-based; 0 for a document without pages); the reader as ``user`` or
    ``groups``; ``format``.

    Outputs: JSON (:class:`PageOut`) or ``image/png``.

    Failures: 401 no or bad key; 404 no such page, or a document that is
    not the tenant's, not live or not readable by the reader; 409 the source's
    bytes no longer match the indexed version (sync it); 415 a PNG of a
    format without page pictures; 422 both or neither of user and groups,
    or groups while caller groups are off; 503 no stores configured.
    """
    settings = request.app.state.settings
    if settings is None:
        raise ApiError(503, "documents are not served by this server (no stores)")
    if (user is None) == (groups is None):
        raise ApiError(422, "name the reader: exactly one of user and groups")
    if groups is not None and not request.app.state.allow_caller_groups:
        raise ApiError(
            422, "groups: caller-supplied groups are off on this server; name the reader as `user`"
        )
    did = path_id(doc_id)
    reader = reader_of(catalog, tenant_id, groups=groups, user=user)
    doc = readable_document(catalog, tenant_id, did, reader) if did is not None and page >= 0 else None
    if doc is None:
        raise not_found(f"document {doc_id!r}")
    if format == "png":
        return Response(_png(catalog, settings, doc, page), media_type="image/png")
    stored = catalog.parsed.get_parsed(doc.content_hash, doc.parser_version) if doc.content_hash else None
    if stored is None:
        raise not_found(f"the stored text of document {doc_id!r} (sync its source to parse it again)")
    view = page_view(doc.doc_id, _elements(stored.elements_uri), page, stored.pages)
    if view is None:
        raise not_found(f"page {page} of document {doc_id!r}")
    return PageOut(
        doc_id=view.doc_id,
        page=view.page,
        pages=view.pages,
        char_start=view.char_start,
        char_end=view.char_end,
        text=view.text,
        elements=[
            PageElementOut(
                type=e.type,
                text=e.text,
                char_start=e.char_start,
                char_end=e.char_end,
                boxes=[list(b) for b in e.boxes],
            )
            for e in view.elements
        ],
    )


def _elements(uri: str) -> list[Element]:
    from transforms.io import read_bytes

    return [Element.from_json(line) for line in read_bytes(uri).decode("utf-8").splitlines() if line]


def _png(catalog: Catalog, settings: Settings, doc: Any, page: int) -> bytes:
    """The page rendered from the bytes the source's connector reads now
    (under the source's location, within its limits)."""
    from connectors.sources import check_source
    from transforms.io import BeamFileSystem

    try:
        source = check_source(catalog, settings, doc.source_id, tenant_id=doc.tenant_id)
        connector = source.open(settings, BeamFileSystem())
        try:
            data = connector.fetch(SourceFile(doc.tenant_id, doc.source_id, doc.source_object_id, doc.uri))
        finally:
            connector.close()
    except RagsyncError as exc:
        raise ApiError(409, f"the document cannot be read from its source now: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != doc.content_hash:
        raise ApiError(409, "the document changed at its source since it was indexed; sync the source first")
    try:
        return render_page(data, doc.mime or "", page)
    except UnsupportedFormatError as exc:
        raise ApiError(415, str(exc)) from exc
    except (ValueError, TooLargeError) as exc:
        raise not_found(f"page {page}: {exc}") from exc
