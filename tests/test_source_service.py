"""The source service: a backfill resolves, checks and opens its source once
on the launcher and hands what it opened on (``connectors.sources``).

A real backfill of a folder (FnApiRunner in this process, so the workers'
calls are counted too) with the location check, the connector factory and the
store preparation counted where every caller reaches them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import beam_pipelines.sync
import connectors.sources
import transforms.fetch
from beam_pipelines.backfill import run_backfill
from ragsync.config import Settings

DOCS = {
    "a.md": "# Leave\n\nStaff take leave in blocks of at least two days.\n",
    "b.md": "# Bikes\n\nBicycles are kept in the locked shed behind building C.\n",
    "c.md": "# VPN\n\nConnect to the VPN before opening the intranet from home.\n",
}


def _counting(counts: Counter[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return real(*args, **kwargs)

    return counted


def test_a_backfill_checks_and_opens_its_source_once_on_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "docs"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text)
    counts: Counter[str] = Counter()
    seen = {
        (connectors.sources, "register_location"): "register_location",
        (connectors.sources, "source_location"): "check_location",
        (transforms.fetch, "source_location"): "worker_check_location",
        (connectors.sources, "open_connector"): "open_connector",
        (beam_pipelines.sync, "prepare_stores"): "prepare_stores",
    }
    for (module, attr), name in seen.items():
        monkeypatch.setattr(module, attr, _counting(counts, name, getattr(module, attr)))
    summary = run_backfill(str(src), Settings(home=str(tmp_path / "home")), show_progress=False)
    assert summary.documents_indexed == 3
    # The launcher: the location checked once (registration), the registered
    # source handed to the sync (not checked again), its connector opened
    # once, the stores prepared once. The workers (here in this process) open
    # their own connector for the listing and for the fetch, and the fetch
    # checks the location it reads under.
    assert counts == Counter(
        register_location=1,
        check_location=0,
        worker_check_location=1,
        open_connector=3,
        prepare_stores=1,
    )
