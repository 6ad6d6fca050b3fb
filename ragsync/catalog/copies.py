"""Exact copies and near duplicates of documents.

Tables: ``documents`` (``canonical_doc_id``), ``doc_signatures``/``doc_bands``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Connection, Engine, and_, bindparam, or_, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now
from ragsync.catalog.chunks import ChunksRepository
from ragsync.catalog.documents import (
    LIVE_STATUSES,
    STATUS_INDEXED,
    DocumentRow,
    _document_from_row,
    document_update,
)
from ragsync.catalog.settling import settle_dead_letters
from ragsync.decisions.gate import Stamp
from ragsync.model import Chunk


class CopiesRepository(Repository):
    """Exact copies (which document holds the chunks of shared bytes) and
    near-duplicate groups (MinHash signatures and LSH bands).

    Args:
        engine: the catalog's engine.
        chunks: the chunks repository (a promotion writes chunk rows in its
            own transaction).
    """

    def __init__(self, engine: Engine, chunks: ChunksRepository) -> None:
        super().__init__(engine)
        self._chunks = chunks

    # -- exact duplicates ------------------------------------------------------------

    def mark_duplicate(
        self,
        doc_id: str,
        canonical_doc_id: str,
        *,
        content_hash: str,
        written: Stamp | None = None,
        by_event: bool = False,
    ) -> None:
        """Record that ``doc_id`` is an exact copy served by ``canonical_doc_id``'s
        chunks: status ``duplicate``, no chunks of its own. With ``written``
        (the copy's version), the open dead letters it settles are resolved
        in the same transaction (``settle_dead_letters``).

        Args:
            doc_id: the copy.
            canonical_doc_id: the document holding the chunks of its bytes.
            content_hash: the copy's (new) content hash. It is stored here
                because ``record_fetch`` keeps the old hash of a document
                that had a live version: an edit that turns it into a copy
                must leave the new hash, or the union of the groups of the
                shared content would miss this copy's groups.
        """
        with self._engine.begin() as conn:
            conn.execute(
                document_update(
                    doc_id,
                    canonical_doc_id=canonical_doc_id,
                    content_hash=content_hash,
                    status="duplicate",
                    error_class=None,
                    indexed_at=_now(),
                    updated_at=_now(),
                )
            )
            if written is not None:
                settle_dead_letters(conn, doc_id, written, by_event=by_event)

    def promote_copy(
        self,
        doc_id: str,
        *,
        from_doc_id: str,
        chunker_id: str,
        parser_version: str,
        indexed_at: float,
        chunks: Sequence[Chunk] = (),
    ) -> int:
        """Make the exact copy ``doc_id`` the holder of the chunks that
        ``from_doc_id`` held, in one transaction: its re-keyed chunk rows
        ``chunks`` are written (live), it becomes ``indexed`` with
        ``chunk_count = len(chunks)`` and its own canonical copy, and every
        live copy linked to ``from_doc_id`` is linked to it. A failure at any
        point leaves none of it: never rows of a copy still marked
        ``duplicate``, nor an ``indexed`` holder without its rows.

        Args:
            doc_id: the promoted copy.
            from_doc_id: the previous holder (deleted, or now other content).
            chunker_id: chunker config of the re-keyed chunks.
            parser_version: parser of the re-keyed chunks.
            indexed_at: epoch seconds.
            chunks: ``from_doc_id``'s chunks re-keyed to ``doc_id`` (already
                in both indexes).

        Returns:
            Number of other copies re-linked to ``doc_id``.
        """
        t = schema.documents
        now = _now()
        with self._engine.begin() as conn:
            self._chunks._write_chunk_rows(conn, chunks)
            row = conn.execute(select(t.c.source_version).where(t.c.doc_id == doc_id)).first()
            conn.execute(
                document_update(
                    doc_id,
                    canonical_doc_id=doc_id,
                    status=STATUS_INDEXED,
                    error_class=None,
                    chunker_id=chunker_id,
                    parser_version=parser_version,
                    chunk_count=len(chunks),
                    indexed_version=row[0] if row is not None else None,
                    indexed_at=indexed_at,
                    updated_at=now,
                )
            )
            return int(
                conn.execute(
                    update(t)
                    .where(t.c.canonical_doc_id == from_doc_id)
                    .where(t.c.doc_id != doc_id)
                    .where(t.c.doc_id != from_doc_id)
                    .where(t.c.status == "duplicate")
                    .where(t.c.deleted_at.is_(None))
                    .values(canonical_doc_id=doc_id, updated_at=now)
                ).rowcount
            )

    def duplicates_of(self, canonical_doc_id: str) -> list[DocumentRow]:
        """Live exact copies served by ``canonical_doc_id``'s chunks."""
        t = schema.documents
        query = (
            select(t)
            .where(t.c.canonical_doc_id == canonical_doc_id)
            .where(t.c.doc_id != canonical_doc_id)
            .where(t.c.status == "duplicate")
            .where(t.c.deleted_at.is_(None))
            .order_by(t.c.doc_id)
        )
        with self._read_engine.connect() as conn:
            return [_document_from_row(r) for r in conn.execute(query).mappings()]

    def doc_ids_in_sources(
        self, tenant_id: str, source_ids: Sequence[str], *, limit: int
    ) -> list[str] | None:
        """The documents whose chunks serve ``source_ids``' live documents: each
        live document's own id, and for an exact copy the holder of its chunks.

        For pushing a query's source filter into the stores (their rows carry
        the holder's doc id).

        Args:
            tenant_id: the tenant.
            source_ids: the sources filtered on.
            limit: the most ids returned.

        Returns:
            Sorted doc ids; None when there are more than ``limit`` (post-filter instead).
        """
        t = schema.documents
        query = (
            select(t.c.doc_id, t.c.status, t.c.canonical_doc_id)
            .where(t.c.tenant_id == tenant_id, t.c.source_id.in_(sorted(set(source_ids))))
            .where(t.c.deleted_at.is_(None), t.c.status.in_([*LIVE_STATUSES, "duplicate"]))
            .limit(limit + 1)
        )
        with self._read_engine.connect() as conn:
            rows = conn.execute(query).all()
        if len(rows) > limit:
            return None
        return sorted({str(c) if status == "duplicate" and c else str(d) for d, status, c in rows})

    # -- near duplicates -------------------------------------------------------------

    def set_near_dup(
        self, doc_id: str, tenant_id: str, signature: np.ndarray, band_keys: Sequence[str]
    ) -> str:
        """Store a document's MinHash signature (``ragsync.ingest.near_dup.ALGORITHM``)
        and join it to the group of the most similar earlier document
        (``ragsync.ingest.near_dup.choose_group``); only signatures of the same
        algorithm are candidates.

        Returns:
            The document's near-duplicate group id (its own doc id when it
            resembles nothing).
        """
        from ragsync.ingest import near_dup

        with self._read_engine.connect() as conn:
            candidates = {
                other: (sig, group) for _key, other, sig, group in _band_matches(conn, tenant_id, band_keys)
            }
        candidates.pop(doc_id, None)
        group = near_dup.choose_group(doc_id, signature, candidates.values())
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "signature": np.asarray(signature, dtype=np.uint64).tobytes(),
            "near_dup_group": group,
            "updated_at": _now(),
            "algorithm": near_dup.ALGORITHM,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.doc_signatures,
                [row],
                ["doc_id"],
                ["signature", "near_dup_group", "updated_at", "algorithm"],
            )
            bands = schema.doc_bands
            conn.execute(bands.delete().where(bands.c.doc_id == doc_id))
            conn.execute(
                bands.insert(),
                [{"tenant_id": tenant_id, "band_key": k, "doc_id": doc_id} for k in set(band_keys)],
            )
        return str(group)

    def remove_near_dup(self, doc_id: str) -> None:
        """Forget a deleted document's signature."""
        with self._engine.begin() as conn:
            conn.execute(schema.doc_bands.delete().where(schema.doc_bands.c.doc_id == doc_id))
            conn.execute(schema.doc_signatures.delete().where(schema.doc_signatures.c.doc_id == doc_id))

    def newest_of_groups(
        self, doc_ids: Sequence[str], acl_ids: Sequence[str] | None = None
    ) -> dict[str, str]:
        """For each document, the newest indexed member of its near-duplicate
        group (itself when it has no group). Newest = latest ``indexed_at``.
        With ``acl_ids``, only members readable through them count, so a
        newer draft a reader may not see never hides the one they may."""
        sigs, d = schema.doc_signatures, schema.documents
        out = {doc_id: doc_id for doc_id in doc_ids}
        with self._read_engine.connect() as conn:
            groups = {
                r.doc_id: r.near_dup_group
                for r in conn.execute(
                    select(sigs.c.doc_id, sigs.c.near_dup_group).where(sigs.c.doc_id.in_(list(doc_ids)))
                )
            }
            if not groups:
                return out
            query = (
                select(sigs.c.near_dup_group, d.c.doc_id, d.c.indexed_at)
                .select_from(sigs.join(d, d.c.doc_id == sigs.c.doc_id))
                .where(sigs.c.near_dup_group.in_(sorted(set(groups.values()))))
                .where(d.c.status == "indexed")
            )
            if acl_ids is not None:
                query = query.where(d.c.acl_id.in_(list(acl_ids)))
            members = conn.execute(query).all()
        newest: dict[str, tuple[float, str]] = {}
        for group, member, indexed_at in members:
            key = (float(indexed_at or 0.0), member)
            if group not in newest or key > newest[group]:
                newest[group] = key
        for doc_id, group in groups.items():
            if group in newest:
                out[doc_id] = newest[group][1]
        return out


