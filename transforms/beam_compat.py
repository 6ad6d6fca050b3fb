"""Three start-up/teardown costs of Beam 2.77 that ragsync does not need.

1. RunInference, imported without torch.

Beam 2.77's ``apache_beam.ml.inference.base`` imports its ``ModelManager``
(GPU memory bookkeeping for ``use_model_manager=True``), whose module imports
torch and scipy at import time: 2-6 s of every process start on 2 cores, and
the ONNX embedding backends need neither. ``base`` already guards that import
(``except ImportError: ModelManager = None``), so the first import of ``base``
here runs with the manager's module marked absent; the mark is removed right
after, so anything that imports the manager itself later still gets it.
ragsync never asks RunInference for the model manager. ``base`` also drops
the stdlib ``resource`` module in the same guard (its memory metric); it is
put back.

If torch or ``base`` is already imported, nothing is blocked (nothing to
save).

2. A parse step's child process, stopped without a fixed one-second sleep.

``with_exception_handling(use_subprocess=True)`` (the parse lanes) runs the
DoFn in a one-process pool that lives from its first element to the DoFn's
teardown (one fork per lane and worker, not per document). Beam's
``_SubprocessDoFn._terminate_pool`` kills the child, then sleeps one second
unconditionally before terminating anything still alive: 2 s of every run
with two lanes. :func:`_terminate_pool` does the same kill / terminate, but
waits for the killed children to exit (``join``, at most the same second)
instead of sleeping, so a dead child ends the wait at once.

3. No child process started only to end a bundle nobody opened.

Beam's ``_SubprocessDoFn.finish_bundle`` and ``teardown`` go through
``_call_remote``, which creates the pool when there is none: a lane that
received no element this run (the slow lane of a backfill without scans)
started a child, with its set-up (catalog open), only to run a remote
``finish_bundle`` that does nothing in a fresh process (``_started`` is
False there) - 1.3-1.6 s of a 60-file cold run. With no pool, i.e. no child
ever started or the last one killed after a crash or a timeout, both
calls have nothing to do: :func:`_finish_bundle` and :func:`_teardown`
return at once; with a pool they are Beam's.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from apache_beam.transforms import core as _core

_MANAGER = "apache_beam.ml.inference.model_manager"
_BASE = "apache_beam.ml.inference.base"


def _import_base() -> None:
    """Import ``apache_beam.ml.inference.base`` without its torch-importing
    model manager (module docstring)."""
    if _BASE in sys.modules or "torch" in sys.modules or _MANAGER in sys.modules:
        return
    sys.modules[_MANAGER] = None  # type: ignore[assignment]  # makes its import raise ImportError
    try:
        import resource

        import apache_beam.ml.inference.base as base
    finally:
        del sys.modules[_MANAGER]
    if getattr(base, "resource", None) is None:
        base.resource = resource  # type: ignore[attr-defined]


_import_base()


def _terminate_pool(self: Any) -> None:
    """Beam's ``_SubprocessDoFn._terminate_pool``: kill the pool's children,
    then terminate any still alive after at most 1 s (module docstring, 2)."""
    pool = self._pool
    self._pool = None
    processes = list(pool._processes.values())
    pool.shutdown(wait=False)
    for p in processes:
        if p.is_alive():
            p.kill()
    deadline = time.monotonic() + 1.0
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()


_SUBPROCESS_DOFN = getattr(_core, "_SubprocessDoFn", None)
if _SUBPROCESS_DOFN is not None and hasattr(_SUBPROCESS_DOFN, "_terminate_pool"):
    _SUBPROCESS_DOFN._terminate_pool = _terminate_pool

_BEAM_FINISH_BUNDLE = getattr(_SUBPROCESS_DOFN, "finish_bundle", None)
_BEAM_TEARDOWN = getattr(_SUBPROCESS_DOFN, "teardown", None)


def _finish_bundle(self: Any) -> None:
    """Beam's ``_SubprocessDoFn.finish_bundle``, without starting a child
    when none is running (module docstring, 3)."""
    if self._pool is not None:
        _BEAM_FINISH_BUNDLE(self)  # type: ignore[misc]


def _teardown(self: Any) -> None:
    """Beam's ``_SubprocessDoFn.teardown``, without starting a child when
    none is running (module docstring, 3)."""
    if self._pool is not None:
        _BEAM_TEARDOWN(self)  # type: ignore[misc]


if _BEAM_FINISH_BUNDLE is not None and _BEAM_TEARDOWN is not None:
    _SUBPROCESS_DOFN.finish_bundle = _finish_bundle  # type: ignore[union-attr]
    _SUBPROCESS_DOFN.teardown = _teardown  # type: ignore[union-attr]

from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference  # noqa: E402

__all__ = ["ModelHandler", "PredictionResult", "RunInference"]
