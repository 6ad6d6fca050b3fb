"""Process lifecycle: stop cleanly on SIGINT/SIGTERM, and never leave children behind.

Two guarantees for a ``ragsync`` process (Linux):

- **SIGINT and SIGTERM stop it promptly and cleanly.** Both raise
  ``KeyboardInterrupt`` in the main thread (SIGTERM's default would kill the
  process without unwinding); the command reports what it did and exits 130 /
  143. Pipelines run in threads of :func:`run_watched`, so the main thread is
  free to handle the signal at once, whatever native call a step is in; the
  process then exits without waiting for them (:func:`exit_abandoning_run`).
  Every write is content-keyed and ordered (indexes, then chunk rows, then
  the version flip in one transaction), so a run stopped at any point is
  resumed by the next one; :func:`terminate_descendants` ends helper
  processes (parse children, Tika, Tesseract) so none outlives the command,
  without waiting on those that ignore SIGTERM.
- **After SIGKILL no child outlives it.** Nothing runs in a SIGKILLed process,
  so the children watch for it themselves: :func:`install_child_watch`
  registers a fork hook that starts, in every forked child, a thread that
  exits the child as soon as its parent is gone (the child is re-parented).
  Parse children inherit the parent's open files, Milvus Lite's lock among
  them; an orphan would block the next run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

_WATCH_INTERVAL_S = 0.2
_installed = False


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(_WATCH_INTERVAL_S)
        if os.getppid() != parent:
            os._exit(137)  # the parent died: leave nothing behind


def exit_when_parent_dies() -> None:
    """Start a thread that ends this process (exit 137) as soon as its
    parent is gone (it is re-parented), SIGKILL of the parent included."""
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), name="ragsync-parent-watch", daemon=True).start()


def _after_fork_in_child() -> None:
    exit_when_parent_dies()


def install_child_watch() -> None:
    """Make every child this process forks from now on exit when this process
    dies, SIGKILL included (idempotent)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _installed = True


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (default: this process), from /proc."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def child_pids(pid: int) -> list[int]:
    """The children of ``pid`` (``/proc/PID/task/PID/children``; empty when
    it is gone or the kernel does not list them)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


#: How :func:`terminate_descendants` ended a helper process.
ENDED_ON_SIGTERM = "exited on SIGTERM"
KILLED_IGNORING_SIGTERM = "killed at once: it ignores SIGTERM"
KILLED_AFTER_GRACE = "killed after the grace period"


def _ignores_sigterm(pid: int) -> bool:
    """Whether ``pid`` ignores or blocks SIGTERM (``/proc/PID/status``), so
    waiting for it to react would only spend the grace period (Python's
    multiprocessing resource tracker ignores SIGTERM by design)."""
    bit = 1 << (signal.SIGTERM - 1)
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            masks = dict(line.split(":", 1) for line in fh if line.startswith(("SigIgn:", "SigBlk:")))
    except OSError:
        return False
    return any(int(v.strip() or "0", 16) & bit for v in masks.values())


def terminate_descendants(grace_s: float = 3.0) -> dict[int, str]:
    """End every descendant of this process: SIGKILL at once for those that
    ignore SIGTERM, SIGTERM for the others, then SIGKILL for any of those
    still alive after ``grace_s``. A second look catches children started
    meanwhile (a pool replacing a worker it lost).

    Returns:
        How each one ended, by pid: :data:`ENDED_ON_SIGTERM`,
        :data:`KILLED_IGNORING_SIGTERM` or :data:`KILLED_AFTER_GRACE`.
    """
    outcome: dict[int, str] = {}
    for _ in range(3):
        pids = [p for p in descendants() if p not in outcome and _alive(p)]
        if not pids:
            break
        waiting = []
        for pid in pids:
            ignores = _ignores_sigterm(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if ignores else signal.SIGTERM)
            if ignores:
                outcome[pid] = KILLED_IGNORING_SIGTERM
            else:
                waiting.append(pid)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in waiting):
            time.sleep(0.02)
        for pid in waiting:
            outcome[pid] = KILLED_AFTER_GRACE if _alive(pid) else ENDED_ON_SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:  # reap our own children so none stays a zombie
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
    return outcome


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/PID/stat``
    field 22), '' when unreadable: with the pid it names one process even
    after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def run_identity(pid: int | None = None) -> str:
    """``HOST:PID:START`` of this process (or ``pid``): who holds the leases
    of the events a stream claims (``events.lease_holder``)."""
    import socket

    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def holder_gone(holder: str, me: str) -> bool:
    """True when the process ``holder`` (a ``run_identity``) no longer runs.

    Only a process of this host can be looked at: ``me`` itself is alive; a
    pid that is not running, is a zombie or was reused (another start time)
    is gone. A holder on another host, or a malformed one, is not known to be
    gone (False), so its leases count as before.
    """
    parts = holder.rsplit(":", 2)
    if holder == me or len(parts) != 3:
        return False
    host, pid_text, start = parts
    if host != me.rsplit(":", 2)[0] or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if not _alive(pid):
        return True
    return bool(start) and _start_ticks(pid) not in ("", start)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM (SIGINT raises KeyboardInterrupt)."""


