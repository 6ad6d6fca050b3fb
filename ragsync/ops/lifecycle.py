"""Process lifecycle: stop cleanly on SIGINT/SIGTERM, and never leave children behind.

Two guarantees for a ``ragsync`` process (Linux):

- **SIGINT and SIGTERM stop it promptly and cleanly.** Both raise
  ``KeyboardInterrupt`` in the main thread (SIGTERM's default would kill the
  process without unwinding); the command reports what it did and exits 130 /
  143. Every write is content-keyed and ordered (indexes, then chunk rows, then
  the version flip in one transaction), so a run stopped at any point is
  resumed by the next one; :func:`terminate_descendants` then ends helper
  processes (parse children, Tika, Tesseract) so none outlives the command.
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
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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


def terminate_descendants(grace_s: float = 3.0) -> int:
    """SIGTERM every descendant, then SIGKILL those still alive after
    ``grace_s``. Returns how many there were."""
    pids = descendants()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:  # reap our own children so none stays a zombie
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return len(pids)


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


def exit_after_interrupt(code: int) -> None:
    """End the process after an interrupt was reported: stop every helper
    process, then exit at once even if a runner thread is still inside a
    bundle (a stopped run is resumed by the next one; waiting for threads
    that are not coming back would break the 10 s promise)."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    terminate_descendants()
    os._exit(code)


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
