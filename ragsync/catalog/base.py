"""What every catalog repository shares: the engine, its transactions and helpers.

Conventions (the whole catalog follows them):

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
* **Transactions**: every write method runs in one short transaction
  (``self._engine.begin()``) and is idempotent or says why not; reads use
  ``self._read_engine``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Column, Engine, create_engine, event, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.schema import Table

#: Largest number of values bound into one ``IN (...)`` clause or insert batch.
BATCH_SIZE = 500

#: Tenant ids and names, source ids, index names: safe in URLs, logs and filters.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
ID_RE = re.compile(ID_PATTERN)

_SQLITE_BEGIN_OPTION = "ragsync_sqlite_begin"

T = TypeVar("T")


class ConflictError(ValueError):
    """The id is already taken (by this or another tenant; the message does not say which)."""


class LimitReachedError(ValueError):
    """A tenant is at one of its caps (queued syncs, sources); the message says which."""


def _now() -> float:
    return time.time()


def _batches(items: Sequence[T], size: int = BATCH_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _json_list(values: Iterable[Any]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


def _json_object(text: str | None) -> dict[str, Any]:
    """A JSON object column decoded ({} when empty, malformed or not an object)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tuple_from_json(text: str | None) -> tuple[Any, ...]:
    return tuple(json.loads(text)) if text else ()


def row_to(cls: type[T], row: Mapping[Any, Any], **overrides: Any) -> T:
    """A row dataclass from a result row: every field named like a column,
    then ``overrides`` (decoded JSON, derived fields).

    Args:
        cls: the row dataclass.
        row: the result row (``RowMapping`` or a dict of column values).
        overrides: field values that do not come straight from a column.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in row.items() if k in names}
    values.update(overrides)
    return cls(**values)


def new_id(prefix: str) -> str:
    """A random id with a readable prefix, e.g. ``bf_1f0c...``."""
    return f"{prefix}_{secrets.token_hex(8)}"


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


def _enable_wal(cursor: Any, *, timeout_s: float = 30.0) -> None:
    """Switch a new SQLite connection to WAL, waiting out other connections.

    Changing the journal mode needs a lock SQLite does not wait for through
    ``busy_timeout`` (several workers opening a new catalog at once got
    "database is locked"), so the switch is retried for up to ``timeout_s``.
    A database already in WAL mode answers at once.

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


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
        size = catalog_pool_size(os.environ)
        return create_engine(url, pool_pre_ping=True, pool_size=size, max_overflow=size)

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
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


POOL_SIZE_ENV = "RAGSYNC_CATALOG_POOL_SIZE"
DEFAULT_POOL_SIZE = 4
"""Connections a process keeps open to a PostgreSQL catalog; as many more
may be opened for a burst (SQLAlchemy's ``max_overflow``), so one process
holds at most ``2 x`` this many."""


def catalog_pool_size(env: Mapping[str, str]) -> int:
    """The pool size of a server catalog's engine.

    Args:
        env: the environment (``RAGSYNC_CATALOG_POOL_SIZE``; unset or empty
            means :data:`DEFAULT_POOL_SIZE`).

    Returns:
        A size >= 1.

    Raises:
        ValueError: the variable is not a whole number >= 1.
    """
    text = env.get(POOL_SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_POOL_SIZE
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{POOL_SIZE_ENV}={text!r}: give a whole number >= 1")
    return int(text)


# One engine per (process, URL) for server catalogs, shared by every Catalog
# the process opens: a Beam worker sets up one catalog per step instance, and
# an engine (a pool) each opened more than 100 PostgreSQL connections from one
# process. Keyed by pid, and forgotten in a forked child, so a child never
# uses its parent's connections. Held weakly: catalogs dropped without
# close() let their engine (and its connections) go, as before the sharing.
# Process-wide by nature: that is the point.
_shared_lock = threading.Lock()
_shared: dict[tuple[int, str], tuple[weakref.ref[Engine], int]] = {}


def acquire_engine(url: str) -> Engine:
    """The catalog engine for ``url`` in this process.

    A server URL (PostgreSQL) returns the one engine this process shares for
    it (created on first use, its pool bounded by
    :func:`catalog_pool_size`) and counts one more user; a SQLite URL gets a
    new engine of its own, as before. Give it back with
    :func:`release_engine`.

    Args:
        url: a normalized catalog URL.

    Returns:
        The engine (no connection is opened yet).
    """
    if url.startswith("sqlite"):
        return create_catalog_engine(url)
    key = (os.getpid(), url)
    with _shared_lock:
        ref, users = _shared.get(key) or (None, 0)
        engine = ref() if ref is not None else None
        if engine is None:
            engine, users = create_catalog_engine(url), 0
        _shared[key] = (weakref.ref(engine), users + 1)
        return engine


def release_engine(engine: Engine) -> None:
    """Give back an engine from :func:`acquire_engine`: the last user of a
    shared engine (or the only user of a SQLite one, or an engine this
    process did not share) closes its pooled connections."""
    with _shared_lock:
        for key, (ref, users) in list(_shared.items()):
            if ref() is engine and key[0] == os.getpid():
                if users > 1:
                    _shared[key] = (ref, users - 1)
                    return
                del _shared[key]
                break
    engine.dispose()


def shared_engine_users() -> dict[str, int]:
    """This process's shared catalog engines: users per URL (tests, status)."""
    pid = os.getpid()
    with _shared_lock:
        return {
            url: users for (owner, url), (ref, users) in _shared.items() if owner == pid and ref() is not None
        }


def _forget_shared_after_fork() -> None:
    """In a forked child: drop the parent's engines without closing the
    parent's connections (``dispose(close=False)``); the child's catalogs
    open their own."""
    global _shared_lock
    _shared_lock = threading.Lock()
    for ref, _ in _shared.values():
        engine = ref()
        if engine is not None:
            engine.dispose(close=False)
    _shared.clear()


os.register_at_fork(after_in_child=_forget_shared_after_fork)


def read_only(engine: Engine) -> Engine:
    """The engine for reads: on SQLite they begin DEFERRED, so they never queue behind a writer."""
    return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "DEFERRED"})


