"""Fault hooks of the crash and signal tests, injected into the writer of a
``ragsync`` subprocess: the test sets ``RAGSYNC_WRITE_HOOKS=tests.crash_hooks:from_env``
(``ragsync.index.service.HOOKS_ENV``) and one of the variables below; :func:`crash_env`
builds that environment.

* ``RAGSYNC_CRASH_AFTER_INDEX_WRITES=N[:SIGNAL[:group]]`` sends SIGNAL (default
  SIGKILL) to the writer's process (with ``:group``, to its whole process
  group, as a terminal's Ctrl-C does) once the index upsert of the batch holding
  its N-th document is done, before any catalog row of that batch exists - the
  worst place to be stopped - and parks the writing thread until the process
  exits. It prints ``[fault] sending SIGNAL ... from the step's thread NAME``
  to stderr first.
* ``RAGSYNC_CRASH_ONCE=PATH``: only the first process to create PATH fires
  that hook (one worker of many, and a re-run goes through).
* ``RAGSYNC_CRASH_BEFORE_FLIPS=N``: SIGKILL before the writer's N-th version
  flip, once that document's new chunks are in both indexes and its chunk rows
  pending in the catalog: inside the write -> flip window.
* ``RAGSYNC_CRASH_AFTER_FLIPS=N``: SIGKILL after the N-th flip of a document
  with vanished chunks, before they are deleted.
* ``RAGSYNC_REEMBED_CRASH_AFTER_DOCS=N``: a re-embedding (``ragsync reembed``)
  ends its process abruptly (``os._exit(137)``, no cleanup, like SIGKILL) once
  it has written N documents to the target version.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from ragsync.index.hooks import HOOKS_ENV, WriteHooks
from ragsync.model import DocumentPlan

ROOT = Path(__file__).resolve().parents[1]
FACTORY = "tests.crash_hooks:from_env"
"""The value of ``RAGSYNC_WRITE_HOOKS`` that loads :func:`from_env`."""


def crash_env(**variables: str) -> dict[str, str]:
    """The test process's environment for a ``ragsync`` subprocess whose
    writers load these hooks: ``RAGSYNC_WRITE_HOOKS``, the repository root on
    ``PYTHONPATH`` (so every worker process can import ``tests``),
    ``HF_HUB_OFFLINE=1`` and ``variables`` (e.g. ``RAGSYNC_CRASH_AFTER_FLIPS="1"``)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, **{HOOKS_ENV: FACTORY}, PYTHONPATH=path, HF_HUB_OFFLINE="1", **variables)


def first_to_crash(marker: str) -> bool:
    """Whether this process may fire a fault hook.

    Args:
        marker: '' (every process fires), or the path of a file that the
            first process to reach a hook creates (``O_EXCL``, atomic across
            processes): only that process fires, once; every later process
            and run goes on.

    Returns:
        True when the hook fires here.

    Raises:
        OSError: the marker cannot be created for another reason than existing.
    """
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _stop(signum: signal.Signals, why: str, *, group: bool = False) -> None:
    """Send ``signum`` to this process (``group``: to its whole process
    group, as a terminal's Ctrl-C or a service manager's stop does), then
    park the calling thread (the run is stopped right here, whatever else
    this thread's bundle holds). The line it prints names the thread the
    step runs in."""
    thread = threading.current_thread().name
    print(f"[fault] sending {signum.name}{why} from the step's thread {thread}", file=sys.stderr, flush=True)
    if group:
        os.killpg(os.getpgid(0), signum)
    else:
        os.kill(os.getpid(), signum)
    threading.Event().wait()


def hooks_for(environ: Mapping[str, str]) -> WriteHooks:
    """The hooks the ``RAGSYNC_CRASH_*`` variables of ``environ`` ask for
    (no variable: hooks that do nothing).

    Raises:
        ValueError: a count is not an integer.
        AttributeError: a signal name is unknown.
    """
    after, _, signame = environ.get("RAGSYNC_CRASH_AFTER_INDEX_WRITES", "").partition(":")
    signame, _, to_group = signame.partition(":")
    after_writes = int(after or 0)
    after_signal = getattr(signal, signame or "SIGKILL")
    once = environ.get("RAGSYNC_CRASH_ONCE", "")
    before_flips = int(environ.get("RAGSYNC_CRASH_BEFORE_FLIPS", "") or 0)
    after_flips = int(environ.get("RAGSYNC_CRASH_AFTER_FLIPS", "") or 0)
    reembed_after = int(environ.get("RAGSYNC_REEMBED_CRASH_AFTER_DOCS", "") or 0)

    def after_index_writes(n: int) -> None:
        if after_writes and n == after_writes and first_to_crash(once):
            _stop(after_signal, " to the process group" if to_group else "", group=bool(to_group))

    def before_flip(n: int, plan: DocumentPlan) -> None:
        if before_flips and n >= before_flips:
            _stop(signal.SIGKILL, " before the flip")

    def after_flip(n: int, plan: DocumentPlan) -> None:
        if after_flips and n >= after_flips and plan.vanished_ids:
            _stop(signal.SIGKILL, " after the flip")

    def after_reembedded_documents(n: int) -> None:
        if reembed_after and n >= reembed_after:
            print(f"[fault] exiting after {n} re-embedded documents", file=sys.stderr, flush=True)
            os._exit(137)

    return WriteHooks(
        after_index_writes=after_index_writes,
        before_flip=before_flip,
        after_flip=after_flip,
        after_reembedded_documents=after_reembedded_documents,
    )


def from_env() -> WriteHooks:
    """:func:`hooks_for` of this process's environment (the factory
    ``RAGSYNC_WRITE_HOOKS`` names)."""
    return hooks_for(os.environ)
