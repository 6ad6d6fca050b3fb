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

Bulk writes: items the server rejects with 429 (its write queue is full)
are sent again, only those, after an exponential backoff
(``BULK_RETRY_BASE_S`` doubling, ``BULK_RETRIES`` times); a whole request
answered 429 (after the client's own retries) is retried the same way.
Still rejected after that: ``WriteError`` (the step's retry or dead letter
takes over; ids are content-keyed, so a retry is harmless).

Index versions (``ragsync.index.versions``): ``alias=False`` opens or
creates exactly the physical index ``{index}_v{n}``; ``point_alias`` moves
the alias to it in one ``_aliases`` call; ``drop_physical`` deletes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ragsync.errors import ConfigurationError, WriteError
from ragsync.index.base import (
    NO_FILTER,
    ClosesOnExit,
    Hit,
    SearchFilter,
    ServerAliasBackend,
    Settings,
    check_chunk_tenants,
)
from ragsync.model import Chunk

BATCH_SIZE = 500
"""Documents per bulk request and ids per delete-by-query."""

PAGE_SIZE = 1000
"""Buckets per composite-aggregation page."""

BULK_RETRIES = 5
"""How many times items rejected with 429 are sent again."""

BULK_RETRY_BASE_S = 0.5
"""First backoff before a 429 retry; doubles each time (0.5, 1, 2, 4, 8 s)."""

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
        "heading": chunk.search_prefix(),
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


_sleep = time.sleep  # the backoff's clock (tests replace it)


def rejected_pairs(response: Any) -> list[int]:
    """Positions (in the request's item order) of bulk items answered 429."""
    if not response.get("errors"):
        return []
    out = []
    for i, item in enumerate(response.get("items", [])):
        for _action, result in item.items():
            if result.get("status") == 429:
                out.append(i)
    return out


def _status_of(exc: BaseException) -> int | None:
    meta = getattr(exc, "meta", None)
    status = getattr(meta, "status", None)
    return status if isinstance(status, int) else None


def bulk_with_retry(
    es: Any,
    operations: list[dict[str, Any]],
    *,
    ignore_missing: bool = False,
    retries: int = BULK_RETRIES,
    base_s: float = BULK_RETRY_BASE_S,
    sleep: Callable[[float], None] | None = None,
) -> list[str]:
    """Send ``operations`` (action/body pairs) as bulk requests until every
    item is written or failed for another reason than 429.

    Returns:
        Error reasons of failed items (404s skipped with ``ignore_missing``).

    Raises:
        WriteError: items (or the whole request) still rejected with 429
            after ``retries`` retries.
    """
    pending = operations
    errors: list[str] = []
    for attempt in range(retries + 1):
        try:
            response = es.bulk(operations=pending, refresh="wait_for")
        except Exception as exc:
            if _status_of(exc) != 429:
                raise
            response = {"errors": True, "items": [{"index": {"status": 429}}] * (len(pending) // 2)}
        rejected = rejected_pairs(response)
        if rejected:
            keep = set(rejected)
            done = {
                "errors": response.get("errors"),
                "items": [item for i, item in enumerate(response.get("items", [])) if i not in keep],
            }
        else:
            done = response
        errors += _bulk_errors(done, ignore_missing=ignore_missing)
        if not rejected:
            return errors
        if attempt == retries:
            raise WriteError(
                f"Elasticsearch rejected {len(rejected)} bulk items with 429 (too many requests) "
                f"{retries + 1} times; the step retries later"
            )
        pending = [op for i in rejected for op in pending[2 * i : 2 * i + 2]]
        (sleep or _sleep)(base_s * 2**attempt)
    return errors


class ElasticsearchKeywordIndex(ClosesOnExit):
    """``KeywordIndex`` on an Elasticsearch index (or alias).

    Args:
        url: server URL, e.g. ``https://es.internal:9200``.
        index: index or alias name the pipeline uses.
        create: create ``{index}_v1`` with the alias ``{index}`` when the
            name does not exist.
        api_key: API key (base64 ``id:key``); empty for no auth.
        basic_auth: ``(user, password)`` instead of an API key.
        alias: with ``create``, False creates exactly ``index`` with no
            alias (an index version built beside the live one).
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
        basic_auth: tuple[str, str] | None = None,
        client: Any = None,
        alias: bool = True,
    ) -> None:
        self.url = url
        self.index = index
        self._alias = alias
        if client is None:
            try:
                from elasticsearch import Elasticsearch
            except ImportError as exc:
                raise ConfigurationError("pip install 'ragsync[elasticsearch]'") from exc
            client = Elasticsearch(
                url,
                api_key=api_key or None,
                basic_auth=basic_auth,
                request_timeout=60,
                retry_on_timeout=True,
            )
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
            if not self._alias:
                es.indices.create(index=self.index, mappings=MAPPINGS)
                return
            physical = f"{self.index}_v1"
            es.indices.create(
                index=physical,
                mappings=MAPPINGS,
                aliases={self.index: {"is_write_index": True}},
            )

    @property
    def physical_index(self) -> str:
        """The concrete index behind the name (the name itself when it is not an alias)."""
        es = self._require_open()
        if es.indices.exists_alias(name=self.index):
            holders = sorted(es.indices.get_alias(name=self.index).keys())
            if len(holders) == 1:
                return str(holders[0])
            raise ConfigurationError(f"Elasticsearch alias {self.index!r} points to {holders}, not one index")
        return self.index

    def point_alias(self, alias: str) -> None:
        """Make ``alias`` name this index's physical index only (created or
        moved in one atomic ``_aliases`` request).

        Raises:
            WriteError: Elasticsearch refused (e.g. ``alias`` is an index name).
        """
        es = self._require_open()
        physical = self.physical_index
        actions: list[dict[str, Any]] = []
        if es.indices.exists_alias(name=alias):
            for holder in sorted(es.indices.get_alias(name=alias).keys()):
                if holder != physical:
                    actions.append({"remove": {"index": holder, "alias": alias}})
        actions.append({"add": {"index": physical, "alias": alias, "is_write_index": True}})
        try:
            es.indices.update_aliases(actions=actions)
        except Exception as exc:
            raise WriteError(f"Elasticsearch alias {alias!r} -> {physical!r} failed: {exc}") from exc

    def drop_physical(self) -> None:
        """Delete the physical index (an index version's; never call on the live one)."""
        es = self._require_open()
        es.options(ignore_status=404).indices.delete(index=self.physical_index)

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
            WriteError: a bulk item failed, or stayed rejected with 429
                (earlier batches stay written; retrying is safe).
        """
        es = self._require_open()
        for start in range(0, len(chunks), BATCH_SIZE):
            operations: list[dict[str, Any]] = []
            for chunk in chunks[start : start + BATCH_SIZE]:
                operations.append({"index": {"_index": self.index, "_id": chunk.chunk_id}})
                operations.append(_source(chunk))
            errors = bulk_with_retry(es, operations)
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
        check_chunk_tenants(tenant_id, chunks)
        for start in range(0, len(chunks), BATCH_SIZE):
            operations: list[dict[str, Any]] = []
            for chunk in chunks[start : start + BATCH_SIZE]:
                operations.append({"update": {"_index": self.index, "_id": chunk.chunk_id}})
                params = {"tenant_id": tenant_id, "acl_ids": list(dict.fromkeys(chunk.acl_ids))}
                operations.append(
                    {"script": {"source": _SET_ACL_SCRIPT, "lang": "painless", "params": params}}
                )
            errors = bulk_with_retry(es, operations, ignore_missing=True)
            if errors:
                raise WriteError(
                    f"Elasticsearch ACL update in {self.index!r} failed: {'; '.join(errors[:5])}"
                )

    # -- reads -----------------------------------------------------------------------

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, where: SearchFilter = NO_FILTER
    ) -> list[Hit]:
        """BM25 (``multi_match`` over text and heading) within the tenant and
        the caller's ACLs, never a chunk carrying one of ``deny_acl_ids``
        (``must_not``), only of ``doc_ids`` (a ``terms`` filter) unless it is
        None. The text is not parsed as query syntax.

        Returns:
            Up to k hits (at most 10,000), best first; empty ``acl_ids``
            returns ``[]`` without a request (fail closed).
        """
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        es = self._require_open()
        acl = list(dict.fromkeys(acl_ids))
        if not acl or k <= 0 or not text.strip() or (doc_ids is not None and not doc_ids):
            return []
        query: dict[str, Any] = {
            "must": [{"multi_match": {"query": text, "fields": ["text", "heading"]}}],
            "filter": [{"term": {"tenant_id": tenant_id}}, {"terms": {"acl_ids": acl}}],
        }
        if doc_ids is not None:
            query["filter"].append({"terms": {"doc_id": list(dict.fromkeys(doc_ids))}})
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

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """How many of ``chunk_ids`` the index holds for ``tenant_id``:
        ``_count`` under term filters on keyword fields, per batch."""
        es = self._require_open()
        ids = list(dict.fromkeys(chunk_ids))
        total = 0
        for start in range(0, len(ids), BATCH_SIZE):
            batch = ids[start : start + BATCH_SIZE]
            query = {"bool": {"filter": [{"term": {"tenant_id": tenant_id}}, {"terms": {"chunk_id": batch}}]}}
            total += int(es.count(index=self.index, query=query)["count"])
        return total

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        """Every chunk id present, for one tenant or all (``None``)."""
        return set(self.iter_chunk_ids(tenant_id))

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]:
        """Every chunk id present, streamed (composite aggregation pages)."""
        for value, _count in self._buckets("chunk_id", tenant_id):
            yield value

    def close(self) -> None:
        """Close the client's connections. Safe to call twice."""
        es, self._es = self._es, None
        if es is not None:
            es.close()


class ElasticsearchBackend(ServerAliasBackend):
    """Elasticsearch (production): ``{es_index}_v{n}`` behind the alias ``{es_index}``."""

    name = "elasticsearch"
    _physical_attr = "physical_index"

    def alias(self, settings: Settings) -> str:
        return settings.es_index

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> ElasticsearchKeywordIndex:
        return ElasticsearchKeywordIndex(
            settings.es_url,
            settings.es_index if physical is None else physical,
            create=create,
            api_key=settings.es_api_key,
            basic_auth=(settings.es_username, settings.es_password) if settings.es_username else None,
            alias=physical is None,
        )

    def open_store(
        self, settings: Settings, physical: str | None, *, create: bool
    ) -> ElasticsearchKeywordIndex:
        return self.open(settings, physical, create=create)


BACKEND = ElasticsearchBackend()
"""The one instance ``ragsync.index.backends`` registers."""
