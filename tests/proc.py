"""Helpers for tests that run ``ragsync`` as a subprocess and kill processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def live_members(group: int, field: str = "pgid") -> list[int]:
    """Processes whose ``field`` (``pgid`` or ``sid``) is ``group`` and that
    have not exited (zombies excluded: an exited child its parent has not
    waited for yet holds nothing)."""
    out = subprocess.run(["ps", "-e", "-o", f"pid=,{field}=,stat="], capture_output=True, text=True).stdout
    return [
        int(p)
        for p, g, stat in (line.split()[:3] for line in out.splitlines())
        if int(g) == group and "Z" not in stat
    ]


def kill_group(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGKILL a process group and wait until every member has exited (they
    hold file locks, e.g. Milvus Lite's, until they exit). The group leader
    may be the caller's own child, left a zombie until it is waited for."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not live_members(pgid):
            return
        time.sleep(0.1)
    raise AssertionError(f"process group {pgid} did not exit: {live_members(pgid)}")


ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli.main"]
"""The ``ragsync`` command as a subprocess of the test's interpreter."""


def cli(*args: str) -> list[str]:
    """``ragsync ARGS`` as a subprocess command line."""
    return [*CLI, *args]


def sigint_as_at_a_terminal() -> None:
    """In a child before exec: SIGINT's default action, as a shell gives a
    foreground command. A suite started in the background of a script
    (``scripts/test.sh &``) inherits SIGINT ignored, and ragsync, like any
    program, keeps an ignored SIGINT ignored (``nohup`` relies on it): a test
    of a Ctrl-C is about a user's Ctrl-C, not that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_as_at_a_terminal(cmd: list[str], env: dict[str, str], log: Path | None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` from the repository root as a shell starts a foreground
    command a user may Ctrl-C: in a session of its own, SIGINT's default
    action, its output (both streams) to ``log``, or to a pipe
    (``proc.stdout``) when ``log`` is None."""
    with open(log, "wb") if log is not None else open(os.devnull, "wb") as fh:
        return subprocess.Popen(
            cmd,
            env=env,
            cwd=ROOT,
            stdout=fh if log is not None else subprocess.PIPE,
            stderr=fh if log is not None else subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=sigint_as_at_a_terminal,
        )


def run_until_killed(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float = 600) -> int:
    """Run ``cmd`` from the repository root in its own session, its output to
    ``log``, until it exits (a fault hook in it sends the signal); then end
    its whole process group (a crashed machine takes the parse pool and the
    Milvus Lite server with it). Returns the exit code."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=fh, stderr=fh, start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        finally:
            kill_group(proc.pid)


def run_json(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 600) -> Any:
    """Run ``argv`` to the end; it must exit 0 (else the assertion shows the
    end of its stderr). Returns the JSON document of its last stdout line."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_rss_mib(pid: int) -> float:
    """The peak resident set size (``VmHWM``) of process ``pid`` so far in
    MiB; 0.0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_watching_memory(
    argv: list[str], env: dict[str, str], timeout_s: float = 900, interval_s: float = 0.05
) -> tuple[subprocess.CompletedProcess[str], dict[str, float]]:
    """Run ``argv`` from the repository root to its end while reading the
    peak RSS of it and every process it starts (each ``interval_s``; a
    process's peak stays readable while it lives, so only one living less
    than that can be missed).

    Returns:
        The finished process (text output) and ``{"PID command": peak MiB}``
        of every process seen, the command itself under ``"main"``.
    """
    from ragsync.ops.lifecycle import descendants

    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    peaks: dict[int, float] = {}
    names: dict[int, str] = {}
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.communicate(timeout=timeout_s)), daemon=True)
    reader.start()
    try:
        while reader.is_alive():
            for pid in (proc.pid, *descendants(proc.pid)):
                peak = peak_rss_mib(pid)
                if peak > peaks.get(pid, 0.0):
                    peaks[pid] = peak
                    names.setdefault(pid, _cmdline(pid))
            time.sleep(interval_s)
        reader.join()
    finally:
        kill_group(proc.pid)
    done = subprocess.CompletedProcess(argv, proc.returncode, *(out or ["", ""]))
    return done, {("main" if p == proc.pid else f"{p} {names[p]}"): v for p, v in peaks.items()}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:120]
    except OSError:
        return "?"
