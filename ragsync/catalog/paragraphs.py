"""Which of a source's documents hold each paragraph: the counts boilerplate is found by.

Table ``paragraphs`` (tenant, source, paragraph hash, doc id): one row per
countable paragraph (``ragsync.ingest.chunking.countable_paragraphs``) of a
document's live version, written when the version is flipped and removed
with the document. A paragraph is a source's boilerplate when a sizeable share
of the source's documents hold it (``ragsync.ingest.boilerplate``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches
from ragsync.catalog.documents import LIVE_STATUSES


class ParagraphsRepository(Repository):
    """Paragraph holders per source."""

    def record(self, tenant_id: str, source_id: str, doc_id: str, hashes: Sequence[str]) -> int:
        """Make ``hashes`` the paragraphs ``doc_id`` holds (its earlier rows
        replaced), in one transaction.

        Args:
            tenant_id, source_id: the document's tenant and source.
            doc_id: the document.
            hashes: its countable paragraphs' hashes (duplicates ignored).

        Returns:
            The number of rows the document now has.
        """
        t = schema.paragraphs
        rows = [
            {"tenant_id": tenant_id, "source_id": source_id, "para_hash": h, "doc_id": doc_id}
            for h in sorted(set(hashes))
        ]
        with self._engine.begin() as conn:
            conn.execute(t.delete().where(t.c.doc_id == doc_id))
            for batch in _batches(rows):
                conn.execute(t.insert(), batch)
        return len(rows)

    def forget(self, doc_id: str) -> int:
        """Remove a deleted document's rows. Returns how many there were."""
        t = schema.paragraphs
        with self._engine.begin() as conn:
            return conn.execute(t.delete().where(t.c.doc_id == doc_id)).rowcount

    def holders(
        self, tenant_id: str, source_id: str, hashes: Sequence[str], *, exclude_doc_id: str = ""
    ) -> dict[str, int]:
        """How many documents of the source hold each paragraph.

        Args:
            tenant_id, source_id: the source.
            hashes: paragraph hashes to count.
            exclude_doc_id: a document not to count (the one being chunked).

        Returns:
            ``{hash: documents}`` for the hashes some document holds. One
            indexed lookup per 500 hashes.
        """
        t = schema.paragraphs
        out: dict[str, int] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(sorted(set(hashes))):
                query = (
                    select(t.c.para_hash, func.count())
                    .where(t.c.tenant_id == tenant_id, t.c.source_id == source_id, t.c.para_hash.in_(batch))
                    .where(t.c.doc_id != exclude_doc_id)
                    .group_by(t.c.para_hash)
                )
                out.update({h: int(n) for h, n in conn.execute(query).all()})
        return out

    def source_documents(self, tenant_id: str, source_id: str) -> int:
        """The number of live documents of a source (what a paragraph's share
        is of), read from the document tallies (a few rows, any source size)."""
        t = schema.document_tallies
        query = select(func.coalesce(func.sum(t.c.n), 0)).where(
            t.c.tenant_id == tenant_id, t.c.source_id == source_id, t.c.status.in_(sorted(LIVE_STATUSES))
        )
        with self._read_engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
