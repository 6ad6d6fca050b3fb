"""Headless Chromium for what renders HTML in a real browser: the report
test (``tests/test_report.py``) and the per-format benchmark's PDF printing
(``benchmarks/eval_formats.py``, tested by ``tests/test_eval_formats.py``).
The product itself never starts a browser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM_MISSING = (
    "Chromium not installed: apt-get install chromium (RAGSYNC_WITH_CHROMIUM=1 scripts/setup.sh)"
)


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome binary on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def fail_if_chromium_required(what: str) -> None:
    """Fail the test when Chromium is missing where it must be present (CI
    with ``RAGSYNC_WITH_CHROMIUM=1``); else return, and the caller skips or
    narrows what it checks."""
    if os.environ.get("CI") and os.environ.get("RAGSYNC_WITH_CHROMIUM") == "1":
        import pytest  # here: the benchmark that prints PDFs imports this module without pytest

        pytest.fail(f"{CHROMIUM_MISSING} (CI with RAGSYNC_WITH_CHROMIUM=1: {what})")


def run_headless(
    browser: str, profile: Path, args: list[str], url: str, *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``browser`` headless on ``url`` with ``args`` (``--screenshot=``,
    ``--print-to-pdf=``, ``--dump-dom``...), offline (every network request
    goes to a closed port) and with ``profile`` as its own profile folder
    (Chromium locks a profile). Returns the finished process (text output).

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds.
    """
    flags = ["--headless", "--no-sandbox", "--disable-gpu"]
    flags += ["--proxy-server=127.0.0.1:9", f"--user-data-dir={profile}"]
    return subprocess.run([browser, *flags, *args, url], capture_output=True, text=True, timeout=timeout)
