"""Parse children: started from a fork server, bounded in time, and a hang
becomes a dead letter while the rest of the run goes on."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import transforms.parse  # noqa: F401  (importing it chooses the start method)
from tests import lock_holder

REPO = Path(__file__).resolve().parents[1]


def _child_takes_the_lock_within(seconds: float, context: multiprocessing.context.BaseContext | None) -> bool:
    """Start a pool child (as Beam's isolated step does) while another thread
    of this process holds ``lock_holder.LOCK``; say whether the child could
    take that lock itself within ``seconds``."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock_holder.LOCK:
            taken.set()
            release.wait()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    taken.wait()
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=context)
    try:
        return bool(pool.submit(lock_holder.take, seconds).result(timeout=60))
    finally:
        release.set()
        holder.join()
        pool.shutdown(wait=True)


def test_parse_children_start_from_a_fork_server() -> None:
    assert multiprocessing.get_start_method() == "forkserver"
    # Beam's ProcessPoolExecutor(1) takes the default context: a child from the
    # fork server does not inherit the lock another thread holds here ...
    assert _child_takes_the_lock_within(5.0, None) is True
    # ... a plain fork does (the lock stays held in the child for ever): the
    # way a pipeline process's parse child could block before any timeout.
    assert _child_takes_the_lock_within(0.5, multiprocessing.get_context("fork")) is False


def test_a_parse_past_its_time_limit_is_a_timeout_dead_letter_the_rest_indexed(tmp_path: Path) -> None:
    """A parse that does not end is stopped by the time limit: a ``timeout``
    dead letter, and the other documents of the run are indexed. The hang is
    made by a test plug-in (``tests/hang_parse.py``: ``hang.md`` sleeps an
    hour in its parse child), so the limit can be 30 s: a 1 s limit against
    a long PDF (~6.5 s of parsing) depended on the machine's speed and load
    (a loaded machine timed the small files out too)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "travel.md").write_text("# Travel\n\nHotel nights in London are capped at 200 pounds.\n")
    (src / "leave.md").write_text("# Leave\n\nEveryone gets 25 days of paid leave a year.\n")
    (src / "hang.md").write_text("# Hang\n\nThis document never finishes parsing.\n")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "RAGSYNC_PLUGINS": "tests.hang_parse",
        "RAGSYNC_PARSE_TIMEOUT_S": "30",
        "RAGSYNC_SLOW_PARSE_TIMEOUT_S": "30",
    }
    home = tmp_path / "home"
    ragsync = [sys.executable, "-m", "cli.main"]
    run = subprocess.run(
        [*ragsync, "backfill", str(src), "--home", str(home), "--acl-groups", "everyone", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=900,  # only a limit that does not act runs into this (the hang is an hour)
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["documents_indexed"], summary["dead_lettered"]) == (2, 1)
    dead = json.loads(
        subprocess.run(
            [*ragsync, "dead-letters", "list", "--home", str(home), "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            check=True,
        ).stdout
    )
    assert [(d["uri"].rsplit("/", 1)[-1], d["stage"], d["error_class"]) for d in dead] == [
        ("hang.md", "parse", "timeout")
    ]


def test_a_bounded_child_ends_a_call_past_its_time_or_memory_limit() -> None:
    """``ragsync parse``'s child (``ragsync.ops.lifecycle.BoundedChild``): the
    parse child's limits, and each way past them is a ragsync error with its
    dead-letter class, never a traceback."""
    import pytest

    from ragsync.errors import ParserCrashError, ParseTimeoutError
    from ragsync.ops.lifecycle import BoundedChild

    with BoundedChild(2048) as child:
        assert child.call(pow, 2, 10, timeout_s=60) == 1024
        with pytest.raises(ParseTimeoutError) as late:
            child.call(time.sleep, 60, timeout_s=1)
    assert late.value.error_class == "timeout"
    for explode in ((bytearray, 3 << 30), (os.abort,)):  # a refused allocation; a native crash
        with BoundedChild(2048) as child, pytest.raises(ParserCrashError) as died:
            child.call(*explode, timeout_s=60)
        assert died.value.error_class == "crash", explode
