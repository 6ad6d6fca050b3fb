"""``ragsync report``: a self-contained HTML page whose plots are drawn,
checked by rendering it in headless Chromium (Debian's ``chromium``).

Without Chromium the rendering test is skipped with the reason, except with
``$CI`` and ``RAGSYNC_WITH_CHROMIUM=1`` (what ``scripts/test.sh`` sets, after
``scripts/setup.sh`` installed it): there it fails.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import insert

from cli.main import main
from ragsync.catalog import Catalog, schema
from ragsync.ops.report import queue_depth_series, write_report
from tests.chromium import CHROMIUM_MISSING, fail_if_chromium_required, find_chromium, run_headless

NOW = 1_796_000_000.0
# matplotlib's colours the plots use: freshness/queue lanes, coverage, dead letters, OCR.
BLUE, RED, GREEN, ORANGE, PURPLE = (
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
)


def _fill(catalog: Catalog) -> None:
    """A day of operations in miniature, written straight to the tables."""
    rows_docs, rows_events, rows_fresh, rows_dead, rows_parsed = [], [], [], [], []
    for i in range(40):
        status, error = (
            ("indexed", None) if i < 36 else ("dead_letter", ["corrupt", "encrypted", "no_text"][i % 3])
        )
        # wiki: 18 of 18 indexed; drive: 18 of 22 (4 dead letters).
        source = "wiki" if i % 2 and i < 36 else "drive"
        rows_docs.append(
            {"doc_id": f"d{i}", "source_id": source, "tenant_id": "acme", "status": status,
             "error_class": error, "content_hash": f"h{i}", "updated_at": NOW}
        )  # fmt: skip
        if error:
            rows_dead.append(
                {"created_at": NOW, "tenant_id": "acme", "source_id": source, "doc_id": f"d{i}",
                 "stage": "parse", "error_class": error}
            )  # fmt: skip
        if i < 12:
            rows_parsed.append(
                {"content_hash": f"h{i}", "parser_version": "p", "elements_uri": "x", "pages": 1,
                 "ocr_confidence": 60.0 + 3 * i}
            )  # fmt: skip
    for i in range(60):
        lane = ["priority", "fast", "slow"][i % 3]
        op = "acl" if lane == "priority" else "upsert"
        at = NOW - 3600 + i * 50
        finished = None if i >= 57 else at + 20 + (i % 7) * 30
        rows_events.append(
            {"tenant_id": "acme", "event_id": f"e{i}", "source_id": "wiki", "doc_id": f"d{i % 40}", "op": op,
             "payload": "{}", "event_time": at, "enqueued_at": at, "available_at": at, "lane": lane,
             "state": "pending" if finished is None else "done", "finished_at": finished}
        )  # fmt: skip
        if finished is not None:
            rows_fresh.append(
                {"tenant_id": "acme", "event_id": f"e{i}", "source_id": "wiki", "op": op, "lane": lane,
                 "event_time": at, "applied_at": finished}
            )  # fmt: skip
    with catalog.engine.begin() as conn:
        for table, rows in (
            (schema.documents, rows_docs),
            (schema.events, rows_events),
            (schema.freshness, rows_fresh),
            (schema.dead_letters, rows_dead),
            (schema.parsed_docs, rows_parsed),
        ):
            conn.execute(insert(table), rows)


def _colour_pixels(img: Image.Image, rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    pixels = np.asarray(img.convert("RGB"), dtype=np.int16)
    return int((np.abs(pixels - np.array(rgb, dtype=np.int16)) <= tolerance).all(axis=2).sum())


def test_queue_depth_series_counts_pending_events_at_each_instant() -> None:
    series = queue_depth_series([("fast", 10.0, 30.0), ("fast", 20.0, None), ("slow", 5.0, 6.0)], now=100.0)
    assert series["fast"] == ([10.0, 20.0, 30.0, 100.0], [1, 2, 1, 1])
    assert series["slow"] == ([5.0, 6.0, 100.0], [1, 0, 0])


def test_report_page_is_self_contained_with_five_drawn_plots(tmp_path: Path) -> None:
    with Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        _fill(catalog)
        path = write_report(catalog, str(tmp_path / "out"), now=NOW)
    page = Path(path).read_text()
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    images = re.findall(
        r'<img alt="([^"]+)" width="(\d+)" height="(\d+)" src="data:image/png;base64,([^"]+)"', page
    )
    assert [alt for alt, *_ in images] == [
        "Freshness over time by lane", "Queue depth", "Coverage by source", "Dead letters by class",
        "OCR confidence distribution",
    ]  # fmt: skip
    expected_colour = [BLUE, RED, GREEN, ORANGE, PURPLE]
    for (alt, width, height, data), colour in zip(images, expected_colour, strict=True):
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert img.size == (int(width), int(height)), alt
        # Drawn: the plot's data colour covers a visible area of the image.
        assert _colour_pixels(img, colour) > 150, alt
    assert "<td>wiki</td><td>100.00%</td><td>ok</td>" in page
    assert "<td>drive</td><td>81.82%</td><td>BELOW</td>" in page


def test_report_command_on_an_empty_home_still_draws_every_plot(tmp_path: Path) -> None:
    """A home with a catalog and nothing in it draws every plot; a folder
    that is no home is refused (exit 2), never made one."""
    from ragsync.config import Settings, open_catalog

    home = str(tmp_path / "home")
    assert main(["report", "--home", home, "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "home" / "catalog.db").exists() and not (tmp_path / "out").exists()
    open_catalog(Settings(home=home)).close()
    assert main(["report", "--home", home, "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and "<script" not in page


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = find_chromium()
    if browser is None:
        fail_if_chromium_required("the rendering test must run")
        pytest.skip(CHROMIUM_MISSING)
    with Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        _fill(catalog)
        path = write_report(catalog, str(tmp_path / "out"), now=NOW)
    shot = tmp_path / "shot.png"
    profile, url = tmp_path / "profile", f"file://{path}"
    window = ["--hide-scrollbars", "--window-size=1700,1200"]
    done = run_headless(browser, profile, [*window, f"--screenshot={shot}"], url)
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1700, 1200)
    # The five plots are laid out two per row: the first four fill the
    # window. Each one's data colour is on screen, in its own region.
    w, h = img.size
    regions = {
        "freshness": ((0, 0, w // 2, h // 2), BLUE),
        "queue": ((w // 2, 0, w, h // 2), RED),
        "coverage": ((0, h // 3, w // 2, h), GREEN),
        "dead letters": ((w // 2, h // 3, w, h), ORANGE),
    }
    for name, (box, colour) in regions.items():
        assert _colour_pixels(img.crop(box), colour) > 150, name
    dom = run_headless(browser, profile, [*window, "--dump-dom"], url)
    assert dom.returncode == 0 and dom.stdout.count("<img") == 5