# ------------------------------------------------------------------ near-duplicate helpers


def _band_matches(
    conn: Connection, tenant_id: str, band_keys: Sequence[str]
) -> list[tuple[str, str, np.ndarray, str]]:
    """(band key, doc id, signature, group) of the documents of ``tenant_id``
    holding one of ``band_keys`` and signed by the current algorithm."""
    from ragsync.ingest import near_dup

    sigs, bands = schema.doc_signatures, schema.doc_bands
    out = []
    for part in _batches(sorted(set(band_keys))):
        rows = conn.execute(
            select(bands.c.band_key, sigs.c.doc_id, sigs.c.signature, sigs.c.near_dup_group)
            .select_from(sigs.join(bands, bands.c.doc_id == sigs.c.doc_id))
            .where(bands.c.tenant_id == tenant_id)
            .where(bands.c.band_key.in_(list(part)))
            .where(sigs.c.algorithm == near_dup.ALGORITHM)
        )
        out += [(str(k), str(d), np.frombuffer(sig, dtype=np.uint64), str(g)) for k, d, sig, g in rows]
    return out


@dataclass(frozen=True)
class ResignCounts:
    """What :func:`resign_near_dups` did: documents re-signed, of them joined
    to another document's group, and signatures dropped (exact copies
    holding no chunks)."""

    signed: int
    grouped: int
    dropped: int


