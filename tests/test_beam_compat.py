"""Beam compatibility fixes (transforms/beam_compat.py): the parse step's
child process is stopped without Beam's fixed one-second sleep, and no child
is started only to end a bundle that never had an element."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import apache_beam as beam
import pytest
from apache_beam.transforms import core

import transforms.parse  # noqa: F401 - installs the teardown
from transforms import beam_compat


class _Echo(beam.DoFn):
    def process(self, element: int) -> Iterator[int]:
        yield element * 2


def test_the_subprocess_teardown_is_the_prompt_one() -> None:
    assert core._SubprocessDoFn._terminate_pool is beam_compat._terminate_pool


def test_a_subprocess_dofn_stops_its_child_without_sleeping_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = core._SubprocessDoFn(_Echo())
    fn.setup()
    fn.start_bundle()
    assert list(fn.process(21)) == [42]
    children = list(fn._pool._processes.values())
    assert len(children) == 1 and children[0].is_alive()
    fn.finish_bundle()
    slept: list[float] = []
    real_sleep = time.sleep

    def recorded(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    # Beam's own teardown calls time.sleep(1) after killing the child; the
    # prompt one waits for the child instead (no timing assertion: a loaded
    # machine may take longer either way).
    monkeypatch.setattr(core.time, "sleep", recorded)
    fn.teardown()
    assert not children[0].is_alive()
    assert fn._pool is None
    assert [s for s in slept if s >= 1] == []


def test_terminate_pool_leaves_no_child_alive() -> None:
    """kill, wait at most 1 s, then terminate whatever is alive (Beam's order)."""
    fn = core._SubprocessDoFn(_Echo())
    fn.setup()
    assert list(fn.process(1)) == [2]
    [child] = list(fn._pool._processes.values())
    beam_compat._terminate_pool(fn)
    child.join(2)
    assert not child.is_alive() and child.exitcode is not None


def test_a_lane_without_elements_starts_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def counting(*args: object, **kwargs: object) -> concurrent.futures.ProcessPoolExecutor:
        started.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", counting)
    fn = core._SubprocessDoFn(_Echo())
    fn.setup()
    fn.start_bundle()
    fn.finish_bundle()
    fn.teardown()
    assert started == [] and fn._pool is None
    # A lane that did get an element still ends its child's bundle and stops it.
    fn.setup()
    fn.start_bundle()
    assert list(fn.process(2)) == [4]
    [child] = list(fn._pool._processes.values())
    fn.finish_bundle()
    fn.teardown()
    child.join(2)
    assert started == [1] and not child.is_alive()
    # After a crash killed the child (no pool), ending the bundle starts none.
    fn.setup()
    assert list(fn.process(3)) == [6]
    beam_compat._terminate_pool(fn)
    fn.finish_bundle()
    fn.teardown()
    assert started == [1, 1] and fn._pool is None
