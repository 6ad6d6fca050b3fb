"""Index versions: blue/green vector + keyword indexes behind an alias.

An index version is one physical Milvus collection plus one physical
keyword index, built for one embedding model, and a row in the catalog table
``index_versions``. The pipeline reads and writes through names that follow
the *live* version:

* the vector index and the keyword index, whichever backends hold them
  (Milvus; tantivy, Milvus BM25, Elasticsearch; or registered sinks): each
  its own alias, named, moved and dropped by its backend
  (``ragsync.index.backends``, which has the table of names). For Milvus,
  the alias ``{collection}`` points to ``{collection}_v{n}``; version 1 is
  the ``{collection}_v1`` every backfill creates.

Stores are opened only through ``ragsync.index.backends.open_vector_index``
and ``open_keyword_index`` (with ``physical=`` for one version's store).

States: ``building`` (being filled by a re-embedding), ``live`` (the aliases
point to it; exactly one), ``retired`` (was live; kept ``retention_s`` for
rollback), ``refused`` (failed its gate; kept the same time for a look),
``dropped`` (removed by :func:`gc`).

A flip moves the vector alias, then the keyword alias (atomic in each
backend), then the catalog rows: both stores
flip (and roll back) together. It is idempotent: if it fails half-way,
running the same flip again finishes it. Indexes opened before a flip keep
using the version they opened; new opens see the new one.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from typing import Any

from ragsync.catalog import Catalog, IndexVersion
from ragsync.config import NEW_HOME_BACKEND, Settings, open_catalog
from ragsync.embedding.models import ModelSpec, backend_of, spec_for
from ragsync.errors import ConfigurationError
from ragsync.index.backends import keyword_backend, open_keyword_index, open_vector_index, vector_backend
from ragsync.index.base import KeywordIndex, VectorIndex

BUILDING = "building"
LIVE = "live"
RETIRED = "retired"
REFUSED = "refused"
DROPPED = "dropped"

DEFAULT_RETENTION_S = 7 * 24 * 3600.0
"""How long a retired or refused version is kept before :func:`gc` drops it."""


__all__ = ["IndexVersion"]  # the row type lives with its table in ragsync.catalog


def _ensure_v1(settings: Settings, catalog: Catalog, spec: ModelSpec | None = None) -> None:
    """Register what a backfill built (``{collection}_v1`` + ``HOME/keyword``) as
    live version 1 with ``spec`` (default: the configured model on the
    configured backend, torch when none is set: an index built before
    backends were recorded), when the registry is empty and the Milvus alias
    exists. Nothing happens before the first backfill."""
    if catalog.index_versions.has_index_versions():
        return
    spec = spec or spec_for("", settings)
    try:
        physical = vector_backend(settings).live_name(settings)
    except ConfigurationError:
        return  # no index yet
    first = IndexVersion(
        version=1,
        model_name=spec.name,
        model_version=spec.version,
        dim=spec.dim,
        vector_collection=physical,
        keyword_index=keyword_backend(settings).live_name(settings),
        state=LIVE,
        created_at=time.time(),
        flipped_at=None,
        retire_after=None,
        note="",
    )
    catalog.index_versions.add_index_version(first, only_if_empty=True)


def register_first_version(settings: Settings, spec: ModelSpec) -> None:
    """Record version 1 with the model and backend ``spec`` names, right after
    the stores of a new home were created (``prepare_stores``), so the
    backend an index was built with is on record from its first write. No-op
    when versions are registered already or no vector collection exists."""
    catalog = open_catalog(settings)
    try:
        _ensure_v1(settings, catalog, spec)
    finally:
        catalog.close()


def prepare_stores(settings: Settings, spec: ModelSpec) -> None:
    """Create the catalog, vector collection and keyword index if missing,
    and record a new home's index version 1 with ``spec``'s model and
    backend (``ragsync.index.versions.register_first_version``).

    Creation is this explicit step; the writers themselves fail fast on a
    missing collection.
    """
    open_catalog(settings).close()
    open_vector_index(settings, spec.dim, create=True).close()
    open_keyword_index(settings, create=True).close()
    register_first_version(settings, spec)  # the backend it is built with, on record


def settings_for_version(settings: Settings, version: IndexVersion) -> Settings:
    """``settings`` with the backend ``version`` was built with (read from its
    model version), so its vectors are compared with vectors of the same
    backend."""
    return replace(settings, embed_backend=backend_of(version.model_version))


def list_versions(settings: Settings) -> list[IndexVersion]:
    """Every version, oldest first (version 1 registered on first call after a backfill)."""
    catalog = open_catalog(settings)
    try:
        _ensure_v1(settings, catalog)
        return catalog.index_versions.list_index_versions()
    finally:
        catalog.close()


def get_version(settings: Settings, version: int) -> IndexVersion:
    """One version.

    Raises:
        ConfigurationError: no such version.
    """
    for v in list_versions(settings):
        if v.version == version:
            return v
    raise ConfigurationError(f"no index version {version}")


def live_version(settings: Settings) -> IndexVersion:
    """The version the aliases point to.

    Raises:
        ConfigurationError: nothing has been indexed yet.
    """
    for v in list_versions(settings):
        if v.state == LIVE:
            return v
    raise ConfigurationError("no live index version: run `ragsync backfill` first")


def create_version(settings: Settings, model_name: str, model_version: str, dim: int) -> IndexVersion:
    """Create the next version's empty stores beside the live one (state ``building``).

    Args:
        settings: where the stores live.
        model_name, model_version, dim: the embedding model it is built for.

    Returns:
        The new row.

    Raises:
        ConfigurationError: no live version yet, or the stores cannot be created.
    """
    catalog = open_catalog(settings)
    try:
        _ensure_v1(settings, catalog)
        existing = catalog.index_versions.list_index_versions()
        if not any(v.state == LIVE for v in existing):
            raise ConfigurationError("no live index version: run `ragsync backfill` first")
        n = max(v.version for v in existing) + 1
        new = IndexVersion(
            version=n,
            model_name=model_name,
            model_version=model_version,
            dim=dim,
            vector_collection=vector_backend(settings).version_name(settings, n),
            keyword_index=keyword_backend(settings).version_name(settings, n),
            state=BUILDING,
            created_at=time.time(),
            flipped_at=None,
            retire_after=None,
            note="",
        )
        open_version_vector(settings, new, create=True).close()
        open_version_keyword(settings, new, create=True).close()
        catalog.index_versions.add_index_version(new)
        return new
    finally:
        catalog.close()


def open_version_vector(settings: Settings, version: IndexVersion, *, create: bool = False) -> VectorIndex:
    """The version's physical vector store (not the alias)."""
    return open_vector_index(settings, version.dim, create=create, physical=version.vector_collection)