def resign_near_dups(conn: Connection, *, batch_size: int = 200) -> ResignCounts:
    """Re-sign every document of ``doc_signatures`` with the current
    algorithm (``ragsync.ingest.near_dup``) and recompute its group, as the pipeline
    would have: run by catalog revisions that change the signature format.

    * Text: the document's stored chunk texts in ordinal order joined by
      ``"\\n\\n"``, which is what the pipeline signs (``ragsync/index/service.py``
      signs the chunks it stores and, for a promoted copy, the chunks
      re-keyed to it; child documents are documents with chunks
      of their own).
    * Groups: all band keys are dropped first, then documents are signed in
      their original signing order (``updated_at``, then doc id), each
      joining the group of its most similar earlier re-signed document of
      its tenant (``near_dup.choose_group`` over the documents sharing a
      band key, as ``set_near_dup`` does): the groups a fresh backfill in
      that order would give. ``updated_at`` is kept.
    * A document that is an exact copy (status ``duplicate``) and holds no
      chunks loses its signature: it was signed before it became a copy,
      and a fresh backfill signs no copy.

    Streams pages of ``batch_size`` signature rows (keyset pagination) with
    their chunks; per page, one query finds the candidates among earlier
    pages and the page's own documents are matched in memory, so the
    statements per page are a handful, not one per document. Runs on the
    caller's connection and transaction.

    Args:
        conn: an open connection inside a transaction (Alembic's).
        batch_size: signature rows per page.

    Returns:
        The counts (see :class:`ResignCounts`).
    """
    sigs = schema.doc_signatures
    conn.execute(schema.doc_bands.delete())
    signed = grouped = dropped = 0
    last: tuple[float, str] | None = None
    while True:
        query = select(sigs.c.doc_id, sigs.c.tenant_id, sigs.c.updated_at)
        if last is not None:
            query = query.where(
                or_(
                    sigs.c.updated_at > last[0],
                    and_(sigs.c.updated_at == last[0], sigs.c.doc_id > last[1]),
                )
            )
        page = conn.execute(query.order_by(sigs.c.updated_at, sigs.c.doc_id).limit(batch_size)).all()
        if not page:
            return ResignCounts(signed, grouped, dropped)
        last = (float(page[-1].updated_at), str(page[-1].doc_id))
        counts = _resign_page(conn, [(str(r.doc_id), str(r.tenant_id)) for r in page])
        signed, grouped, dropped = signed + counts.signed, grouped + counts.grouped, dropped + counts.dropped


