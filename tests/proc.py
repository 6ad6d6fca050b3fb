"""Helpers for tests that run ``ragsync`` as a subprocess and kill processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
