"""Hits that applications can cite, and a source's boilerplate shown once, end to end.

One real backfill (parse, chunk, embed, Milvus Lite, tantivy, SQLite) of a
folder holding eleven memos that share a disclaimer and a three-page PDF
report; queries through ``hybrid_query`` (the CLI's and the API's path, with
the default reranker) and ``GET /v1/documents/{doc_id}/pages/{page}`` over
real HTTP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from beam_pipelines.backfill import run_backfill  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from ragsync.config import Settings, open_catalog  # noqa: E402
from ragsync.query.search import hybrid_query  # noqa: E402
from tests.serving import served  # noqa: E402

DISCLAIMER = (
    "This memo is confidential and intended only for the named recipients; if you received it in "
    "error, delete it and tell the sender, and do not copy, forward or act on its contents."
)
TOPICS = [
    ("parking", "The north parking garage closes for resurfacing from the third to the ninth of May."),
    ("canteen", "The canteen now serves a vegetarian lunch menu every Tuesday and Thursday."),
    ("laptops", "Laptops older than four years are replaced by the service desk on request."),
    ("travel", "Rail is required for every trip under five hours; flights need a director's approval."),
    ("badges", "Visitor badges must be returned to reception before six in the evening."),
    ("printers", "The colour printers on floor two are retired; print jobs go to the copy room."),
    ("holidays", "The office is closed between Christmas and New Year; support runs a rota."),
    ("bikes", "Covered bicycle racks for forty bikes open behind building C in spring."),
    ("plants", "Desk plants are watered by the facilities team on Mondays and Fridays."),
    ("mail", "Internal mail is collected twice a day, at ten in the morning and at three."),
    ("lockers", "Gym lockers are emptied every Friday night; unclaimed items go to lost property."),
]
PAGE2 = "Freight revenue grew to 412 million euros as the Rotterdam terminal doubled its container capacity."


def _pdf(path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    pages = [
        ["Harbor Logistics Group plc", "Annual Report 2022", "A year of steady growth across our ports."],
        ["Operating review", PAGE2, "Road network volumes were flat against the previous year."],
        ["Outlook", "The board expects moderate growth in 2023 from the new cold chain service."],
    ]
    for lines in pages:
        pdf.add_page()
        for i, line in enumerate(lines):
            pdf.set_font("helvetica", size=20 if i == 0 else 12)  # each page under a heading of its own
            pdf.multi_cell(0, 10 if i == 0 else 8, line)
            pdf.ln(4)
    pdf.output(str(path))


@dataclass
class Home:
    folder: Path
    settings: Settings


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("cite")
    folder = root / "src"
    folder.mkdir()
    for i, (topic, text) in enumerate(TOPICS, 1):
        (folder / f"memo-{i:02d}.md").write_text(f"# Memo {i}: {topic}\n\n{text}\n\n{DISCLAIMER}\n")
    _pdf(folder / "harbor-report.pdf")
    settings = Settings(home=str(root / "home"))
    summary = run_backfill(str(folder), settings, show_progress=False)
    assert (summary.documents_indexed, summary.dead_lettered) == (12, 0)
    return Home(folder, settings)


def _name(hit: Any) -> str:
    return hit.uri.rsplit("/", 1)[-1]


def test_the_disclaimer_is_shown_once_and_every_memo_ranks_first(home: Home) -> None:
    hits = hybrid_query(home.settings, DISCLAIMER, groups=["everyone"], k=10)
    shown = [h for h in hits if "confidential" in h.text]
    assert len(shown) == 1
    assert shown[0].boilerplate > 0.5
    # the other memos' hits show their own text only, their whole text kept aside
    assert all("confidential" in h.source_text for h in hits if h.source_text)
    for i, (_, text) in enumerate(TOPICS, 1):
        first = hybrid_query(home.settings, text, groups=["everyone"], k=10)[0]
        assert _name(first) == f"memo-{i:02d}.md", text
        assert "confidential" in first.text  # its own hit shows its whole text


def test_without_boilerplate_the_disclaimer_fills_the_hits(home: Home) -> None:
    """The gap the issue measured: every memo's copy of the disclaimer is shown."""
    off = Settings(home=home.settings.home, boilerplate_min_docs=0)
    hits = hybrid_query(off, DISCLAIMER, groups=["everyone"], k=10)
    assert len([h for h in hits if "confidential" in h.text]) == 10


