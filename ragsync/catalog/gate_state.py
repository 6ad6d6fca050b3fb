"""What the version gate compares with besides the documents: the
tombstones of deleted documents (table ``tombstones``) and the last applied
permission version per document (``acl_versions``). Rows are returned as
dicts of their columns."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _now
from ragsync.catalog.settling import settle_dead_letters
from ragsync.decisions.gate import row_stamp


class GateStateRepository(Repository):
    """Tombstones and permission versions."""

    def get_tombstone(self, doc_id: str) -> dict[str, Any] | None:
        """The document's tombstone (row as a dict), or None."""
        return self._find(schema.tombstones, doc_id=doc_id)

    def put_tombstone(
        self,
        doc_id: str,
        tenant_id: str,
        source_version: str,
        *,
        version_domain: str = "",
        observed_at: float | None = None,
    ) -> None:
        """Record a delete (the tombstone blocks older upserts) and mark the
        document deleted; completion is recorded by ``complete_tombstone``.
        ``version_domain`` and ``observed_at`` (the delete's event time) let
        the gate order the tombstone against versions of another domain."""
        ts = _now()
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "source_version": source_version,
            "deleted_at": ts,
            "completed_at": None,
            "version_domain": version_domain or None,
            "observed_at": observed_at or None,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.tombstones,
                [row],
                ["doc_id"],
                ["source_version", "deleted_at", "completed_at", "version_domain", "observed_at"],
            )
            d = schema.documents
            conn.execute(
                update(d)
                .where(d.c.doc_id == doc_id)
                .values(status="deleted", deleted_at=ts, chunk_count=0, updated_at=ts)
            )

    def list_tombstones(self) -> list[dict[str, Any]]:
        """Every tombstone row (as dicts), by doc_id."""
        t = schema.tombstones
        with self._read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).order_by(t.c.doc_id)).mappings()]

    def complete_tombstone(self, doc_id: str) -> None:
        """Record that a delete finished everywhere; the document's open dead
        letters it settles are resolved with it (``catalog.settling``)."""
        t = schema.tombstones
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.c.doc_id == doc_id).values(completed_at=_now()))
            row = conn.execute(select(t).where(t.c.doc_id == doc_id)).mappings().first()
            deleted = row_stamp(dict(row) if row is not None else None, "source_version")
            if deleted is not None:
                settle_dead_letters(conn, doc_id, deleted, by_event=True)

    def get_acl_version(self, doc_id: str) -> dict[str, Any] | None:
        """The document's last applied permission change (row as a dict), or None."""
        return self._find(schema.acl_versions, doc_id=doc_id)

    def set_acl_version(
        self,
        doc_id: str,
        tenant_id: str,
        acl_version: str,
        acl_id: str,
        *,
        version_domain: str = "",
        observed_at: float | None = None,
    ) -> None:
        """Record the permission evidence a document was given: its version,
        domain and the time it was true at the source (``observed_at``)."""
        row = {
            "doc_id": doc_id,
            "tenant_id": tenant_id,
            "acl_version": acl_version,
            "acl_id": acl_id,
            "updated_at": _now(),
            "version_domain": version_domain or None,
            "observed_at": observed_at or None,
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.acl_versions,
                [row],
                ["doc_id"],
                ["acl_version", "acl_id", "updated_at", "version_domain", "observed_at"],
            )
