"""Progress lines on stderr: the first item, then at most one line per
interval, and one last line when the phase ends (so a run's output does not
stop wherever the last interval happened to fall). A backfill's total is
unknown until its listing completes: count and rate first, then total,
percent and ETA."""

from __future__ import annotations

from pathlib import Path

import pytest

import transforms.progress
from ragsync.config import Settings
from ragsync.ops.display import listing_line, progress_line
from ragsync.source_types import SourceSpec
from transforms import listing
from transforms.listing import _ListShardFn, listing_shards
from transforms.progress import ListingTally, Progress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Ticking(_Clock):
    """A clock that moves one second each time it is read."""

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _folder_source(tmp_path: Path, files: int) -> tuple[Settings, SourceSpec]:
    """A folder of ``files`` small text files and its source ``kb`` of tenant ``acme``."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(files):
        (folder / f"{i}.txt").write_text(f"text {i}")
    settings = Settings(home=str(tmp_path / "home"))
    return settings, SourceSpec("kb", "acme", "object_store", str(folder), options={"acl_groups": ["staff"]})


def test_lines_at_the_first_item_each_interval_and_once_at_the_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = _Clock()
    monkeypatch.setattr(transforms.progress.time, "monotonic", clock)
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
        "[write] 3/10 docs 30% 1.5 docs/s ETA 5s",
        "[write] 5/10 docs 50% 1.2 docs/s ETA 4s",
        "[write] 7/10 docs 70% 1.2 docs/s ETA 3s",
        "[write] 9/10 docs 90% 1.1 docs/s ETA 1s",
        "[write] done: 10 docs in 10.0s (1.0 docs/s)",
    ]


def test_nothing_when_disabled_or_nothing_counted(capsys: pytest.CaptureFixture[str]) -> None:
    quiet = Progress("embed", "chunks", enabled=False)
    quiet.add(5)
    quiet.finish()
    Progress("parse", "docs").finish()
    assert capsys.readouterr().err == ""


def test_progress_line_count_rate_then_total_percent_eta() -> None:
    assert progress_line("write", "docs", 3, 0.5, None) == "[write] 3 docs"
    assert progress_line("write", "docs", 3, 0.5, 10) == "[write] 3/10 docs"
    assert progress_line("write", "docs", 6, 4.0, None) == "[write] 6 docs 1.5 docs/s"
    assert progress_line("write", "docs", 6, 4.0, 0) == "[write] 6 docs 1.5 docs/s"
    assert progress_line("write", "docs", 6, 4.0, 40) == "[write] 6/40 docs 15% 1.5 docs/s ETA 23s"
    # More done than expected (a total that shrank as unchanged objects left it): capped at 100%.
    assert progress_line("write", "docs", 12, 4.0, 10) == "[write] 12/10 docs 100% 3.0 docs/s ETA 0s"
    assert listing_line(40, 2.0, complete=False) == "[list] 40 listed so far 20.0/s"
    assert listing_line(55, 2.5, complete=True) == "[list] listing complete: 55 objects in 2.5s (22.0/s)"


def test_tally_total_once_every_shard_is_listed_minus_the_unread(tmp_path: Path) -> None:
    tally = ListingTally(str(tmp_path / "tally"), shards=2)
    assert tally.total() is None  # nothing listed yet (the directory does not exist)
    tally.shard_listed("Main", 30)
    tally.add_unread(4)
    assert tally.total() is None  # one shard of two
    tally.shard_listed("Help", 12)
    tally.add_unread(6)
    tally.add_unread(0)
    assert tally.total() == 32
    tally.shard_listed("Help", 12)  # a retried shard's bundle counts once
    assert tally.total() == 32
    with pytest.raises(ValueError):
        ListingTally(str(tmp_path), shards=0)


def test_phase_lines_switch_to_total_when_the_listing_completes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clock = _Clock()
    monkeypatch.setattr(transforms.progress.time, "monotonic", clock)
    tally = ListingTally(str(tmp_path / "tally"), shards=1)
    progress = Progress("write", "docs", tally, every_s=2.0)
    for step in range(8):
        clock.now = 100.0 + step
        if step == 4:
            tally.shard_listed("", 20)  # the listing finished while the first documents were written
            tally.add_unread(4)
        progress.add()
    clock.now = 108.0
    progress.finish()
    assert capsys.readouterr().err.splitlines() == [
        "[write] 1 docs",
        "[write] 3 docs 1.5 docs/s",
        "[write] 5/16 docs 31% 1.2 docs/s ETA 9s",
        "[write] 7/16 docs 43% 1.2 docs/s ETA 8s",
        "[write] done: 8 docs in 8.0s (1.0 docs/s)",
    ]


def test_listing_shows_the_count_so_far_then_its_total(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings, spec = _folder_source(tmp_path, 7)
    shards = listing_shards(spec, settings)
    assert len(shards) == 1

    monkeypatch.setattr(listing.time, "monotonic", _Ticking())
    tally = ListingTally(str(tmp_path / "tally"), shards=1)
    quiet = _ListShardFn(spec, settings, timeout_s=3600.0, show_progress=False)  # --quiet
    quiet.setup()
    try:
        assert len(list(quiet.process(shards[0]))) == 7
    finally:
        quiet.teardown()
    assert capsys.readouterr().err == ""
    fn = _ListShardFn(spec, settings, timeout_s=3600.0, show_progress=True, tally=tally)
    fn.setup()
    try:
        listed = list(fn.process(shards[0]))
    finally:
        fn.teardown()
    assert len(listed) == 7
    assert tally.total() == 7
    # Clock readings (after the quiet run's): the start, item n one second per
    # item after it (a line every 2 s), the end 8 s after the start.
    assert capsys.readouterr().err.splitlines() == [
        "[list] 2 listed so far 1.0/s",
        "[list] 4 listed so far 1.0/s",
        "[list] 6 listed so far 1.0/s",
        "[list] listing complete: 7 objects in 8.0s (0.9/s)",
    ]


def test_the_rate_counts_from_the_first_item_not_from_setup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = _Clock()
    monkeypatch.setattr(transforms.progress.time, "monotonic", clock)
    progress = Progress("write", "docs", every_s=2.0)  # made at setup, 100 s
    for now in (130.0, 131.0, 132.0):  # 30 s of model loading before the first document
        clock.now = now
        progress.add()
    clock.now = 134.0
    progress.finish()
    assert capsys.readouterr().err.splitlines() == [
        "[write] 1 docs",
        "[write] 3 docs 1.5 docs/s",
        "[write] done: 3 docs in 4.0s (0.8 docs/s)",
    ]


def test_a_listing_of_several_shards_names_each_and_totals_when_the_last_is_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings, spec = _folder_source(tmp_path, 7)

    tally = ListingTally(str(tmp_path / "tally"), shards=2, started=90.0)
    tally.shard_listed("other", 5)  # another worker listed the other shard
    monkeypatch.setattr(listing.time, "monotonic", _Ticking())
    fn = _ListShardFn(spec, settings, timeout_s=3600.0, show_progress=True, tally=tally, shards=2)
    fn.setup()
    try:
        assert len(list(fn.process(""))) == 7
    finally:
        fn.teardown()
    assert (tally.listed(), tally.total()) == (12, 12)
    assert capsys.readouterr().err.splitlines() == [
        "[list] 2 listed so far 1.0/s (shard -)",
        "[list] 4 listed so far 1.0/s (shard -)",
        "[list] 6 listed so far 1.0/s (shard -)",
        "[list] shard - listed: 7 objects in 8.0s (0.9/s)",
        "[list] listing complete: 12 objects in 19.0s (0.6/s)",  # since the listing started (90)
    ]
    assert (
        listing_line(12, 2.0, complete=True, shard="kb/a")
        == "[list] shard kb/a listed: 12 objects in 2.0s (6.0/s)"
    )


def test_an_empty_shard_prints_no_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An ``s3://`` listing has 63 shards (one per leading key character) and
    most are empty: each printed ``shard ... listed: 0 objects``. An empty
    shard now says nothing; the listing's total still comes when the last
    shard is listed."""
    settings, spec = _folder_source(tmp_path, 0)
    monkeypatch.setattr(listing.time, "monotonic", _Ticking())
    tally = ListingTally(str(tmp_path / "tally"), shards=3, started=90.0)
    tally.shard_listed("a", 5)  # other workers listed the other shards
    fn = _ListShardFn(spec, settings, timeout_s=3600.0, show_progress=True, tally=tally, shards=3)
    fn.setup()
    try:
        assert list(fn.process("")) == []
        assert capsys.readouterr().err == ""  # not the last shard: nothing to say
        tally.shard_listed("b", 0)
        assert list(fn.process("")) == []  # now the last one
    finally:
        fn.teardown()
    assert capsys.readouterr().err.splitlines() == ["[list] listing complete: 5 objects in 14.0s (0.4/s)"]
