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
from collections.abc import Iterator

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
