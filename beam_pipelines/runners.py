"""What a pipeline's runner means for ragsync: whether it runs steps in
worker processes other than this one (:func:`worker_processes`), the refusal
of a store that takes one process there (:func:`refuse_single_process_stores`),
running pipelines so that a stop is prompt and a dead worker process ends the
run (:func:`run_pipelines`), and one bounded run of a graph
(:func:`run_to_end`). Settings and job parameters as options live in
``ragsync.options``."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import local_job_service

from ragsync.errors import WorkerLostError
from ragsync.ops import lifecycle

IN_PROCESS_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner")
"""Runners whose SDK workers run in the launcher process unless
``direct_running_mode=multi_processing`` asks for worker processes."""


def runner_name(options: PipelineOptions) -> str:
    """The runner of ``options`` by class name (default ``FnApiRunner``)."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner or "FnApiRunner"
    return str(runner if isinstance(runner, str) else type(runner).__name__).split(".")[-1]


def local_runner(options: PipelineOptions) -> bool:
    """Whether ``options`` run the pipeline on this machine's Python runner:
    an in-process runner (also with worker processes) or Beam's embedded job
    service (``--runner=PortableRunner --job_endpoint=embed``)."""
    from apache_beam.options.pipeline_options import PortableOptions

    name = runner_name(options)
    endpoint = options.view_as(PortableOptions).job_endpoint
    return name in IN_PROCESS_RUNNERS or (name == "PortableRunner" and endpoint in (None, "", "embed"))


NATIVE_PUBSUB_RUNNERS = ("DataflowRunner", "TestDataflowRunner")
"""Runners that run Beam's Pub/Sub read (``ReadFromPubSub``) themselves."""


def stream_route(source: str, options: PipelineOptions) -> str:
    """How a stream of ``source`` (``queue``, ``pubsub`` or ``kafka``) is
    read on the runner of ``options``.

    Returns:
        ``queue``: the catalog's queue. ``relay``: Pub/Sub anywhere but on
        Dataflow (the local runners cannot run Beam's Pub/Sub read and would
        read nothing): ``connectors.pubsub.PubSubRelay`` feeds the queue
        from this process and the stream serves the queue. ``bus``: the
        runner reads the bus (Pub/Sub on Dataflow; Kafka on Flink or
        Dataflow).

    Raises:
        ConfigurationError: a runner that cannot read ``source``, with what to use.
    """
    from ragsync.errors import ConfigurationError

    name = runner_name(options)
    if name == "BundleBasedDirectRunner":
        raise ConfigurationError(
            "BundleBasedDirectRunner cannot run the stream's readers (unbounded splittable sources): "
            "leave --runner out (FnApiRunner, this process) or use --runner=DirectRunner"
        )
    if source == "queue":
        return "queue"
    if source == "pubsub":
        return "bus" if name in NATIVE_PUBSUB_RUNNERS else "relay"
    if source == "kafka":
        if local_runner(options):
            raise ConfigurationError(
                "Kafka is read by Beam's cross-language ReadFromKafka (Java), which the local runner "
                "cannot run: use a runner that runs Java transforms (Flink: --runner=PortableRunner "
                "--job_endpoint=HOST:8099, see docs/flink.md; or --runner=DataflowRunner); to apply "
                "events here, queue them with `ragsync events push` or use --source pubsub"
            )
        return "bus"
    raise ConfigurationError(f"unknown event source {source!r}: use queue, pubsub or kafka")


def worker_processes(options: PipelineOptions) -> bool:
    """Whether the runner of ``options`` runs steps in processes other than
    this one: a remote or portable runner (except the ``LOOPBACK``
    environment, whose worker is this process) or the local runner with
    ``--direct_running_mode=multi_processing``."""
    from apache_beam.options.pipeline_options import DirectOptions, PortableOptions

    name = runner_name(options)
    if name in IN_PROCESS_RUNNERS:
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


#: Why each SDK worker process that died during a run died (see :func:`watch_sdk_workers`).
_LOST_WORKERS: list[str] = []
#: The shell Beam started each SDK worker process with, by worker id.
_WORKER_SHELLS: dict[str, int] = {}
#: The SDK worker process under each shell (resolved while it runs).
_WORKER_PIDS: dict[str, int] = {}


