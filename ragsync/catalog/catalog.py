"""The catalog: the pipeline's durable bookkeeping in SQLite or PostgreSQL.

One :class:`Catalog` wraps one SQLAlchemy engine and is the only way any layer
(pipelines, control plane, command line) reads or writes the catalog. It
holds one repository per concern, and a caller names the one it uses
(``catalog.documents.get_document(...)``), so what a step depends on is
visible where it is called:

* ``catalog.documents`` (:mod:`~ragsync.catalog.documents`) -- documents;
* ``catalog.acls`` (:mod:`~ragsync.catalog.acls`) -- ACL ids and their groups;
* ``catalog.parsed`` (:mod:`~ragsync.catalog.parsed`) -- parsed element lists
  and pages for OCR review;
* ``catalog.copies`` (:mod:`~ragsync.catalog.copies`) -- exact copies and
  near-duplicate groups;
* ``catalog.chunks`` (:mod:`~ragsync.catalog.chunks`) -- chunks and the embedding cache;
* ``catalog.paragraphs`` (:mod:`~ragsync.catalog.paragraphs`) -- which documents of a source hold
  each paragraph (boilerplate);
* ``catalog.queue`` (:mod:`~ragsync.catalog.queue`) -- the event queue and leases;
* ``catalog.queue_views`` (:mod:`~ragsync.catalog.queue_views`) -- depth,
  age and stale events, for operators;
* ``catalog.gate_state`` (:mod:`~ragsync.catalog.gate_state`) -- tombstones
  and permission versions (what the gate compares with);
* ``catalog.freshness`` (:mod:`~ragsync.catalog.freshness`) -- lag per applied event;
* ``catalog.dead_letters`` (:mod:`~ragsync.catalog.dead_letters`) -- dead
  letters and their retries;
* ``catalog.tenants`` (:mod:`~ragsync.catalog.tenants`) -- tenants and API keys;
* ``catalog.sources`` (:mod:`~ragsync.catalog.sources`) -- sources;
* ``catalog.backfills`` (:mod:`~ragsync.catalog.backfills`) -- backfill
  requests and progress;
* ``catalog.syncs`` (:mod:`~ragsync.catalog.syncs`) -- source sync state
  (cursor, pause, failures) and sync runs;
* ``catalog.index_versions`` (:mod:`~ragsync.catalog.index_versions`) -- the
  index-version registry;
* ``catalog.runs`` (:mod:`~ragsync.catalog.runs`) -- pipeline runs and
  per-source outcomes;
* ``catalog.identities`` (:mod:`~ragsync.catalog.identities`) -- users,
  groups and memberships synced from sources.

Every write method is idempotent (an upsert keyed by the row's identity, or
an update/delete that gives the same end state when repeated) unless its
docstring says otherwise, and runs in one short transaction, so an
at-least-once pipeline can repeat any step. Conventions (timestamps, lists,
vectors, backends) are in :mod:`ragsync.catalog.base`.

A ``Catalog`` holds a connection pool and is not picklable: open one per
worker (for Beam, in ``DoFn.setup()``) from :attr:`Catalog.url`.
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy import Engine, func, select, text

from ragsync.catalog import schema
from ragsync.catalog.acls import AclsRepository
from ragsync.catalog.backfills import BackfillsRepository
from ragsync.catalog.base import acquire_engine, normalize_url, read_only, release_engine
from ragsync.catalog.chunks import ChunksRepository
from ragsync.catalog.copies import CopiesRepository
from ragsync.catalog.dead_letters import DeadLettersRepository
from ragsync.catalog.documents import DocumentsRepository
from ragsync.catalog.freshness import FreshnessRepository
from ragsync.catalog.gate_state import GateStateRepository
from ragsync.catalog.identities import IdentitiesRepository
from ragsync.catalog.index_versions import IndexVersionsRepository
from ragsync.catalog.migrations import migrate
from ragsync.catalog.paragraphs import ParagraphsRepository
from ragsync.catalog.parsed import ParsedRepository
from ragsync.catalog.queue import QueueRepository
from ragsync.catalog.queue_views import QueueViewsRepository
from ragsync.catalog.runs import RunsRepository
from ragsync.catalog.sources import SourcesRepository
from ragsync.catalog.syncs import SyncsRepository
from ragsync.catalog.tenants import TenantsRepository


class Catalog:
    """Typed access to every catalog table, one repository per concern.

    Open with :meth:`Catalog.open`; close with :meth:`close` (or use it as a
    context manager). All methods raise ``sqlalchemy.exc.SQLAlchemyError`` when
    the database fails; a failed write method has changed nothing (its
    transaction is rolled back).
    """

    def __init__(self, engine: Engine, url: str) -> None:
        """Wrap an engine whose schema is already migrated; prefer :meth:`open`."""
        self._engine = engine
        self._read_engine = read_only(engine)
        self.documents = DocumentsRepository(engine)
        self.acls = AclsRepository(engine)
        self.parsed = ParsedRepository(engine)
        self.chunks = ChunksRepository(engine)
        self.paragraphs = ParagraphsRepository(engine)
        self.copies = CopiesRepository(engine, self.chunks)
        self.queue = QueueRepository(engine)
        self.queue_views = QueueViewsRepository(engine)
        self.gate_state = GateStateRepository(engine)
        self.freshness = FreshnessRepository(engine)
        self.sources = SourcesRepository(engine)
        self.dead_letters = DeadLettersRepository(engine, self.queue, self.sources)
        self.tenants = TenantsRepository(engine)
        self.backfills = BackfillsRepository(engine)
        self.syncs = SyncsRepository(engine)
        self.index_versions = IndexVersionsRepository(engine)
        self.runs = RunsRepository(engine)
        self.identities = IdentitiesRepository(engine)
        self._url = url
        self._closed = False

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
        engine = acquire_engine(url)
        try:
            migrate(engine)
        except Exception:
            release_engine(engine)
            raise
        return cls(engine, url)

    @property
    def url(self) -> str:
        """The normalized database URL (may contain a password: do not log it)."""
        return self._url

    @property
    def engine(self) -> Engine:
        """The underlying engine (tests and the migrations use it; other code calls methods)."""
        return self._engine

    def count_rows(self, table: str) -> int:
        """Rows in one catalog table (for status and benchmarks).

        Raises:
            KeyError: no such table in :mod:`ragsync.catalog.schema`.
        """
        t = schema.metadata.tables[table]
        with self._read_engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(t)).scalar() or 0)

    def ping(self) -> None:
        """Round-trip to the database.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database does not answer.
        """
        with self._read_engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        """Give the engine back: SQLite closes its connections; a server
        catalog's engine, shared by the catalogs of this process, closes them
        when its last catalog closes. Safe to call twice."""
        if not self._closed:
            self._closed = True
            release_engine(self._engine)

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
