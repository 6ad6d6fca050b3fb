"""Base classes of the Beam steps that use the catalog: :class:`CatalogDoFn`
(one catalog per DoFn instance) and :class:`CatalogStep` (a transform that is
one such DoFn). Steps that change the index are one generic step,
``transforms.index.UpdateIndex``."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from ragsync.config import Settings, open_catalog
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