_stop_signal: int | None = None


_abandoning = False


def stopping() -> bool:
    """Whether this process is being stopped: a SIGINT or SIGTERM arrived, or
    it is ending a run it leaves behind (:func:`exit_abandoning_run`). A
    failure a step meets now may be the stop's own doing (a helper process
    it ended), not its input's: it is not recorded, the next run does the
    work again."""
    return _stop_signal is not None or _abandoning


def stop_signal() -> int | None:
    """The signal that asked this process to stop, or None. Beam may wrap the
    ``KeyboardInterrupt`` raised inside a step in its own error; callers
    check this to tell a requested stop from a failure."""
    return _stop_signal


def _raise_stopped(signum: int, _frame: object) -> None:
    global _stop_signal
    _stop_signal = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(f"stopped by signal {signum}")


@contextlib.contextmanager
def graceful_signals() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Stopped` and SIGINT raises
    ``KeyboardInterrupt`` (unless the process was started with SIGINT ignored,
    as ``nohup`` and background jobs of a non-interactive shell are: that
    choice is kept). Restores the previous handlers on exit; does nothing
    outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _raise_stopped)
    if previous[signal.SIGINT] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _raise_stopped)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


STOP_REPORT_ENV = "RAGSYNC_STOP_REPORT"
"""A file that :func:`exit_abandoning_run` writes how the stop went to, as
JSON (tests and ``benchmarks/bench_stop.py`` read it): ``why``,
``left_running`` (the threads of :func:`run_watched` still at work, not
waited for) and ``helpers`` (pid -> how it ended)."""

_RUN_THREADS: set[threading.Thread] = set()


def run_watched(
    works: Sequence[Callable[[], T]], *, watch: Sequence[Callable[[], None]] = (), poll_s: float = 0.2
) -> list[T]:
    """Run each of ``works`` (a pipeline's run) in a thread of its own and
    wait for them here, calling every ``watch`` each ``poll_s`` seconds.

    Why not run them in the calling thread: Python handles a signal in the
    main thread, between two of its Python steps. A main thread running a
    pipeline's bundle handles Ctrl-C only once the native call it is in
    returns (a model's batch, a store's flush, a parse child's teardown);
    waiting here, it handles it at once, and the stop never waits for the
    step in progress (every write is ordered so that a run stopped anywhere
    is resumed by the next one). A watch that raises ends the wait with its
    error (a dead worker process the runner would otherwise wait for forever).

    Returns:
        The works' results, in order.

    Raises:
        The first error a work raised, or the error of a watch; the other
        works are left running (daemon threads: the process exits without
        them). KeyboardInterrupt (SIGINT) and ``Stopped`` (SIGTERM) reach
        the caller at once, the works left running.
    """
    results: list[Any] = [None] * len(works)
    errors: list[BaseException] = []
    finished = threading.Event()

    def run(i: int) -> None:
        try:
            results[i] = works[i]()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            errors.append(exc)
        finally:
            finished.set()

    threads = [
        threading.Thread(target=run, args=(i,), name=f"ragsync-run-{i}", daemon=True)
        for i in range(len(works))
    ]
    _RUN_THREADS.update(threads)
    try:
        for thread in threads:
            thread.start()
        while not errors and any(t.is_alive() for t in threads):
            finished.wait(poll_s)  # a lock wait: a signal interrupts it at once
            finished.clear()
            for check in watch:
                check()
    finally:
        _RUN_THREADS.difference_update(t for t in threads if not t.is_alive())
    if errors:
        raise errors[0]
    return results


def runs_left() -> bool:
    """Whether a thread of :func:`run_watched` is still at work (its wait
    ended on an error or an interrupt, not on the run's end)."""
    return any(t.is_alive() for t in _RUN_THREADS)


def exit_abandoning_run(code: int, why: str) -> NoReturn:
    """End the process now: stop every helper process, then exit with
    ``code`` even if a thread of :func:`run_watched` is still inside a bundle
    (a stopped run is resumed by the next one; waiting for threads that are
    not coming back would break the promise of a prompt stop). With
    ``$RAGSYNC_STOP_REPORT`` set, how it went is written there first."""
    import sys

    global _abandoning
    _abandoning = True  # before any helper dies: see stopping()
    sys.stdout.flush()
    sys.stderr.flush()
    helpers = terminate_descendants()
    report = os.environ.get(STOP_REPORT_ENV)
    if report:
        import json

        left = sorted(t.name for t in _RUN_THREADS if t.is_alive())
        ended = {str(pid): how for pid, how in helpers.items()}
        with contextlib.suppress(OSError), open(report, "w", encoding="utf-8") as fh:
            json.dump({"why": why, "left_running": left, "helpers": ended}, fh)
    os._exit(code)


def exit_after_interrupt(code: int) -> NoReturn:
    """:func:`exit_abandoning_run` after a reported SIGINT (``code`` 130) or
    SIGTERM (143)."""
    exit_abandoning_run(code, "SIGTERM" if code == 143 else "SIGINT")


def lock_holders(path: str) -> list[int]:
    """PIDs (other than this process) with ``path`` open, from /proc."""
    target = os.path.abspath(path)
    holders = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    holders.append(int(entry))
                    break
            except OSError:
                continue
    return holders


# ----------------------------------------------------------- bounded children


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies
    (``PR_SET_PDEATHSIG``), so a child working on untrusted bytes never
    outlives the run that started it and keeps working on its behalf.

    The parent is a fork server (``transforms.parse``'s, or
    :class:`BoundedChild`'s), which exits as soon as the process that started
    it is gone, SIGKILL included. A fork server's child inherits no open
    files (index lock files included), so nothing is released here. No-op
    off Linux."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:  # pragma: no cover - not Linux
        pass


def bound_this_process(memory_mb: int) -> None:
    """Put this process, a child that reads untrusted bytes (detection,
    parsing), under the parse child's limits: it dies with its parent and its
    heap is capped at ``memory_mb`` MiB, so a decompression bomb ends as a
    MemoryError or a crash of this child (a dead letter), never as an
    out-of-memory kill of the run. RLIMIT_DATA, not RLIMIT_AS: Tika's native
    VM reserves a large address range it never touches, which an
    address-space cap would refuse.

    Args:
        memory_mb: ``Settings.parse_memory_mb``.
    """
    import resource

    die_with_parent()
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))


class BoundedChild:
    """One child process, started from a fork server (a clean single-threaded
    interpreter: nothing of the caller's threads, locks or open files) under
    :func:`bound_this_process`, that runs functions on untrusted bytes with a
    time limit per call. The caller holds nothing of what the child decodes.
    Use as a context manager; the child ends with the block (or the caller).

    Args:
        memory_mb: the child's heap limit (``Settings.parse_memory_mb``).
    """

    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self._pool: Any = None

    def __enter__(self) -> BoundedChild:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("forkserver"),
            initializer=bound_this_process,
            initargs=(self.memory_mb,),
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()

    def call(self, fn: Callable[..., T], *args: Any, timeout_s: float) -> T:
        """``fn(*args)`` in the child (``fn`` importable, arguments and result
        picklable); what ``fn`` raises is raised here.

        Raises:
            ParseTimeoutError: it ran past ``timeout_s`` (the child is killed).
            ParserCrashError: the child died or ran out of memory: over its
                memory limit (an allocation the limit refused) or a crash of
                native code.
        """
        from concurrent.futures import TimeoutError as FuturesTimeout
        from concurrent.futures.process import BrokenProcessPool

        from ragsync.errors import ParserCrashError, ParseTimeoutError

        if self._pool is None:
            raise RuntimeError("BoundedChild.call outside its with block, or after its process ended")
        try:
            return self._pool.submit(fn, *args).result(timeout_s)  # type: ignore[no-any-return]
        except MemoryError:
            # An allocation the heap limit refused, raised in the child and
            # sent back: the same outcome as a child the limit killed.
            self._end()
            raise ParserCrashError(
                f"the isolated process ran past its {self.memory_mb} MiB memory limit"
            ) from None
        except FuturesTimeout:
            self._end()
            raise ParseTimeoutError(
                f"ran past the time limit of {timeout_s:g} s (the process was ended)"
            ) from None
        except BrokenProcessPool:
            self._end()
            raise ParserCrashError(
                f"the isolated process died: past its {self.memory_mb} MiB memory limit, or a crash"
            ) from None

    def _end(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.kill()
        for proc in processes:
            proc.join(5)