class _RecordingSubprocess:
    """Beam's local job service's view of the ``subprocess`` module: the
    same, except that ``Popen`` notes which process it started for which
    worker (``WORKER_ID`` in its environment), so a dead worker can be named."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:  # noqa: N802 - subprocess's name
        proc = subprocess.Popen(*args, **kwargs)
        worker = str((kwargs.get("env") or {}).get("WORKER_ID") or "")
        if worker:
            _WORKER_SHELLS[worker] = proc.pid
        return proc


def lost_worker_reason(worker_id: str, code: int, pid: int | None) -> str:
    """What to tell the operator about SDK worker ``worker_id`` that exited
    with ``code`` (a shell's code: 128 + N for signal N; or -N)."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        how = f"killed by {signal.Signals(number).name}" if number else f"exit code {code}"
    except ValueError:
        how = f"exit code {code}"
    hint = " (the kernel's out-of-memory killer sends it)" if number == signal.SIGKILL else ""
    name = f"SDK worker {worker_id}" + (f" (process {pid})" if pid else "")
    return (
        f"{name} died: {how}{hint}. The local runner does not retry a lost worker's work and would wait "
        "for it forever, so this run is stopped; nothing is left half-written: run the same command again "
        "to resume (if memory ran out: fewer workers with --direct_num_workers, or more memory)"
    )


def _run_sdk_worker(self: Any) -> None:
    """Beam's ``SubprocessSdkWorker.run`` (a thread per worker process that
    waits for the process), noting a worker that died for
    :func:`watch_sdk_workers` instead of leaving a traceback nobody acts on."""
    try:
        _BEAM_WORKER_RUN(self)
    except RuntimeError as exc:  # 'Worker subprocess exited with return code N'
        found = re.search(r"return code (-?\d+)", str(exc))
        if found is None:
            raise
        worker = str(self._worker_id or "")
        _LOST_WORKERS.append(lost_worker_reason(worker, int(found.group(1)), _WORKER_PIDS.get(worker)))


#: Beam's threads of this process that read an SDK worker's gRPC streams.
_WORKER_LINK_THREADS = ("read_grpc_client_inputs", "beam_control_read")


def _quiet_broken_worker_links(args: Any) -> None:
    """``threading.excepthook``: Beam's threads that read an SDK worker's
    streams end with an ``RpcError`` when the worker dies; their tracebacks
    say less than :func:`watch_sdk_workers` does, and only theirs are
    silenced."""
    rpc_error = any(c.__name__ == "RpcError" and c.__module__ == "grpc" for c in type(args.exc_value).__mro__)
    if rpc_error and getattr(args.thread, "name", "") in _WORKER_LINK_THREADS:
        return
    _PREVIOUS_EXCEPTHOOK(args)


_BEAM_WORKER_RUN: Callable[[Any], None] = local_job_service.SubprocessSdkWorker.run
local_job_service.SubprocessSdkWorker.run = _run_sdk_worker  # type: ignore[method-assign]
local_job_service.subprocess = _RecordingSubprocess()  # type: ignore[assignment]
_PREVIOUS_EXCEPTHOOK = threading.excepthook
threading.excepthook = _quiet_broken_worker_links


def watch_sdk_workers() -> None:
    """A watch for :func:`ragsync.ops.lifecycle.run_watched`: notes the process
    of each SDK worker while it runs, and raises once one has died.

    Raises:
        WorkerLostError: naming the worker, how it died and what to do.
    """
    for worker, shell in list(_WORKER_SHELLS.items()):
        if worker not in _WORKER_PIDS:
            children = lifecycle.child_pids(shell)
            if children:
                _WORKER_PIDS[worker] = children[0]
    if _LOST_WORKERS:
        raise WorkerLostError(_LOST_WORKERS.pop(0))


def run_pipelines(
    pipelines: Sequence[Any], *, cancel_on_interrupt: bool = False, watch: Sequence[Callable[[], None]] = ()
) -> list[Any]:
    """Run ``pipelines`` at once and wait for all of them
    (``ragsync.ops.lifecycle.run_watched``: the calling thread stays free to
    handle Ctrl-C and SIGTERM at once, and a dead SDK worker process ends the
    wait).

    Args:
        pipelines: ``beam.Pipeline`` objects, ready to run.
        cancel_on_interrupt: on Ctrl-C or SIGTERM, cancel the jobs already
            submitted (a remote runner's) before the interrupt is raised.
        watch: more watches beside the SDK workers' (one that raises ends
            the wait with its error).

    Returns:
        Their ``PipelineResult``, finished, in order.

    Raises:
        WorkerLostError: an SDK worker process died (see :func:`watch_sdk_workers`).
        KeyboardInterrupt: Ctrl-C or SIGTERM (``ragsync.ops.lifecycle``).
        whatever a pipeline's run raised.
    """
    _LOST_WORKERS.clear()
    results: list[Any] = [None] * len(pipelines)

    def runner(i: int) -> Callable[[], Any]:
        def run() -> Any:
            results[i] = pipelines[i].run()
            results[i].wait_until_finish()
            return results[i]

        return run

    try:
        works = [runner(i) for i in range(len(pipelines))]
        return lifecycle.run_watched(works, watch=[watch_sdk_workers, *watch])
    except KeyboardInterrupt:
        if cancel_on_interrupt:
            for result in results:
                if result is not None:
                    with contextlib.suppress(Exception):  # best effort: the stop goes on
                        result.cancel()
        raise


def run_to_end(settings: Any, beam_args: Sequence[str], build: Callable[[Any], None]) -> Any:
    """Build a bounded graph with ``build(pipeline)`` on the runner
    ``beam_args`` name (default the FnApiRunner), its stores checked by
    :func:`refuse_single_process_stores`, run it (:func:`run_pipelines`) and
    wait for its end.

    Returns:
        The finished pipeline's result (for its counters).

    Raises:
        ConfigurationError: a single-process store with worker processes.
        WorkerLostError: an SDK worker process died.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions

    options = PipelineOptions(list(beam_args) or ["--runner=FnApiRunner"])
    refuse_single_process_stores(settings, options)
    p = beam.Pipeline(runner=options.view_as(StandardOptions).runner or "FnApiRunner", options=options)
    build(p)
    (result,) = run_pipelines([p])
    return result
