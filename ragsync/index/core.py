"""The index service's base: the open catalog and stores, and the primitive
changes (index chunks, set their ACL ids, remove them) that the operations
in ``ragsync.index.copies``, ``deletes``, ``maintenance`` and
``ragsync.index.service`` are built of. Nothing outside ``ragsync.index``
uses it directly: callers open an :class:`ragsync.index.service.IndexService`.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Self

from ragsync.counters import declared
from ragsync.errors import ConfigurationError
from ragsync.index.base import KeywordIndex, VectorIndex
from ragsync.index.hooks import WriteHooks
from ragsync.index.stores import IndexStores
from ragsync.model import Chunk

if TYPE_CHECKING:  # pragma: no cover
    from ragsync.catalog import Catalog, IndexVersion
    from ragsync.config import Settings


def remove_local_object(uri: str) -> None:
    """Delete a raw or parsed copy on a local object store (missing is fine).

    Raises:
        ConfigurationError: ``uri`` is on a remote object store (``gs://``,
            ``s3://``): the caller must pass a remover that reaches it (the
            pipeline passes Beam's file systems, ``transforms.io.delete_if_exists``).
    """
    if "://" in uri:
        raise ConfigurationError(f"{uri}: deleting from a remote object store needs Beam's file systems")
    with contextlib.suppress(FileNotFoundError):
        os.remove(uri)


class IndexCore:
    """The open catalog and stores, and the primitive changes every index
    operation is built of (the rest is :class:`ragsync.index.service.IndexService`).

    Args:
        settings: the home (index versions, embedding cache, batch size).
        catalog: the catalog.
        stores: the live stores and the versions being built.
        hooks: fault-injection points (default: none).
        count: called as ``count(name, n)`` for every ragsync counter the
            service adds to (a Beam step passes its own counters); the counts
            are also kept in :attr:`counts`.
        remove_object: deletes a raw or parsed copy from the object store
            (default :func:`remove_local_object`; the pipeline passes Beam's
            file systems).

    It owns what it is given: :meth:`close` closes it all.
    """

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        stores: IndexStores,
        *,
        hooks: WriteHooks | None = None,
        count: Callable[[str, int], None] | None = None,
        remove_object: Callable[[str], object] = remove_local_object,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.stores = stores
        self.hooks = hooks or WriteHooks()
        self.remove_object = remove_object
        self.counts: Counter[str] = Counter()
        self._on_count = count
        self._docs_indexed = 0
        self._flips = 0
        self._seen_versions: dict[str, str] = {}

    @classmethod
    def open(
        cls,
        settings: Settings,
        dim: int,
        *,
        hooks: WriteHooks | None = None,
        count: Callable[[str, int], None] | None = None,
        remove_object: Callable[[str], object] = remove_local_object,
    ) -> Self:
        """One on the catalog and stores of ``settings`` (and on every
        index version in state ``building``, read now).

        Args:
            settings: the home.
            dim: the live vectors' dimension.
            hooks, count, remove_object: see the class.

        Raises:
            ConfigurationError: a store does not exist.
        """
        from ragsync.config import open_catalog

        catalog = open_catalog(settings)
        try:
            stores = IndexStores.open(settings, dim)
        except BaseException:
            catalog.close()
            raise
        return cls(settings, catalog, stores, hooks=hooks, count=count, remove_object=remove_object)

    def close(self) -> None:
        """Close the stores (the keyword writers first), then the catalog."""
        self.stores.close()
        self.catalog.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def vectors(self) -> VectorIndex:
        """The live vector store (for reading; every change goes through the service)."""
        return self.stores.vectors

    @property
    def keywords(self) -> KeywordIndex:
        """The live keyword store (for reading; every change goes through the service)."""
        return self.stores.keywords

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the ragsync counter ``name``.

        Raises:
            ValueError: ``name`` is not declared in ``ragsync.counters.COUNTERS``.
        """
        self.counts[declared(name)] += n
        if self._on_count is not None:
            self._on_count(name, n)

    # -- the stores: the live version and every building version -------------------

    def index_chunks(self, chunks: list[Chunk], vectors: Sequence[Sequence[float]]) -> None:
        """Upsert ``chunks`` (with their live-model ``vectors``) into both
        indexes, then into every building version, embedded with its model
        (``ragsync.embedding.models.embed_with_cache``: cache first).

        Raises:
            EmbedFailedError: a building version's model gave no vector.
        """
        self.stores.upsert(self.catalog, chunks, vectors, self._embed_for_version)

    def _embed_for_version(self, version: IndexVersion, chunks: Sequence[Chunk]) -> list[list[float]]:
        from ragsync.embedding.models import embed_failure, embed_with_cache, get_model
        from ragsync.index.versions import settings_for_version

        # The version's own backend (recorded in its model version), not the setting's.
        model = get_model(version.model_name, settings_for_version(self.settings, version))
        got = embed_with_cache(
            self.catalog,
            model,
            list(chunks),
            batch_size=self.settings.embed_batch_size,
            version=version.model_version,
        )
        if got.failures:
            raise embed_failure(got.failures)
        return [got.vectors[c.text_hash].tolist() for c in chunks]

    def set_index_acl(self, tenant_id: str, chunks: list[Chunk], acl_ids: list[str]) -> None:
        """Give ``chunks`` (already carrying ``acl_ids``) their new ACL in
        both indexes and every building version (not the chunk rows)."""
        self.stores.set_acl(tenant_id, chunks, acl_ids)

    def remove_chunks(self, tenant_id: str, chunk_ids: list[str]) -> None:
        """Delete ``chunk_ids`` from both indexes and every building version,
        then their chunk rows (in that order: a crash leaves rows that point
        at nothing, never a searchable chunk without its row)."""
        if not chunk_ids:
            return
        self.stores.delete(tenant_id, chunk_ids)
        self.catalog.chunks.delete_chunks(chunk_ids)
