"""The keyword backends a home can use: how each is opened, how its index
versions are named, aliased and dropped. The one place that knows them.

Every keyword store is reached through :func:`keyword_backend` (and the
openers in ``ragsync.config`` that call it): the pipeline, queries,
reconcile, re-embedding and the index-version flip
(``ragsync.index.versions``) never name a backend's class.

An index version is one physical keyword index beside the live one; the
live one is found through an alias:

* tantivy: version 1 is ``HOME/keyword``, version n ``HOME/keyword_v{n}``;
  the alias is the file ``HOME/keyword.alias``.
* milvus (BM25): ``{collection}_keyword_v1`` / ``{collection}_keyword_v{n}``
  behind the Milvus alias ``{collection}_keyword``.
* elasticsearch: ``{es_index}_v1`` / ``{es_index}_v{n}`` behind the
  Elasticsearch alias ``{es_index}``.

Adding a sink (a keyword store): write a class implementing
:class:`ragsync.index.base.KeywordIndex`, and a backend object with the
methods of :class:`KeywordBackend` below; call
:func:`register_keyword_backend` at import of your module (a plug-in's
``__init__``, named in the ``plugins`` setting: ``ragsync.plugins``); then
``--keyword-index NAME`` / ``RAGSYNC_KEYWORD_INDEX=NAME`` selects it.
``tests/test_adding_a_sink.py`` follows these steps with an in-memory store.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Protocol

from ragsync.errors import ConfigurationError

if TYPE_CHECKING:
    from ragsync.index.base import KeywordIndex

KEYWORD_ALIAS_FILE = "keyword.alias"
"""File under ``home`` naming the live tantivy directory (one line)."""

V1_KEYWORD_DIR = "keyword"
"""Version 1's tantivy directory under ``home``."""


class Settings(Protocol):
    """What the backends read of ``ragsync.config.Settings`` (typed
    structurally: the stores do not import the configuration)."""

    @property
    def home(self) -> str: ...
    @property
    def keyword_backend(self) -> str: ...
    @property
    def keyword_path(self) -> str: ...
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


class KeywordBackend(Protocol):
    """One kind of keyword store.

    Attributes:
        name: the value of ``Settings.keyword_index`` that selects it.
        one_process: True when only one process may open the store
            (tantivy's single writer): runners with worker processes refuse it.
    """

    name: str
    one_process: bool

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        """The store: through the alias (``physical`` None, what the pipeline
        and queries use) or one index version's physical store.

        Raises:
            ConfigurationError: it does not exist and ``create`` is False, or
                it cannot be reached.
        """
        ...

    def version_name(self, settings: Settings, version: int) -> str:
        """The physical name of index version ``version`` (>= 2; version 1
        is what a backfill creates)."""
        ...

    def live_name(self, settings: Settings) -> str:
        """The physical name the alias points to now."""
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


