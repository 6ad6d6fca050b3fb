"""Web pages: detection by markup (pages that open with scripts, comments, BOMs),
main content (article kept with its structure, boilerplate removed), and the
fallback that keeps non-article pages whole. Generated pages plus named files
of the shared corpus."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from ragsync.ingest.detect import detect_mime
from ragsync.model import ElementType
from ragsync.parsing import ParseResult, parse
from ragsync.parsing._common import RawElement
from ragsync.parsing.html import choose_reading, restore_headings
from tests.corpus import corpus_dir

CORPUS = corpus_dir()
corpus_required = pytest.mark.skipif(
    not (CORPUS / "documents").is_dir(), reason="shared corpus absent (../shared/corpus or $RAGSYNC_CORPUS)"
)

_TOKEN = re.compile(r"[^\W_]+")

ARTICLE = [
    "Harbour bridge reopens after two years of repairs",
    "The city's harbour bridge reopened to traffic on Monday after a two-year renovation that replaced "
    "every one of its four hundred steel cables and resurfaced the deck.",
    "Engineers found corrosion in the anchorages during a routine inspection, which forced the closure "
    "and a redesign of the drainage along both approaches.",
    "What changed",
    "New cables with a galvanised core and a polymer sheath.",
    "A drainage channel that keeps salt water away from the anchorages.",
    "Wider footpaths on both sides of the deck for pedestrians and cyclists.",
    "The council expects the repairs to extend the bridge's life by at least forty years, and says tolls "
    "will stay at their current level until the end of next year.",
    "| Span | Length (m) |",
    "| Main | 503 |",
]
BOILERPLATE = [
    "Subscribe to our newsletter for the latest headlines",
    "We use cookies to improve your experience. Accept all cookies",
    "Related stories: Ferry timetable changes this summer",
    "Most read: Ten things to do this weekend in the old town",
    "Comments (3): Great news, finally! Posted by commuter42",
    "Copyright 2024 Harbour Daily News. All rights reserved. Privacy policy",
]


def _article_page(prefix: str = "") -> bytes:
    script = "<script>" + "var tracking = {id: 1, tags: ['a', 'b']};\n" * 400 + "</script>"
    nav = "".join(f"<li><a href='/s{i}'>Section {i}</a></li>" for i in range(12))
    related = "".join(f"<li><a href='/r{i}'>{BOILERPLATE[2]} {i}</a></li>" for i in range(6))
    return (
        f"{prefix}{script}<html><head><title>Harbour bridge reopens | Harbour Daily</title>{script}</head>"
        "<body>"
        f"<div class='cookie-banner'><p>{BOILERPLATE[1]}</p><button>OK</button></div>"
        f"<div class='menu'><ul>{nav}</ul></div><div class='promo'><p>{BOILERPLATE[0]}</p></div>"
        f"<div class='story'><h1>{ARTICLE[0]}</h1><p>{ARTICLE[1]}</p><p>{ARTICLE[2]}</p>"
        f"<h2>{ARTICLE[3]}</h2><ul><li>{ARTICLE[4]}</li><li>{ARTICLE[5]}</li><li>{ARTICLE[6]}</li></ul>"
        f"<p>{ARTICLE[7]}</p><table><tr><th>Span</th><th>Length (m)</th></tr>"
        "<tr><td>Main</td><td>503</td></tr>"
        f"</table></div><div class='related'><h3>Related</h3><ul>{related}</ul></div>"
        f"<div class='mostread'><p><a href='/m'>{BOILERPLATE[3]}</a></p></div>"
        f"<div id='comments' class='comments'><p>{BOILERPLATE[4]}</p></div>"
        f"<div class='site-footer'><p>{BOILERPLATE[5]}</p></div></body></html>"
    ).encode()


def _tokens(text: str) -> Counter[str]:
    return Counter(_TOKEN.findall(text.lower()))


def _recall_precision(result: ParseResult, truth: str) -> tuple[float, float]:
    got, want = _tokens(" ".join(e.text for e in result.elements)), _tokens(truth)
    shared = sum((got & want).values())
    return shared / sum(want.values()), shared / max(1, sum(got.values()))


# --------------------------------------------------------------------------- detection


def test_page_opening_with_scripts_is_html_whatever_libmagic_says() -> None:
    import magic

    page = _article_page()
    assert magic.from_buffer(page, mime=True) != "text/html"  # libmagic's guess is not ours
    assert detect_mime(page, "") == "text/html"
    assert detect_mime(page, "article.txt") == "text/html"


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "\ufeff",
        "\n\n   \t",
        "<!-- served by cache 12 -->\n<!-- another comment -->",
        '<?xml version="1.0" encoding="utf-8"?>\n',
        "<!DOCTYPE html>\n",
        "<meta charset='utf-8'><link rel='stylesheet' href='a.css'><style>p {color: red}</style>",
    ],
)
def test_markup_detected_past_leading_junk(prefix: str) -> None:
    assert detect_mime(_article_page(prefix)) == "text/html"


def test_html_in_utf16_and_fragments() -> None:
    page = "<html><body><p>Grüße aus Köln</p></body></html>"
    assert detect_mime(page.encode("utf-16")) == "text/html"  # with BOM
    assert detect_mime(page.encode("utf-16-le") * 3) == "text/html"  # without BOM
    assert detect_mime(b"<h3 class='t'>Jahresabschluss 2020</h3>") == "text/html"
    assert detect_mime(b"<div>\n<p>Test page</p>\n<img src='x.png'>\n</div>\n") == "text/html"
    assert detect_mime(b"# Title\n\n<table><tr><td>a</td></tr></table>\n", "mixed.md") == "text/markdown"
    assert detect_mime(b"<factbook><country>Chad</country></factbook>") == "text/plain"


# --------------------------------------------------------------------------- main content


def test_article_main_content_and_structure() -> None:
    result = parse(_article_page(), "text/html")
    recall, precision = _recall_precision(result, " ".join(ARTICLE))
    assert recall >= 0.95 and precision >= 0.9, (recall, precision, [e.text for e in result.elements])
    text = " ".join(e.text for e in result.elements)
    for line in BOILERPLATE:
        assert line.split(":")[0] not in text
    assert "Section 3" not in text and "tracking" not in text
    kinds = [(e.type, e.level, e.text) for e in result.elements]
    assert (ElementType.HEADING, 1, ARTICLE[0]) in kinds  # trafilatura moved the title out: restored
    assert (ElementType.HEADING, 2, ARTICLE[3]) in kinds
    assert [e.text for e in result.elements if e.type is ElementType.LIST_ITEM] == ARTICLE[4:7]
    tables = [e.text for e in result.elements if e.type is ElementType.TABLE]
    assert tables == ["| Span | Length (m) |\n| --- | --- |\n| Main | 503 |"]
    assert result.metadata["reading"] == "main"


def test_small_notice_among_navigation_keeps_the_page() -> None:
    nav = "".join(f"<p><a href='/{i}'>Team page number {i} of the intranet</a></p>" for i in range(40))
    page = f"<html><body><div>{nav}</div><div><p>Office closed Friday.</p></div></body></html>".encode()
    result = parse(page, "text/html")
    assert result.metadata["reading"] in ("structure", "main")
    assert "Office closed Friday." in [e.text for e in result.elements]


def test_choose_reading_rules() -> None:
    para = ElementType.PARAGRAPH
    walk = [RawElement(ElementType.HEADING, "Guide", 1), RawElement(para, "one two three four")]
    walk += [RawElement(para, f"menu entry {i}") for i in range(30)]
    assert choose_reading(walk, []) == ("structure", walk)
    small = [RawElement(para, "one two three four")]
    assert choose_reading(walk, small)[0] == "structure"  # 4 tokens, under a quarter of the page
    body = [RawElement(para, " ".join(f"word{i}" for i in range(80)))]
    reading, elements = choose_reading([*walk, *body], body)
    assert reading == "main" and elements == body
    # a heading the extractor dropped is put back before the text it introduces
    restored = restore_headings([RawElement(ElementType.HEADING, "Intro", 2), *body], body)
    assert [e.text for e in restored] == ["Intro", body[0].text]
    # ... and so is the paragraph right after a kept table (trafilatura drops it with the table's block)
    table = RawElement(ElementType.TABLE, "| Span | Length |\n| --- | --- |\n| Main | 503 |")
    after = RawElement(para, "Figures from the council.")
    assert restore_headings([table, after], [table]) == [table, after]
    assert restore_headings([after, table], [table]) == [table]  # only text that follows the table


@corpus_required
def test_corpus_page_opening_with_a_script() -> None:
    path = CORPUS / "documents" / "tika" / "big-preamble.html"
    data = path.read_bytes()
    assert data.startswith(b"<script")
    assert detect_mime(data, path.name) == "text/html"
    result = parse(data, "text/html", filename=path.name)
    text = " ".join(e.text for e in result.elements)
    assert "Снять квартиру в Москве" in text
    assert "addToList" not in text and "selectedIndex" not in text


@corpus_required
def test_corpus_boilerplate_page() -> None:
    """Tika's boilerplate test page: a table of navigation links, the article, a footer link."""
    result = parse((CORPUS / "documents" / "tika" / "boilerplate.html").read_bytes(), "text/html")
    assert [e.text for e in result.elements] == [
        "This is the real meat of the page, and represents the text we want. It has lots of juicy content. "
        "We assume that it won't get filtered out. And that all of the lines will be in the output.",
        "Here's another paragraph of text. This is the end of the text.",
    ]


