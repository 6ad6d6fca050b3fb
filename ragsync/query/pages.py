"""A cited page for display: its text, elements and line boxes, or its picture.

A hit cites a page range, a character span in the document's text and line
boxes (``ragsync.model.Chunk``); an application shows the reader that page to
check it. ``GET /v1/documents/{doc_id}/pages/{page}`` serves it through the
functions here:

* :func:`readable_document`: the document, when the reader may read it (the
  same rules as a query: tenant, a live version, the reader's grant in the
  document's source, deny wins); None otherwise, so another tenant's or an
  unreadable document looks like a missing one;
* :func:`page_view`: the page's elements from the document's stored parse,
  each with its character span in the document's text and its boxes;
* :func:`render_page`: a PNG of the page from the document's bytes, which the
  caller reads through the source's connector (never a path from the
  request): a PDF page rendered by PDFium, an image file's frame.

Nothing here imports Beam.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragsync.catalog.documents import LIVE_STATUSES
from ragsync.errors import TooLargeError, UnsupportedFormatError
from ragsync.model import Box, Element, element_offsets
from ragsync.query.identity import Reader

MAX_RENDER_SIDE = 2000
"""A rendered page's longer side in pixels, at most."""

MAX_IMAGE_PIXELS = 100_000_000
"""An image file's frame larger than this is not decoded (as the parser's limit)."""


@dataclass(frozen=True)
class PageElement:
    """One element of a page.

    Attributes:
        type: heading, paragraph, list_item or table.
        text: its text (a table as Markdown rows).
        char_start: where it starts in the document's text.
        char_end: where it ends (exclusive).
        boxes: its lines' boxes (``ragsync.model.Box``), ``()`` when unknown.
    """

    type: str
    text: str
    char_start: int
    char_end: int
    boxes: tuple[Box, ...]


@dataclass(frozen=True)
class PageView:
    """A page of a document as the index holds it.

    Attributes:
        doc_id: the document.
        page: the page (1-based; 0 for a format without pages: the whole document).
        pages: the document's page count (0 without pages).
        char_start: where the page's first element starts in the document's text.
        char_end: where its last element ends.
        elements: the page's elements in reading order.
    """

    doc_id: str
    page: int
    pages: int
    char_start: int
    char_end: int
    elements: tuple[PageElement, ...]

    @property
    def text(self) -> str:
        """The page's text: its elements joined by blank lines."""
        return "\n\n".join(e.text for e in self.elements)


def readable_document(catalog: Any, tenant_id: str, doc_id: str, reader: Reader) -> Any | None:
    """The catalog row of ``doc_id`` when ``reader`` may read it, else None.

    Args:
        catalog: the catalog.
        tenant_id: the caller's tenant.
        doc_id: the document (a hit's ``doc_id``).
        reader: the reader (``ragsync.query.search.reader_of``).
    """
    doc = catalog.documents.get_document(doc_id)
    if doc is None or doc.tenant_id != tenant_id or doc.deleted_at:
        return None
    holder = doc
    if doc.status not in LIVE_STATUSES and doc.canonical_doc_id and doc.canonical_doc_id != doc.doc_id:
        holder = catalog.documents.get_document(doc.canonical_doc_id)  # an exact copy: its holder's parse
    if holder is None or holder.status not in LIVE_STATUSES or not doc.acl_id:
        return None
    return doc if reader.may_read(doc.source_id, doc.acl_id) else None


def page_view(doc_id: str, elements: Sequence[Element], page: int, pages: int) -> PageView | None:
    """The elements of ``page`` with their spans in the document's text.

    Args:
        doc_id: the document.
        elements: its parsed elements in reading order (the stored parse).
        page: the page asked for (0 for a document without pages).
        pages: its page count.

    Returns:
        The view; None when the page holds no element (or does not exist).
    """
    picked = [
        PageElement(e.type.value, e.text, at, at + len(e.text), e.boxes)
        for e, at in zip(elements, element_offsets(elements), strict=True)
        if e.page == page
    ]
    if not picked:
        return None
    return PageView(doc_id, page, pages, picked[0].char_start, picked[-1].char_end, tuple(picked))


def render_page(data: bytes, mime: str, page: int) -> bytes:
    """A PNG of one page of a PDF or an image file.

    Args:
        data: the document's bytes (read through its source's connector).
        mime: its detected content type.
        page: 1-based page (a PDF page, an image's frame).

    Returns:
        PNG bytes, the longer side at most :data:`MAX_RENDER_SIDE` pixels.

    Raises:
        UnsupportedFormatError: not a PDF or an image.
        ValueError: no such page.
        TooLargeError: an image frame above :data:`MAX_IMAGE_PIXELS`.
    """
    from PIL import Image

    base = mime.split(";", 1)[0].strip().lower()
    if base == "application/pdf":
        import pypdfium2 as pdfium

        from ragsync.parsing._pdfium import PDFIUM_LOCK

        with PDFIUM_LOCK:
            doc = pdfium.PdfDocument(data)
            try:
                if not 1 <= page <= len(doc):
                    raise ValueError(f"the document has {len(doc)} pages, not {page}")
                width, height = doc.get_page_size(page - 1)
                scale = min(MAX_RENDER_SIDE / max(width, height, 1.0), 3.0)
                pdf_page = doc[page - 1]
                try:
                    image = pdf_page.render(scale=scale).to_pil()
                finally:
                    pdf_page.close()
            finally:
                doc.close()
    elif base.startswith("image/"):
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
        try:
            image = Image.open(io.BytesIO(data))
            frames = getattr(image, "n_frames", 1)
            if not 1 <= page <= frames:
                raise ValueError(f"the image has {frames} frames, not {page}")
            image.seek(page - 1)
            image = image.convert("RGB")
        except Image.DecompressionBombError as exc:
            raise TooLargeError(f"image frame above {MAX_IMAGE_PIXELS} pixels") from exc
        image.thumbnail((MAX_RENDER_SIDE, MAX_RENDER_SIDE))
    else:
        raise UnsupportedFormatError(f"a page of {base or 'this format'} has no picture; ask for its text")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
