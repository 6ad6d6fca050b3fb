"""Store interfaces shared by the local and the production implementations.

A vector index (Milvus Lite locally, a Milvus server in production) and a
keyword index (tantivy locally, Elasticsearch in production) expose the same
small surface so the pipeline, the query command and reconcile never care
which one runs.

Contract for every implementation:
- ``upsert`` is idempotent on ``chunk_id``; writing the same rows twice
  leaves one copy.
- ``delete`` removes by chunk id and is scoped by tenant.
- Per-document operations (``delete``, ``set_acl_ids``, ``count_ids``) look
  chunks up by id (the primary key or an indexed term): their cost does not
  grow with the tenant's size.
- Writes are durable when the call returns (committed; acknowledged by the
  store's log): a process killed right after a write loses none of it.
- A missing collection/index fails fast unless ``create=True`` was passed
  when the store was opened.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self

from ragsync.errors import ConfigurationError
from ragsync.model import Chunk


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk id and its score (higher is better)."""

    chunk_id: str
    doc_id: str
    score: float


@dataclass(frozen=True)
class SearchFilter:
    """What narrows a search beyond the reader's ACL ids.

    Attributes:
        deny_acl_ids: a chunk holding one of these ACL ids is never returned
            (a deny entry of the reader's groups: deny wins).
        doc_ids: only chunks of these documents (a source filter pushed
            down); None for any document, empty for none.
    """

    deny_acl_ids: tuple[str, ...] = ()
    doc_ids: tuple[str, ...] | None = None


NO_FILTER = SearchFilter()
"""The filter of a search narrowed by nothing but the reader's ACL ids."""


def check_chunk_tenants(tenant_id: str, chunks: Sequence[Chunk]) -> None:
    """Refuse a per-tenant write that carries another tenant's chunk.

    Raises:
        ValueError: a chunk's ``tenant_id`` is not ``tenant_id``.
    """
    for chunk in chunks:
        if chunk.tenant_id != tenant_id:
            raise ValueError(
                f"chunk {chunk.chunk_id} belongs to tenant {chunk.tenant_id!r}, not {tenant_id!r}"
            )


class ClosesOnExit:
    """Base of the store implementations: ``with store:`` closes it on exit
    (each implements ``close``, safe to call twice)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VectorIndex(Protocol):
    """Dense vectors keyed by chunk id, filtered by tenant and ACL ids."""

    dim: int

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> int:
        """Write rows; returns the number written. Raises ValueError on a
        vector of the wrong dimension or with a non-finite value (nothing is
        written then)."""
        ...

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """Delete rows by id within a tenant; returns how many were asked."""
        ...

    def set_acl_ids(self, tenant_id: str, chunk_ids: Sequence[str], acl_ids: Sequence[str]) -> None:
        """Replace the ACL ids of existing rows (no re-embedding)."""
        ...

    def search(
        self,
        tenant_id: str,
        vector: Sequence[float],
        acl_ids: Sequence[str],
        k: int,
        *,
        where: SearchFilter = NO_FILTER,
    ) -> list[Hit]:
        """Top k rows of the tenant whose acl_ids intersect ``acl_ids``,
        narrowed by ``where`` (no denied ACL id; only its documents, when it names some)."""
        ...

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Row count per doc_id (for reconcile)."""
        ...

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """How many of ``chunk_ids`` the store holds for the tenant (delete
        verification): a primary-key lookup, never a scan of the tenant."""
        ...

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        """Every chunk id present (for reconcile repair)."""
        ...

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]:
        """Every chunk id present, streamed page by page (the orphan sweep:
        never all ids at once)."""
        ...

    def close(self) -> None: ...


class KeywordIndex(Protocol):
    """BM25 over chunk text, filtered by tenant and ACL ids."""

    def upsert(self, chunks: Sequence[Chunk]) -> int: ...

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int: ...

    def set_acl_ids(self, tenant_id: str, chunks: Sequence[Chunk]) -> None:
        """Rewrite rows with the chunks' new acl_ids (text unchanged)."""
        ...

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, where: SearchFilter = NO_FILTER
    ) -> list[Hit]:
        """BM25 top k of the tenant within ``acl_ids``, narrowed by ``where``."""
        ...

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]: ...

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """How many of ``chunk_ids`` the store holds for the tenant (by id)."""
        ...

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]: ...

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]: ...

    def close(self) -> None: ...


