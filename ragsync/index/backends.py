"""The backend registry: every kind of vector and keyword store a home can
use, registered once, and the two functions that open a store.

Each backend lives beside its store and knows how the store is opened, how
its index versions are named, how the alias moves and how a retired version
is dropped (``ragsync.index.base.VectorBackend`` / ``KeywordBackend``):

============== ================ ======================================= ================================
setting        backend          physical index of version n             live one found through
============== ================ ======================================= ================================
vector_index   ``milvus``       ``{collection}_v{n}``                   the Milvus alias ``{collection}``
keyword_index  ``tantivy``      ``HOME/keyword`` (1), ``keyword_v{n}``  the file ``HOME/keyword.alias``
keyword_index  ``milvus``       ``{collection}_keyword_v{n}``           the alias ``{collection}_keyword``
keyword_index  ``elasticsearch`` ``{es_index}_v{n}``                    the alias ``{es_index}``
============== ================ ======================================= ================================

Nothing else names a store class: the index service, queries, reconcile,
re-embedding and the index-version flip (``ragsync.index.versions``) open
stores with :func:`open_vector_index` / :func:`open_keyword_index`.

Adding a sink: write a store implementing ``VectorIndex`` or
``KeywordIndex`` (``ragsync.index.base``) and a backend object beside it;
call :func:`register_vector_backend` or :func:`register_keyword_backend`
when your module is imported (a plug-in named in the ``plugins`` setting:
``ragsync.plugins``); then ``--vector-index NAME`` / ``--keyword-index NAME``
selects it. ``tests/test_adding_a_sink.py`` follows these steps with an
in-memory store of each kind.
"""

from __future__ import annotations

from typing import TypeVar

from ragsync.errors import ConfigurationError
from ragsync.index import elasticsearch, milvus_keyword, milvus_vectors, tantivy
from ragsync.index.base import KeywordBackend, KeywordIndex, Settings, VectorBackend, VectorIndex

VECTOR_BACKENDS: dict[str, VectorBackend] = {milvus_vectors.BACKEND.name: milvus_vectors.BACKEND}
"""Backend name -> backend; ``Settings.vector_index`` takes exactly these keys."""

KEYWORD_BACKENDS: dict[str, KeywordBackend] = {
    b.name: b for b in (tantivy.BACKEND, milvus_keyword.BACKEND, elasticsearch.BACKEND)
}
"""Backend name -> backend; ``Settings.keyword_index`` takes exactly these keys."""

B = TypeVar("B", VectorBackend, KeywordBackend)


def _register(registry: dict[str, B], backend: B, kind: str) -> None:
    current = registry.get(backend.name)
    if current is not None and current is not backend:
        raise ValueError(f"{kind} backend {backend.name!r} is already registered")
    registry[backend.name] = backend


def register_vector_backend(backend: VectorBackend) -> None:
    """Make ``backend`` selectable as ``vector_index=backend.name``.

    Raises:
        ValueError: the name is taken by another backend object.
    """
    _register(VECTOR_BACKENDS, backend, "vector")


def register_keyword_backend(backend: KeywordBackend) -> None:
    """Make ``backend`` selectable as ``keyword_index=backend.name``.

    Raises:
        ValueError: the name is taken by another backend object.
    """
    _register(KEYWORD_BACKENDS, backend, "keyword")


def _lookup(registry: dict[str, B], name: str, setting: str) -> B:
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry))
        raise ConfigurationError(f"{setting} must be one of {known}, got {name!r}") from None


def vector_backend(settings: Settings) -> VectorBackend:
    """The vector backend ``settings`` selects (``Settings.vector_index``).

    Raises:
        ConfigurationError: no backend of that name is registered.
    """
    return _lookup(VECTOR_BACKENDS, settings.vector_index, "vector_index")


def keyword_backend(settings: Settings) -> KeywordBackend:
    """The keyword backend ``settings`` selects (``Settings.keyword_backend``).

    Raises:
        ConfigurationError: no backend of that name is registered.
    """
    return _lookup(KEYWORD_BACKENDS, settings.keyword_backend, "keyword_index")


def open_vector_index(
    settings: Settings, dim: int, *, create: bool = False, physical: str | None = None
) -> VectorIndex:
    """The vector store of ``settings.vector_index``: behind its alias (what
    the pipeline and queries use), or the physical store ``physical`` of one
    index version.

    Raises:
        ConfigurationError: it does not exist and ``create`` is False, its
            dimension is not ``dim``, or it cannot be reached.
    """
    return vector_backend(settings).open(settings, dim, physical, create=create)


def open_keyword_index(
    settings: Settings, *, create: bool = False, physical: str | None = None
) -> KeywordIndex:
    """The keyword store of ``settings.keyword_backend`` (tantivy under
    ``home``, Milvus BM25 in the vectors' Milvus, Elasticsearch, or a
    registered sink): behind its alias, or the physical store ``physical``.

    Raises:
        ConfigurationError: it does not exist and ``create`` is False, or it
            cannot be reached.
    """
    return keyword_backend(settings).open(settings, physical, create=create)
