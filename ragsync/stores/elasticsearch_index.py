"""Keyword index on Elasticsearch (production), with the official client.

Layout mirrors the Milvus store: the physical index is ``{index}_v1`` and
``{index}`` is an alias to it, so a rebuilt index can be swapped in by
moving the alias. Opening accepts an alias or a plain index name.

Mapping::

    chunk_id, doc_id, tenant_id, acl_ids   keyword (acl_ids multi-valued)
    text, heading                          text, english analyzer

Documents use ``_id = chunk_id``, so indexing the same chunk twice keeps
one copy. Writes use ``refresh="wait_for"`` (or ``refresh=True`` for
delete-by-query) so they are visible to searches when the call returns.

The client's major version must match the server's (an 9.x client is
refused by an 8.x server); ``open`` checks the connection and says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ragsync.errors import ConfigurationError, WriteError
from ragsync.model import Chunk
from ragsync.stores.base import Hit

BATCH_SIZE = 500
"""Documents per bulk request and ids per delete-by-query."""

PAGE_SIZE = 1000
"""Buckets per composite-aggregation page."""

MAX_RESULT_WINDOW = 10_000
"""Elasticsearch's default ``index.max_result_window``."""

MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "properties": {
        "chunk_id": {"type": "keyword"},
        "doc_id": {"type": "keyword"},
        "tenant_id": {"type": "keyword"},
        "acl_ids": {"type": "keyword"},
        "text": {"type": "text", "analyzer": "english"},
        "heading": {"type": "text", "analyzer": "english"},
    },
}


# Tenant-scoped partial update: another tenant's document with the same id is left alone.
_SET_ACL_SCRIPT = (
    "if (ctx._source.tenant_id == params.tenant_id) { ctx._source.acl_ids = params.acl_ids }"
    " else { ctx.op = 'noop' }"
)


def _source(chunk: Chunk) -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "tenant_id": chunk.tenant_id,
        "acl_ids": list(dict.fromkeys(chunk.acl_ids)),
        "text": chunk.text,
        "heading": " > ".join(chunk.heading_path),
    }


def _bulk_errors(response: Any, ignore_missing: bool = False) -> list[str]:
    """Error reasons of a bulk response's failed items."""
    if not response.get("errors"):
        return []
    reasons: list[str] = []
    for item in response.get("items", []):
        for _action, result in item.items():
            error = result.get("error")
            if error is None:
                continue
            if ignore_missing and result.get("status") == 404:
                continue
            reason = error.get("reason", error) if isinstance(error, dict) else error
            reasons.append(f"{result.get('_id')}: {reason}")
    return reasons


