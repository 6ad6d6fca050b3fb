"""The one element model: every record that flows between stages.

All records are frozen dataclasses that round-trip through JSON
(``to_json`` / ``from_json``) so they can be stored in the object store, sent
through a queue, or pickled by a Beam runner. Keys used by stateful steps are
plain ``str``.

Nothing here imports Apache Beam.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, TypeVar

T = TypeVar("T", bound="JsonRecord")


class JsonRecord:
    """Mixin: JSON round trip for frozen dataclasses with simple fields."""

    _tuple_fields: ClassVar[tuple[str, ...]] = ()
    _nested: ClassVar[dict[str, type]] = {}
    # Optional fields left out of the JSON while None, so records written before they existed
    # and records that do not use them keep their exact JSON.
    _omit_none: ClassVar[tuple[str, ...]] = ()
    # The same for fields left out while they hold their default (0, "", ()).
    _omit_default: ClassVar[tuple[str, ...]] = ()
    # Tuple fields whose items are tuples too (boxes): JSON lists back to tuples at both depths.
    _tuple_of_tuples: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self._omit_none:
                continue
            if f.name in self._omit_default and value == f.default:
                continue
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, JsonRecord):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = [
                    v.to_dict() if isinstance(v, JsonRecord) else list(v) if isinstance(v, tuple) else v
                    for v in value
                ]
            out[f.name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        kwargs: dict[str, Any] = {}
        names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for name, value in data.items():
            if name not in names:
                continue
            nested = cls._nested.get(name)
            if nested is not None and value is not None:
                if isinstance(value, list):
                    value = tuple(nested.from_dict(v) for v in value)  # type: ignore[attr-defined]
                else:
                    value = nested.from_dict(value)  # type: ignore[attr-defined]
            elif name in cls._tuple_of_tuples and value is not None:
                value = tuple(tuple(v) for v in value)
            elif name in cls._tuple_fields and value is not None:
                value = tuple(value)
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))


Box = tuple[int, float, float, float, float]
"""A line's place on its page: ``(page, x0, y0, x1, y1)``, ``page`` 1-based, the
corners as fractions of the page's width and height (0-1, origin at the top
left, y down): multiply by a rendered page's size in pixels to draw it."""

DOCUMENT_TEXT_SEPARATOR = "\n\n"
"""What joins a document's elements into its text (:func:`document_text`)."""


def document_text(elements: Sequence[Element]) -> str:
    """A document's text: its elements' texts in reading order, joined by
    :data:`DOCUMENT_TEXT_SEPARATOR`. A chunk's ``char_start``/``char_end``
    and a page's offsets (``GET /v1/documents/{id}/pages/{n}``) index into it.

    Args:
        elements: the parsed elements in reading order.
    """
    return DOCUMENT_TEXT_SEPARATOR.join(e.text for e in elements)


def element_offsets(elements: Sequence[Element]) -> list[int]:
    """Where each element's text starts in :func:`document_text`.

    Args:
        elements: the parsed elements in reading order.

    Returns:
        One character offset per element.
    """
    out: list[int] = []
    at = 0
    for e in elements:
        out.append(at)
        at += len(e.text) + len(DOCUMENT_TEXT_SEPARATOR)
    return out


class ElementType(str, Enum):
    """Kinds of parsed elements."""

    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST_ITEM = "list_item"
    TABLE = "table"


class Lane(str, Enum):
    """Processing lane chosen from the detected content type."""

    FAST = "fast"
    SLOW = "slow"


@dataclass(frozen=True)
class Element(JsonRecord):
    """One structural element of a parsed document.

    Attributes:
        type: heading, paragraph, list_item or table.
        text: the text; a table is Markdown rows with its header row first.
        level: heading level (1 = top) for headings, nesting depth for list
            items, 0 otherwise.
        page: 1-based page (or slide/sheet) number, 0 when the format has none.
        order: 0-based position in reading order within the document.
        confidence: OCR word confidence 0-100 (mean over the element's
            words) when the text was OCR'd, None when it came from a text
            layer or markup (left out of the JSON then).
        boxes: where the element's lines are, for PDFs and scans: one
            :data:`Box` per line (a table: one for the whole table), in
            reading order; ``()`` for formats without a page layout (left out
            of the JSON then).
    """

    _omit_none: ClassVar[tuple[str, ...]] = ("confidence",)
    _omit_default: ClassVar[tuple[str, ...]] = ("boxes",)
    _tuple_of_tuples: ClassVar[tuple[str, ...]] = ("boxes",)

    type: ElementType
    text: str
    level: int = 0
    page: int = 0
    order: int = 0
    confidence: float | None = None
    boxes: tuple[Box, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.type, ElementType):
            object.__setattr__(self, "type", ElementType(self.type))