def open_version_keyword(settings: Settings, version: IndexVersion, *, create: bool = False) -> KeywordIndex:
    """The version's physical keyword index (not the alias)."""
    return open_keyword_index(settings, create=create, physical=version.keyword_index)


def flip(settings: Settings, version: int, *, retention_s: float = DEFAULT_RETENTION_S) -> IndexVersion:
    """Make ``version`` live; the previous live version becomes ``retired`` and
    is kept ``retention_s`` seconds for :func:`rollback`.

    Returns:
        The new live row.

    Raises:
        ConfigurationError: no such version, or it was dropped.
    """
    target = get_version(settings, version)
    if target.state == DROPPED:
        raise ConfigurationError(f"index version {version} was dropped")
    vector_backend(settings).point_alias(settings, target.vector_collection)
    keyword_backend(settings).point_alias(settings, target.keyword_index)
    now = time.time()
    catalog = open_catalog(settings)
    try:
        for v in catalog.index_versions.list_index_versions():
            if v.state == LIVE and v.version != version:
                catalog.index_versions.update_index_version(
                    v.version, state=RETIRED, retire_after=now + retention_s
                )
        catalog.index_versions.update_index_version(version, state=LIVE, flipped_at=now, retire_after=None)
        return next(v for v in catalog.index_versions.list_index_versions() if v.version == version)
    finally:
        catalog.close()


def rollback(settings: Settings, *, retention_s: float = DEFAULT_RETENTION_S) -> IndexVersion:
    """Flip back to the most recently live retired version.

    Raises:
        ConfigurationError: no retired version is left to go back to.
    """
    retired = [v for v in list_versions(settings) if v.state == RETIRED]
    if not retired:
        raise ConfigurationError("no retired index version to roll back to")
    previous = max(retired, key=lambda v: (v.flipped_at or v.created_at, v.version))
    return flip(settings, previous.version, retention_s=retention_s)


def mark_refused(
    settings: Settings, version: int, note: str, *, retention_s: float = DEFAULT_RETENTION_S
) -> None:
    """Record that ``version`` failed its gate (the live version is untouched)."""
    catalog = open_catalog(settings)
    try:
        retire_after = time.time() + retention_s
        catalog.index_versions.update_index_version(
            version, state=REFUSED, note=note, retire_after=retire_after
        )
    finally:
        catalog.close()


