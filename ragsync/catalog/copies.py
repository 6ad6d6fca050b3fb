"""Exact copies and near duplicates of documents.

Tables: ``documents`` (``canonical_doc_id``), ``doc_signatures``/``doc_bands``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _now
from ragsync.catalog.documents import STATUS_INDEXED, DocumentRow, _document_from_row, document_update


class CopiesRepository(Repository):
    """Exact copies (which document holds the chunks of shared bytes) and
    near-duplicate groups (MinHash signatures and LSH bands)."""

    # -- exact duplicates ------------------------------------------------------------

    def mark_duplicate(self, doc_id: str, canonical_doc_id: str, *, content_hash: str) -> None:
        """Record that ``doc_id`` is an exact copy served by ``canonical_doc_id``'s
        chunks: status ``duplicate``, no chunks of its own.

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

    def promote_copy(
        self,
        doc_id: str,
        *,
        from_doc_id: str,
        chunker_id: str,
        parser_version: str,
        chunk_count: int,
        indexed_at: float,
    ) -> int:
        """Make the exact copy ``doc_id`` the holder of the chunks that
        ``from_doc_id`` held (after its chunk rows were re-keyed to it), in
        one transaction: it becomes ``indexed`` and its own canonical copy,
        and every live copy linked to ``from_doc_id`` is linked to it.

        Args:
            doc_id: the promoted copy.
            from_doc_id: the previous holder (deleted, or now other content).
            chunker_id: chunker config of the re-keyed chunks.
            parser_version: parser of the re-keyed chunks.
            chunk_count: number of re-keyed chunks.
            indexed_at: epoch seconds.

        Returns:
            Number of other copies re-linked to ``doc_id``.
        """
        t = schema.documents
        now = _now()
        with self._engine.begin() as conn:
            row = conn.execute(select(t.c.source_version).where(t.c.doc_id == doc_id)).first()
            conn.execute(
                document_update(
                    doc_id,
                    canonical_doc_id=doc_id,
                    status=STATUS_INDEXED,
                    error_class=None,
                    chunker_id=chunker_id,
                    parser_version=parser_version,
                    chunk_count=chunk_count,
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

    # -- near duplicates -------------------------------------------------------------

    def set_near_dup(
        self, doc_id: str, tenant_id: str, signature: np.ndarray, band_keys: Sequence[str]
    ) -> str:
        """Store a document's MinHash signature and join it to the group of
        the most similar earlier document (``ragsync.near_dup.THRESHOLD``).

        Returns:
            The document's near-duplicate group id (its own doc id when it
            resembles nothing).
        """
        from ragsync import near_dup

        sigs, bands = schema.doc_signatures, schema.doc_bands
        with self._read_engine.connect() as conn:
            candidates = conn.execute(
                select(sigs.c.doc_id, sigs.c.signature, sigs.c.near_dup_group)
                .select_from(sigs.join(bands, bands.c.doc_id == sigs.c.doc_id))
                .where(bands.c.tenant_id == tenant_id)
                .where(bands.c.band_key.in_(list(band_keys)))
                .where(sigs.c.doc_id != doc_id)
                .distinct()
            ).all()
        group = doc_id
        best = 0.0
        for _other_id, other_sig, other_group in candidates:
            sim = near_dup.similarity(signature, np.frombuffer(other_sig, dtype=np.uint64))
            if sim >= near_dup.THRESHOLD and (sim > best or (sim == best and other_group < group)):
                best, group = sim, other_group
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "signature": np.asarray(signature, dtype=np.uint64).tobytes(),
            "near_dup_group": group,
            "updated_at": _now(),
        }
        with self._engine.begin() as conn:
            self._upsert(conn, sigs, [row], ["doc_id"], ["signature", "near_dup_group", "updated_at"])
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
