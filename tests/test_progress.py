"""Progress lines on stderr: the first item, then at most one line per
interval, and one last line when the phase ends (so a run's output does not
stop wherever the last interval happened to fall)."""

from __future__ import annotations

import pytest

from transforms import common
from transforms.common import Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_at_the_first_item_each_interval_and_once_at_the_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = _Clock()
    monkeypatch.setattr(common.time, "monotonic", clock)
    progress = Progress("write", "docs", total=10, every_s=2.0)
    for step in range(10):
        clock.now = 100.0 + step  # one item per second
        progress.add()
    clock.now = 110.0
    progress.finish()
    progress.finish()  # a second teardown prints nothing more
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[write] 1/10 docs",
        "[write] 3/10 docs 1.5 docs/s ETA 5s",
        "[write] 5/10 docs 1.2 docs/s ETA 4s",
        "[write] 7/10 docs 1.2 docs/s ETA 3s",
        "[write] 9/10 docs 1.1 docs/s ETA 1s",
        "[write] done: 10 docs in 10.0s (1.0 docs/s)",
    ]


def test_nothing_when_disabled_or_nothing_counted(capsys: pytest.CaptureFixture[str]) -> None:
    quiet = Progress("embed", "chunks", enabled=False)
    quiet.add(5)
    quiet.finish()
    Progress("parse", "docs").finish()
    assert capsys.readouterr().err == ""