@dataclass(frozen=True)
class Attachment:
    """A file carried inside a parsed document: an e-mail attachment or an archive member.

    Parsing returns attachments instead of reading them, so each becomes a
    child document of its parent (its own id from
    ``ragsync.ids.child_object_id``, the parent's groups, deleted with the
    parent). Not a JSON record: it carries bytes.

    Attributes:
        name: the name the container gives it, unique within one parse result
            (an archive member's path, nested archives joined with ``/``; an
            attachment's filename). Hostile: only a label, never a file path.
        data: the member's bytes (bounded by the archive limits).
        media_type: the container's type hint (an e-mail part's
            ``Content-Type``), ``""`` when none; detection from the bytes decides.
        depth: how many containers enclose it (1 for a member of a top-level
            document); pass it as ``parse(..., depth=)`` when parsing the child.
    """

    name: str
    data: bytes
    media_type: str = ""
    depth: int = 1


@dataclass(frozen=True)
class SourceFile(JsonRecord):
    """A file found by a listing, before it is fetched.

    Attributes:
        tenant_id: tenant that owns the source.
        source_id: registered source (a folder or prefix for backfills).
        source_object_id: stable id of the object inside the source (the
            path relative to the source root for file systems).
        uri: where Beam FileSystems can read the bytes.
        size: size in bytes reported by the listing (-1 when unknown).
        acl_groups: groups allowed to read the document; empty means the
            permissions could not be read and the document must not be
            indexed (fail closed).
        source_version: the source's version of the object (mtime or etag).
        event_id: the change event this work comes from ('' in a backfill).
        event_time: when the change happened (epoch seconds; 0 in a backfill).
        attempts: failed deliveries of that event before this one.
        version_domain: the domain of ``source_version`` (``revision``,
            ``timestamp``, ``etag``; '' for the source's declared domain).
        observed_at: when the source showed this version (the event time, or
            the listing time); 0 when unknown.
        acl_observed_at: when ``acl_groups`` were true at the source (an
            event's time, a sidecar's modification time, the listing time of a
            connector returning current permissions); 0 when unknown.
        deny_groups: groups explicitly denied (never see the document, even
            when another of their groups is allowed).
        stored_copy: the work re-reads the document's stored raw copy (a
            parser or chunker backfill: nothing is fetched): the version is
            the catalog's live one, and it is written only while the catalog
            still holds that version (as an event's).
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = ("acl_groups", "deny_groups")

    tenant_id: str
    source_id: str
    source_object_id: str
    uri: str
    size: int = -1
    acl_groups: tuple[str, ...] = ()
    source_version: str = ""
    event_id: str = ""
    event_time: float = 0.0
    attempts: int = 0
    version_domain: str = ""
    observed_at: float = 0.0
    acl_observed_at: float = 0.0
    deny_groups: tuple[str, ...] = ()
    stored_copy: bool = False


@dataclass(frozen=True)
class FetchedDocument(JsonRecord):
    """A document whose bytes were fetched, hashed and copied.

    Attributes:
        doc_id: namespaced stable id (see ``ids.doc_id``).
        source: the listing record it came from.
        content_hash: sha256 hex of the bytes.
        raw_uri: the raw copy in the object store.
        size: number of bytes.
        acl_id: id of the ACL row built from ``source.acl_groups``.
        canonical_doc_id: the document whose chunks this content shares
            (itself unless it is an exact duplicate).
        mime: detected content type (filled by detection).
        lane: fast or slow (filled by detection).
        shared_acl_ids: ACL ids of exact duplicates whose chunks this
            document owns.
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = ("shared_acl_ids",)
    _nested: ClassVar[dict[str, type]] = {}

    doc_id: str
    source: SourceFile
    content_hash: str
    raw_uri: str
    size: int
    acl_id: str
    canonical_doc_id: str
    mime: str = ""
    lane: str = Lane.FAST.value
    shared_acl_ids: tuple[str, ...] = ()

    @property
    def chunk_acl_ids(self) -> tuple[str, ...]:
        """ACL ids the chunks carry: this copy's and its exact duplicates'."""
        return tuple(sorted({self.acl_id, *self.shared_acl_ids}))


FetchedDocument._nested = {"source": SourceFile}