@corpus_required
def test_corpus_wiki_article_against_docling_snapshot() -> None:
    """wiki_duck.html vs docling's snapshot (a tool's output that keeps everything, navigation
    included): precision stays high, recall drops by the language links and category lists dropped."""
    page = CORPUS / "documents" / "docling" / "html" / "sources" / "wiki_duck.html"
    snapshot = CORPUS / "parse_groundtruth" / "docling" / "html" / "groundtruth" / "wiki_duck.html.md"
    truth = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", snapshot.read_text(encoding="utf-8"))
    result = parse(page.read_bytes(), "text/html")
    recall, precision = _recall_precision(result, truth)
    assert recall >= 0.72 and precision >= 0.97, (recall, precision)
    texts = [e.text for e in result.elements]
    assert texts[0] == "Duck"
    assert "Afrikaans" not in texts and "Retrieved from" not in " ".join(texts)


@corpus_required
def test_corpus_structure_pages_keep_tables_and_lists() -> None:
    sources = CORPUS / "documents" / "docling" / "html" / "sources"
    table = parse((sources / "table_01.html").read_bytes(), "text/html")
    assert [e.type for e in table.elements].count(ElementType.TABLE) == 1
    nested = CORPUS / "documents" / "docling" / "html" / "sources" / "html_nested_block_in_list_item.html"
    items = [e for e in parse(nested.read_bytes(), "text/html").elements if e.type is ElementType.LIST_ITEM]
    assert len(items) >= 2
