"""The open stores of one home: the live vector and keyword indexes and every
index version being built beside them, and the only calls that change
their rows.

:class:`IndexStores` is what :class:`ragsync.index.service.IndexService`
writes through. Every upsert, ACL rewrite and delete of the pipeline, the
copies, deletes, re-embedding, sweep and repair lands in one of its methods,
which fan the change out to each store that must hold it: a change to the
live version is also written to every version being built (a re-embedding,
``ragsync reembed``), embedded with that version's model, so the new version
never falls behind the live one. ``tests/test_layering.py`` checks that no
other module calls a store's write methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ragsync.errors import ConfigurationError
from ragsync.index.backends import open_keyword_index, open_vector_index
from ragsync.index.base import KeywordIndex, VectorIndex
from ragsync.model import Chunk

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.catalog import Catalog, IndexVersion
    from ragsync.config import Settings

Shadow = tuple["IndexVersion", VectorIndex, KeywordIndex]
"""An index version being built, with its vector and keyword store."""


class IndexStores:
    """Both live stores and every version being built, opened together.

    Args:
        settings: the home (its backends and index versions).
        vectors: the live vector store.
        keywords: the live keyword store.
        shadows: ``(IndexVersion, vector store, keyword store)`` of every
            version in state ``building``.

    The object owns what it is given: :meth:`close` closes it all.
    """

    def __init__(
        self,
        settings: Settings,
        vectors: VectorIndex,
        keywords: KeywordIndex,
        shadows: Sequence[Shadow] = (),
    ) -> None:
        self.settings = settings
        self.vectors = vectors
        self.keywords = keywords
        self.shadows = list(shadows)

    @classmethod
    def open(cls, settings: Settings, dim: int) -> IndexStores:
        """The live stores (through their aliases) and every version in state
        ``building`` (read now).

        Raises:
            ConfigurationError: a live store does not exist.
        """
        from ragsync.index import versions as iv

        vectors = open_vector_index(settings, dim)
        try:
            keywords = open_keyword_index(settings)
        except BaseException:
            vectors.close()
            raise
        stores = cls(settings, vectors, keywords)
        try:
            try:
                building = [v for v in iv.list_versions(settings) if v.state == iv.BUILDING]
            except ConfigurationError:
                building = []
            for version in building:
                stores.shadows.append(
                    (
                        version,
                        iv.open_version_vector(settings, version),
                        iv.open_version_keyword(settings, version),
                    )
                )
        except BaseException:
            stores.close()
            raise
        return stores

    def close(self) -> None:
        """Close every store: the building versions' and the live keyword
        index first (a keyword writer holds a lock)."""
        stores: list[Any] = []
        for _, vec, kw in self.shadows:
            stores += [kw, vec]
        stores += [self.keywords, self.vectors]
        self.shadows = []
        for store in stores:
            store.close()

    def shadow(self, version: int) -> Shadow:
        """The open stores of building version ``version``.

        Raises:
            ConfigurationError: that version was not building when the stores were opened.
        """
        for shadow in self.shadows:
            if shadow[0].version == version:
                return shadow
        raise ConfigurationError(f"index version {version} is not being built")

    # -- writes: live version and every building version ----------------------------------

    def upsert(
        self,
        catalog: Catalog,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        embed_for: Callable[[Any, Sequence[Chunk]], list[list[float]]],
    ) -> None:
        """Upsert ``chunks`` (with the live model's ``vectors``) into both live
        stores, then into every building version with vectors of its own
        model (``embed_for(version, chunks)``: the embedding cache first).

        Raises:
            ValueError: a vector of the wrong dimension or not finite
                (nothing of the batch is written to that store).
            EmbedFailedError: a building version's model gave no vector.
        """
        if not chunks:
            return
        self.vectors.upsert(chunks, vectors)
        self.keywords.upsert(chunks)
        for version, vec, kw in self.shadows:
            vec.upsert(chunks, embed_for(version, chunks))
            kw.upsert(chunks)

    def set_acl(self, tenant_id: str, chunks: Sequence[Chunk], acl_ids: Sequence[str]) -> None:
        """Give ``chunks`` (already carrying ``acl_ids``) their new ACL ids in
        every store (no re-embedding)."""
        if not chunks:
            return
        chunk_ids = [c.chunk_id for c in chunks]
        for _, vec, kw in [(None, self.vectors, self.keywords), *self.shadows]:
            vec.set_acl_ids(tenant_id, chunk_ids, list(acl_ids))
            kw.set_acl_ids(tenant_id, chunks)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        """Delete ``chunk_ids`` of ``tenant_id`` from every store."""
        if not chunk_ids:
            return
        for _, vec, kw in [(None, self.vectors, self.keywords), *self.shadows]:
            vec.delete(tenant_id, chunk_ids)
            kw.delete(tenant_id, chunk_ids)

    def left(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, int]:
        """How many of ``chunk_ids`` each live store still holds (by id)."""
        return {
            "vector": self.vectors.count_ids(tenant_id, chunk_ids),
            "keyword": self.keywords.count_ids(tenant_id, chunk_ids),
        }

    # -- one store at a time: re-embedding, repair and the sweep ----------------------

    def live(self) -> dict[str, VectorIndex | KeywordIndex]:
        """The live stores by kind (``vector``, ``keyword``)."""
        return {"vector": self.vectors, "keyword": self.keywords}

    def upsert_one(
        self, store: VectorIndex | KeywordIndex, chunks: Sequence[Chunk], vectors: Any = None
    ) -> None:
        """Upsert into one store only (``vectors`` for a vector store): a
        repair rewriting what one store lacks, or a re-embedding filling the
        version it builds."""
        if not chunks:
            return
        if vectors is None:
            store.upsert(chunks)  # type: ignore[call-arg]
        else:
            store.upsert(chunks, vectors)  # type: ignore[call-arg]

    def delete_one(self, store: VectorIndex | KeywordIndex, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        """Delete from one store only (its orphans)."""
        if chunk_ids:
            store.delete(tenant_id, chunk_ids)

    @staticmethod
    def ids_of(store: VectorIndex | KeywordIndex, tenant_id: str) -> Iterator[str]:
        """Every chunk id ``store`` holds for ``tenant_id``, page by page."""
        return store.iter_chunk_ids(tenant_id)