@dataclass(frozen=True)
class ParsedDocument(JsonRecord):
    """The parser's output for one document.

    Attributes:
        doc: the fetched document.
        parser_version: version string of the parser that produced it.
        elements: elements in reading order.
        pages: number of pages (0 when the format has none).
        pages_for_review: pages below the OCR bar, listed for review (what they
            read at the region bar is indexed; docs/ocr.md).
        metadata: format metadata such as title or front matter.
        cpu_s: CPU seconds the parse took in its child process, OCR
            subprocesses included (0.0 when read back from a stored parse).
        wall_s: wall seconds the parse took.
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = ("pages_for_review",)
    _nested: ClassVar[dict[str, type]] = {}

    doc: FetchedDocument
    parser_version: str
    elements: tuple[Element, ...]
    pages: int = 0
    pages_for_review: tuple[int, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    cpu_s: float = 0.0
    wall_s: float = 0.0


ParsedDocument._nested = {"doc": FetchedDocument, "elements": Element}


@dataclass(frozen=True)
class Chunk(JsonRecord):
    """One retrievable piece of a document.

    Attributes:
        chunk_id: 32 hex chars, see ``ids.chunk_id``.
        doc_id: the canonical document the chunk belongs to.
        tenant_id: owner tenant.
        text_hash: sha256 hex of ``text``.
        ordinal: position of the chunk in the document.
        heading_path: headings above the chunk, outermost first.
        page: page of the chunk's first element (0 when the format has none).
        text: chunk text (the heading path is not repeated in it).
        token_count: tokens by the embedding model's tokenizer.
        acl_ids: ACL ids allowed to read the chunk.
        ocr_confidence: the lowest OCR confidence (0-100) among the chunk's
            OCR'd elements, None when none of its text was OCR'd (left out
            of the JSON then).
        page_end: page of the chunk's last element (``page`` .. ``page_end``
            is the chunk's page range).
        char_start: where the chunk's text starts in the document's text
            (:func:`document_text`, character offset).
        char_end: where it ends (exclusive); a table piece's range runs from
            its first to its last row (the repeated header row is not counted).
        boxes: the lines the chunk covers, for PDFs and scans (:data:`Box`).
        context: the document's identity (title, issuer or author, period,
            source name) as ``ragsync.ingest.context`` found it: embedded and
            indexed before the heading path and the text, never shown as text.

    The new fields are left out of the JSON while they hold their defaults.
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = ("heading_path", "acl_ids")
    _omit_none: ClassVar[tuple[str, ...]] = ("ocr_confidence",)
    _omit_default: ClassVar[tuple[str, ...]] = ("page_end", "char_start", "char_end", "boxes", "context")
    _tuple_of_tuples: ClassVar[tuple[str, ...]] = ("boxes",)

    chunk_id: str
    doc_id: str
    tenant_id: str
    text_hash: str
    ordinal: int
    heading_path: tuple[str, ...]
    page: int
    text: str
    token_count: int
    acl_ids: tuple[str, ...]
    ocr_confidence: float | None = None
    page_end: int = 0
    char_start: int = 0
    char_end: int = 0
    boxes: tuple[Box, ...] = ()
    context: str = ""

    def search_prefix(self) -> str:
        """What is embedded and indexed before the text: the document's
        identity (``context``) on one line, the heading path on the next
        (either left out when empty)."""
        parts = [self.context] if self.context else []
        if self.heading_path:
            parts.append(" > ".join(self.heading_path))
        return "\n".join(parts)

    def embedding_text(self) -> str:
        """The text given to the embedding model: :meth:`search_prefix`, a blank line, the text."""
        prefix = self.search_prefix()
        return prefix + "\n\n" + self.text if prefix else self.text


@dataclass(frozen=True)
class DeadLetter(JsonRecord):
    """A record of work that failed and was set aside with its reason.

    Attributes:
        stage: pipeline stage that failed (list, fetch, detect, parse, ...).
        doc_id: affected document ('' when unknown, e.g. a malformed event).
        uri: affected object's uri.
        error_class: one of ``errors.ERROR_CLASSES``.
        message: human-readable reason.
        traceback: truncated traceback ('' for expected errors).
        attempts: number of attempts made.
        payload: JSON of the input record, so the work can be retried.
        tenant_id: owner tenant ('' when unknown).
        source_version: version of the failed input.
        event_id: the change event behind the work ('' in a backfill).
    """

    stage: str
    doc_id: str
    uri: str
    error_class: str
    message: str
    traceback: str = ""
    attempts: int = 1
    payload: str = ""
    tenant_id: str = ""
    source_version: str = ""
    event_id: str = ""


