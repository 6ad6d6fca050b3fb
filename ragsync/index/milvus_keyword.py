"""Keyword index on Milvus' own full-text search (BM25).

The second keyword backend beside tantivy (``RAGSYNC_KEYWORD_INDEX=milvus``):
the same Milvus that holds the vectors (Lite, ``milvus-lite server`` or a
Milvus cluster) also holds a BM25 index, and unlike tantivy it takes
writers from many processes at once, so the pipeline can run on several
workers.

Layout and behaviour as :class:`ragsync.index.milvus.MilvusVectorIndex`
(one client per store, ``{collection}_v1`` behind an alias, ``Strong``
consistency, no flush, deletes scoped by tenant). Schema::

    chunk_id   VARCHAR(64)  primary key
    doc_id     VARCHAR(64)
    tenant_id  VARCHAR(128)
    acl_ids    ARRAY<VARCHAR(128)>
    text       VARCHAR(65535), analyzed (standard tokenizer, lowercase):
               the document's identity and heading path, a newline, the text
    sparse     SPARSE_FLOAT_VECTOR, filled by Milvus' BM25 function from
               ``text``; SPARSE_INVERTED_INDEX, metric BM25

Ranking differs from tantivy's in small ways: no English stemming (Milvus
Lite 3.2.2 accepts the stemmer filter but then matches neither form of a
stemmed word), and BM25 statistics are Milvus' own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ragsync.errors import ConfigurationError
from ragsync.index.base import NO_FILTER, Hit, SearchFilter, ServerAliasBackend, Settings, check_chunk_tenants
from ragsync.index.milvus import MAX_TOP_K, MilvusCollection, lite_one_process
from ragsync.model import Chunk

MAX_TEXT_BYTES = 65_535
"""Milvus' largest VARCHAR: heading path plus chunk text, UTF-8."""

ANALYZER = {"tokenizer": "standard", "filter": ["lowercase"]}
"""How Milvus splits ``text`` and queries into words."""

_WORD = re.compile(r"\w")


def keyword_text(chunk: Chunk) -> str:
    """What is indexed for a chunk: the document's identity and its heading
    path (``Chunk.search_prefix``), a newline, its text."""
    return chunk.search_prefix() + "\n" + chunk.text


