"""``ragsync.ops.lifecycle`` on its own: runs waited for off their thread, and
helper processes ended without waiting on those that cannot react."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ragsync.ops import lifecycle
from ragsync.ops.lifecycle import (
    ENDED_ON_SIGTERM,
    KILLED_AFTER_GRACE,
    KILLED_IGNORING_SIGTERM,
    run_watched,
)
from tests.proc import ROOT


def test_run_watched_returns_each_result_and_raises_a_work_error() -> None:
    assert run_watched([lambda: 1, lambda: "two"]) == [1, "two"]
    with pytest.raises(ValueError, match="bad run"):
        run_watched([lambda: 1, lambda: (_ for _ in ()).throw(ValueError("bad run"))])


def test_a_watch_ends_the_wait_while_the_work_goes_on() -> None:
    """A run that never returns (a runner waiting for a dead worker) does not
    hold the caller: the watch's error does, and the run is left running."""
    release = threading.Event()
    seen = []

    def stuck() -> None:
        release.wait()

    def watch() -> None:
        seen.append(1)
        if len(seen) == 3:
            raise RuntimeError("the worker died")

    try:
        with pytest.raises(RuntimeError, match="the worker died"):
            run_watched([stuck], watch=[watch], poll_s=0.01)
        assert lifecycle.runs_left()
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while lifecycle.runs_left() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not lifecycle.runs_left()


def test_the_run_is_not_on_the_waiting_thread() -> None:
    names = run_watched([lambda: threading.current_thread().name])
    assert names == ["ragsync-run-0"]


CHILD = """
import signal, sys, time
mode = sys.argv[1]
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "handle":
    signal.signal(signal.SIGTERM, lambda *a: None)
print("ready", flush=True)
time.sleep(120)
"""

PARENT = """
import json, subprocess, sys
from ragsync.ops.lifecycle import terminate_descendants
children = {}
for mode in ("default", "ignore", "handle"):
    proc = subprocess.Popen([sys.executable, "-c", sys.argv[1], mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    children[mode] = proc.pid
ended = terminate_descendants(grace_s=0.5)
left = terminate_descendants(grace_s=0.5)
print(json.dumps({"ended": {mode: ended.get(pid) for mode, pid in children.items()}, "left": len(left)}))
"""


def test_helpers_that_ignore_sigterm_are_killed_at_once_the_others_get_the_grace() -> None:
    """The multiprocessing resource tracker ignores SIGTERM: waiting for it
    cost every stop its whole grace period (3 s). (In a process of its own:
    this one's descendants include the suite's servers.)"""
    done = subprocess.run(
        [sys.executable, "-c", PARENT, CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "ended": {
            "default": ENDED_ON_SIGTERM,
            "ignore": KILLED_IGNORING_SIGTERM,
            "handle": KILLED_AFTER_GRACE,
        },
        "left": 0,
    }


def test_parse_children_leave_a_group_signal_to_the_run() -> None:
    """A terminal's Ctrl-C and a service manager's SIGTERM reach the whole
    process group: the parse children (and their fork server) ignore both,
    so none dies of it and is recorded as a crash of the document it read;
    the run's main process ends them."""
    import os

    import transforms.parse  # noqa: F401 - sets the fork server and its preload
    from ragsync.ops.lifecycle import BoundedChild

    with BoundedChild(512) as child:
        pid = child.call(os.getpid, timeout_s=120)
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            ignored = int(next(line for line in fh if line.startswith("SigIgn:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGINT - 1)) and ignored & (1 << (signal.SIGTERM - 1))


def test_a_failure_met_while_the_process_stops_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a stop began, a step's failure may be the stop's own doing (a
    parse child it ended): the dead-letter sink records nothing then, and the
    next run does the work again."""
    import apache_beam as beam

    from ragsync.config import Settings, open_catalog
    from ragsync.model import DeadLetter
    from transforms.dead_letters import WriteDeadLetters

    settings = Settings(home=str(tmp_path / "home"))
    crash = DeadLetter(stage="parse", doc_id="d1", uri="/x/a.pdf", error_class="crash", message="child died")

    def write(stopping: bool) -> int:
        monkeypatch.setattr(lifecycle, "_abandoning", stopping)
        with beam.Pipeline(runner="FnApiRunner") as p:
            _ = p | beam.Create([crash]) | WriteDeadLetters(settings)
        catalog = open_catalog(settings)
        try:
            return len(catalog.dead_letters.list_dead_letters(limit=10))
        finally:
            catalog.close()

    assert write(stopping=True) == 0
    assert write(stopping=False) == 1
