"""Chunks and the embedding cache.

Tables: ``chunks`` (rows are :class:`~ragsync.model.Chunk`) and
``embedding_cache`` (float32 vectors keyed by text hash and model version).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, func, select, update
from sqlalchemy.engine import RowMapping

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _json_list, _tuple_from_json, row_to
from ragsync.model import Chunk


def _chunk_from_row(row: RowMapping) -> Chunk:
    lists = {name: _tuple_from_json(row[name]) for name in ("heading_path", "acl_ids")}
    boxes = tuple(tuple(b) for b in _tuple_from_json(row["boxes"]))
    return row_to(Chunk, row, boxes=boxes, **lists)


def chunk_row(c: Chunk) -> dict[str, Any]:
    """The ``chunks`` row of ``c`` (every column but ``pending``)."""
    return {
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
        "page_end": c.page_end,
        "char_start": c.char_start,
        "char_end": c.char_end,
        "boxes": _json_list(list(b) for b in c.boxes),
        "context": c.context,
    }


class ChunksRepository(Repository):
    """Chunk rows and cached embeddings."""

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

    def write_chunks(self, chunks: Sequence[Chunk], *, pending: bool = False) -> int:
        """Insert or update chunks by chunk_id, in one transaction.

        ``near_dup_group`` and ``pending`` of an existing row are kept.

        Args:
            chunks: chunks to store; for a repeated chunk_id the last one wins.
            pending: new rows are not shown by queries until a
                ``flip_indexed_version(live_chunk_ids=...)`` names them (a new
                version's chunks); an existing row (a chunk the live version
                already has) stays as it is.

        Returns:
            Number of distinct chunk ids written.
        """
        with self._engine.begin() as conn:
            return self._write_chunk_rows(conn, chunks, pending=pending)

    def _write_chunk_rows(self, conn: Connection, chunks: Sequence[Chunk], *, pending: bool = False) -> int:
        """:meth:`write_chunks` inside the caller's transaction ``conn`` (so
        another write can commit or fail with it). Returns the number of
        distinct chunk ids written."""
        by_id: dict[str, dict[str, Any]] = {}
        for c in chunks:
            # ``pending`` left out: the column's default (live).
            by_id[c.chunk_id] = {**chunk_row(c), **({"pending": True} if pending else {})}
        if not by_id:
            return 0
        columns = [name for name in next(iter(by_id.values())) if name not in ("chunk_id", "pending")]
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

    def chunks_by_ids(self, chunk_ids: Sequence[str], *, live_only: bool = False) -> dict[str, Chunk]:
        """Stored chunks by id; ids not stored are absent from the result.

        ``live_only``: also leave out pending chunks (written for a version
        not yet flipped live, or of a replaced version not yet deleted): what
        a query may show. One indexed lookup per 500 ids.
        """
        t = schema.chunks
        ids = sorted(set(chunk_ids))
        out: dict[str, Chunk] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(ids):
                query = select(t).where(t.c.chunk_id.in_(batch))
                if live_only:
                    query = query.where(t.c.pending.is_(False))
                for row in conn.execute(query).mappings():
                    out[row["chunk_id"]] = _chunk_from_row(row)
        return out

    def chunk_counts_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Number of stored chunks per doc_id, for one tenant or all, as one
        dict (O(documents) memory: for tests and small catalogs; reconcile
        reads :meth:`iter_chunk_counts_by_doc`)."""
        return dict(self.iter_chunk_counts_by_doc(tenant_id))

    def iter_chunk_counts_by_doc(
        self, tenant_id: str | None = None, *, page: int = 5000
    ) -> Iterator[tuple[str, int]]:
        """(doc_id, number of stored chunk rows) of every document with chunk
        rows, for one tenant or all, in the database's doc_id order.

        Read in keyset pages of at most ``page`` documents (``doc_id >
        last ... GROUP BY doc_id ORDER BY doc_id LIMIT page``, along
        ``ix_chunks_doc``), each on its own short connection: at most ``page``
        documents' counts are held at once, whatever the catalog's size.
        Pending rows count like live ones (they are in the stores too).

        Raises:
            ValueError: ``page`` is below 1.
        """
        if page < 1:
            raise ValueError(f"page must be at least 1, not {page}")
        t = schema.chunks
        after: str | None = None
        while True:
            query = select(t.c.doc_id, func.count()).group_by(t.c.doc_id).order_by(t.c.doc_id).limit(page)
            if after is not None:
                query = query.where(t.c.doc_id > after)
            if tenant_id is not None:
                query = query.where(t.c.tenant_id == tenant_id)
            with self._read_engine.connect() as conn:
                rows = [(str(doc), int(n)) for doc, n in conn.execute(query)]
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1][0]

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

    def chunk_ids_for_tenant(self, tenant_id: str) -> set[str]:
        """Every chunk id of a tenant (for the orphan sweep)."""
        t = schema.chunks
        with self._read_engine.connect() as conn:
            return {r for (r,) in conn.execute(select(t.c.chunk_id).where(t.c.tenant_id == tenant_id)).all()}

    def pending_chunk_ids(self, tenant_id: str) -> set[str]:
        """Chunk ids of a tenant's pending rows (of no live version: see
        ``write_chunks``), for repair."""
        t = schema.chunks
        query = select(t.c.chunk_id).where(t.c.tenant_id == tenant_id, t.c.pending.is_(True))
        with self._read_engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def present_chunk_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> set[str]:
        """Of ``chunk_ids`` (one page: the orphan sweep's), those with a
        chunk row of ``tenant_id``. One query per 500 ids."""
        t = schema.chunks
        wanted = sorted(set(chunk_ids))
        found: set[str] = set()
        with self._read_engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                query = select(t.c.chunk_id).where(
                    t.c.tenant_id == tenant_id, t.c.chunk_id.in_(wanted[i : i + 500])
                )
                found.update(r for (r,) in conn.execute(query).all())
        return found

    def chunk_docs(self) -> dict[str, str]:
        """``{chunk_id: doc_id}`` of every stored chunk, all tenants (a re-embedding's work list)."""
        t = schema.chunks
        with self._read_engine.connect() as conn:
            return {cid: doc for cid, doc in conn.execute(select(t.c.chunk_id, t.c.doc_id)).all()}

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
