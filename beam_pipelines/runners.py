"""What a pipeline's runner means for ragsync's stores: whether it runs steps
in worker processes other than this one (:func:`worker_processes`), and the
refusal of a store that takes one process there
(:func:`refuse_single_process_stores`), and one bounded run of a graph
(:func:`run_to_end`). Settings and job parameters as options live in
``ragsync.options``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

IN_PROCESS_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
"""Runners whose SDK workers run in the launcher process unless
``direct_running_mode=multi_processing`` asks for worker processes."""


def worker_processes(options: PipelineOptions) -> bool:
    """Whether the runner of ``options`` runs steps in processes other than
    this one: a remote or portable runner (except the ``LOOPBACK``
    environment, whose worker is this process) or the local runner with
    ``--direct_running_mode=multi_processing``."""
    from apache_beam.options.pipeline_options import DirectOptions, PortableOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner or "FnApiRunner"
    name = runner if isinstance(runner, str) else type(runner).__name__
    if name.split(".")[-1] in IN_PROCESS_RUNNERS:
        return options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    return (options.view_as(PortableOptions).environment_type or "").upper() != "LOOPBACK"


def refuse_single_process_stores(settings: Any, options: PipelineOptions) -> None:
    """Refuse a run whose workers are other processes when a store takes one
    process only (its backend's ``one_process``: the tantivy keyword index,
    one writer with ``LockBusy`` in any other process; a Milvus Lite file,
    locked by the process that opened it; a store in memory).

    Raises:
        ConfigurationError: naming the store and what to use instead.
    """
    from ragsync.errors import ConfigurationError

    if not worker_processes(options):
        return
    from ragsync.index.backends import keyword_backend, vector_backend

    for kind, backend in (("keyword", keyword_backend(settings)), ("vector", vector_backend(settings))):
        reason = backend.one_process(settings)
        if reason:
            raise ConfigurationError(
                f"the {backend.name} {kind} index takes one process, but this runner runs steps in "
                f"several worker processes: {reason}; or run on one process (--runner=FnApiRunner)"
            )


def run_to_end(settings: Any, beam_args: Sequence[str], build: Callable[[Any], None]) -> Any:
    """Build a bounded graph with ``build(pipeline)`` on the runner
    ``beam_args`` name (default the FnApiRunner), its stores checked by
    :func:`refuse_single_process_stores`, run it and wait for its end.

    Returns:
        The finished pipeline's result (for its counters).

    Raises:
        ConfigurationError: a single-process store with worker processes.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions

    options = PipelineOptions(list(beam_args) or ["--runner=FnApiRunner"])
    refuse_single_process_stores(settings, options)
    p = beam.Pipeline(runner=options.view_as(StandardOptions).runner or "FnApiRunner", options=options)
    build(p)
    result = p.run()
    result.wait_until_finish()
    return result
