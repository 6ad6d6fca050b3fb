"""Base classes of the Beam steps that use the catalog and the stores:
:class:`CatalogDoFn` (one catalog per DoFn instance), :class:`CatalogStep`
(a transform that is one such DoFn) and :class:`StoresDoFn` (the catalog
and both indexes, and the index versions being built beside the live one)."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from ragsync.config import Settings, open_catalog, open_keyword_index, open_vector_index
from transforms.metrics import StageMetrics, counter


class CatalogDoFn(beam.DoFn):
    """Base for steps that read or write the catalog: one ``Catalog`` per DoFn
    instance, opened in ``setup()`` and closed in ``teardown()`` (a Catalog
    holds a connection pool and does not pickle).

    Steps count with :meth:`count` (ragsync counters by name) and, when
    ``metrics_stage`` names their stage, time their work with
    ``self._stage`` (``StageMetrics`` made in ``setup()``).

    Args:
        settings: where the catalog is; None runs the step without one
            (``self._catalog`` stays None: the gate's catalog-free tests).
    """

    settings: Settings
    metrics_stage: str = ""
    _stage: StageMetrics

    def __init__(self, settings: Settings | None) -> None:
        # None only for the gate's catalog-free tests; every other step has settings.
        self.settings = settings  # type: ignore[assignment]
        self._catalog: Any = None
        self._counters: dict[str, Any] = {}

    def setup(self) -> None:
        if self.settings is not None:
            self._catalog = open_catalog(self.settings)
        if self.metrics_stage:
            self._stage = StageMetrics(self.metrics_stage)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the ragsync counter ``name`` (its handle made once per instance)."""
        handle = self._counters.get(name)
        if handle is None:
            handle = self._counters[name] = counter(name)
        handle.inc(n)

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None


class CatalogStep(beam.PTransform):
    """A transform that is one catalog DoFn over its input: subclasses name
    the DoFn class (``fn``, built from the settings) and the step's label.
    """

    fn: type[CatalogDoFn]
    label_: str

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | self.label_ >> beam.ParDo(self.fn(self.settings))


class StoresDoFn(CatalogDoFn):
    """Base for steps that write the catalog and both indexes: opens one
    client of each in ``setup()`` and closes them in ``teardown()``
    (keyword index first, so its writer lock is released early; the catalog
    last).

    It also opens every index version that is being built beside the live
    one (a re-embedding, ``ragsync reembed``): the ``shadow_*`` methods write
    the same changes there, embedded with that version's model, so the new
    version never falls behind the live one while it is built. Versions are
    read at setup; with the embedded stores a re-embedding and a pipeline
    cannot run at once anyway (one process per Milvus Lite file).
    """

    def __init__(self, settings: Settings, dim: int) -> None:
        super().__init__(settings)
        self.dim = dim
        self._stores: list[Any] = []
        self._shadows: list[tuple[Any, Any, Any]] = []

    def setup(self) -> None:
        super().setup()
        self._vectors = open_vector_index(self.settings, self.dim)
        self._keywords = open_keyword_index(self.settings)
        self._stores = [self._keywords, self._vectors]
        self._shadows = self._open_shadows()

    def _open_shadows(self) -> list[tuple[Any, Any, Any]]:
        from ragsync import index_versions as iv
        from ragsync.errors import ConfigurationError

        try:
            building = [v for v in iv.list_versions(self.settings) if v.state == iv.BUILDING]
        except ConfigurationError:
            return []
        shadows = []
        for v in building:
            vec = iv.open_version_vector(self.settings, v)
            kw = iv.open_version_keyword(self.settings, v)
            self._stores[:0] = [kw, vec]
            shadows.append((v, vec, kw))
        return shadows

    def shadow_upsert(self, chunks: list[Any]) -> None:
        """Write ``chunks`` to every building version, embedded with its
        model through the shared embedding path
        (``ragsync.embedding.embed_with_cache``: cache first, batches of
        ``embed_batch_size``).

        Raises:
            EmbedFailedError: that model gave no vector for a chunk (the
                step's exception handling dead-letters the document).
        """
        if not chunks:
            return
        from ragsync.embedding import embed_failure, embed_with_cache, get_model
        from ragsync.index_versions import settings_for_version

        for version, vec, kw in self._shadows:
            # The version's own backend (recorded in its model version), not the setting's.
            model = get_model(version.model_name, settings_for_version(self.settings, version))
            got = embed_with_cache(
                self._catalog,
                model,
                chunks,
                batch_size=self.settings.embed_batch_size,
                version=version.model_version,
            )
            if got.failures:
                raise embed_failure(got.failures)
            vec.upsert(chunks, [got.vectors[c.text_hash].tolist() for c in chunks])
            kw.upsert(chunks)

    def shadow_delete(self, tenant_id: str, chunk_ids: list[str]) -> None:
        """Delete ``chunk_ids`` from every building version."""
        if not chunk_ids:
            return
        for _, vec, kw in self._shadows:
            vec.delete(tenant_id, chunk_ids)
            kw.delete(tenant_id, chunk_ids)

    def shadow_set_acl(self, tenant_id: str, chunks: list[Any], acl_ids: list[str]) -> None:
        """Give ``chunks`` (already carrying ``acl_ids``) their new ACL in
        every building version."""
        if not chunks:
            return
        for _, vec, kw in self._shadows:
            vec.set_acl_ids(tenant_id, [c.chunk_id for c in chunks], acl_ids)
            kw.set_acl_ids(tenant_id, chunks)

    def teardown(self) -> None:
        for store in self._stores:
            store.close()
        self._stores = []
        self._shadows = []
        super().teardown()
