"""ragsync's settings and job parameters as a Beam ``PipelineOptions`` view,
for the tests that check the Beam-style flags (``--catalog_url=...``) of
``ragsync.options`` against Beam's own parser. The product splits those
flags from Beam's with ``ragsync.options.parse_pipeline_args`` instead."""

from __future__ import annotations

from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from ragsync.options import add_pipeline_flags


class RagsyncOptions(PipelineOptions):
    """``--catalog_url=...``, ``--es_api_key=...``, ``--source=...``: every
    option of ``ragsync.options.ALL_OPTIONS``; each unset one falls back to
    its ``RAGSYNC_*`` environment variable, then the ``Settings`` default
    (``ragsync.options.option_values``)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        add_pipeline_flags(parser)


def settings_from_pipeline_options(options: PipelineOptions) -> Any:
    """``Settings`` from a ``PipelineOptions`` (its ragsync options, then the
    ``RAGSYNC_*`` environment, then the defaults).

    Raises:
        ConfigurationError: a value out of range.
    """
    from ragsync.options import option_values, settings_from

    return settings_from(option_values(options.view_as(RagsyncOptions).get_all_options()))
