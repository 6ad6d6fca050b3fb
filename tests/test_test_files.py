"""``scripts/test_files.sh`` (what ``scripts/test.sh`` and CI run): a line per
file with where the run is, running totals, a grand total, the exit code."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_file_shows_progress_and_the_run_ends_with_the_grand_total(tmp_path: Path, jobs: str) -> None:
    """One file at a time, or two at once (each file's line when it ends)."""
    good = tmp_path / "test_good.py"
    good.write_text(
        "import pytest\n\ndef test_a():\n    pass\n\n@pytest.mark.skip\ndef test_b():\n    pass\n"
    )
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_c():\n    assert 1 == 2\n\ndef test_d():\n    pass\n")
    env = dict(os.environ, RAGSYNC_TEST_FILES=f"{good} {bad}", RAGSYNC_TEST_JOBS=jobs)
    script = str(ROOT / "scripts" / "test_files.sh")
    done = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    heads = [line for line in lines if line.startswith("== [")]
    named = [re.sub(r"\(elapsed \d+m\d+s\)", "(elapsed T)", h) for h in heads]
    so_far = [line.strip() for line in lines if line.startswith("   so far:")]
    if jobs == "1":  # in order
        assert named == [f"== [1/2] {good} (elapsed T)", f"== [2/2] {bad} (elapsed T)"]
        assert so_far == [
            "so far: 1 passed, 0 failed, 1 skipped; 0 of 1 files failed",
            "so far: 2 passed, 1 failed, 1 skipped; 1 of 2 files failed",
        ]
    else:  # in the order they end, which load decides
        first, second = (good, bad) if named[0].endswith(f"{good} (elapsed T)") else (bad, good)
        assert named == [f"== [1/2] {first} (elapsed T)", f"== [2/2] {second} (elapsed T)"]
        assert so_far[-1] == "so far: 2 passed, 1 failed, 1 skipped; 1 of 2 files failed"
    (total,) = [line for line in lines if line.startswith("TOTAL:")]
    assert re.fullmatch(r"TOTAL: 2 files in \d+m\d+s: 2 passed, 1 failed, 1 skipped", total)
    (slowest,) = [line for line in lines if line.startswith("slowest files:")]
    ranked = re.fullmatch(r"slowest files: (\d+)s (\S+), (\d+)s (\S+)", slowest)
    assert ranked is not None, slowest
    assert {ranked[2], ranked[4]} == {str(good), str(bad)} and int(ranked[1]) >= int(ranked[3])
    assert f"FAILED test files: {bad}" in done.stderr