class MilvusKeywordIndex(MilvusCollection):
    """``KeywordIndex`` on Milvus BM25 full-text search.

    Args:
        uri: a Milvus Lite file path ending in ``.db`` or a server URL.
        collection: collection or alias name (``{Settings.collection}_keyword``
            from :func:`ragsync.config.open_keyword_index`).
        create: create ``{collection}_v1`` and the alias when missing.
        token: server auth token; ignored by Milvus Lite.
        database: Milvus database; empty = ``default``.
        alias: with ``create``, False creates the collection under exactly
            ``collection`` with no alias (an index version built beside the
            live one).

    Raises:
        ConfigurationError: as ``MilvusVectorIndex``, or the collection has no
            BM25 ``sparse`` field (not created by this class).
    """

    def __init__(
        self,
        uri: str,
        collection: str,
        *,
        create: bool = False,
        token: str = "",
        database: str = "",
        alias: bool = True,
    ) -> None:
        super().__init__(uri, collection, create=create, token=token, alias=alias, database=database)

    def _create_collection(self) -> None:
        from pymilvus import DataType, Function, FunctionType

        schema = self._key_schema()
        schema.add_field(
            "text",
            DataType.VARCHAR,
            max_length=MAX_TEXT_BYTES,
            enable_analyzer=True,
            analyzer_params=ANALYZER,
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name="text_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["text"],
                output_field_names=["sparse"],
            )
        )
        index_params = self._client.prepare_index_params()
        index_params.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self._make_collection(schema, index_params)

    def _check_schema(self, described: dict[str, Any]) -> None:
        names = {field.get("name") for field in described.get("fields", [])}
        if not {"sparse", "text", "acl_ids"} <= names:
            raise ConfigurationError(
                f"Milvus collection {self.collection!r} has no BM25 'sparse' and 'text' fields; it was "
                "not created as a ragsync keyword index (is it the vector collection?)"
            )

    # -- writes ------------------------------------------------------------------

    def _rows(self, chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
        rows = []
        for chunk in chunks:
            self._validate_row(chunk.chunk_id, chunk.doc_id, chunk.tenant_id, chunk.acl_ids)
            text = keyword_text(chunk)
            if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
                raise ValueError(f"chunk {chunk.chunk_id}: text longer than {MAX_TEXT_BYTES} bytes")
            rows.append(
                {
                    "chunk_id": chunk.chunk_id,
                    "doc_id": chunk.doc_id,
                    "tenant_id": chunk.tenant_id,
                    "acl_ids": list(dict.fromkeys(chunk.acl_ids)),
                    "text": text,
                }
            )
        return rows

    def upsert(self, chunks: Sequence[Chunk]) -> int:
        """Index the chunks, replacing rows with the same chunk id.

        Returns:
            The number of chunks written; acknowledged by Milvus' log when it returns.

        Raises:
            ValueError: a field is too long (checked before the first write).
            WriteError: Milvus refused a batch (retrying is safe: idempotent).
        """
        client = self._require_open()
        rows = self._rows(chunks)
        if rows:
            self._upsert_rows(client, rows)
        return len(rows)

    def set_acl_ids(self, tenant_id: str, chunks: Sequence[Chunk]) -> None:
        """Rewrite the tenant's existing rows with the chunks' acl_ids.

        Chunks not in the index (or another tenant's there) are skipped.

        Raises:
            ValueError: a chunk's ``tenant_id`` is not ``tenant_id``.
        """
        check_chunk_tenants(tenant_id, chunks)
        present = self._tenant_ids_present(tenant_id, [c.chunk_id for c in chunks])
        self.upsert([c for c in chunks if c.chunk_id in present])

    # -- reads -------------------------------------------------------------------

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, where: SearchFilter = NO_FILTER
    ) -> list[Hit]:
        """BM25 over heading and text, within the tenant and the caller's ACLs.

        Args:
            tenant_id: tenant to search in.
            text: user text (Milvus' analyzer splits it; no query syntax).
            acl_ids: the caller's ACL ids; empty returns ``[]`` (fail closed).
            k: number of hits wanted (capped at 16384).
            deny_acl_ids: a row carrying any of these is never returned.
            doc_ids: None, or only rows of these documents (the query's
                source filter pushed down; empty returns ``[]``).

        Returns:
            Up to k hits, best first; ``score`` is the BM25 score (Milvus Lite
            reports it negated as a distance; a server positive: the
            magnitude is the score either way).
        """
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        client = self._require_open()
        acl = list(dict.fromkeys(acl_ids))
        if not acl or k <= 0 or not _WORD.search(text) or (doc_ids is not None and not doc_ids):
            return []
        result = client.search(
            self.collection,
            data=[text],
            anns_field="sparse",
            filter=self._acl_filter(tenant_id, acl, deny_acl_ids, doc_ids),
            limit=min(k, MAX_TOP_K),
            output_fields=["doc_id"],
            search_params={"metric_type": "BM25"},
        )
        hits = [
            Hit(
                chunk_id=str(hit.get("chunk_id", hit.get("id"))),
                doc_id=str((hit.get("entity") or {}).get("doc_id", "")),
                score=abs(float(hit["distance"])),
            )
            for hit in (result[0] if result else [])
        ]
        hits.sort(key=lambda hit: hit.score, reverse=True)
        return hits


class MilvusBM25Backend(ServerAliasBackend):
    """Milvus' BM25 full-text search in the vectors' Milvus (Lite or server):
    ``{collection}_keyword_v{n}`` behind the alias ``{collection}_keyword``."""

    name = "milvus"
    _physical_attr = "physical_collection"

    def one_process(self, settings: Settings) -> str:
        return lite_one_process(settings)

    def alias(self, settings: Settings) -> str:
        return settings.keyword_collection

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> MilvusKeywordIndex:
        if "://" not in settings.milvus_uri:
            settings.ensure_home()
        return MilvusKeywordIndex(
            settings.milvus_uri,
            settings.keyword_collection if physical is None else physical,
            create=create,
            token=settings.milvus_token,
            database=settings.milvus_database,
            alias=physical is None,
        )

    def open_store(self, settings: Settings, physical: str | None, *, create: bool) -> MilvusKeywordIndex:
        return self.open(settings, physical, create=create)


BACKEND = MilvusBM25Backend()
"""The one instance ``ragsync.index.backends`` registers."""
