"""The catalog database: schema, migrations and the typed :class:`Catalog` API.

Plain Python (SQLAlchemy Core); runs on SQLite and PostgreSQL. See
:mod:`ragsync.catalog.catalog` for conventions (timestamps are float epoch
seconds, UTC).
"""

from ragsync.catalog.catalog import (
    BATCH_SIZE,
    STATUS_FETCHED,
    STATUS_INDEXED,
    Catalog,
    DeadLetterRow,
    DocumentRow,
    FetchRecord,
    ParsedRow,
    create_catalog_engine,
    make_indexed_version,
    normalize_url,
)
from ragsync.catalog.migrations import MIGRATIONS, Migration, applied_versions, migrate

__all__ = [
    "BATCH_SIZE",
    "MIGRATIONS",
    "STATUS_FETCHED",
    "STATUS_INDEXED",
    "Catalog",
    "DeadLetterRow",
    "DocumentRow",
    "FetchRecord",
    "Migration",
    "ParsedRow",
    "applied_versions",
    "create_catalog_engine",
    "make_indexed_version",
    "migrate",
    "normalize_url",
]