@dataclass(frozen=True)
class DocumentPlan(JsonRecord):
    """What the write stage must do for one document.

    Attributes:
        doc: the fetched document (its ``canonical_doc_id`` owns the chunks).
        parser_version: parser that produced the elements.
        chunker_id: chunker config id of the chunks.
        chunks: every chunk of the new version, in order.
        new_ids: ids among ``chunks`` that must be embedded and written.
        vanished_ids: stored ids to delete once the new version is live.
        acl_ids: ACL ids the chunks carry (the union over exact duplicates).
        pages_for_review: pages below the OCR bar, listed for review.
        paragraphs: the hashes of the document's countable paragraphs
            (``chunking.countable_paragraphs``), recorded for boilerplate
            when the version is flipped (left out of the JSON when empty).
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = (
        "new_ids",
        "vanished_ids",
        "acl_ids",
        "pages_for_review",
        "paragraphs",
    )
    _omit_default: ClassVar[tuple[str, ...]] = ("paragraphs",)
    _nested: ClassVar[dict[str, type]] = {}

    doc: FetchedDocument
    parser_version: str
    chunker_id: str
    chunks: tuple[Chunk, ...]
    new_ids: tuple[str, ...]
    vanished_ids: tuple[str, ...]
    acl_ids: tuple[str, ...]
    pages_for_review: tuple[int, ...] = ()
    paragraphs: tuple[str, ...] = ()


DocumentPlan._nested = {"doc": FetchedDocument, "chunks": Chunk}


@dataclass(frozen=True)
class EventLimits:
    """Size limits of a change event: the one home for them. The event schema
    (``connectors.events``) enforces them and the catalog's columns are sized
    from them, so an accepted event can always be stored.

    Attributes:
        source_id: characters of a source id.
        doc_id: characters of the source's object id.
        event_id: characters of an event id (idempotency key).
        source_version: characters of a version.
        content_uri: characters of a content address (PATH_MAX).
        group: characters of one group name.
        groups: groups in one event.
        event_bytes: bytes of one encoded event (a JSON line or message).
    """

    source_id: int = 128
    doc_id: int = 1024
    event_id: int = 255
    source_version: int = 255
    content_uri: int = 4096
    group: int = 255
    groups: int = 256
    event_bytes: int = 1_000_000


EVENT_LIMITS = EventLimits()


@dataclass(frozen=True)
class Event(JsonRecord):
    """A validated change event.

    Attributes:
        event_id: idempotency key (given or derived).
        source_id: registered source.
        doc_id: the source's object id.
        op: upsert, delete or acl.
        source_version: the source's version, as text.
        acl_groups: groups allowed to read the document.
        content_uri: where the bytes are (upserts only).
        event_time: when the change happened, epoch seconds UTC.
        tenant_id: the tenant whose source it is ('' until known: the API
            sets it from the caller's key, ``events push`` from ``--tenant``
            or the source's only owner). Event ids are unique per tenant.
        deny_groups: groups explicitly denied (upsert and acl events).
    """

    _tuple_fields: ClassVar[tuple[str, ...]] = ("acl_groups", "deny_groups")

    event_id: str
    source_id: str
    doc_id: str
    op: str
    source_version: str
    acl_groups: tuple[str, ...]
    content_uri: str
    event_time: float
    tenant_id: str = ""
    deny_groups: tuple[str, ...] = ()

    @property
    def needs_groups(self) -> bool:
        """An upsert or permission change that names no groups (it takes its
        source's default groups, or fails closed without them)."""
        return self.op in ("upsert", "acl") and not self.acl_groups

    def with_default_groups(self, groups: Sequence[str]) -> Event:
        """The event, with ``groups`` (its source's defaults) when it
        :attr:`needs_groups`; otherwise unchanged."""
        chosen = tuple(sorted({g.strip() for g in groups if g.strip()}))
        return dataclasses.replace(self, acl_groups=chosen) if self.needs_groups and chosen else self


@dataclass(frozen=True)
class QueuedEvent(JsonRecord):
    """An event read from the queue, resolved to its tenant and internal id.

    Attributes:
        event: the validated event.
        tenant_id: tenant owning ``event.source_id``.
        doc_id: internal document id (``ids.doc_id``).
        attempts: deliveries before this one that failed.
        version_domain: the source's version domain ('' when undeclared).
    """

    _nested: ClassVar[dict[str, type]] = {}

    event: Event
    tenant_id: str
    doc_id: str
    attempts: int = 0
    version_domain: str = ""


QueuedEvent._nested = {"event": Event}


def payload_field(payload: str, name: str) -> str:
    """A field of a dead letter's payload, wherever the record keeps it.

    Payloads are the JSON of a SourceFile (``name`` at the top), a
    FetchedDocument (under ``source``) or a QueuedEvent (under ``event``).
    Returns '' when the payload is not JSON or has no such field.
    """
    try:
        data = json.loads(payload)
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    for container in (data, data.get("source"), data.get("event")):
        if isinstance(container, dict) and isinstance(container.get(name), str) and container[name]:
            return str(container[name])
    return ""