def _resign_page(conn: Connection, page: list[tuple[str, str]]) -> ResignCounts:
    """Re-sign one page of (doc id, tenant), in order (see :func:`resign_near_dups`)."""
    from ragsync.ingest import near_dup

    sigs, chunks, docs, bands = schema.doc_signatures, schema.chunks, schema.documents, schema.doc_bands
    ids = [doc_id for doc_id, _ in page]
    texts: dict[str, list[str]] = {doc_id: [] for doc_id in ids}
    for doc_id, text in conn.execute(
        select(chunks.c.doc_id, chunks.c.text)
        .where(chunks.c.doc_id.in_(ids))
        .order_by(chunks.c.doc_id, chunks.c.ordinal, chunks.c.chunk_id)
    ):
        texts[doc_id].append(text)
    status = dict(conn.execute(select(docs.c.doc_id, docs.c.status).where(docs.c.doc_id.in_(ids))).all())
    drop = [d for d in ids if not texts[d] and status.get(d) == "duplicate"]
    signatures = {d: near_dup.signature("\n\n".join(texts[d])) for d in ids if d not in drop}
    texts.clear()
    keys = {d: near_dup.band_keys(sig) for d, sig in signatures.items()}
    # (tenant, band key) -> {doc id: (signature, group)}: earlier pages from
    # the catalog (their bands are rewritten already), then this page's.
    bucket: dict[tuple[str, str], dict[str, tuple[np.ndarray, str]]] = {}
    for tenant in sorted({t for d, t in page if d in signatures}):
        wanted = [k for d, t in page if t == tenant and d in keys for k in keys[d]]
        for key, doc_id, sig, group in _band_matches(conn, tenant, wanted):
            bucket.setdefault((tenant, key), {})[doc_id] = (sig, group)
    updates, band_rows, grouped = [], [], 0
    for doc_id, tenant in page:
        if doc_id not in signatures:
            continue
        sig = signatures[doc_id]
        candidates = {o: c for k in keys[doc_id] for o, c in bucket.get((tenant, k), {}).items()}
        candidates.pop(doc_id, None)
        group = near_dup.choose_group(doc_id, sig, candidates.values())
        grouped += group != doc_id
        updates.append({"b_doc_id": doc_id, "b_signature": sig.tobytes(), "b_group": group})
        for k in set(keys[doc_id]):
            bucket.setdefault((tenant, k), {})[doc_id] = (sig, group)
            band_rows.append({"tenant_id": tenant, "band_key": k, "doc_id": doc_id})
    if drop:
        conn.execute(sigs.delete().where(sigs.c.doc_id.in_(drop)))
    if updates:
        conn.execute(
            update(sigs)
            .where(sigs.c.doc_id == bindparam("b_doc_id"))
            .values(
                signature=bindparam("b_signature"),
                near_dup_group=bindparam("b_group"),
                algorithm=near_dup.ALGORITHM,
            ),
            updates,
        )
        conn.execute(bands.insert(), band_rows)
    return ResignCounts(len(updates), grouped, len(drop))
