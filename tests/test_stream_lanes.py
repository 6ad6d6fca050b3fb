"""Lanes end to end: with a scanned page waiting for OCR, a permission change
and a small edit are applied by the priority/fast workers without waiting for
the slow lane, which a separate worker drains afterwards (real model, Milvus
Lite, tantivy, Tesseract)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from beam_pipelines.streaming import run_stream
from connectors.sources import register_source
from ragsync.config import Settings, open_catalog
from ragsync.embedding.models import default_model
from ragsync.index.versions import prepare_stores
from ragsync.query.search import hybrid_query
from tests.queue_events import change_event, push_events

pytestmark = pytest.mark.slow
TENANT, SOURCE = "acme", "share"


def _scan(path: Path, text: str) -> None:
    """A page image of ``text`` (what a scanner gives), 200 dpi-ish."""
    img = Image.new("L", (1700, 600), 255)
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.truetype("DejaVuSans.ttf", 48)
    except OSError:
        font = ImageFont.load_default(size=48)
    for i, line in enumerate(text.split("\n")):
        draw.text((80, 80 + 90 * i), line, fill=0, font=font)
    img.save(path)


def _event(doc: str, op: str, version: int, groups: list[str], uri: str = "") -> dict[str, object]:
    return change_event(SOURCE, doc, op, version, groups, uri, tenant_id=TENANT)


_push = push_events


def _docs(settings: Settings, text: str, group: str) -> set[str]:
    return {Path(h.uri).name for h in hybrid_query(settings, text, groups=[group], tenant_id=TENANT, k=10)}


def test_permission_change_and_edit_do_not_wait_for_the_slow_lane(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    settings = Settings(home=str(tmp_path / "home"), event_lease_s=30.0)
    prepare_stores(settings, default_model())
    register_source(settings, SOURCE, TENANT, "object_store", str(src))
    (src / "policy.md").write_text("# Policy\n\nVisitors sign in at the front desk before nine.\n")
    _push(settings, [_event("policy.md", "upsert", 1, ["staff"], str(src / "policy.md"))])
    assert (
        run_stream(settings, until_idle=True, show_progress=False, lanes="priority,fast").documents_indexed
        == 1
    )

    # A scanned page arrives first, then an edit and a permission change.
    _scan(src / "scan.png", "Fire drill every second Tuesday\nAssemble in the north car park")
    (src / "policy.md").write_text("# Policy\n\nVisitors sign in at the reception desk before ten.\n")
    _push(settings, [_event("scan.png", "upsert", 1, ["staff"], str(src / "scan.png"))])
    _push(
        settings,
        [
            _event("policy.md", "upsert", 2, ["staff"], str(src / "policy.md")),
            _event("policy.md", "acl", 3, ["contractors"]),
        ],
    )
    fast = run_stream(settings, until_idle=True, show_progress=False, lanes="priority,fast")
    # The priority/fast workers applied both and handed the scan over.
    assert (fast.documents_indexed, fast.documents_acl_updated) == (1, 1)
    assert _docs(settings, "visitors reception desk", "contractors") == {"policy.md"}
    assert _docs(settings, "visitors reception desk", "staff") == set()  # narrowed, fail closed
    cat = open_catalog(settings)
    try:
        assert cat.queue_views.queue_stats()["by_lane"] == {"slow": 1}
    finally:
        cat.close()
    assert _docs(settings, "fire drill north car park", "staff") == set()

    slow = run_stream(settings, until_idle=True, show_progress=False, lanes="slow")
    assert slow.documents_indexed == 1
    assert "scan.png" in _docs(settings, "fire drill north car park", "staff")
    cat = open_catalog(settings)
    try:
        assert cat.queue_views.queue_stats()["depth"] == 0
    finally:
        cat.close()


def test_a_drained_queue_ends_the_stream_before_any_store_or_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stream --until-idle`` with nothing pending for the lanes it serves
    (a cron job's usual call) returns an all-zero summary without opening the
    stores or building a pipeline; with an event pending it builds them."""
    import beam_pipelines.streaming as streaming

    src = tmp_path / "src"
    src.mkdir()
    settings = Settings(home=str(tmp_path / "home"))
    open_catalog(settings).close()
    register_source(settings, SOURCE, TENANT, "object_store", str(src))
    built: list[object] = []

    def refuse(*_args: object, **kwargs: object) -> None:
        built.append(kwargs["lanes"])
        raise RuntimeError("a pipeline was built")

    monkeypatch.setattr(streaming, "_lane_pipeline", refuse)
    summary = run_stream(settings, until_idle=True, show_progress=False)
    assert (summary.events_applied, summary.documents_indexed, summary.dead_lettered) == (0, 0, 0)
    assert built == [] and sorted(p.name for p in (tmp_path / "home").iterdir()) == ["catalog.db"]
    (src / "policy.md").write_text("# Policy\n\nVisitors sign in at the front desk.\n")
    _push(settings, [_event("policy.md", "upsert", 1, ["staff"], str(src / "policy.md"))])
    # The slow lane's workers have nothing to do ...
    assert run_stream(settings, until_idle=True, show_progress=False, lanes="slow").events_applied == 0
    assert built == []
    # ... the priority/fast workers build their pipeline.
    with pytest.raises(RuntimeError, match="a pipeline was built"):
        run_stream(settings, until_idle=True, show_progress=False, lanes="priority,fast")
    assert built == [("priority", "fast")]