class ElasticsearchKeywordIndex:
    """``KeywordIndex`` on an Elasticsearch index (or alias).

    Args:
        url: server URL, e.g. ``https://es.internal:9200``.
        index: index or alias name the pipeline uses.
        create: create ``{index}_v1`` with the alias ``{index}`` when the
            name does not exist.
        api_key: API key (base64 ``id:key``); empty for no auth.
        client: an already built ``Elasticsearch`` client (tests, custom TLS
            settings); ``url`` and ``api_key`` are ignored then.

    Raises:
        ConfigurationError: the client package is missing, the server cannot
            be reached or refuses the client version, or the index is missing
            and ``create`` is False.
    """

    def __init__(
        self,
        url: str,
        index: str,
        *,
        create: bool = False,
        api_key: str = "",
        client: Any = None,
    ) -> None:
        self.url = url
        self.index = index
        if client is None:
            try:
                from elasticsearch import Elasticsearch
            except ImportError as exc:
                raise ConfigurationError("pip install 'ragsync[elasticsearch]'") from exc
            client = Elasticsearch(url, api_key=api_key or None, request_timeout=60, retry_on_timeout=True)
        self._es: Any = client
        try:
            self._open(create)
        except ConfigurationError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise ConfigurationError(
                f"cannot use Elasticsearch at {url!r} (index {index!r}): {exc}. The elasticsearch client's "
                "major version must match the server's (pip install 'elasticsearch>=8,<9' for an 8.x server)"
            ) from exc

    def _open(self, create: bool) -> None:
        es = self._es
        if not es.indices.exists(index=self.index):
            if not create:
                raise ConfigurationError(
                    f"Elasticsearch index {self.index!r} does not exist at {self.url!r}; create it by "
                    "opening the index with create=True (e.g. `ragsync init`)"
                )
            physical = f"{self.index}_v1"
            es.indices.create(
                index=physical,
                mappings=MAPPINGS,
                aliases={self.index: {"is_write_index": True}},
            )

    def _require_open(self) -> Any:
        if self._es is None:
            raise RuntimeError("ElasticsearchKeywordIndex is closed")
        return self._es

    # -- writes ----------------------------------------------------------------------

    def upsert(self, chunks: Sequence[Chunk]) -> int:
        """Index the chunks with ``_id = chunk_id`` (replacing older copies).

        Returns:
            The number of chunks written; visible to search on return.

        Raises:
            WriteError: a bulk item failed (earlier batches stay written;
                retrying is safe).
        """
        es = self._require_open()
        for start in range(0, len(chunks), BATCH_SIZE):
            operations: list[dict[str, Any]] = []
            for chunk in chunks[start : start + BATCH_SIZE]:
                operations.append({"index": {"_index": self.index, "_id": chunk.chunk_id}})
                operations.append(_source(chunk))
            response = es.bulk(operations=operations, refresh="wait_for")
            errors = _bulk_errors(response)
            if errors:
                raise WriteError(
                    f"Elasticsearch bulk index into {self.index!r} failed: {'; '.join(errors[:5])}"
                )
        return len(chunks)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """Delete the tenant's documents with these chunk ids.

        Returns:
            ``len(chunk_ids)`` (the number asked).

        Raises:
            WriteError: the delete-by-query reported failures.
        """
        es = self._require_open()
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), BATCH_SIZE):
            batch = ids[start : start + BATCH_SIZE]
            response = es.delete_by_query(
                index=self.index,
                query={
                    "bool": {"filter": [{"term": {"tenant_id": tenant_id}}, {"terms": {"chunk_id": batch}}]}
                },
                refresh=True,
                conflicts="proceed",
            )
            failures = response.get("failures") or []
            if failures:
                raise WriteError(f"Elasticsearch delete from {self.index!r} failed: {failures[:3]}")
        return len(chunk_ids)

    def set_acl_ids(self, tenant_id: str, chunks: Sequence[Chunk]) -> None:
        """Replace the acl_ids of the tenant's existing documents (scripted
        partial update; text untouched). Missing documents and documents of
        another tenant are skipped.

        Raises:
            ValueError: a chunk's ``tenant_id`` is not ``tenant_id``.
            WriteError: a bulk item failed for another reason than missing.
        """
        es = self._require_open()
        for chunk in chunks:
            if chunk.tenant_id != tenant_id:
                raise ValueError(
                    f"chunk {chunk.chunk_id} belongs to tenant {chunk.tenant_id!r}, not {tenant_id!r}"
                )
        for start in range(0, len(chunks), BATCH_SIZE):
            operations: list[dict[str, Any]] = []
            for chunk in chunks[start : start + BATCH_SIZE]:
                operations.append({"update": {"_index": self.index, "_id": chunk.chunk_id}})
                params = {"tenant_id": tenant_id, "acl_ids": list(dict.fromkeys(chunk.acl_ids))}
                operations.append(
                    {"script": {"source": _SET_ACL_SCRIPT, "lang": "painless", "params": params}}
                )
            response = es.bulk(operations=operations, refresh="wait_for")
            errors = _bulk_errors(response, ignore_missing=True)
            if errors:
                raise WriteError(
                    f"Elasticsearch ACL update in {self.index!r} failed: {'; '.join(errors[:5])}"
                )

    # -- reads -----------------------------------------------------------------------

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, deny_acl_ids: Sequence[str] = ()
    ) -> list[Hit]:
        """BM25 (``multi_match`` over text and heading) within the tenant and
        the caller's ACLs, never a chunk carrying one of ``deny_acl_ids``
        (``must_not``). The text is not parsed as query syntax.

        Returns:
            Up to k hits (at most 10,000), best first; empty ``acl_ids``
            returns ``[]`` without a request (fail closed).
        """
        es = self._require_open()
        acl = list(dict.fromkeys(acl_ids))
        if not acl or k <= 0 or not text.strip():
            return []
        query: dict[str, Any] = {
            "must": [{"multi_match": {"query": text, "fields": ["text", "heading"]}}],
            "filter": [{"term": {"tenant_id": tenant_id}}, {"terms": {"acl_ids": acl}}],
        }
        deny = list(dict.fromkeys(deny_acl_ids))
        if deny:
            query["must_not"] = [{"terms": {"acl_ids": deny}}]
        response = es.search(
            index=self.index,
            query={"bool": query},
            size=min(k, MAX_RESULT_WINDOW),
            source_includes=["doc_id"],
        )
        hits: list[Hit] = []
        for hit in response["hits"]["hits"]:
            source = hit.get("_source") or {}
            hits.append(
                Hit(chunk_id=hit["_id"], doc_id=str(source.get("doc_id", "")), score=float(hit["_score"]))
            )
        return hits

    def _buckets(self, field: str, tenant_id: str | None) -> Iterator[tuple[str, int]]:
        """Every (value, doc count) of a keyword field, paged with a
        composite aggregation."""
        es = self._require_open()
        query: dict[str, Any] = (
            {"term": {"tenant_id": tenant_id}} if tenant_id is not None else {"match_all": {}}
        )
        after: dict[str, Any] | None = None
        while True:
            composite: dict[str, Any] = {"size": PAGE_SIZE, "sources": [{"key": {"terms": {"field": field}}}]}
            if after is not None:
                composite["after"] = after
            response = es.search(
                index=self.index, size=0, query=query, aggs={"values": {"composite": composite}}
            )
            agg = response["aggregations"]["values"]
            buckets = agg.get("buckets", [])
            for bucket in buckets:
                yield str(bucket["key"]["key"]), int(bucket["doc_count"])
            after = agg.get("after_key")
            if not buckets or after is None:
                return

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Document count per doc id, for one tenant or all (``None``);
        exact (composite aggregation, paged)."""
        return dict(self._buckets("doc_id", tenant_id))

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        """Every chunk id present, for one tenant or all (``None``)."""
        return {value for value, _count in self._buckets("chunk_id", tenant_id)}

    def close(self) -> None:
        """Close the client's connections. Safe to call twice."""
        es, self._es = self._es, None
        if es is not None:
            es.close()

    def __enter__(self) -> ElasticsearchKeywordIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
