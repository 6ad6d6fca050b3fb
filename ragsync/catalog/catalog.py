"""The catalog: the pipeline's durable bookkeeping in SQLite or PostgreSQL.

One :class:`Catalog` wraps one SQLAlchemy engine. Every write method is
idempotent (an upsert keyed by the row's identity, or an update/delete that
gives the same end state when repeated) and runs in one short transaction
(``engine.begin()``), so an at-least-once pipeline can repeat any step.

Conventions:

* **Timestamps** are float seconds since the Unix epoch, UTC (``time.time()``),
  in parameters, in row dataclasses and in the database. They subtract
  directly (freshness = ``indexed_at - event_time``) and mean the same on
  both backends.
* **Lists** (ACL groups, ACL ids, heading paths, pages for review) are JSON
  text in the database and tuples in the row types.
* **Vectors** are stored as little-endian float32 bytes and returned as
  ``numpy.float32`` arrays, bit-exact.
* **Backends**: ``sqlite:///path`` (or a bare filesystem path) and
  ``postgresql+psycopg://...``. SQLite runs in WAL mode with a 30 s busy
  timeout; its write transactions start with ``BEGIN IMMEDIATE`` so two
  writers queue on the lock instead of failing on a lock upgrade, and reads
  start with a plain ``BEGIN`` so they never wait for a writer.

A ``Catalog`` holds a connection pool and is not picklable: open one per
worker (for Beam, in ``DoFn.setup()``) from :attr:`Catalog.url`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Engine, and_, case, create_engine, event, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.schema import Table

from ragsync.catalog import schema
from ragsync.catalog.migrations import migrate
from ragsync.model import Chunk, DeadLetter, FetchedDocument

#: Document statuses written by this module. Other stages may set their own
#: with :meth:`Catalog.set_status` (for example ``"failed"`` or ``"deleted"``).
STATUS_FETCHED = "fetched"
STATUS_INDEXED = "indexed"

#: Largest number of values bound into one ``IN (...)`` clause or insert batch.
BATCH_SIZE = 500

_SQLITE_BEGIN_OPTION = "ragsync_sqlite_begin"

T = TypeVar("T")


def _now() -> float:
    return time.time()


def _batches(items: Sequence[T], size: int = BATCH_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _json_list(values: Iterable[Any]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


def _tuple_from_json(text: str | None) -> tuple[Any, ...]:
    return tuple(json.loads(text)) if text else ()


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


@dataclass(frozen=True)
class FetchRecord:
    """What :meth:`Catalog.record_fetch` stores about a fetched document.

    Attributes:
        doc_id: namespaced stable id.
        source_id: registered source.
        tenant_id: owner tenant.
        source_object_id: id of the object inside the source.
        uri: where the object was read from.
        size: bytes.
        source_version: the source's version of the object.
        content_hash: sha256 hex of the bytes.
        acl_id: ACL row built from the object's groups.
        canonical_doc_id: itself, or the document it duplicates.
        mime: detected content type ('' when not yet detected).
    """

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

    @classmethod
    def from_fetched(cls, doc: FetchedDocument) -> FetchRecord:
        """Build from the pipeline's :class:`~ragsync.model.FetchedDocument`."""
        return cls(
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
    """

    content_hash: str
    parser_version: str
    elements_uri: str
    pages: int
    pages_for_review: tuple[int, ...]
    ocr_confidence: float | None


@dataclass(frozen=True)
class DeadLetterRow:
    """One row of ``dead_letters``.

    Attributes:
        id: row id, increasing in insertion order.
        created_at: epoch seconds when it was recorded.
        tenant_id: owner tenant ('' when unknown).
        source_id: source ('' when unknown).
        doc_id: affected document ('' when unknown).
        uri: affected object's uri.
        stage: pipeline stage that failed.
        error_class: one of ``ragsync.errors.ERROR_CLASSES``.
        message: human-readable reason.
        traceback: truncated traceback ('' for expected errors).
        attempts: attempts made.
        payload: JSON of the input record, for a retry.
        source_version: version of the failed input.
        resolved_at: epoch seconds when resolved, None while open.
    """

    id: int
    created_at: float
    tenant_id: str
    source_id: str
    doc_id: str
    uri: str
    stage: str
    error_class: str
    message: str
    traceback: str
    attempts: int
    payload: str
    source_version: str
    resolved_at: float | None

    def to_dead_letter(self) -> DeadLetter:
        """The pipeline record this row was made from (without ids and times)."""
        return DeadLetter(
            stage=self.stage,
            doc_id=self.doc_id,
            uri=self.uri,
            error_class=self.error_class,
            message=self.message,
            traceback=self.traceback,
            attempts=self.attempts,
            payload=self.payload,
            tenant_id=self.tenant_id,
            source_version=self.source_version,
        )


def _chunk_from_row(row: RowMapping) -> Chunk:
    return Chunk(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        tenant_id=row["tenant_id"],
        text_hash=row["text_hash"],
        ordinal=row["ordinal"],
        heading_path=_tuple_from_json(row["heading_path"]),
        page=row["page"],
        text=row["text"],
        token_count=row["token_count"],
        acl_ids=_tuple_from_json(row["acl_ids"]),
    )


def _document_from_row(row: RowMapping) -> DocumentRow:
    return DocumentRow(**dict(row))


# ------------------------------------------------------------------------- engine


def normalize_url(url: str) -> str:
    """Turn a bare filesystem path into a SQLite URL; leave URLs alone.

    Args:
        url: ``dialect+driver://...`` or a filesystem path.

    Returns:
        The URL; a path becomes ``sqlite:///<absolute path>``.
    """
    if "://" in url:
        return url
    return f"sqlite:///{Path(url).expanduser().resolve()}"


def create_catalog_engine(url: str) -> Engine:
    """Create an engine configured for the catalog.

    SQLite: WAL, ``busy_timeout`` 30 s and ``synchronous=NORMAL`` on every
    connection; the driver's legacy transaction handling is switched off and
    SQLAlchemy emits ``BEGIN IMMEDIATE`` for transactions (``BEGIN DEFERRED``
    when the connection has the execution option ``ragsync_sqlite_begin``),
    which makes DDL transactional and queues writers on the lock. The parent
    directory of a database file is created.

    Args:
        url: a SQLAlchemy URL or a bare filesystem path (SQLite).

    Returns:
        The engine (no connection is opened yet).
    """
    url = normalize_url(url)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)

    database = url.split(":///", 1)[1] if ":///" in url else ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30.0})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level; SQLAlchemy's "begin" hook below owns BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 30000")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


# ------------------------------------------------------------------------ catalog


class Catalog:
    """Typed access to the catalog tables.

    Open with :meth:`Catalog.open`; close with :meth:`close` (or use it as a
    context manager). All methods raise ``sqlalchemy.exc.SQLAlchemyError`` when
    the database fails; a failed write method has changed nothing (its
    transaction is rolled back).
    """

    def __init__(self, engine: Engine, url: str) -> None:
        """Wrap an engine whose schema is already migrated; prefer :meth:`open`."""
        self._engine = engine
        self._url = url
        self._dialect = engine.dialect.name
        self._read_engine = engine.execution_options(**{_SQLITE_BEGIN_OPTION: "DEFERRED"})

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    def open(cls, url: str) -> Catalog:
        """Connect, apply missing migrations and return the catalog.

        Args:
            url: ``sqlite:///path``, a bare filesystem path (SQLite; parent
                directories are created) or ``postgresql+psycopg://...``.

        Returns:
            An open catalog.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or a
                migration fails.
        """
        url = normalize_url(url)
        engine = create_catalog_engine(url)
        try:
            migrate(engine)
        except Exception:
            engine.dispose()
            raise
        return cls(engine, url)

    @property
    def url(self) -> str:
        """The normalized database URL (may contain a password: do not log it)."""
        return self._url

    @property
    def engine(self) -> Engine:
        """The underlying engine, for queries this class does not offer."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection. Safe to call twice."""
        self._engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------

    def _upsert(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        keys: Sequence[str],
        update_columns: Sequence[str] | None,
        overrides: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        """INSERT ... ON CONFLICT (keys) DO UPDATE / DO NOTHING, per dialect.

        ``update_columns=None`` means DO NOTHING. ``overrides``, given the
        statement's ``excluded`` namespace, returns extra ``column: expression``
        assignments for the DO UPDATE.
        Rows must be unique on ``keys`` (PostgreSQL refuses to update one row
        twice in a statement).
        """
        if not rows:
            return
        stmt = postgresql.insert(table) if self._dialect == "postgresql" else sqlite.insert(table)
        if update_columns is None:
            final = stmt.on_conflict_do_nothing(index_elements=list(keys))
        else:
            set_: dict[str, Any] = {name: stmt.excluded[name] for name in update_columns}
            if overrides is not None:
                set_.update(overrides(stmt.excluded))
            final = stmt.on_conflict_do_update(index_elements=list(keys), set_=set_)
        for batch in _batches(rows):
            conn.execute(final, list(batch))

    # -- sources and ACLs --------------------------------------------------------

    def ensure_source(self, source_id: str, tenant_id: str, type: str, uri: str = "") -> None:
        """Register a source if it is not registered yet.

        Args:
            source_id: id of the source.
            tenant_id: owner tenant.
            type: connector type (``drive``, ``wiki``, ``filesystem``, ...).
            uri: root of the source.

        Raises:
            ValueError: the source exists under another tenant (nothing changed).
        """
        t = schema.sources
        with self._engine.begin() as conn:
            row = {
                "source_id": source_id,
                "tenant_id": tenant_id,
                "type": type,
                "uri": uri,
                "created_at": _now(),
            }
            self._upsert(conn, t, [row], ["source_id"], None)
            owner = conn.execute(select(t.c.tenant_id).where(t.c.source_id == source_id)).scalar_one()
            if owner != tenant_id:
                raise ValueError(f"source {source_id!r} belongs to tenant {owner!r}, not {tenant_id!r}")

    def upsert_acl(self, acl_id: str, tenant_id: str, groups: Sequence[str]) -> None:
        """Create or replace an ACL row and its group lookup rows.

        Args:
            acl_id: ACL id (stable for a set of groups).
            tenant_id: owner tenant.
            groups: groups allowed to read; stored sorted and de-duplicated.
        """
        unique = sorted(set(groups))
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.acls,
                [
                    {
                        "acl_id": acl_id,
                        "tenant_id": tenant_id,
                        "allow_groups": _json_list(unique),
                        "updated_at": _now(),
                    }
                ],
                ["acl_id"],
                ["tenant_id", "allow_groups", "updated_at"],
            )
            conn.execute(schema.acl_groups.delete().where(schema.acl_groups.c.acl_id == acl_id))
            if unique:
                conn.execute(
                    schema.acl_groups.insert(),
                    [{"tenant_id": tenant_id, "group_name": g, "acl_id": acl_id} for g in unique],
                )

    def get_acl_groups(self, acl_id: str) -> tuple[str, ...] | None:
        """The groups of an ACL, sorted, or None when the ACL does not exist."""
        with self._read_engine.connect() as conn:
            text = conn.execute(
                select(schema.acls.c.allow_groups).where(schema.acls.c.acl_id == acl_id)
            ).scalar_one_or_none()
        return None if text is None else _tuple_from_json(text)

    def acl_ids_for_groups(self, tenant_id: str, groups: Sequence[str]) -> list[str]:
        """ACL ids of a tenant that allow at least one of the groups.

        Args:
            tenant_id: tenant; ACLs of other tenants are never returned.
            groups: the reader's groups.

        Returns:
            Sorted, unique ACL ids; ``[]`` when ``groups`` is empty.
        """
        unique = sorted(set(groups))
        if not unique:
            return []
        t = schema.acl_groups
        found: set[str] = set()
        with self._read_engine.connect() as conn:
            for batch in _batches(unique):
                query = select(t.c.acl_id).where(t.c.tenant_id == tenant_id, t.c.group_name.in_(batch))
                found.update(conn.execute(query).scalars())
        return sorted(found)

    # -- documents ---------------------------------------------------------------

    def get_document(self, doc_id: str) -> DocumentRow | None:
        """The document row, or None when the document is unknown."""
        t = schema.documents
        with self._read_engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.doc_id == doc_id)).mappings().first()
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
                t.c.status == STATUS_INDEXED,
                t.c.deleted_at.is_(None),
                t.c.canonical_doc_id == t.c.doc_id,
            )
            .order_by(t.c.doc_id)
            .limit(1)
        )
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else _document_from_row(row)

    def record_fetch(self, doc: FetchRecord | FetchedDocument | DocumentRow) -> None:
        """Insert or update a document after its bytes were fetched and hashed.

        The status becomes ``fetched``, except that a document already
        ``indexed`` with the same content hash stays ``indexed`` (nothing to
        redo). ``deleted_at`` and ``error_class`` are cleared; the live-version
        fields (``indexed_version``, ``chunk_count``, ...) are left alone.

        Args:
            doc: the fetched document's identity, version, hash and ACL.
        """
        if isinstance(doc, FetchedDocument):
            rec = FetchRecord.from_fetched(doc)
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
            )
        else:
            rec = doc
        t = schema.documents
        row = dataclasses.asdict(rec)
        row.update(status=STATUS_FETCHED, error_class=None, deleted_at=None, updated_at=_now())

        def keep_indexed(excluded: Any) -> dict[str, Any]:
            # SET expressions see the old row, so this compares stored vs new hash.
            same = and_(t.c.status == STATUS_INDEXED, t.c.content_hash == excluded.content_hash)
            return {"status": case((same, STATUS_INDEXED), else_=STATUS_FETCHED)}

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
        t = schema.documents
        with self._engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.doc_id == doc_id)
                .values(status=status, error_class=error_class, updated_at=_now())
            )

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
    ) -> bool:
        """Make a new version of a document live, in one transaction.

        Sets ``content_hash``, ``source_version``, ``indexed_version``,
        ``chunker_id``, ``parser_version``, ``chunk_count``, ``indexed_at``,
        ``status='indexed'`` and clears ``error_class``.

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
            **({"mime": mime} if mime is not None else {}),
        )
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def documents_for_source(self, source_id: str) -> list[DocumentRow]:
        """All documents of a source (deleted ones included), ordered by doc_id."""
        t = schema.documents
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.source_id == source_id).order_by(t.c.doc_id)).mappings()
            return [_document_from_row(r) for r in rows]

    def document_counts_by_status(self, tenant_id: str | None = None) -> dict[str, int]:
        """Number of documents per status, for one tenant or all."""
        t = schema.documents
        query = select(t.c.status, func.count()).group_by(t.c.status)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return {status: int(n) for status, n in conn.execute(query).all()}

    # -- parsed documents ---------------------------------------------------------

    def get_parsed(self, content_hash: str, parser_version: str) -> ParsedRow | None:
        """The stored parse of some bytes by a parser version, or None."""
        t = schema.parsed_docs
        with self._read_engine.connect() as conn:
            row = (
                conn.execute(
                    select(t).where(t.c.content_hash == content_hash, t.c.parser_version == parser_version)
                )
                .mappings()
                .first()
            )
        if row is None:
            return None
        return ParsedRow(
            content_hash=row["content_hash"],
            parser_version=row["parser_version"],
            elements_uri=row["elements_uri"],
            pages=row["pages"],
            pages_for_review=tuple(int(p) for p in _tuple_from_json(row["pages_for_review"])),
            ocr_confidence=row["ocr_confidence"],
        )

    def put_parsed(
        self,
        content_hash: str,
        parser_version: str,
        elements_uri: str,
        pages: int,
        pages_for_review: Sequence[int] = (),
        ocr_confidence: float | None = None,
    ) -> None:
        """Record (or overwrite) where a parse of some bytes is stored.

        Args:
            content_hash: sha256 hex of the bytes.
            parser_version: version of the parser.
            elements_uri: object-store uri of the elements.
            pages: number of pages.
            pages_for_review: pages not indexed.
            ocr_confidence: mean OCR confidence, or None.
        """
        row = {
            "content_hash": content_hash,
            "parser_version": parser_version,
            "elements_uri": elements_uri,
            "pages": pages,
            "pages_for_review": _json_list(int(p) for p in pages_for_review),
            "ocr_confidence": ocr_confidence,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.parsed_docs,
                [row],
                ["content_hash", "parser_version"],
                ["elements_uri", "pages", "pages_for_review", "ocr_confidence"],
            )

    # -- chunks ---------------------------------------------------------------------

    def chunk_ids_for_doc(self, doc_id: str) -> set[str]:
        """Ids of the stored chunks of a (canonical) document."""
        t = schema.chunks
        with self._read_engine.connect() as conn:
            return set(conn.execute(select(t.c.chunk_id).where(t.c.doc_id == doc_id)).scalars())

    def chunks_for_doc(self, doc_id: str) -> list[Chunk]:
        """The stored chunks of a (canonical) document, ordered by ordinal."""
        t = schema.chunks
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.doc_id == doc_id).order_by(t.c.ordinal, t.c.chunk_id))
            return [_chunk_from_row(r) for r in rows.mappings()]

    def write_chunks(self, chunks: Sequence[Chunk]) -> int:
        """Insert or update chunks by chunk_id, in one transaction.

        ``near_dup_group`` of an existing row is kept.

        Args:
            chunks: chunks to store; for a repeated chunk_id the last one wins.

        Returns:
            Number of distinct chunk ids written.
        """
        by_id: dict[str, dict[str, Any]] = {}
        for c in chunks:
            by_id[c.chunk_id] = {
                "chunk_id": c.chunk_id,
                "doc_id": c.doc_id,
                "tenant_id": c.tenant_id,
                "text_hash": c.text_hash,
                "ordinal": c.ordinal,
                "heading_path": _json_list(c.heading_path),
                "page": c.page,
                "text": c.text,
                "token_count": c.token_count,
                "acl_ids": _json_list(c.acl_ids),
            }
        if not by_id:
            return 0
        columns = [name for name in next(iter(by_id.values())) if name != "chunk_id"]
        with self._engine.begin() as conn:
            self._upsert(conn, schema.chunks, list(by_id.values()), ["chunk_id"], columns)
        return len(by_id)

    def delete_chunks(self, chunk_ids: Sequence[str], *, tenant_id: str | None = None) -> int:
        """Delete chunks by id, in one transaction.

        Args:
            chunk_ids: ids to delete; unknown ids are ignored.
            tenant_id: when given, only that tenant's chunks are deleted.

        Returns:
            Number of rows deleted (0 when repeated).
        """
        t = schema.chunks
        ids = sorted(set(chunk_ids))
        deleted = 0
        with self._engine.begin() as conn:
            for batch in _batches(ids):
                stmt = t.delete().where(t.c.chunk_id.in_(batch))
                if tenant_id is not None:
                    stmt = stmt.where(t.c.tenant_id == tenant_id)
                deleted += conn.execute(stmt).rowcount
        return deleted

    def chunks_by_ids(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        """Stored chunks by id; ids not stored are absent from the result."""
        t = schema.chunks
        ids = sorted(set(chunk_ids))
        out: dict[str, Chunk] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(ids):
                for row in conn.execute(select(t).where(t.c.chunk_id.in_(batch))).mappings():
                    out[row["chunk_id"]] = _chunk_from_row(row)
        return out

    def chunk_counts_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Number of stored chunks per doc_id, for one tenant or all."""
        t = schema.chunks
        query = select(t.c.doc_id, func.count()).group_by(t.c.doc_id)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return {doc_id: int(n) for doc_id, n in conn.execute(query).all()}

    def set_chunk_acl_ids(self, doc_id: str, acl_ids: Sequence[str], *, tenant_id: str | None = None) -> int:
        """Replace the ACL ids of every chunk of a document (permission change).

        Args:
            doc_id: the canonical document.
            acl_ids: the new ACL ids, stored in the given order.
            tenant_id: when given, only that tenant's chunks are touched.

        Returns:
            Number of chunk rows matched.
        """
        t = schema.chunks
        stmt = update(t).where(t.c.doc_id == doc_id).values(acl_ids=_json_list(acl_ids))
        if tenant_id is not None:
            stmt = stmt.where(t.c.tenant_id == tenant_id)
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount

    # -- embedding cache -------------------------------------------------------------

    def get_embeddings(self, text_hashes: Sequence[str], model_version: str) -> dict[str, np.ndarray]:
        """Cached vectors by text hash for one model version.

        Args:
            text_hashes: hashes to look up (duplicates allowed).
            model_version: the embedding model's version.

        Returns:
            ``{text_hash: float32 vector}`` for the hashes found (misses absent).

        Raises:
            ValueError: a stored vector's byte length does not match its dim.
        """
        t = schema.embedding_cache
        hashes = sorted(set(text_hashes))
        out: dict[str, np.ndarray] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(hashes):
                query = select(t.c.text_hash, t.c.dim, t.c.vector).where(
                    t.c.model_version == model_version, t.c.text_hash.in_(batch)
                )
                for text_hash, dim, blob in conn.execute(query).all():
                    data = bytes(blob)
                    if len(data) != dim * 4:
                        raise ValueError(
                            f"embedding {text_hash}/{model_version}: {len(data)} bytes for dim {dim}"
                        )
                    out[text_hash] = np.frombuffer(data, dtype="<f4").astype(np.float32)
        return out

    def put_embeddings(self, items: Mapping[str, np.ndarray], model_version: str) -> int:
        """Store vectors by text hash for one model version (insert or overwrite).

        Args:
            items: ``{text_hash: vector}``; vectors are cast to float32.
            model_version: the embedding model's version.

        Returns:
            Number of vectors written.

        Raises:
            ValueError: a vector is not 1-D, is empty, or has a non-finite value
                (nothing is written then).
        """
        rows = []
        for text_hash, vector in items.items():
            arr = np.asarray(vector, dtype=np.float32)
            if arr.ndim != 1 or arr.size == 0:
                raise ValueError(f"embedding {text_hash}: expected a non-empty 1-D vector, got {arr.shape}")
            if not np.isfinite(arr).all():
                raise ValueError(f"embedding {text_hash}: non-finite values")
            rows.append(
                {
                    "text_hash": text_hash,
                    "model_version": model_version,
                    "dim": int(arr.size),
                    "vector": arr.astype("<f4").tobytes(),
                }
            )
        if rows:
            with self._engine.begin() as conn:
                self._upsert(
                    conn, schema.embedding_cache, rows, ["text_hash", "model_version"], ["dim", "vector"]
                )
        return len(rows)

    # -- dead letters ---------------------------------------------------------------------

    def add_dead_letter(self, dl: DeadLetter, source_id: str = "") -> int:
        """Record a dead letter (every call adds a row).

        Args:
            dl: the pipeline's dead-letter record.
            source_id: source of the failed work ('' when unknown).

        Returns:
            The new row's id.
        """
        row = {
            "created_at": _now(),
            "tenant_id": dl.tenant_id,
            "source_id": source_id,
            "doc_id": dl.doc_id,
            "uri": dl.uri,
            "stage": dl.stage,
            "error_class": dl.error_class,
            "message": dl.message,
            "traceback": dl.traceback,
            "attempts": dl.attempts,
            "payload": dl.payload,
            "source_version": dl.source_version,
        }
        with self._engine.begin() as conn:
            result = conn.execute(schema.dead_letters.insert().values(**row))
            pk = result.inserted_primary_key
            assert pk is not None
            return int(pk[0])

    def resolve_dead_letter(self, dead_letter_id: int, resolved_at: float | None = None) -> bool:
        """Mark a dead letter resolved (kept for audit, hidden from open lists).

        Returns:
            True if an open dead letter was resolved; False if unknown or already resolved.
        """
        t = schema.dead_letters
        stmt = (
            update(t)
            .where(t.c.id == dead_letter_id, t.c.resolved_at.is_(None))
            .values(resolved_at=_now() if resolved_at is None else resolved_at)
        )
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def list_dead_letters(
        self,
        *,
        tenant_id: str | None = None,
        source_id: str | None = None,
        unresolved_only: bool = True,
        limit: int = 100,
    ) -> list[DeadLetterRow]:
        """Dead letters, oldest first (by id).

        Args:
            tenant_id: only this tenant's, when given.
            source_id: only this source's, when given.
            unresolved_only: skip resolved ones.
            limit: maximum number of rows.

        Returns:
            The rows.
        """
        t = schema.dead_letters
        query = select(t).order_by(t.c.id).limit(limit)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        if source_id is not None:
            query = query.where(t.c.source_id == source_id)
        if unresolved_only:
            query = query.where(t.c.resolved_at.is_(None))
        with self._read_engine.connect() as conn:
            return [DeadLetterRow(**dict(r)) for r in conn.execute(query).mappings()]

    def dead_letter_counts(self) -> dict[str, int]:
        """Number of unresolved dead letters per error class."""
        t = schema.dead_letters
        query = (
            select(t.c.error_class, func.count()).where(t.c.resolved_at.is_(None)).group_by(t.c.error_class)
        )
        with self._read_engine.connect() as conn:
            return {error_class: int(n) for error_class, n in conn.execute(query).all()}

    # -- exact duplicates, ACL changes and sweeps -----------------------------

    def mark_duplicate(self, doc_id: str, canonical_doc_id: str) -> None:
        """Record that ``doc_id`` is an exact copy served by ``canonical_doc_id``'s
        chunks: status ``duplicate``, no chunks of its own."""
        t = schema.documents
        with self._engine.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.doc_id == doc_id)
                .values(
                    canonical_doc_id=canonical_doc_id,
                    status="duplicate",
                    error_class=None,
                    indexed_at=_now(),
                    updated_at=_now(),
                )
            )

    def duplicate_acl_ids(self, canonical_doc_id: str) -> list[str]:
        """ACL ids of the live exact copies that ``canonical_doc_id`` serves."""
        return sorted({d.acl_id for d in self.duplicates_of(canonical_doc_id) if d.acl_id})

    def set_document_acl(self, doc_id: str, acl_id: str) -> None:
        """Record the ACL id a document's permissions now map to."""
        t = schema.documents
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.c.doc_id == doc_id).values(acl_id=acl_id, updated_at=_now()))

    def tenant_ids(self) -> list[str]:
        """Every tenant that owns a source or a document."""
        with self._read_engine.connect() as conn:
            a = {r for (r,) in conn.execute(select(schema.sources.c.tenant_id).distinct()).all()}
            b = {r for (r,) in conn.execute(select(schema.documents.c.tenant_id).distinct()).all()}
        return sorted(x for x in a | b if x)

    def chunk_ids_for_tenant(self, tenant_id: str) -> set[str]:
        """Every chunk id of a tenant (for the orphan sweep)."""
        t = schema.chunks
        with self._read_engine.connect() as conn:
            return {r for (r,) in conn.execute(select(t.c.chunk_id).where(t.c.tenant_id == tenant_id)).all()}

    def record_dead_letter(self, dl: DeadLetter, source_id: str = "") -> tuple[int, bool]:
        """Record a dead letter once and mark its document.

        A replay of the same failure (same document, stage, error class and
        source version, still unresolved) adds no second row. The document's
        row gets status ``dead_letter`` and the error class; a document that
        failed before it had a row (say, an empty file) gets a minimal row so
        coverage counts see it.

        Returns:
            (dead letter id, True when a new row was added).
        """
        t = schema.dead_letters
        if dl.doc_id:
            query = (
                select(t.c.id)
                .where(t.c.doc_id == dl.doc_id)
                .where(t.c.stage == dl.stage)
                .where(t.c.error_class == dl.error_class)
                .where(t.c.source_version == dl.source_version)
                .where(t.c.resolved_at.is_(None))
                .limit(1)
            )
            with self._read_engine.connect() as conn:
                existing = conn.execute(query).scalar()
            if existing is not None:
                self._mark_dead(dl, source_id)
                return int(existing), False
        new_id = self.add_dead_letter(dl, source_id=source_id)
        self._mark_dead(dl, source_id)
        return new_id, True

    def _mark_dead(self, dl: DeadLetter, source_id: str) -> None:
        if not dl.doc_id:
            return
        t = schema.documents
        with self._engine.begin() as conn:
            updated = conn.execute(
                update(t)
                .where(t.c.doc_id == dl.doc_id)
                .values(status="dead_letter", error_class=dl.error_class, updated_at=_now())
            ).rowcount
            if updated == 0:
                row = {
                    "doc_id": dl.doc_id,
                    "source_id": source_id,
                    "tenant_id": dl.tenant_id,
                    "uri": dl.uri,
                    "source_version": dl.source_version,
                    "status": "dead_letter",
                    "error_class": dl.error_class,
                    "updated_at": _now(),
                }
                self._upsert(conn, t, [row], ["doc_id"], ["status", "error_class", "updated_at"])

    # -- the local event queue ----------------------------------------------
    # The events table is the durable queue of the local default (Pub/Sub or
    # Kafka in production). States: pending -> done, or pending -> dead after
    # the last attempt. ``available_at`` delays a retry (backoff).

    def enqueue_events(self, events: Sequence[Any], *, now: float | None = None) -> tuple[int, int]:
        """Add events (``connectors.events.Event``) to the queue.

        Idempotent on ``event_id``: a redelivered event is not queued twice.

        Returns:
            (newly queued, duplicates ignored).
        """
        t = schema.events
        ts = _now() if now is None else now
        rows = [
            {
                "event_id": e.event_id,
                "source_id": e.source_id,
                "doc_id": e.doc_id,
                "op": e.op,
                "source_version": e.source_version,
                "payload": e.to_json(),
                "event_time": e.event_time,
                "enqueued_at": ts,
                "attempts": 0,
                "state": "pending",
                "available_at": ts,
            }
            for e in events
        ]
        if not rows:
            return 0, 0
        ids = [r["event_id"] for r in rows]
        with self._engine.begin() as conn:
            existing = {r for (r,) in conn.execute(select(t.c.event_id).where(t.c.event_id.in_(ids))).all()}
            fresh = [r for r in rows if r["event_id"] not in existing]
            unique: dict[str, dict[str, Any]] = {}
            for r in fresh:
                unique.setdefault(r["event_id"], r)
            if unique:
                self._upsert(conn, t, list(unique.values()), ["event_id"], None)
        return len(unique), len(rows) - len(unique)

    def pending_events(self, *, limit: int = 500, now: float | None = None) -> list[dict[str, Any]]:
        """Pending events that are due, oldest first (rows as dicts)."""
        t = schema.events
        ts = _now() if now is None else now
        query = (
            select(t)
            .where(t.c.state == "pending")
            .where(t.c.available_at <= ts)
            .order_by(t.c.enqueued_at, t.c.event_id)
            .limit(limit)
        )
        with self._read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        t = schema.events
        with self._read_engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.event_id == event_id)).mappings().first()
        return dict(row) if row is not None else None

    def ack_events(self, event_ids: Sequence[str], state: str = "done") -> int:
        """Mark events finished (``done``, ``stale``, ``duplicate`` or ``dead``)."""
        t = schema.events
        n = 0
        with self._engine.begin() as conn:
            for batch in _batches(list(event_ids)):
                n += conn.execute(update(t).where(t.c.event_id.in_(batch)).values(state=state)).rowcount
        return n

    def retry_event_later(self, event_id: str, delay_s: float, *, max_attempts: int = 5) -> str:
        """Count a failed attempt; requeue after ``delay_s`` or mark ``dead``.

        Returns:
            The event's new state: ``pending`` or ``dead``.
        """
        t = schema.events
        with self._engine.begin() as conn:
            row = conn.execute(select(t.c.attempts).where(t.c.event_id == event_id)).first()
            if row is None:
                return "missing"
            attempts = int(row[0]) + 1
            state = "dead" if attempts >= max_attempts else "pending"
            conn.execute(
                update(t)
                .where(t.c.event_id == event_id)
                .values(attempts=attempts, state=state, available_at=_now() + delay_s)
            )
        return state

    def requeue_event(self, event_id: str) -> bool:
        """Put a finished or dead event back in the queue (dead-letter retry)."""
        t = schema.events
        with self._engine.begin() as conn:
            return (
                conn.execute(
                    update(t)
                    .where(t.c.event_id == event_id)
                    .values(state="pending", attempts=0, available_at=_now())
                ).rowcount
                == 1
            )

    def queue_stats(self, *, now: float | None = None) -> dict[str, Any]:
        """Queue depth by state and the age of the oldest pending event."""
        t = schema.events
        ts = _now() if now is None else now
        with self._read_engine.connect() as conn:
            by_state = {
                s: int(n) for s, n in conn.execute(select(t.c.state, func.count()).group_by(t.c.state)).all()
            }
            oldest = conn.execute(select(func.min(t.c.enqueued_at)).where(t.c.state == "pending")).scalar()
        return {
            "by_state": by_state,
            "depth": by_state.get("pending", 0),
            "oldest_pending_age_s": round(ts - float(oldest), 3) if oldest is not None else 0.0,
        }

    # -- streaming sync: sources, leases, tombstones, permission versions -----

    def get_source(self, source_id: str) -> dict[str, Any] | None:
        """The source row as a dict, or None."""
        t = schema.sources
        with self._read_engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.source_id == source_id)).mappings().first()
        return dict(row) if row is not None else None

    def claim_events(
        self, *, limit: int = 100, lease_s: float = 300.0, now: float | None = None
    ) -> list[dict[str, Any]]:
        """Lease up to ``limit`` due pending events, oldest first.

        A leased event stays ``pending`` with ``available_at`` moved ``lease_s``
        ahead: if the worker dies before acknowledging it, it is delivered
        again when the lease ends (at-least-once). Rows come back as dicts.
        """
        t = schema.events
        ts = _now() if now is None else now
        with self._engine.begin() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    select(t)
                    .where(t.c.state == "pending")
                    .where(t.c.available_at <= ts)
                    .order_by(t.c.enqueued_at, t.c.event_id)
                    .limit(limit)
                ).mappings()
            ]
            ids = [r["event_id"] for r in rows]
            for batch in _batches(ids):
                conn.execute(
                    update(t)
                    .where(t.c.event_id.in_(batch))
                    .where(t.c.state == "pending")
                    .values(available_at=ts + lease_s)
                )
        return rows

    def unfinished_events(self) -> int:
        """Pending events, leased or not (the queue is drained at 0)."""
        t = schema.events
        with self._read_engine.connect() as conn:
            return int(conn.execute(select(func.count()).where(t.c.state == "pending")).scalar() or 0)

    def get_tombstone(self, doc_id: str) -> dict[str, Any] | None:
        t = schema.tombstones
        with self._read_engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.doc_id == doc_id)).mappings().first()
        return dict(row) if row is not None else None

    def put_tombstone(self, doc_id: str, tenant_id: str, source_version: str) -> None:
        """Record a delete (the tombstone blocks older upserts) and mark the
        document deleted; completion is recorded by ``complete_tombstone``."""
        ts = _now()
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "source_version": source_version,
            "deleted_at": ts,
            "completed_at": None,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn, schema.tombstones, [row], ["doc_id"], ["source_version", "deleted_at", "completed_at"]
            )
            d = schema.documents
            conn.execute(
                update(d)
                .where(d.c.doc_id == doc_id)
                .values(status="deleted", deleted_at=ts, chunk_count=0, updated_at=ts)
            )

    def complete_tombstone(self, doc_id: str) -> None:
        t = schema.tombstones
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.c.doc_id == doc_id).values(completed_at=_now()))

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

    def get_acl_version(self, doc_id: str) -> dict[str, Any] | None:
        t = schema.acl_versions
        with self._read_engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.doc_id == doc_id)).mappings().first()
        return dict(row) if row is not None else None

    def set_acl_version(self, doc_id: str, tenant_id: str, acl_version: str, acl_id: str) -> None:
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "acl_version": acl_version,
            "acl_id": acl_id,
            "updated_at": _now(),
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn, schema.acl_versions, [row], ["doc_id"], ["acl_version", "acl_id", "updated_at"]
            )

    def record_freshness(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store (event_id, source_id, tenant_id, op, lane, event_time,
        applied_at) rows; a replayed event keeps its first measurement."""
        if not rows:
            return
        with self._engine.begin() as conn:
            self._upsert(conn, schema.freshness, [dict(r) for r in rows], ["event_id"], None)

    def freshness_stats(self, *, since: float | None = None) -> list[dict[str, Any]]:
        """p50/p95 of applied_at - event_time per source, lane and kind
        (``content`` for upserts, ``permissions`` for acl and delete)."""
        t = schema.freshness
        query = select(t.c.source_id, t.c.lane, t.c.op, t.c.event_time, t.c.applied_at)
        if since is not None:
            query = query.where(t.c.applied_at >= since)
        groups: dict[tuple[str, str, str], list[float]] = {}
        with self._read_engine.connect() as conn:
            for source_id, lane, op, event_time, applied_at in conn.execute(query).all():
                kind = "content" if op == "upsert" else "permissions"
                groups.setdefault((source_id, lane, kind), []).append(max(0.0, applied_at - event_time))
        out = []
        for (source_id, lane, kind), values in sorted(groups.items()):
            values.sort()
            out.append(
                {
                    "source_id": source_id,
                    "lane": lane,
                    "kind": kind,
                    "events": len(values),
                    "p50_s": round(_percentile(values, 0.50), 3),
                    "p95_s": round(_percentile(values, 0.95), 3),
                }
            )
        return out

    def duplicates_of(self, canonical_doc_id: str) -> list[DocumentRow]:
        """Live exact copies served by ``canonical_doc_id``'s chunks."""
        t = schema.documents
        query = (
            select(t)
            .where(t.c.canonical_doc_id == canonical_doc_id)
            .where(t.c.doc_id != canonical_doc_id)
            .where(t.c.status == "duplicate")
            .where(t.c.deleted_at.is_(None))
            .order_by(t.c.doc_id)
        )
        with self._read_engine.connect() as conn:
            return [_document_from_row(r) for r in conn.execute(query).mappings()]

    def pages_for_review(self, *, limit: int = 20) -> dict[str, Any]:
        """Pages not indexed because OCR fell below the bar: totals and the
        documents holding them (uri and page numbers)."""
        p, d = schema.parsed_docs, schema.documents
        query = (
            select(d.c.doc_id, d.c.uri, p.c.pages_for_review)
            .select_from(p.join(d, d.c.content_hash == p.c.content_hash))
            .where(p.c.pages_for_review.is_not(None))
            .where(p.c.pages_for_review != "[]")
            .where(d.c.deleted_at.is_(None))
            .order_by(d.c.doc_id)
        )
        docs = []
        with self._read_engine.connect() as conn:
            for doc_id, uri, pages_json in conn.execute(query).all():
                pages = sorted(set(json.loads(pages_json or "[]")))
                if pages:
                    docs.append({"doc_id": doc_id, "uri": uri, "pages": pages})
        return {
            "documents": len(docs),
            "pages": sum(len(x["pages"]) for x in docs),
            "items": docs[:limit],
        }

    # -- near duplicates and boilerplate -------------------------------------

    def set_near_dup(
        self, doc_id: str, tenant_id: str, signature: np.ndarray, band_keys: Sequence[str]
    ) -> str:
        """Store a document's MinHash signature and join it to the group of
        the most similar earlier document (``ragsync.near_dup.THRESHOLD``).

        Returns:
            The document's near-duplicate group id (its own doc id when it
            resembles nothing).
        """
        from ragsync import near_dup

        sigs, bands = schema.doc_signatures, schema.doc_bands
        with self._read_engine.connect() as conn:
            candidates = conn.execute(
                select(sigs.c.doc_id, sigs.c.signature, sigs.c.near_dup_group)
                .select_from(sigs.join(bands, bands.c.doc_id == sigs.c.doc_id))
                .where(bands.c.tenant_id == tenant_id)
                .where(bands.c.band_key.in_(list(band_keys)))
                .where(sigs.c.doc_id != doc_id)
                .distinct()
            ).all()
        group = doc_id
        best = 0.0
        for _other_id, other_sig, other_group in candidates:
            sim = near_dup.similarity(signature, np.frombuffer(other_sig, dtype=np.uint64))
            if sim >= near_dup.THRESHOLD and (sim > best or (sim == best and other_group < group)):
                best, group = sim, other_group
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "signature": np.asarray(signature, dtype=np.uint64).tobytes(),
            "near_dup_group": group,
            "updated_at": _now(),
        }
        with self._engine.begin() as conn:
            self._upsert(conn, sigs, [row], ["doc_id"], ["signature", "near_dup_group", "updated_at"])
            conn.execute(bands.delete().where(bands.c.doc_id == doc_id))
            conn.execute(
                bands.insert(),
                [{"tenant_id": tenant_id, "band_key": k, "doc_id": doc_id} for k in set(band_keys)],
            )
        return str(group)

    def remove_near_dup(self, doc_id: str) -> None:
        """Forget a deleted document's signature."""
        with self._engine.begin() as conn:
            conn.execute(schema.doc_bands.delete().where(schema.doc_bands.c.doc_id == doc_id))
            conn.execute(schema.doc_signatures.delete().where(schema.doc_signatures.c.doc_id == doc_id))

    def newest_of_groups(
        self, doc_ids: Sequence[str], acl_ids: Sequence[str] | None = None
    ) -> dict[str, str]:
        """For each document, the newest indexed member of its near-duplicate
        group (itself when it has no group). Newest = latest ``indexed_at``.
        With ``acl_ids``, only members readable through them count, so a
        newer draft a reader may not see never hides the one they may."""
        sigs, d = schema.doc_signatures, schema.documents
        out = {doc_id: doc_id for doc_id in doc_ids}
        with self._read_engine.connect() as conn:
            groups = {
                r.doc_id: r.near_dup_group
                for r in conn.execute(
                    select(sigs.c.doc_id, sigs.c.near_dup_group).where(sigs.c.doc_id.in_(list(doc_ids)))
                )
            }
            if not groups:
                return out
            query = (
                select(sigs.c.near_dup_group, d.c.doc_id, d.c.indexed_at)
                .select_from(sigs.join(d, d.c.doc_id == sigs.c.doc_id))
                .where(sigs.c.near_dup_group.in_(sorted(set(groups.values()))))
                .where(d.c.status == "indexed")
            )
            if acl_ids is not None:
                query = query.where(d.c.acl_id.in_(list(acl_ids)))
            members = conn.execute(query).all()
        newest: dict[str, tuple[float, str]] = {}
        for group, member, indexed_at in members:
            key = (float(indexed_at or 0.0), member)
            if group not in newest or key > newest[group]:
                newest[group] = key
        for doc_id, group in groups.items():
            if group in newest:
                out[doc_id] = newest[group][1]
        return out

    def docs_per_text_hash(self, text_hashes: Sequence[str], *, exclude_doc_id: str = "") -> dict[str, int]:
        """How many other documents hold a chunk with each text hash
        (boilerplate detection)."""
        t = schema.chunks
        out: dict[str, int] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(sorted(set(text_hashes))):
                rows = conn.execute(
                    select(t.c.text_hash, func.count(func.distinct(t.c.doc_id)))
                    .where(t.c.text_hash.in_(batch))
                    .where(t.c.doc_id != exclude_doc_id)
                    .group_by(t.c.text_hash)
                ).all()
                out.update({h: int(n) for h, n in rows})
        return out


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, int(-(-q * len(sorted_values) // 1)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])
