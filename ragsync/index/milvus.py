"""What the Milvus stores share (Milvus Lite locally, a Milvus server in production).

:class:`MilvusCollection` holds one ``MilvusClient`` for the store's whole
life (never a client per call; ``close()`` releases it), the optional
database, the alias layout, deletes scoped by tenant and the paged reads of
reconcile. The vector store is :mod:`ragsync.index.milvus_vectors`, the BM25
keyword store :mod:`ragsync.index.milvus_keyword`.

Layout: the physical collection is ``{collection}_v1`` and the name the
pipeline uses, ``{collection}``, is an alias pointing to it, so a later
index version can be built next to it and the alias flipped. Opening
accepts either an alias or a plain collection name.

Schema (every collection)::

    chunk_id   VARCHAR(64)  primary key
    doc_id     VARCHAR(64)
    tenant_id  VARCHAR(128)
    acl_ids    ARRAY<VARCHAR(128)>, at most 64 elements

plus the kind's own fields (``vector FLOAT_VECTOR(dim)``, COSINE metric, for
the vectors). Milvus Lite (``uri`` ending in ``.db``) gets a FLAT index
(exact search, so selective tenant/ACL filters still return k hits); a
server gets HNSW and searches with a large ``ef`` for the same reason. A
Lite file is locked by the process that opened it: a second process must go
through ``milvus-lite server`` instead.

Writes are not followed by ``flush``: Milvus acknowledges an upsert or a
delete once it is in its log (a server's write-ahead log; Lite's local
store), so it is durable and, with the collection's ``Strong`` consistency,
visible to the next read. A flush only seals the growing segment; one per
document wrote thousands of tiny sealed segments, which Milvus' own
documentation warns slows search (and it cost ~30 ms a document on Lite).
``tests/test_stores.py`` kills a writer without a flush and reads its rows back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ragsync.errors import STORE_BUSY, ConfigurationError, StoreBusyError, WriteError
from ragsync.index.base import ClosesOnExit, Settings

BATCH_SIZE = 500
"""Rows per upsert/delete/query request."""

MAX_ACL_IDS = 64
"""Capacity of the ``acl_ids`` array field."""

MAX_ID_LENGTH = 64
MAX_TENANT_LENGTH = 128
MAX_ACL_ID_LENGTH = 128

ITERATOR_BATCH = 10_000
"""Rows per query-iterator page (count_by_doc, chunk_ids): fewer round trips."""

MAX_TOP_K = 16384
"""Milvus refuses a larger ``limit``."""

MIN_EF = 1000
"""HNSW ``ef`` floor: with selective filters a small ef returns fewer than k hits."""

_SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")


def _is_server_uri(uri: str) -> bool:
    return uri.lower().startswith(_SERVER_SCHEMES)


def _literal(value: str) -> str:
    """Quote ``value`` as a Milvus filter string literal.

    Backslashes and double quotes are escaped; control characters are
    refused because the filter grammar has no portable escape for them.

    Raises:
        ValueError: ``value`` contains a control character.
    """
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"control character in filter value {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list_literal(values: Sequence[str]) -> str:
    return "[" + ", ".join(_literal(v) for v in values) + "]"


def _check_ids(tenant_id: str, chunk_ids: Sequence[str]) -> None:
    """Refuse what a primary-key lookup cannot carry safely.

    Raises:
        ValueError: the tenant or an id holds a control character, or an id a
            quote or backslash (pymilvus quotes primary keys unescaped).
    """
    _literal(tenant_id)
    for chunk_id in chunk_ids:
        _literal(chunk_id)
        if "'" in chunk_id or "\\" in chunk_id:
            raise ValueError(f"quote or backslash in chunk id {chunk_id!r}")


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# Milvus Lite runs its server inside this process and keeps the data file
# locked until the server stops. Count the open clients per file and stop the
# server when the last one closes, so another process (the next CLI command, a
# restarted pipeline) can open the file. Process-wide by nature of the lock.
_LITE_REFS: dict[str, int] = {}
LITE_LOCK_WAIT_S = 15.0
"""How long opening Milvus Lite waits for a lock left by a process that just died."""
SERVER_CONNECT_WAIT_S = 30.0
"""How long opening a Milvus server retries a refused connection (a busy
server while several workers start; one ``pymilvus`` attempt gives up in ~10 s)."""


def _release_lite(path: str) -> None:
    left = _LITE_REFS.get(path, 0) - 1
    if left > 0:
        _LITE_REFS[path] = left
        return
    _LITE_REFS.pop(path, None)
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover - older milvus-lite keeps no registry
        return
    server_manager_instance.release_server(path)


class MilvusCollection(ClosesOnExit):
    """What the Milvus stores share: one client for the store's life, the
    optional database, the alias layout (``{collection}_v1`` behind the alias
    ``{collection}``), deletes scoped by tenant and the paged reads of
    reconcile. Subclasses give the schema (``_create_collection``,
    ``_check_schema``) and the writes and searches of their kind.

    Args:
        uri: a Milvus Lite file path ending in ``.db`` or a server URL.
        collection: collection or alias name.
        create: create the collection (and the database) when missing.
        token: server auth token; ignored by Milvus Lite.
        alias: with ``create``, False creates the collection under exactly
            ``collection`` with no alias.
        database: Milvus database holding the collection; empty = Milvus'
            ``default`` database.
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        *,
        create: bool = False,
        token: str = "",
        alias: bool = True,
        database: str = "",
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.database = database
        self.is_lite = not _is_server_uri(uri)
        self._alias = alias
        self._client: Any = None
        if self.is_lite:
            uri = os.path.expanduser(uri)
            if not uri.endswith(".db"):
                raise ConfigurationError(
                    f"Milvus uri {self.uri!r}: use a server URL (http://host:19530) or a Milvus Lite "
                    "path ending in .db"
                )
            parent = Path(uri).parent
            if not parent.is_dir():
                if not create:
                    raise ConfigurationError(
                        f"Milvus Lite directory {parent} does not exist; create the index with "
                        "`create=True` (e.g. `ragsync init`) first"
                    )
                parent.mkdir(parents=True, exist_ok=True)
        self._lite_path = os.path.abspath(uri) if self.is_lite else ""
        self._client = self._connect(uri, token)
        if self._lite_path:
            _LITE_REFS[self._lite_path] = _LITE_REFS.get(self._lite_path, 0) + 1
        try:
            self._use_database(create)
            self._open(create)
        except BaseException:
            self.close()
            raise

    # -- connection and schema -------------------------------------------------

    @staticmethod
    def _quiet_client_logs() -> None:
        """pymilvus logs a warning on every query iterator against Milvus
        Lite (no server timestamp); keep the operator's console readable."""
        import logging

        for name in list(logging.root.manager.loggerDict):
            if name.startswith("pymilvus"):
                logging.getLogger(name).setLevel(logging.ERROR)

    def _connect(self, uri: str, token: str) -> Any:
        try:
            from pymilvus import MilvusClient
        except ImportError as exc:  # pragma: no cover - pymilvus is a core dependency
            raise ConfigurationError("pip install 'pymilvus[milvus_lite]'") from exc
        self._quiet_client_logs()
        # A process that was just killed may hold Milvus Lite's lock for a
        # moment (its children exit within a second, ragsync.ops.lifecycle): wait
        # for it rather than fail the run that follows a crash.
        # A server may be slow to accept a new worker's connection while
        # other workers load it: retry for a while before giving up.
        deadline = time.monotonic() + (LITE_LOCK_WAIT_S if self.is_lite else SERVER_CONNECT_WAIT_S)
        while True:
            try:
                if self.is_lite:
                    return MilvusClient(uri=uri)
                return MilvusClient(uri=uri, token=token)
            except Exception as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                error = exc
                break
        hint = ""
        if self.is_lite:
            from ragsync.ops.lifecycle import lock_holders

            holders = lock_holders(os.path.join(uri, "LOCK"))
            if holders:
                raise StoreBusyError(
                    f"cannot open Milvus Lite at {self.uri!r}: it is {STORE_BUSY} (process(es) "
                    f"{', '.join(map(str, holders))}); try again when that run has ended"
                ) from error
            hint += (
                " A Milvus Lite file can be opened by one process only; to share it run "
                "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port P` and use"
                " http://127.0.0.1:P as the uri."
            )
        raise ConfigurationError(f"cannot open Milvus at {self.uri!r}: {error}.{hint}") from error

    def _use_database(self, create: bool) -> None:
        """Switch the client to ``database`` (created with ``create``)."""
        if not self.database:
            return
        client = self._client
        if self.database not in client.list_databases():
            if not create:
                raise ConfigurationError(
                    f"Milvus database {self.database!r} does not exist at {self.uri!r}; create it by "
                    "opening the index with create=True (e.g. `ragsync init`)"
                )
            client.create_database(self.database)
        client.use_database(self.database)

    def _create_collection(self) -> None:
        raise NotImplementedError

    def _key_schema(self) -> Any:
        """A schema with the fields every ragsync collection has: the key,
        the document, the tenant and the ACL ids."""
        from pymilvus import DataType

        schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("chunk_id", DataType.VARCHAR, max_length=MAX_ID_LENGTH, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=MAX_ID_LENGTH)
        schema.add_field("tenant_id", DataType.VARCHAR, max_length=MAX_TENANT_LENGTH)
        schema.add_field(
            "acl_ids",
            DataType.ARRAY,
            element_type=DataType.VARCHAR,
            max_capacity=MAX_ACL_IDS,
            max_length=MAX_ACL_ID_LENGTH,
        )
        return schema

    def _make_collection(self, schema: Any, index_params: Any) -> None:
        """Create the physical collection with its index, loaded, and the alias."""
        client = self._client
        physical = f"{self.collection}_v1" if self._alias else self.collection
        if not client.has_collection(physical):
            client.create_collection(physical, schema=schema, consistency_level="Strong")
            # pymilvus polls a new index's state every 0.5 s (and asks for a
            # timestamp Milvus Lite does not serve); Lite builds a FLAT index
            # on an empty collection at once, so its state is not awaited.
            client.create_index(physical, index_params, sync=not self.is_lite)
            client.load_collection(physical)
        if self._alias:
            client.create_alias(physical, self.collection)

    def _acl_filter(
        self,
        tenant_id: str,
        acl: Sequence[str],
        deny_acl_ids: Sequence[str],
        doc_ids: Sequence[str] | None = None,
    ) -> str:
        """The search filter: the tenant's rows sharing an ACL id with ``acl``,
        holding none of ``deny_acl_ids`` and, unless ``doc_ids`` is None, of
        one of those documents."""
        expr = f"tenant_id == {_literal(tenant_id)} and array_contains_any(acl_ids, {_list_literal(acl)})"
        deny = list(dict.fromkeys(deny_acl_ids))
        if deny:
            expr += f" and not array_contains_any(acl_ids, {_list_literal(deny)})"
        if doc_ids is not None:
            expr += f" and doc_id in {_list_literal(list(dict.fromkeys(doc_ids)))}"
        return expr

    def _check_schema(self, described: dict[str, Any]) -> None:
        """Raise ``ConfigurationError`` when the described collection is not this kind's."""
        raise NotImplementedError

    def _open(self, create: bool) -> None:
        client = self._client
        if not client.has_collection(self.collection):
            if not create:
                raise ConfigurationError(
                    f"Milvus collection {self.collection!r} does not exist at {self.uri!r}; create it "
                    "by opening the index with create=True (e.g. `ragsync init`)"
                )
            self._create_collection()
        described = client.describe_collection(self.collection)
        self.physical_collection: str = described.get("collection_name", self.collection)
        self._check_schema(described)
        client.load_collection(self.collection)

    def point_alias(self, alias: str) -> None:
        """Make ``alias`` name this index's physical collection (create or move it).

        Raises:
            WriteError: Milvus refused (e.g. ``alias`` is a collection name).
        """
        client = self._require_open()
        try:
            existing = set(client.list_aliases(self.physical_collection).get("aliases", []))
            if alias in existing:
                return
            try:
                client.alter_alias(self.physical_collection, alias)
            except Exception:
                client.create_alias(self.physical_collection, alias)
        except Exception as exc:
            raise WriteError(f"Milvus alias {alias!r} -> {self.physical_collection!r} failed: {exc}") from exc

    def drop_physical(self) -> None:
        """Drop this index's physical collection (every row) and close.

        Raises:
            WriteError: an alias still names it, or Milvus refused.
        """
        client = self._require_open()
        try:
            client.release_collection(self.physical_collection)
            client.drop_collection(self.physical_collection)
        except Exception as exc:
            raise WriteError(f"Milvus drop of {self.physical_collection!r} failed: {exc}") from exc
        finally:
            self.close()

    def _require_open(self) -> Any:
        if self._client is None:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return self._client

    # -- writes ------------------------------------------------------------------

    @staticmethod
    def _validate_row(chunk_id: str, doc_id: str, tenant_id: str, acl_ids: Sequence[str]) -> None:
        if not chunk_id or len(chunk_id) > MAX_ID_LENGTH:
            raise ValueError(f"chunk id {chunk_id!r} is empty or longer than {MAX_ID_LENGTH}")
        if len(doc_id) > MAX_ID_LENGTH:
            raise ValueError(f"doc id {doc_id!r} is longer than {MAX_ID_LENGTH}")
        if len(tenant_id) > MAX_TENANT_LENGTH:
            raise ValueError(f"tenant id {tenant_id!r} is longer than {MAX_TENANT_LENGTH}")
        if len(acl_ids) > MAX_ACL_IDS:
            raise ValueError(f"chunk {chunk_id}: {len(acl_ids)} ACL ids, at most {MAX_ACL_IDS}")
        for acl in acl_ids:
            if len(acl) > MAX_ACL_ID_LENGTH:
                raise ValueError(f"ACL id {acl!r} is longer than {MAX_ACL_ID_LENGTH}")

    def _upsert_rows(self, client: Any, rows: Sequence[dict[str, Any]]) -> None:
        try:
            for batch in _batches(rows, BATCH_SIZE):
                client.upsert(self.collection, list(batch))
        except Exception as exc:
            raise WriteError(f"Milvus upsert into {self.collection!r} failed: {exc}") from exc

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """Delete rows by chunk id, only where they belong to ``tenant_id``.

        Returns:
            ``len(chunk_ids)`` (the number asked, not the number found).

        Raises:
            ValueError: an id contains a control character.
            WriteError: Milvus refused the delete.
        """
        client = self._require_open()
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        _check_ids(tenant_id, ids)
        # By primary key (a filter, even ``chunk_id in [...]``, scans every
        # row in Milvus Lite): the tenant's own ids are looked up, then deleted.
        try:
            doomed = [row["chunk_id"] for row in self._rows_by_id(ids, ["chunk_id", "tenant_id"], tenant_id)]
            for batch in _batches(doomed, BATCH_SIZE):
                client.delete(self.collection, ids=list(batch))
        except Exception as exc:
            raise WriteError(f"Milvus delete from {self.collection!r} failed: {exc}") from exc
        return len(chunk_ids)

    def _rows_by_id(self, ids: Sequence[str], fields: list[str], tenant_id: str) -> list[dict[str, Any]]:
        """The rows of ``ids`` that belong to ``tenant_id`` (primary-key ``get``).

        Raises:
            ValueError: see ``_check_ids``.
        """
        client = self._require_open()
        _check_ids(tenant_id, ids)
        rows: list[dict[str, Any]] = []
        for batch in _batches(list(dict.fromkeys(ids)), BATCH_SIZE):
            found = client.get(self.collection, ids=list(batch), output_fields=[*fields, "tenant_id"])
            rows += [row for row in found if row["tenant_id"] == tenant_id]
        return rows

    def _tenant_ids_present(self, tenant_id: str, chunk_ids: Sequence[str]) -> set[str]:
        return {str(row["chunk_id"]) for row in self._rows_by_id(chunk_ids, ["chunk_id"], tenant_id)}

    # -- reads -------------------------------------------------------------------

    def _iterate(self, tenant_id: str | None, fields: list[str]) -> Iterator[dict[str, Any]]:
        client = self._require_open()
        expr = f"tenant_id == {_literal(tenant_id)}" if tenant_id is not None else 'chunk_id != ""'
        iterator = client.query_iterator(
            self.collection, batch_size=ITERATOR_BATCH, filter=expr, output_fields=fields
        )
        try:
            while True:
                batch = iterator.next()
                if not batch:
                    break
                yield from batch
        finally:
            iterator.close()

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Row count per doc id, for one tenant or all (``None``).

        Pages through every row with a query iterator, so it is exact beyond
        Milvus' 16384-row query window.
        """
        counts: dict[str, int] = {}
        for row in self._iterate(tenant_id, ["doc_id"]):
            doc = row["doc_id"]
            counts[doc] = counts.get(doc, 0) + 1
        return counts

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """How many of ``chunk_ids`` the collection holds for ``tenant_id``
        (a primary-key ``get``: flat in the collection's size)."""
        return len(self._tenant_ids_present(tenant_id, chunk_ids))

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        """Every chunk id present, for one tenant or all (``None``)."""
        return set(self.iter_chunk_ids(tenant_id))

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]:
        """Every chunk id present, streamed (a query iterator, one page at a time)."""
        for row in self._iterate(tenant_id, ["chunk_id"]):
            yield str(row["chunk_id"])

    def count(self, tenant_id: str | None = None) -> int:
        """Number of rows, for one tenant or all (``None``)."""
        client = self._require_open()
        expr = f"tenant_id == {_literal(tenant_id)}" if tenant_id is not None else ""
        result = client.query(self.collection, filter=expr, output_fields=["count(*)"])
        return int(result[0]["count(*)"]) if result else 0

    def close(self) -> None:
        """Release the client. Safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
            if self._lite_path:
                _release_lite(self._lite_path)


def lite_one_process(settings: Settings) -> str:
    """Why a Milvus Lite file takes one process ('' for a server URL)."""
    if "://" in settings.milvus_uri:
        return ""
    return (
        f"Milvus Lite ({settings.milvus_uri}) is locked by the process that opens it: run "
        "`milvus-lite server --data-dir DIR --host 127.0.0.1 --port P` (or use a Milvus server) and set "
        "--milvus-uri http://127.0.0.1:P"
    )