def test_hits_cite_pages_spans_boxes_and_the_documents_identity(home: Home) -> None:
    from ragsync.model import Element, document_text
    from transforms.io import read_bytes

    hit = hybrid_query(home.settings, "How much did freight revenue grow?", groups=["everyone"], k=3)[0]
    assert _name(hit) == "harbor-report.pdf"
    assert (hit.page, hit.page_end) == (2, 2)
    assert hit.heading_path and hit.boxes and all(b[0] == 2 for b in hit.boxes)
    assert all(0 <= v <= 1 for b in hit.boxes for v in b[1:])
    assert "Harbor Logistics Group plc" in hit.context and "2022" in hit.context
    catalog = open_catalog(home.settings)
    try:
        doc = catalog.documents.get_document(hit.doc_id)
        stored = catalog.parsed.get_parsed(doc.content_hash, doc.parser_version)
    finally:
        catalog.close()
    elements = [Element.from_json(x) for x in read_bytes(stored.elements_uri).decode().splitlines() if x]
    span = document_text(elements)[hit.char_start : hit.char_end]
    assert PAGE2[:40] in span and span.startswith(hit.text[:20])


@pytest.fixture(scope="module")
def api(home: Home) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    app = create_app(home.settings.catalog_url, settings=home.settings, allow_caller_groups=True)
    _, key = app.state.keys.create_tenant("default")
    _, other = app.state.keys.create_tenant("other")
    try:
        with served(app) as port:
            base = f"http://127.0.0.1:{port}"
            with (
                httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=120) as mine,
                httpx.Client(base_url=base, headers={"X-API-Key": other}, timeout=120) as theirs,
            ):
                yield mine, theirs
    finally:
        app.state.catalog.close()


def test_a_cited_page_is_served_to_its_readers_only(home: Home, api: tuple[Any, Any]) -> None:
    mine, theirs = api
    hit = hybrid_query(home.settings, "How much did freight revenue grow?", groups=["everyone"], k=1)[0]
    url = f"/v1/documents/{hit.doc_id}/pages/2"
    r = mine.get(url, params={"groups": "everyone"})
    assert r.status_code == 200, r.text
    page = r.json()
    assert (page["page"], page["pages"]) == (2, 3)
    assert PAGE2 in page["text"]
    assert page["char_start"] <= hit.char_start < hit.char_end <= page["char_end"]
    assert all(e["boxes"] and e["boxes"][0][0] == 2 for e in page["elements"])
    png = mine.get(url, params={"groups": "everyone", "format": "png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert png.headers["content-type"] == "image/png"
    # Not readable, not this tenant's, no such page, no picture for Markdown: nothing shown.
    assert mine.get(url, params={"groups": "contractors"}).status_code == 404
    assert theirs.get(url, params={"groups": "everyone"}).status_code == 404
    assert mine.get(f"/v1/documents/{hit.doc_id}/pages/9", params={"groups": "everyone"}).status_code == 404
    assert (
        mine.get("/v1/documents/..%2F..%2Fetc%2Fpasswd/pages/1", params={"groups": "everyone"}).status_code
        == 404
    )
    assert mine.get(url, params={"groups": "everyone", "user": "bob"}).status_code == 422
    memo = hybrid_query(home.settings, TOPICS[0][1], groups=["everyone"], k=1)[0]
    md = mine.get(f"/v1/documents/{memo.doc_id}/pages/0", params={"groups": "everyone", "format": "png"})
    assert md.status_code == 415
    assert (
        DISCLAIMER
        in mine.get(f"/v1/documents/{memo.doc_id}/pages/0", params={"groups": "everyone"}).json()["text"]
    )
    # The source's bytes changed since they were indexed: the picture would not be what was cited.
    report = home.folder / "harbor-report.pdf"
    original = report.read_bytes()
    try:
        report.write_bytes(original + b"\n% edited\n")
        assert mine.get(url, params={"groups": "everyone", "format": "png"}).status_code == 409
    finally:
        report.write_bytes(original)
    assert hashlib.sha256(report.read_bytes()).hexdigest()


def test_a_memo_added_later_leaves_the_disclaimer_out(home: Home) -> None:
    """Once ``boilerplate_min_docs`` documents of the source hold a paragraph,
    a document chunked later leaves it out (here 11, the memos holding it).
    The share alone never drops text when indexing: the chunks must not
    depend on the order documents are written in."""
    import dataclasses

    (home.folder / "memo-12.md").write_text(
        f"# Memo 12: keys\n\nSpare office keys are kept in the safe at reception.\n\n{DISCLAIMER}\n"
    )
    counted = dataclasses.replace(home.settings, boilerplate_min_docs=11)
    summary = run_backfill(str(home.folder), counted, show_progress=False)
    assert summary.documents_indexed == 1
    catalog = open_catalog(home.settings)
    try:
        doc = next(
            d
            for d in catalog.documents.documents_for_source(_source_of(catalog))
            if d.uri.endswith("memo-12.md")
        )
        texts = [c.text for c in catalog.chunks.chunks_for_doc(doc.doc_id)]
    finally:
        catalog.close()
    assert texts == ["Spare office keys are kept in the safe at reception."]


def _source_of(catalog: Any) -> str:
    from sqlalchemy import select

    from ragsync.catalog import schema

    with catalog.engine.connect() as conn:
        return str(conn.execute(select(schema.sources.c.source_id)).scalar_one())