class Repository:
    """Base of the per-concern repositories that :class:`~ragsync.catalog.Catalog` combines.

    Holds the engine (writes, ``BEGIN IMMEDIATE`` on SQLite) and the read
    engine (``BEGIN DEFERRED``), and the dialect-aware upsert every
    repository uses.
    """

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine whose schema is already migrated."""
        self._engine = engine
        self._dialect = engine.dialect.name
        self._read_engine = read_only(engine)

    def _find(self, table: Table, *, tenant_id: str | None = None, **key: Any) -> dict[str, Any] | None:
        """The row of ``table`` whose columns equal ``key`` (a primary key), as a dict.

        Args:
            table: the table.
            tenant_id: when given, another tenant's row counts as missing.
            key: ``column=value`` pairs.

        Returns:
            The row, or None.
        """
        query = select(table).where(*(table.c[name] == value for name, value in key.items()))
        if tenant_id is not None:
            query = query.where(table.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else dict(row)

    def _count_by(self, column: Column[Any], *where: Any, tenant_id: str | None = None) -> dict[str, int]:
        """Rows of ``column``'s table counted by the column's value.

        Args:
            column: the column to group by.
            where: extra conditions.
            tenant_id: when given, only that tenant's rows.
        """
        query = select(column, func.count()).where(*where).group_by(column)
        if tenant_id is not None:
            query = query.where(column.table.c.tenant_id == tenant_id)
        with self._read_engine.connect() as conn:
            return {str(value): int(n) for value, n in conn.execute(query).all()}

    def _claim_oldest(
        self, table: Table, key: str, waiting: str, *order: Any, where: Any = None
    ) -> str | None:
        """Move the first row of ``table`` in state ``waiting`` (by ``order``;
        among rows matching ``where`` when given) to ``running``, its
        ``started_at`` and ``updated_at`` now.

        One conditional update per try: two workers never take the same row
        (the loser tries the next one).

        Returns:
            The taken row's ``key`` column, or None when no row waits.
        """
        column = table.c[key]
        while True:
            with self._read_engine.connect() as conn:
                query = select(column).where(table.c.state == waiting)
                if where is not None:
                    query = query.where(where)
                found = conn.execute(query.order_by(*order).limit(1)).scalar()
            if found is None:
                return None
            now = _now()
            with self._engine.begin() as conn:
                taken = conn.execute(
                    update(table)
                    .where(column == found, table.c.state == waiting)
                    .values(state="running", started_at=now, updated_at=now)
                ).rowcount
            if taken:
                return str(found)

    def _insert_new(self, table: Table, row: Mapping[str, Any], conflict: str) -> None:
        """INSERT one row whose key must be new, in its own transaction.

        Raises:
            ConflictError: the key (or a unique column) is taken; the
                message is ``conflict`` and nothing is written.
        """
        try:
            with self._engine.begin() as conn:
                conn.execute(table.insert().values(**row))
        except IntegrityError as exc:
            raise ConflictError(conflict) from exc

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