def set_note(settings: Settings, version: int, note: str) -> None:
    """Store a gate report (JSON text) on a version."""
    catalog = open_catalog(settings)
    try:
        catalog.index_versions.update_index_version(version, note=note)
    finally:
        catalog.close()


def gc(settings: Settings, *, now: float | None = None) -> list[int]:
    """Drop retired and refused versions whose retention has passed: their
    vector and keyword indexes are dropped by their backends, the row stays as
    ``dropped``. Version 1's keyword index is deleted the same way.

    Returns:
        The versions dropped.

    Raises:
        WriteError: Milvus refused to drop a collection (that version stays).
    """
    now = time.time() if now is None else now
    vectors, keywords = vector_backend(settings), keyword_backend(settings)
    live_keyword = keywords.live_name(settings)
    dropped: list[int] = []
    for v in list_versions(settings):
        if v.state not in (RETIRED, REFUSED) or v.retire_after is None or v.retire_after > now:
            continue
        vectors.drop(settings, v.vector_collection)
        if v.keyword_index != live_keyword:
            keywords.drop(settings, v.keyword_index)
        catalog = open_catalog(settings)
        try:
            catalog.index_versions.update_index_version(v.version, state=DROPPED)
        finally:
            catalog.close()
        dropped.append(v.version)
    return dropped


def building_version(settings: Settings, model_name: str) -> IndexVersion | None:
    """The newest ``building`` version for ``model_name`` (a re-embedding to resume)."""
    found = [v for v in list_versions(settings) if v.state == BUILDING and v.model_name == model_name]
    return found[-1] if found else None


def describe(v: IndexVersion) -> str:
    """One human line for ``ragsync index-versions``."""
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(v.created_at))
    extra = ""
    if v.retire_after:
        extra = " gc after " + time.strftime("%Y-%m-%d %H:%M", time.gmtime(v.retire_after))
    reason = ""
    if v.state == REFUSED and v.note:
        try:
            reason = " (" + "; ".join(json.loads(v.note).get("reasons", [])) + ")"
        except (ValueError, AttributeError):
            reason = f" ({v.note[:100]})"
    return (
        f"v{v.version:<3d} {v.state:9s} {v.model_name:24s} {v.vector_collection} + {v.keyword_index} "
        f"created {when}{extra}{reason}"
    )


def resolve_backend(configured: str, recorded: str | None) -> str:
    """The backend to embed with.

    Args:
        configured: ``Settings.embed_backend`` (empty = not set).
        recorded: the live index's backend (:func:`ragsync.embedding.models.backend_of`
            of its model version), None when the home has no index yet.

    Returns:
        The recorded backend when nothing is set; ``NEW_HOME_BACKEND``
        (onnx-int8) for a home without an index; else the configured one.

    Raises:
        ConfigurationError: a backend is set that differs from the recorded
            one: an index keeps its backend (re-embed to change it).
    """
    if recorded is None:
        return configured or NEW_HOME_BACKEND
    if configured and configured != recorded:
        raise ConfigurationError(
            f"the embedding backend is set to {configured!r}, but the live index was built with "
            f"{recorded!r}; an index keeps its backend. Re-embed into a new index version with "
            f"`ragsync reembed --model MODEL --embed-backend {configured}`, or unset the backend setting"
        )
    return recorded


def live_spec(settings: Settings) -> Any:
    """The ModelSpec of the live index version's model (the configured
    ``settings.embed_model`` before anything was indexed), on the backend the
    live version was built with (:func:`resolve_backend`: ``onnx-int8`` for a
    home without an index unless another is set), with the device, prefixes
    and token limit of ``settings``. Pipelines embed with it and queries
    encode with it, so a flip to a new model or backend switches both.

    Raises:
        ConfigurationError: ``settings.embed_model`` names another model than
            the live version's, or ``settings.embed_backend`` another backend:
            an index keeps its model (and dimension) and backend; switching is
            a re-embedding into a new index version.
    """
    try:
        live = live_version(settings)
    except ConfigurationError:
        backend = resolve_backend(settings.embed_backend, None)
        return spec_for("", replace(settings, embed_backend=backend))
    wanted = settings.embed_model
    if wanted and wanted != live.model_name and os.path.abspath(wanted) != live.model_name:
        raise ConfigurationError(
            f"the embedding model is set to {wanted!r}, but the live index (v{live.version}) was built "
            f"with {live.model_name!r} ({live.dim} dimensions); an index keeps its model. Re-embed into a "
            f"new index version with `ragsync reembed --model {wanted}`, or unset the model setting"
        )
    backend = resolve_backend(settings.embed_backend, backend_of(live.model_version))
    return spec_for(live.model_name, replace(settings, embed_backend=backend))