class TantivyBackend:
    """tantivy directories under ``home``; the alias is a file."""

    name = "tantivy"
    one_process = True

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        from ragsync.index.tantivy import TantivyKeywordIndex

        path = settings.keyword_path if physical is None else _under_home(settings.home, physical)
        if create:
            os.makedirs(path, exist_ok=True)
        return TantivyKeywordIndex(path, create=create)

    def version_name(self, settings: Settings, version: int) -> str:
        return f"{V1_KEYWORD_DIR}_v{version}"

    def live_name(self, settings: Settings) -> str:
        return os.path.basename(resolve_keyword_alias(settings.home))

    def point_alias(self, settings: Settings, physical: str) -> None:
        _under_home(settings.home, physical)
        path = os.path.join(settings.home, KEYWORD_ALIAS_FILE)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(physical + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def drop(self, settings: Settings, physical: str) -> None:
        shutil.rmtree(_under_home(settings.home, physical), ignore_errors=True)


class _ServerAliasBackend:
    """What the server backends share: a physical index per version behind
    a named alias the store itself moves (``point_alias``, ``drop_physical``,
    the physical name read through the alias). Subclasses give ``open``, the
    alias name and the attribute holding the physical name."""

    name = ""
    one_process = False
    _physical_attr = ""

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        raise NotImplementedError

    def alias(self, settings: Settings) -> str:
        raise NotImplementedError

    def version_name(self, settings: Settings, version: int) -> str:
        return f"{self.alias(settings)}_v{version}"

    def live_name(self, settings: Settings) -> str:
        index = self.open(settings, None, create=False)
        try:
            return str(getattr(index, self._physical_attr))
        finally:
            index.close()

    def point_alias(self, settings: Settings, physical: str) -> None:
        index = self.open(settings, physical, create=False)
        try:
            index.point_alias(self.alias(settings))  # type: ignore[attr-defined]
        finally:
            index.close()

    def drop(self, settings: Settings, physical: str) -> None:
        try:
            index = self.open(settings, physical, create=False)
        except ConfigurationError:
            return  # already gone
        try:
            index.drop_physical()  # type: ignore[attr-defined]
        finally:
            index.close()


class MilvusBM25Backend(_ServerAliasBackend):
    """Milvus' BM25 full-text search in the vectors' Milvus (Lite or server)."""

    name = "milvus"
    _physical_attr = "physical_collection"

    def alias(self, settings: Settings) -> str:
        return settings.keyword_collection

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        from ragsync.index.milvus_keyword import MilvusKeywordIndex

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


class ElasticsearchBackend(_ServerAliasBackend):
    """Elasticsearch (production): indexes behind an alias."""

    name = "elasticsearch"
    _physical_attr = "physical_index"

    def alias(self, settings: Settings) -> str:
        return settings.es_index

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> KeywordIndex:
        from ragsync.index.elasticsearch import ElasticsearchKeywordIndex

        return ElasticsearchKeywordIndex(
            settings.es_url,
            settings.es_index if physical is None else physical,
            create=create,
            api_key=settings.es_api_key,
            basic_auth=(settings.es_username, settings.es_password) if settings.es_username else None,
            alias=physical is None,
        )


KEYWORD_BACKENDS: dict[str, KeywordBackend] = {
    b.name: b for b in (TantivyBackend(), MilvusBM25Backend(), ElasticsearchBackend())
}
"""Backend name -> backend; ``Settings.keyword_index`` takes exactly these keys."""


def register_keyword_backend(backend: KeywordBackend) -> None:
    """Make ``backend`` selectable as ``keyword_index=backend.name``.

    Raises:
        ValueError: the name is taken by another backend object.
    """
    current = KEYWORD_BACKENDS.get(backend.name)
    if current is not None and current is not backend:
        raise ValueError(f"keyword backend {backend.name!r} is already registered")
    KEYWORD_BACKENDS[backend.name] = backend


def keyword_backend(settings: Settings) -> KeywordBackend:
    """The backend ``settings`` selects (``Settings.keyword_backend``).

    Raises:
        ConfigurationError: no backend of that name is registered.
    """
    name = settings.keyword_backend
    try:
        return KEYWORD_BACKENDS[name]
    except KeyError:
        known = ", ".join(sorted(KEYWORD_BACKENDS))
        raise ConfigurationError(f"keyword_index must be one of {known}, got {name!r}") from None


def resolve_keyword_alias(home: str) -> str:
    """Directory the keyword alias file under ``home`` points to.

    Returns ``home/keyword`` when the file is missing or empty. Only a plain
    directory name under ``home`` is followed.

    Raises:
        ConfigurationError: the file names something outside ``home``.
    """
    try:
        with open(os.path.join(home, KEYWORD_ALIAS_FILE), encoding="utf-8") as fh:
            name = fh.read().strip()
    except FileNotFoundError:
        name = ""
    return _under_home(home, name or V1_KEYWORD_DIR)


def _under_home(home: str, name: str) -> str:
    """``home/name`` for a plain directory name.

    Raises:
        ConfigurationError: ``name`` is a path, not a name under ``home``.
    """
    if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
        raise ConfigurationError(f"{KEYWORD_ALIAS_FILE} must name a directory under {home}, got {name!r}")
    return os.path.join(home, name)
