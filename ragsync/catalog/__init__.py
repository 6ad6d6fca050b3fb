"""The catalog database: schema, migrations and the typed :class:`Catalog` API.

Plain Python (SQLAlchemy); runs on SQLite and PostgreSQL. The only package
that holds SQL: every other layer calls :class:`Catalog` methods. See
:mod:`ragsync.catalog.catalog` for the repositories it combines and
:mod:`ragsync.catalog.base` for conventions (timestamps are float epoch
seconds, UTC).
"""

from ragsync.catalog import schema
from ragsync.catalog.backfills import BACKFILL_REASONS, BACKFILL_STATES, BackfillRow
from ragsync.catalog.base import (
    BATCH_SIZE,
    ID_PATTERN,
    ConflictError,
    LimitReachedError,
    create_catalog_engine,
    new_id,
    normalize_url,
)
from ragsync.catalog.catalog import Catalog
from ragsync.catalog.dead_letters import DeadLetterRow, event_id_of_payload, event_of_payload
from ragsync.catalog.documents import (
    STATUS_FETCHED,
    STATUS_INDEXED,
    DocumentRow,
    FetchRecord,
    ParsedRow,
    make_indexed_version,
)
from ragsync.catalog.index_versions import IndexVersion
from ragsync.catalog.migrations import LegacyCatalogError, current_revision, head_revision, migrate
from ragsync.catalog.sources import SourceState
from ragsync.catalog.syncs import SYNC_MODES, SyncRun
from ragsync.catalog.tenants import ApiKeyRow, TenantRow

__all__ = [
    "BACKFILL_REASONS",
    "BACKFILL_STATES",
    "BATCH_SIZE",
    "ID_PATTERN",
    "STATUS_FETCHED",
    "STATUS_INDEXED",
    "SYNC_MODES",
    "ApiKeyRow",
    "BackfillRow",
    "Catalog",
    "ConflictError",
    "LimitReachedError",
    "DeadLetterRow",
    "DocumentRow",
    "FetchRecord",
    "IndexVersion",
    "LegacyCatalogError",
    "ParsedRow",
    "TenantRow",
    "SourceState",
    "SyncRun",
    "create_catalog_engine",
    "current_revision",
    "event_id_of_payload",
    "event_of_payload",
    "head_revision",
    "make_indexed_version",
    "migrate",
    "new_id",
    "normalize_url",
    "schema",
]
