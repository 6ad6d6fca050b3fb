"""Documents and what hangs off them: ACLs and parsed documents (copies: ``copies.py``).

Rows: :class:`DocumentRow` (``documents``), :class:`FetchRecord` (what a
fetch writes) and :class:`ParsedRow` (``parsed_docs``). Tables: ``documents``,
``acls``/``acl_groups``, ``parsed_docs``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, func, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now, row_to
from ragsync.catalog.settling import settle_dead_letters
from ragsync.decisions.gate import Stamp
from ragsync.model import FetchedDocument

#: Document statuses written by this module. Other stages may set their own
#: with :meth:`DocumentsRepository.set_status` (for example ``"failed"`` or ``"deleted"``).
STATUS_FETCHED = "fetched"
STATUS_INDEXED = "indexed"
#: A live version is served while a newer version failed (see ``dead_letters``).
STATUS_STALE = "stale"
#: Statuses of a document whose live version is searchable.
LIVE_STATUSES = (STATUS_INDEXED, STATUS_STALE)


def make_indexed_version(content_hash: str, source_version: str) -> str:
    """The ``indexed_version`` string for a live content hash and source version.

    Args:
        content_hash: sha256 hex of the indexed bytes.
        source_version: the source's version of the object.

    Returns:
        ``"<content_hash>@<source_version>"``.
    """
    return f"{content_hash}@{source_version}"


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class DocumentRow:
    """One row of ``documents``.

    Attributes:
        doc_id: namespaced stable id.
        source_id: registered source.
        tenant_id: owner tenant.
        source_object_id: id of the object inside the source.
        uri: where the object was read from.
        mime: detected content type ('' until detection).
        size: bytes (-1 when unknown).
        source_version: the latest fetched source version.
        content_hash: sha256 hex of the latest fetched bytes.
        canonical_doc_id: document whose chunks this content shares.
        acl_id: ACL row of the document's permissions.
        status: pipeline status (``fetched``, ``indexed`` or a stage's own).
        error_class: error class of the last failure, else None.
        parser_version: parser of the live version.
        chunker_id: chunker config of the live version.
        indexed_version: ``content_hash@source_version`` that is live, else None.
        chunk_count: number of chunks of the live version.
        indexed_at: epoch seconds of the last flip, else None.
        deleted_at: epoch seconds of deletion, else None.
        updated_at: epoch seconds of the last write to the row.
        version_domain: domain of ``source_version`` (None: undeclared).
        version_observed_at: when the source showed ``source_version``.
        parent_doc_id: the document this child was cut out of (an e-mail's
            attachment, an archive's member), None for a top-level document.
    """

    doc_id: str
    source_id: str
    tenant_id: str
    source_object_id: str = ""
    uri: str = ""
    mime: str = ""
    size: int = -1
    source_version: str | None = None
    content_hash: str | None = None
    canonical_doc_id: str | None = None
    acl_id: str | None = None
    status: str = STATUS_FETCHED
    error_class: str | None = None
    parser_version: str | None = None
    chunker_id: str | None = None
    indexed_version: str | None = None
    chunk_count: int = 0
    indexed_at: float | None = None
    deleted_at: float | None = None
    updated_at: float = 0.0
    version_domain: str | None = None
    version_observed_at: float | None = None
    parent_doc_id: str | None = None


@dataclass(frozen=True)
class FetchRecord:
    """What :meth:`Catalog.record_fetch` stores about a fetched document: the
    columns of :class:`DocumentRow` of the same names, as fetched (``acl_id``
    built from the object's groups; ``canonical_doc_id`` itself, or the
    document it duplicates; ``mime`` '' when not yet detected)."""

    doc_id: str
    source_id: str
    tenant_id: str
    source_object_id: str
    uri: str
    size: int
    source_version: str
    content_hash: str
    acl_id: str
    canonical_doc_id: str
    mime: str = ""
    version_domain: str | None = None
    version_observed_at: float | None = None
    parent_doc_id: str | None = None

    @classmethod
    def from_fetched(cls, doc: FetchedDocument, parent_doc_id: str | None = None) -> FetchRecord:
        """Build from the pipeline's :class:`~ragsync.model.FetchedDocument`."""
        return cls(
            parent_doc_id=parent_doc_id,
            doc_id=doc.doc_id,
            source_id=doc.source.source_id,
            tenant_id=doc.source.tenant_id,
            source_object_id=doc.source.source_object_id,
            uri=doc.source.uri,
            size=doc.size,
            source_version=doc.source.source_version,
            content_hash=doc.content_hash,
            acl_id=doc.acl_id,
            canonical_doc_id=doc.canonical_doc_id,
            mime=doc.mime,
            version_domain=doc.source.version_domain or None,
            version_observed_at=doc.source.observed_at or None,
        )


@dataclass(frozen=True)
class ParsedRow:
    """One row of ``parsed_docs``: where a parser's output for some bytes is stored.

    Attributes:
        content_hash: sha256 hex of the parsed bytes.
        parser_version: version of the parser.
        elements_uri: object-store uri of the element list.
        pages: number of pages (0 when the format has none).
        pages_for_review: pages not indexed (OCR below the bar).
        ocr_confidence: mean OCR confidence, None when no page was OCR'd.
        doc_metadata: the parser's metadata (title, author, front matter).
    """

    content_hash: str
    parser_version: str
    elements_uri: str
    pages: int
    pages_for_review: tuple[int, ...]
    ocr_confidence: float | None
    doc_metadata: dict[str, str] = field(default_factory=dict)


def _document_from_row(row: Mapping[Any, Any]) -> DocumentRow:
    return row_to(DocumentRow, row)


# --------------------------------------------------------------------- repository


def _make_live(conn: Any, doc_id: str, live_chunk_ids: Sequence[str]) -> None:
    """Exactly ``live_chunk_ids`` of the document's chunk rows are live (the
    others pending), in the caller's transaction (a flip's)."""
    c = schema.chunks
    conn.execute(update(c).where(c.c.doc_id == doc_id).values(pending=True))
    for batch in _batches(sorted(set(live_chunk_ids))):
        conn.execute(update(c).where(c.c.doc_id == doc_id, c.c.chunk_id.in_(batch)).values(pending=False))


def document_update(doc_id: str, **values: Any) -> Any:
    """The statement that sets ``values`` (column=value) on the row of ``doc_id``."""
    t = schema.documents
    return update(t).where(t.c.doc_id == doc_id).values(**values)


class DocumentsRepository(Repository):
    """Documents, ACLs, parsed documents, exact and near duplicates."""

    # -- documents ---------------------------------------------------------------

    def get_document(self, doc_id: str, *, tenant_id: str | None = None) -> DocumentRow | None:
        """The document row, or None when the document is unknown (or, with
        ``tenant_id``, another tenant's)."""
        row = self._find(schema.documents, tenant_id=tenant_id, doc_id=doc_id)
        return None if row is None else _document_from_row(row)

    def find_indexed_by_content(
        self, tenant_id: str, content_hash: str, exclude_doc_id: str
    ) -> DocumentRow | None:
        """Find the canonical indexed copy of some bytes, for exact-duplicate linking.

        Args:
            tenant_id: tenant to search (duplicates never cross tenants).
            content_hash: sha256 hex of the bytes.
            exclude_doc_id: the document asking (never returned).

        Returns:
            The indexed, non-deleted document of the tenant with this content
            hash that is its own canonical document (smallest doc_id if several),
            or None.
        """
        t = schema.documents
        query = (
            select(t)
            .where(
                t.c.tenant_id == tenant_id,
                t.c.content_hash == content_hash,
                t.c.doc_id != exclude_doc_id,
                t.c.status.in_(LIVE_STATUSES),
                t.c.deleted_at.is_(None),
                t.c.canonical_doc_id == t.c.doc_id,
            )
            .order_by(t.c.doc_id)
            .limit(1)
        )
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _document_from_row(row)

    def record_fetch(
        self, doc: FetchRecord | FetchedDocument | DocumentRow, *, parent_doc_id: str | None = None
    ) -> None:
        """Insert or update a document after its bytes were fetched and hashed.

        The status becomes ``fetched`` and ``content_hash`` the new hash,
        except for a document with a live version (``indexed`` or ``stale``):
        it keeps its status, the hash of the live content and the live
        version's stamp (``source_version``, ``version_domain``,
        ``version_observed_at``) until the new version is written
        (``flip_indexed_version``), so it stays searchable, a crash before the
        write leaves a differing hash (the next run redoes it), and no
        observation of the new version is recorded before its write is done
        (the version gate never meets a version nothing wrote).
        ``deleted_at`` and ``error_class`` are cleared; the live-version
        fields (``indexed_version``, ``chunk_count``, ...) are left alone.

        Args:
            doc: the fetched document's identity, version, hash and ACL.
            parent_doc_id: for a ``FetchedDocument`` that is a child document
                (attachment, archive member): its parent's doc id.
        """
        if isinstance(doc, FetchedDocument):
            rec = FetchRecord.from_fetched(doc, parent_doc_id)
        elif isinstance(doc, DocumentRow):
            rec = FetchRecord(
                doc_id=doc.doc_id,
                source_id=doc.source_id,
                tenant_id=doc.tenant_id,
                source_object_id=doc.source_object_id,
                uri=doc.uri,
                size=doc.size,
                source_version=doc.source_version or "",
                content_hash=doc.content_hash or "",
                acl_id=doc.acl_id or "",
                canonical_doc_id=doc.canonical_doc_id or doc.doc_id,
                mime=doc.mime,
                version_domain=doc.version_domain,
                version_observed_at=doc.version_observed_at,
                parent_doc_id=doc.parent_doc_id,
            )
        else:
            rec = doc
        t = schema.documents
        row = dataclasses.asdict(rec)
        row.update(status=STATUS_FETCHED, error_class=None, deleted_at=None, updated_at=_now())

        def keep_indexed(excluded: Any) -> dict[str, Any]:
            # SET expressions see the old row. A document with a live version
            # keeps its status and the hash of the live content until the
            # new version is written (flip_indexed_version): it stays
            # searchable meanwhile, and a differing hash tells the next run
            # the new version is still to do.
            # Likewise its version stamp (source_version, its domain and
            # observation time), which the gate and the write's superseded
            # check compare events with: it is the live version's until the
            # flip records the new one, so a run killed between fetch and
            # write leaves no observation of a version it never wrote.
            live = and_(t.c.status.in_(LIVE_STATUSES), t.c.indexed_version.is_not(None))
            kept = ("content_hash", "source_version", "version_domain", "version_observed_at")
            return {
                "status": case((live, t.c.status), else_=STATUS_FETCHED),
                **{c: case((live, t.c[c]), else_=getattr(excluded, c)) for c in kept},
            }

        updated = [c for c in row if c not in ("doc_id", "status")]
        with self._engine.begin() as conn:
            self._upsert(conn, t, [row], ["doc_id"], updated, overrides=keep_indexed)

    def set_status(self, doc_id: str, status: str, error_class: str | None = None) -> None:
        """Set a document's status and error class (None clears it).

        Args:
            doc_id: the document; an unknown id changes nothing.
            status: new status.
            error_class: error class of the failure, or None.
        """
        with self._engine.begin() as conn:
            conn.execute(document_update(doc_id, status=status, error_class=error_class, updated_at=_now()))

    def flip_indexed_version(
        self,
        doc_id: str,
        *,
        content_hash: str,
        source_version: str,
        indexed_version: str,
        chunker_id: str,
        parser_version: str,
        chunk_count: int,
        indexed_at: float,
        expected_version_guard: str | None = None,
        mime: str | None = None,
        version_domain: str | None = None,
        version_observed_at: float | None = None,
        live_chunk_ids: Sequence[str] | None = None,
        by_event: bool = False,
    ) -> bool:
        """Make a new version of a document live, in one transaction.

        Sets ``content_hash``, ``source_version``, ``indexed_version``,
        ``chunker_id``, ``parser_version``, ``chunk_count``, ``indexed_at``,
        ``status='indexed'`` and clears ``error_class``; the document's open
        dead letters this version settles are resolved in the same
        transaction (``settle_dead_letters``; ``by_event``: the version came
        from a change event).

        Args:
            doc_id: the document.
            content_hash: hash of the indexed bytes.
            source_version: source version of the indexed bytes.
            indexed_version: see :func:`make_indexed_version`.
            chunker_id: chunker config id.
            parser_version: parser version.
            chunk_count: number of chunks now live.
            indexed_at: epoch seconds.
            expected_version_guard: when given, update only if the row's stored
                ``source_version`` still equals it (a newer fetch has not
                overtaken this one).
            mime: detected content type to record (None keeps the stored one).
            version_domain: domain of ``source_version`` (None: undeclared).
            version_observed_at: when the source showed it (None: unknown).
            live_chunk_ids: the new version's chunk ids: in the same
                transaction they stop being pending (queries show them) and
                every other chunk row of the document becomes pending (the
                replaced version's, hidden until deleted). None leaves the
                chunk rows as they are.

        Returns:
            True if the row was updated; False if the document does not exist
            or the guard failed (then nothing changed).
        """
        t = schema.documents
        stmt = update(t).where(t.c.doc_id == doc_id)
        if expected_version_guard is not None:
            stmt = stmt.where(t.c.source_version == expected_version_guard)
        stmt = stmt.values(
            content_hash=content_hash,
            source_version=source_version,
            indexed_version=indexed_version,
            chunker_id=chunker_id,
            parser_version=parser_version,
            chunk_count=chunk_count,
            indexed_at=indexed_at,
            status=STATUS_INDEXED,
            error_class=None,
            updated_at=_now(),
            version_domain=version_domain,
            version_observed_at=version_observed_at,
            **({"mime": mime} if mime is not None else {}),
        )
        with self._engine.begin() as conn:
            if conn.execute(stmt).rowcount != 1:
                return False
            if live_chunk_ids is not None:
                _make_live(conn, doc_id, live_chunk_ids)
            written = Stamp(source_version, version_domain or "", version_observed_at or 0.0)
            settle_dead_letters(conn, doc_id, written, by_event=by_event)
            return True

    def documents_for_source(self, source_id: str) -> list[DocumentRow]:
        """All documents of a source (deleted ones included), ordered by doc_id."""
        t = schema.documents
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.source_id == source_id).order_by(t.c.doc_id)).mappings()
            return [_document_from_row(r) for r in rows]

    def iter_source_documents(
        self, source_id: str, tenant_id: str, *, updated_before: float, page: int = 5000
    ) -> Iterator[tuple[str, str, str]]:
        """(doc_id, source object id, source version) of every document of a
        source that is not deleted, is not a child document (attachments and
        archive members go with their parent) and was last written before
        ``updated_before``, ordered by doc_id and read page by page (never
        all at once): what a full listing compares itself with.
        """
        t = schema.documents
        after = ""
        while True:
            query = (
                select(t.c.doc_id, t.c.source_object_id, t.c.source_version)
                .where(
                    t.c.source_id == source_id,
                    t.c.tenant_id == tenant_id,
                    t.c.status != "deleted",
                    t.c.parent_doc_id.is_(None),  # children go with their parent
                    t.c.updated_at < updated_before,
                    t.c.doc_id > after,
                )
                .order_by(t.c.doc_id)
                .limit(page)
            )
            with self._read_engine.connect() as conn:
                rows = conn.execute(query).all()
            for doc_id, object_id, version in rows:
                yield str(doc_id), str(object_id or ""), str(version or "")
            if len(rows) < page:
                return
            after = str(rows[-1][0])

    def children_of(self, parent_doc_id: str) -> list[DocumentRow]:
        """The live (not deleted) child documents of a parent, by doc_id.

        Args:
            parent_doc_id: the parent (an e-mail, an archive, a child e-mail).

        Returns:
            Its direct children (attachments, archive members); empty when none.
        """
        t = schema.documents
        query = (
            select(t).where(t.c.parent_doc_id == parent_doc_id, t.c.deleted_at.is_(None)).order_by(t.c.doc_id)
        )
        with self._read_engine.connect() as conn:
            return [_document_from_row(r) for r in conn.execute(query).mappings()]

    def gone_doc_ids(self, doc_ids: Sequence[str]) -> set[str]:
        """Of ``doc_ids``, those that are deleted or have no row (their chunk
        rows are leftovers of a delete that stopped part-way)."""
        t = schema.documents
        wanted = sorted(set(doc_ids))
        present: set[str] = set()
        with self._read_engine.connect() as conn:
            for batch in _batches(wanted):
                query = select(t.c.doc_id).where(t.c.doc_id.in_(batch), t.c.deleted_at.is_(None))
                present.update(conn.execute(query).scalars())
        return set(wanted) - present

    def document_counts_by_status(self, tenant_id: str | None = None) -> dict[str, int]:
        """Number of documents per status, for one tenant or all (statuses
        with no document are left out). Summed from ``document_tallies``: a
        few rows per source, never a count of every document."""
        t = schema.document_tallies
        query = select(t.c.status, func.sum(t.c.n)).where(t.c.n > 0).group_by(t.c.status)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return {str(status): int(n) for status, n in conn.execute(query).all()}

    def set_document_acl(self, doc_id: str, acl_id: str) -> None:
        """Record the ACL id a document's permissions now map to.

        A document that was dead-lettered while an earlier attempt at this
        change failed (a store refused the write) is ``indexed`` again once
        the change is applied, when its live version is its current content;
        a document whose newer content failed stays a dead letter.
        """
        t = schema.documents
        recovered = and_(
            t.c.status == "dead_letter",
            t.c.content_hash.is_not(None),
            t.c.indexed_version.like(t.c.content_hash.concat("@%")),
        )
        values = {
            "acl_id": acl_id,
            "updated_at": _now(),
            "status": case((recovered, STATUS_INDEXED), else_=t.c.status),
            "error_class": case((recovered, None), else_=t.c.error_class),
        }
        with self._engine.begin() as conn:
            conn.execute(document_update(doc_id, **values))

    def content_in_use(self, content_hash: str, exclude_doc_id: str) -> bool:
        """True when another live document has these bytes (keep the raw copy)."""
        t = schema.documents
        query = (
            select(func.count())
            .where(t.c.content_hash == content_hash)
            .where(t.c.doc_id != exclude_doc_id)
            .where(t.c.deleted_at.is_(None))
        )
        with self._read_engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0) > 0

    # -- parsed documents ---------------------------------------------------------
