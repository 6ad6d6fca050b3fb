"""The vector index on Milvus (Lite or server) and its backend.

:class:`MilvusVectorIndex` is the ``VectorIndex`` the pipeline writes and
queries read (schema and connection in :mod:`ragsync.index.milvus`);
:class:`MilvusVectorBackend` opens it, names its index versions
(``{collection}_v{n}`` behind the alias ``{collection}``), moves the alias
and drops retired versions. It is registered as ``vector_index=milvus``, the
default (``ragsync.index.backends``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ragsync.errors import ConfigurationError
from ragsync.index.base import NO_FILTER, Hit, SearchFilter, ServerAliasBackend, Settings
from ragsync.index.milvus import BATCH_SIZE, MAX_TOP_K, MIN_EF, MilvusCollection, _batches, lite_one_process
from ragsync.model import Chunk


class MilvusVectorIndex(MilvusCollection):
    """``VectorIndex`` on Milvus (Lite or server).

    Args:
        uri: a Milvus Lite file path ending in ``.db`` (e.g.
            ``~/ragsync/milvus.db``) or a server URL
            (``http://host:19530``).
        collection: collection or alias name the pipeline uses.
        dim: vector dimension; must match an existing collection.
        create: create ``{collection}_v1`` and the alias ``{collection}``
            when the name does not exist yet.
        token: server auth token (``user:password`` or an API key); ignored
            by Milvus Lite.
        alias: with ``create``, False creates the collection under exactly
            ``collection`` with no alias (an index version built beside the
            live one, see :mod:`ragsync.index.versions`).
        database: Milvus database (``RAGSYNC_MILVUS_DATABASE``); empty =
            ``default``.

    Raises:
        ConfigurationError: the uri is not usable, a Lite file is locked by
            another process, the collection is missing and ``create`` is
            False, or its vector dimension differs from ``dim``.
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        dim: int,
        *,
        create: bool = False,
        token: str = "",
        alias: bool = True,
        database: str = "",
    ) -> None:
        if dim <= 0:
            raise ConfigurationError(f"vector dimension must be positive, got {dim}")
        self.dim = dim
        super().__init__(uri, collection, create=create, token=token, alias=alias, database=database)

    def _check_schema(self, described: dict[str, Any]) -> None:
        found_dim = None
        for field in described.get("fields", []):
            if field.get("name") == "vector":
                found_dim = int(field.get("params", {}).get("dim", 0))
        if found_dim is None:
            raise ConfigurationError(
                f"Milvus collection {self.collection!r} has no 'vector' field; it was not created by ragsync"
            )
        if found_dim != self.dim:
            raise ConfigurationError(
                f"Milvus collection {self.collection!r} has vectors of dimension {found_dim} but the "
                f"embedding model gives {self.dim}: vectors of another dimension cannot go into this "
                "index. Re-embed into a new index version instead (`ragsync reembed --model NAME`, "
                "which builds and flips to a new collection), or use another collection name"
            )

    def _create_collection(self) -> None:
        from pymilvus import DataType

        schema = self._key_schema()
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        index_params = self._client.prepare_index_params()
        if self.is_lite:
            index_params.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
        else:
            index_params.add_index(
                field_name="vector",
                index_type="HNSW",
                metric_type="COSINE",
                params={"M": 16, "efConstruction": 200},
            )
        self._make_collection(schema, index_params)

    def _validate(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> list[list[float]]:
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        out: list[list[float]] = []
        for chunk, vector in zip(chunks, vectors, strict=True):
            values = [float(x) for x in vector]
            if len(values) != self.dim:
                raise ValueError(
                    f"chunk {chunk.chunk_id}: vector has dimension {len(values)}, index expects {self.dim}"
                )
            if not all(math.isfinite(x) for x in values):
                raise ValueError(f"chunk {chunk.chunk_id}: vector has a non-finite value")
            self._validate_row(chunk.chunk_id, chunk.doc_id, chunk.tenant_id, chunk.acl_ids)
            out.append(values)
        return out

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> int:
        """Write one row per chunk, replacing rows with the same chunk id.

        Args:
            chunks: the chunks; only ids, tenant and ACL ids are stored.
            vectors: one normalized vector per chunk, same order.

        Returns:
            The number of rows written.

        Raises:
            ValueError: counts differ, a vector has the wrong dimension or a
                non-finite value, or a field is too long. Everything is
                checked before the first write, so nothing is written then.
            WriteError: Milvus refused a batch (earlier batches stay written;
                retrying is safe because upsert is idempotent).
        """
        client = self._require_open()
        clean = self._validate(chunks, vectors)
        if not clean:
            return 0
        rows = [
            {
                "chunk_id": chunk.chunk_id,
                "doc_id": chunk.doc_id,
                "tenant_id": chunk.tenant_id,
                "acl_ids": list(chunk.acl_ids),
                "vector": vector,
            }
            for chunk, vector in zip(chunks, clean, strict=True)
        ]
        self._upsert_rows(client, rows)
        return len(rows)

    def set_acl_ids(self, tenant_id: str, chunk_ids: Sequence[str], acl_ids: Sequence[str]) -> None:
        """Replace the ACL ids of the tenant's existing rows, keeping vectors.

        Ids that do not exist (or belong to another tenant) are skipped.

        Raises:
            ValueError: too many or too long ACL ids.
            WriteError: Milvus refused the rewrite.
        """
        client = self._require_open()
        new_acl = list(dict.fromkeys(acl_ids))
        self._validate_row("x", "", tenant_id, new_acl)
        for batch in _batches(list(dict.fromkeys(chunk_ids)), BATCH_SIZE):
            rows = self._rows_by_id(batch, ["chunk_id", "doc_id", "acl_ids", "vector"], tenant_id)
            updated = [
                {
                    "chunk_id": row["chunk_id"],
                    "doc_id": row["doc_id"],
                    "tenant_id": row["tenant_id"],
                    "acl_ids": new_acl,
                    "vector": [float(x) for x in row["vector"]],
                }
                for row in rows
            ]
            if updated:
                self._upsert_rows(client, updated)

    def search(
        self,
        tenant_id: str,
        vector: Sequence[float],
        acl_ids: Sequence[str],
        k: int,
        *,
        where: SearchFilter = NO_FILTER,
    ) -> list[Hit]:
        """Nearest rows of ``tenant_id`` whose ACL ids intersect ``acl_ids``
        and hold none of ``deny_acl_ids``.

        Args:
            tenant_id: tenant to search in.
            vector: query vector of dimension ``dim``.
            acl_ids: the caller's ACL ids; empty returns ``[]`` without a
                query (fail closed).
            k: number of hits wanted (capped at 16384).
            deny_acl_ids: ACL ids that deny one of the caller's groups: a row
                carrying any of them is never returned.
            doc_ids: None, or only rows of these documents (the query's
                source filter pushed down; empty returns ``[]``).

        Returns:
            Up to k hits, best first; ``score`` is the cosine similarity.

        Raises:
            ValueError: the query vector has the wrong dimension or a
                non-finite value.
        """
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        client = self._require_open()
        acl = list(dict.fromkeys(acl_ids))
        if not acl or k <= 0 or (doc_ids is not None and not doc_ids):
            return []
        query = [float(x) for x in vector]
        if len(query) != self.dim or not all(math.isfinite(x) for x in query):
            raise ValueError(f"query vector must have {self.dim} finite values")
        limit = min(k, MAX_TOP_K)
        expr = self._acl_filter(tenant_id, acl, deny_acl_ids, doc_ids)
        result = client.search(
            self.collection,
            data=[query],
            filter=expr,
            limit=limit,
            output_fields=["doc_id"],
            search_params={"metric_type": "COSINE", "params": {"ef": max(MIN_EF, limit)}},
        )
        hits: list[Hit] = []
        for hit in result[0] if result else []:
            entity = hit.get("entity") or {}
            chunk_id = hit.get("chunk_id", hit.get("id"))
            hits.append(
                Hit(
                    chunk_id=str(chunk_id), doc_id=str(entity.get("doc_id", "")), score=float(hit["distance"])
                )
            )
        return hits


class _MilvusContainer(MilvusCollection):
    """A collection opened only to move its alias or drop it (any schema)."""

    def _check_schema(self, described: dict[str, Any]) -> None:
        return None


class MilvusVectorBackend(ServerAliasBackend):
    """Milvus (Lite under ``home`` or a server): ``{collection}_v{n}`` behind
    the alias ``{collection}``."""

    name = "milvus"
    _physical_attr = "physical_collection"

    def one_process(self, settings: Settings) -> str:
        return lite_one_process(settings)

    def alias(self, settings: Settings) -> str:
        return settings.collection

    def _connection(self, settings: Settings) -> dict[str, Any]:
        if "://" not in settings.milvus_uri:
            settings.ensure_home()
        return {"token": settings.milvus_token, "database": settings.milvus_database}

    def open(self, settings: Settings, dim: int, physical: str | None, *, create: bool) -> MilvusVectorIndex:
        name = settings.collection if physical is None else physical
        return MilvusVectorIndex(
            settings.milvus_uri,
            name,
            dim,
            create=create,
            alias=physical is None,
            **self._connection(settings),
        )

    def open_store(self, settings: Settings, physical: str | None, *, create: bool) -> MilvusCollection:
        name = settings.collection if physical is None else physical
        return _MilvusContainer(settings.milvus_uri, name, create=False, **self._connection(settings))


BACKEND = MilvusVectorBackend()
"""The one instance ``ragsync.index.backends`` registers."""