# -- backends: how a kind of store is opened, versioned, aliased and dropped ---------


class Settings(Protocol):
    """What the backends read of ``ragsync.config.Settings`` (typed
    structurally: the stores do not import the configuration)."""

    @property
    def home(self) -> str: ...
    @property
    def collection(self) -> str: ...
    @property
    def vector_index(self) -> str: ...
    @property
    def keyword_backend(self) -> str: ...
    @property
    def keyword_collection(self) -> str: ...
    @property
    def milvus_uri(self) -> str: ...
    @property
    def milvus_token(self) -> str: ...
    @property
    def milvus_database(self) -> str: ...
    @property
    def es_url(self) -> str: ...
    @property
    def es_index(self) -> str: ...
    @property
    def es_api_key(self) -> str: ...
    @property
    def es_username(self) -> str: ...
    @property
    def es_password(self) -> str: ...

    def ensure_home(self) -> None: ...


class ContainerBackend(Protocol):
    """What every backend does with its containers (one physical index per
    index version, the live one found through an alias).

    Attributes:
        name: the setting value that selects it (``vector_index`` /
            ``keyword_index``).
    """

    name: str

    def one_process(self, settings: Settings) -> str:
        """Why only one process may open the store, with what to use
        instead (tantivy's single writer, a Milvus Lite file, a store in
        memory), or '' when worker processes may share it: runners with
        worker processes refuse a store that gives a reason."""
        ...

    def version_name(self, settings: Settings, version: int) -> str:
        """The physical name of index version ``version`` (>= 2; version 1
        is what a backfill creates)."""
        ...

    def live_name(self, settings: Settings) -> str:
        """The physical name the alias points to now.

        Raises:
            ConfigurationError: nothing was created yet.
        """
        ...

    def point_alias(self, settings: Settings, physical: str) -> None:
        """Make the alias name ``physical`` (atomic; idempotent).

        Raises:
            WriteError: the store refused.
        """
        ...

    def drop(self, settings: Settings, physical: str) -> None:
        """Delete a physical index (a retired version's; never the live one).
        Missing is not an error."""
        ...


class VectorBackend(ContainerBackend, Protocol):
    """One kind of vector store (Milvus, or a registered sink)."""

    def open(self, settings: Settings, dim: int, physical: str | None, *, create: bool) -> VectorIndex:
        """The store: through the alias (``physical`` None, what the pipeline
        and queries use) or one index version's physical store.

        Raises:
            ConfigurationError: it does not exist and ``create`` is False, or
                it cannot be reached.
        """
        ...


class KeywordBackend(ContainerBackend, Protocol):
    """One kind of keyword store (tantivy, Milvus BM25, Elasticsearch, or a registered sink)."""

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        """As :meth:`VectorBackend.open`, without a dimension."""
        ...


class ServerAliasBackend:
    """What the server backends share (Milvus, Milvus BM25, Elasticsearch): a
    physical index per version behind a named alias the store itself moves
    (``point_alias``, ``drop_physical``; the physical name read through the
    alias). Subclasses give :meth:`open_store` (the store with or without a
    dimension), :meth:`alias` and ``_physical_attr``, the attribute holding
    an opened store's physical name."""

    name = ""
    _physical_attr = ""

    def one_process(self, settings: Settings) -> str:
        return ""

    def open_store(self, settings: Settings, physical: str | None, *, create: bool) -> Any:
        raise NotImplementedError

    def alias(self, settings: Settings) -> str:
        raise NotImplementedError

    def version_name(self, settings: Settings, version: int) -> str:
        return f"{self.alias(settings)}_v{version}"

    def live_name(self, settings: Settings) -> str:
        store = self.open_store(settings, None, create=False)
        try:
            return str(getattr(store, self._physical_attr))
        finally:
            store.close()

    def point_alias(self, settings: Settings, physical: str) -> None:
        store = self.open_store(settings, physical, create=False)
        try:
            store.point_alias(self.alias(settings))
        finally:
            store.close()

    def drop(self, settings: Settings, physical: str) -> None:
        try:
            store = self.open_store(settings, physical, create=False)
        except ConfigurationError:
            return  # already gone
        try:
            store.drop_physical()
        finally:
            store.close()
