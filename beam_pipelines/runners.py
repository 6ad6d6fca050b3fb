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
    process only: the tantivy keyword index (one writer, ``LockBusy`` in
    any other process) or a Milvus Lite file (locked by the process that
    opened it).

    Raises:
        ConfigurationError: naming the store and what to use instead.
    """
    from ragsync.errors import ConfigurationError

    if not worker_processes(options):
        return
    from ragsync.stores.backends import keyword_backend

    backend = keyword_backend(settings)
    if backend.one_process:
        raise ConfigurationError(
            f"the {backend.name} keyword index takes one process, but this runner runs steps in several "
            "worker processes: use --keyword-index milvus (RAGSYNC_KEYWORD_INDEX=milvus, BM25 in the "
            "vectors' Milvus server) or elasticsearch (--es-url), or run on one process "
            "(--runner=FnApiRunner)"
        )
    if "://" not in settings.milvus_uri:
        raise ConfigurationError(
            f"Milvus Lite ({settings.milvus_uri}) takes one process, but this runner runs steps in "
            "several worker processes: run `milvus-lite server --data-dir DIR --host 127.0.0.1 --port P` "
            "(or use a Milvus server) and set --milvus-uri http://127.0.0.1:P"
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
