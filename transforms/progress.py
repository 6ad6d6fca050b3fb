"""Progress lines of a run on stderr: what a backfill's listing found so far
(:class:`ListingTally`, shared through small files by the steps after it),
the lines themselves (:class:`Progress`) and the catalog step that prints
them (:class:`ProgressDoFn`)."""

from __future__ import annotations

import hashlib
import os
import sys
import time

from ragsync.config import Settings
from ragsync.ops.display import progress_line, safe_text
from transforms.steps import CatalogDoFn


class ListingTally:
    """What a listing found so far, kept as small files in ``directory`` so the
    steps after it (later bundles, other worker processes on this machine)
    learn a backfill's total once every shard is listed.

    Files: ``listed-<shard digest>`` holds one listed shard's count (written
    when the shard's listing completed); ``unread`` gets one line per batch
    of listed objects that ``SkipUnread`` dropped. Progress is advisory: a
    directory that cannot be written or read (a worker on another machine)
    leaves the total unknown, never fails a step, and a retried bundle of
    ``SkipUnread`` may count its objects twice (a lower total; a listed
    shard counts once whatever its retries).

    Args:
        directory: a directory of this run only (made on first write).
        shards: how many shards the listing has.
        started: ``time.monotonic()`` when the listing started (a clock
            every process of this machine shares); default now.
    """

    def __init__(self, directory: str, shards: int, started: float | None = None) -> None:
        if shards <= 0:
            raise ValueError("a listing has at least one shard")
        self.directory = directory
        self.shards = shards
        self.started = time.monotonic() if started is None else started

    def shard_listed(self, shard: str, count: int) -> None:
        """Record that ``shard`` is listed completely with ``count`` objects."""
        name = "listed-" + hashlib.sha256(shard.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        try:
            os.makedirs(self.directory, exist_ok=True)
            tmp = os.path.join(self.directory, f".{name}.{os.getpid()}")
            with open(tmp, "w", encoding="ascii") as f:
                f.write(str(count))
            os.replace(tmp, os.path.join(self.directory, name))  # readers see a whole count
        except OSError:
            pass

    def add_unread(self, n: int) -> None:
        """Record ``n`` listed objects that will not be read (unchanged)."""
        if n <= 0:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(os.path.join(self.directory, "unread"), "a", encoding="ascii") as f:
                f.write(f"{n}\n")  # one short append: whole lines even from several processes
        except OSError:
            pass

    def listed(self) -> int | None:
        """Objects listed, once every shard is listed; None before (or when
        the directory cannot be read)."""
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith("listed-")]
            if len(names) < self.shards:
                return None
            found = 0
            for name in names:
                with open(os.path.join(self.directory, name), encoding="ascii") as f:
                    found += int(f.read() or 0)
        except (OSError, ValueError):
            return None
        return found

    def total(self) -> int | None:
        """Objects listed minus those not read, once every shard is listed;
        None before (or when the directory cannot be read)."""
        found = self.listed()
        if found is None:
            return None
        try:
            with open(os.path.join(self.directory, "unread"), encoding="ascii") as f:
                unread = sum(int(line) for line in f if line.strip())
        except FileNotFoundError:
            unread = 0
        except (OSError, ValueError):
            return None
        return max(found - unread, 0)


class Progress:
    """Prints a progress line to stderr (``ragsync.ops.display.progress_line``):
    the first item, then at most one line every ``every_s`` seconds, and one
    last line when the phase ends.

    Args:
        phase: shown at the start of each line.
        total: expected number of items, for percent and ETA: a number (0
            when unknown), or the ``ListingTally`` of a backfill's listing
            (unknown, so count and rate only, until the listing completes).
        enabled: print nothing when False.
    """

    def __init__(
        self,
        phase: str,
        unit: str,
        total: int | ListingTally = 0,
        *,
        enabled: bool = True,
        every_s: float = 2.0,
    ):
        self.phase = phase
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.every_s = every_s
        self.done = 0
        # The clock starts at the first item, not at setup: loading a model
        # or opening stores before it is not the phase's rate.
        self._start: float | None = None
        self._last = 0.0
        self._finished = False

    def add(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if not self.enabled or now - self._last < self.every_s:
            return
        self._last = now
        total = self.total.total() if isinstance(self.total, ListingTally) else self.total
        line = progress_line(self.phase, self.unit, self.done, now - self._start, total)
        print(safe_text(line), file=sys.stderr, flush=True)

    def finish(self) -> None:
        """Print the phase's last line (count, time, rate), once, when it
        counted anything: the periodic lines alone end wherever the last
        interval fell, not at the phase's real end."""
        if not self.enabled or self.done <= 0 or self._finished or self._start is None:
            return
        self._finished = True
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = self.done / elapsed
        line = f"[{self.phase}] done: {self.done} {self.unit} in {elapsed:.1f}s ({rate:.1f} {self.unit}/s)"
        print(safe_text(line), file=sys.stderr, flush=True)


class ProgressDoFn(CatalogDoFn):
    """A catalog step that prints progress lines: ``self._progress`` (made in
    ``setup()``) counts ``progress_unit`` of phase ``progress_phase``.

    Args:
        settings: where the catalog is.
        total: expected items, for percent and ETA (0 when unknown; a
            ``ListingTally`` while a backfill lists).
        show_progress: print the lines (to stderr).
    """

    progress_phase: str
    progress_unit: str

    def __init__(
        self, settings: Settings, *, total: int | ListingTally = 0, show_progress: bool = False
    ) -> None:
        super().__init__(settings)
        self.total = total
        self.show_progress = show_progress

    def setup(self) -> None:
        super().setup()
        phase, unit = self.progress_phase, self.progress_unit
        self._progress = Progress(phase, unit, self.total, enabled=self.show_progress)

    def teardown(self) -> None:
        self._progress.finish()
        super().teardown()
