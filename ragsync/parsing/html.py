"""HTML parser: the main content of a page as headings, paragraphs, list items and tables.

Two readings of every page, one decision:

* **structure walk** (BeautifulSoup): the whole page minus scripts, styles,
  ``nav``/``header``/``footer``/``aside``, forms and ARIA navigation/banner/
  contentinfo landmarks; only ``<main>`` (or a single ``<article>``) when the
  page has one. Exact structure, but keeps whatever boilerplate sits in plain
  ``div``s (related links, cookie banners, comments, share bars).
* **main content** (trafilatura): the article body found by link density,
  text density and known boilerplate patterns, with its headings, lists and
  tables; comments are left out.

``choose_reading`` picks one: the main content when it is substantial and the
structure walk holds clearly more text (boilerplate was there to remove);
the structure walk when the page is mostly content anyway (intranet and wiki
pages keep their exact structure), or when the main content is too small to be
the page's content (link lists, tables of data, short notices).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from typing import Any

from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning
from bs4.element import NavigableString, Tag

from ragsync.errors import TooLargeError
from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, table_to_markdown, text_encoding

_DROP = (
    "script",
    "style",
    "nav",
    "header",
    "footer",
    "aside",
    "noscript",
    "template",
    "form",
    "button",
    "iframe",
    "svg",
    "select",
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
#: Deepest element nesting read (libxml2's own default limit; browsers stop at 512).
#: The readings walk the tree recursively, so a deeper page is refused as
#: ``too_large`` before them instead of ending in a RecursionError.
MAX_HTML_DEPTH = 256
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)
_TOKEN = re.compile(r"\w+")
#: The structure walk is kept when the main content has fewer tokens than this and
#: covers under ``SMALL_SHARE`` of the walk's tokens (extraction kept too little).
MIN_MAIN_TOKENS = 60
SMALL_SHARE = 0.25
#: Main content that is flat and has under 1/COLLAPSED as many elements as the
#: walk's held elements came out collapsed (one block for a structured page).
COLLAPSED = 3
_PARA_TAGS = {"p", "pre", "dt", "dd", "figcaption", "caption", "summary", "address"}
_LISTS = {"ul", "ol", "menu"}
_BLOCKS = (
    set(_HEADINGS)
    | _PARA_TAGS
    | _LISTS
    | {
        "li",
        "table",
        "div",
        "section",
        "article",
        "main",
        "blockquote",
        "dl",
        "figure",
        "details",
        "body",
        "center",
        "hr",
        "br",
        "tr",
        "td",
        "th",
    }
)


class _Walker:
    def __init__(self) -> None:
        self.out: list[RawElement] = []
        self.buffer: list[str] = []

    def flush(self) -> None:
        text = clean_text("".join(self.buffer))
        self.buffer = []
        if text:
            self.out.append(RawElement(ElementType.PARAGRAPH, text))

    def walk(self, node: Tag, depth: int) -> None:
        for child in node.children:
            if isinstance(child, NavigableString):
                if type(child) is NavigableString:  # skip comments, CDATA, doctype
                    self.buffer.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name not in _BLOCKS:
                # inline element: collect its text unless it hides a block inside
                if child.find(list(_BLOCKS)) is None:
                    self.buffer.append(child.get_text())
                else:
                    self.walk(child, depth)
                continue
            self.flush()
            if name in _HEADINGS:
                text = clean_text(child.get_text(" "))
                if text:
                    self.out.append(RawElement(ElementType.HEADING, text, _HEADINGS[name]))
            elif name == "pre":
                text = child.get_text().strip("\n")
                if text.strip():
                    self.out.append(RawElement(ElementType.PARAGRAPH, text))
            elif name in _PARA_TAGS:
                if child.find(["table", "ul", "ol"] + list(_HEADINGS)) is not None:
                    self.walk(child, depth)
                else:
                    text = clean_text(child.get_text(" "))
                    if text:
                        self.out.append(RawElement(ElementType.PARAGRAPH, text))
            elif name in _LISTS:
                self.walk(child, depth + 1)
            elif name == "li":
                self._list_item(child, max(depth, 1))
            elif name == "table":
                self._table(child)
            else:
                self.walk(child, depth)
            self.flush()

    def _list_item(self, li: Tag, depth: int) -> None:
        parts: list[str] = []
        nested: list[Tag] = []
        for child in li.children:
            if isinstance(child, Tag) and child.name in _LISTS | {"table"}:
                nested.append(child)
            elif isinstance(child, Tag):
                if child.find(list(_LISTS)) is not None:
                    nested.append(child)
                else:
                    parts.append(child.get_text(" "))
            elif type(child) is NavigableString:
                parts.append(str(child))
        text = clean_text(" ".join(parts))
        if text:
            self.out.append(RawElement(ElementType.LIST_ITEM, text, depth))
        for sub in nested:
            if sub.name in _LISTS:
                self.walk(sub, depth + 1)
            elif sub.name == "table":
                self._table(sub)
            else:
                self.walk(sub, depth)

    def _table(self, table: Tag) -> None:
        rows: list[list[str]] = []
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table:
                continue
            row: list[str] = []
            for cell in tr.find_all(["th", "td"], recursive=False):
                row.append(cell.get_text(" "))
                span = cell.get("colspan")
                try:
                    extra = int(str(span)) - 1 if span else 0
                except ValueError:
                    extra = 0
                row.extend([""] * max(0, min(extra, 50)))
            rows.append(row)
        md = table_to_markdown(rows)
        if md:
            self.out.append(RawElement(ElementType.TABLE, md))


def decode_html(data: bytes) -> str:
    """Decode an HTML page with ``text_encoding`` (BOM, UTF-16, UTF-8, a legacy
    code page guessed for mostly non-ASCII bytes), except that for mostly-ASCII
    non-UTF-8 bytes the charset its ``<meta>`` declares is used when Python
    knows it and it decodes the bytes (else cp1252/latin-1).

    A declared charset is only believed when UTF-8 fails: pages that declare
    one encoding and are written in UTF-8 are common.

    Args:
        data: the page bytes.

    Returns:
        The text without a BOM.
    """
    codec = text_encoding(data)
    if codec in ("cp1252", "latin-1"):  # mostly Western bytes: the declaration may say which code page
        declared = _META_CHARSET.search(data[:8192])
        if declared is not None:
            name = declared.group(1).decode("ascii", "replace").lower()
            try:
                return data.decode(name).lstrip("\ufeff")
            except (LookupError, UnicodeDecodeError):
                pass
    if codec.startswith("utf-16-"):
        data = data[: len(data) // 2 * 2]
    return data.decode(codec, errors="replace").lstrip("\ufeff")


def _title(soup: BeautifulSoup) -> dict[str, str]:
    if soup.title is not None:
        title = clean_text(soup.title.get_text())
        if title:
            return {"title": title}
    return {}


def structure_walk(soup: BeautifulSoup) -> list[RawElement]:
    """The page's elements in document order, minus obvious boilerplate.

    Drops script, style, nav, header (outside an article), footer, aside,
    forms, buttons, iframes and ARIA navigation/banner/contentinfo regions;
    reads only ``<main>`` (or ``role=main``, or the one ``<article>``) when the
    page has it. Modifies ``soup``.

    Args:
        soup: the parsed page.

    Returns:
        Raw elements (headings with their level, paragraphs, list items with
        their nesting depth, Markdown tables).
    """
    for tag in soup.find_all(_DROP):
        if not isinstance(tag, Tag) or tag.decomposed:
            continue
        if tag.name == "header" and tag.find_parent(["main", "article"]) is not None:
            continue  # an article's own header holds its title
        tag.decompose()
    for tag in soup.find_all(True, attrs={"role": ["navigation", "banner", "contentinfo"]}):
        if isinstance(tag, Tag) and not tag.decomposed:
            tag.decompose()
    found = soup.find("main") or soup.find(True, attrs={"role": "main"})
    root: Tag | None = found if isinstance(found, Tag) else None
    if root is None:
        articles = soup.find_all("article")
        if len(articles) == 1 and isinstance(articles[0], Tag):
            root = articles[0]
    if root is None:
        root = soup.body or soup
    walker = _Walker()
    walker.walk(root, 0)
    walker.flush()
    return walker.out


def _tei_text(node: Any) -> str:
    return clean_text("".join(_tei_strings(node)))


def _tei_strings(node: Any) -> list[str]:
    """The text under ``node`` with a space for each line break (``lb``), which ``itertext`` drops."""
    out = [node.text or ""]
    for child in node:
        if child.tag == "lb":
            out.append(" ")
        else:
            out.extend(_tei_strings(child))
        out.append(child.tail or "")
    return out


def _tei_item_text(item: Any) -> str:
    """An item's own text, without the lists nested in it."""
    parts = [item.text or ""]
    for child in item:
        if child.tag == "lb":
            parts.append(" ")
        elif child.tag != "list":
            parts.extend(_tei_strings(child))
        parts.append(child.tail or "")
    return clean_text("".join(parts))


def _tei_table(table: Any) -> str:
    rows: list[list[str]] = []
    for row in table.iter("row"):
        cells: list[str] = []
        for cell in row:
            if cell.tag != "cell":
                continue
            cells.append(_tei_text(cell))
            try:
                extra = int(cell.get("cols") or cell.get("colspan") or 1) - 1
            except ValueError:
                extra = 0
            cells.extend([""] * max(0, min(extra, 50)))
        rows.append(cells)
    return table_to_markdown(rows)


def _tei_elements(node: Any, depth: int, out: list[RawElement]) -> None:
    """trafilatura's body (``head``/``p``/``list``/``item``/``table``/``quote``/``code``) to raw elements."""
    for child in node:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag == "head":
            rend = str(child.get("rend") or "")
            level = int(rend[1]) if re.fullmatch(r"h[1-6]", rend) else 2
            text = _tei_text(child)
            if text:
                out.append(RawElement(ElementType.HEADING, text, level))
        elif tag in ("list", "table") and _link_dense(child):
            continue  # navigation: a list or table of links only
        elif tag == "list":
            _tei_list(child, depth + 1, out)
        elif tag == "table":
            md = _tei_table(child)
            if md:
                out.append(RawElement(ElementType.TABLE, md))
        elif tag == "code":
            text = "".join(child.itertext()).strip("\n")
            if text.strip():
                out.append(RawElement(ElementType.PARAGRAPH, text))
        elif tag in ("p", "quote", "div") and any(c.tag in ("list", "table", "head", "p") for c in child):
            lead = clean_text(child.text or "")
            if lead:
                out.append(RawElement(ElementType.PARAGRAPH, lead))
            _tei_elements(child, depth, out)
        elif tag:
            text = _tei_text(child)
            if text:
                out.append(RawElement(ElementType.PARAGRAPH, text))


def _link_dense(node: Any) -> bool:
    """At least 90 % of a list's or table's text is link text (``ref``)."""
    total = len(clean_text("".join(_tei_strings(node))))
    linked = sum(len(clean_text("".join(_tei_strings(ref)))) for ref in node.iter("ref"))
    return total > 0 and linked >= 0.9 * total


def _tei_list(node: Any, depth: int, out: list[RawElement]) -> None:
    for item in node:
        if item.tag != "item":
            continue
        text = _tei_item_text(item)
        if text:
            out.append(RawElement(ElementType.LIST_ITEM, text, depth))
        for sub in item:
            if sub.tag == "list":
                _tei_list(sub, depth + 1, out)


def main_content(data: bytes | str) -> list[RawElement]:
    """The article body of a page by trafilatura (tables kept, comments dropped).

    Args:
        data: the page (bytes or decoded text).

    Returns:
        Raw elements; empty when trafilatura finds no main content or fails.
    """
    try:
        import trafilatura
    except ImportError:  # pragma: no cover - a declared dependency
        return []
    try:
        doc = trafilatura.bare_extraction(
            data, include_comments=False, include_tables=True, include_formatting=False, include_links=True
        )
    except Exception:  # noqa: BLE001 - extraction is best effort; the structure walk stands
        return []
    body = getattr(doc, "body", None)
    if body is None:
        return []
    out: list[RawElement] = []
    _tei_elements(body, 0, out)
    return out


def _tokens(elements: list[RawElement]) -> Counter[str]:
    return Counter(t.lower() for e in elements for t in _TOKEN.findall(e.text))


def _kept_flags(structure: list[RawElement], main: list[RawElement]) -> list[bool]:
    """For each structure-walk element: does the main content hold it?

    An element is held when at least half of its tokens are still unclaimed in
    the main content's token multiset (held elements claim theirs), so a
    navigation line that repeats a word of the article is still dropped.
    """
    remaining = _tokens(main)
    flags: list[bool] = []
    for element in structure:
        tokens = _tokens([element])
        count = sum(tokens.values())
        held = bool(count) and sum((tokens & remaining).values()) * 2 >= count
        if held:
            remaining -= tokens
        flags.append(held)
    return flags


def keep_main_elements(structure: list[RawElement], main: list[RawElement]) -> list[RawElement]:
    """The structure walk's elements that the main content holds (``_kept_flags``).

    Args:
        structure: the structure walk's elements.
        main: the main-content elements.

    Returns:
        The held elements, in document order.
    """
    return [e for e, held in zip(structure, _kept_flags(structure, main), strict=True) if held]


def _restore_after_tables(
    structure: list[RawElement], flags: list[bool], main: list[RawElement]
) -> list[RawElement]:
    """Put back the paragraphs that directly follow a held table in the walk but that
    the main content lacks (trafilatura drops the text after a table in the same
    block), right after that table."""
    out = list(main)
    for i, element in enumerate(structure[:-1]):
        after = structure[i + 1]
        if element.type is not ElementType.TABLE or not flags[i] or flags[i + 1]:
            continue
        if after.type is not ElementType.PARAGRAPH:
            continue
        at = next(
            (k for k, e in enumerate(out) if e.type is ElementType.TABLE and e.text == element.text), -1
        )
        if at >= 0 and (at + 1 >= len(out) or out[at + 1].text != after.text):
            out.insert(at + 1, after)
    return out


def restore_headings(structure: list[RawElement], main: list[RawElement]) -> list[RawElement]:
    """The main content with the headings extraction dropped put back before the
    text they introduce (and a paragraph right after a kept table, which
    trafilatura drops with the table's block).

    trafilatura moves a page's ``<h1>`` into its title metadata and drops some
    section headings; a heading of the structure walk whose next non-heading
    element the main content holds is part of the content, so it is inserted
    before the main element where that text starts. Headings of dropped
    boilerplate ("Related articles", "Leave a reply") introduce dropped text
    and stay out.

    Args:
        structure: the structure walk's elements.
        main: the main-content elements.

    Returns:
        ``main`` with the restored headings, in order.
    """
    flags = _kept_flags(structure, main)
    main = _restore_after_tables(structure, flags, main)
    main_tokens = [" ".join(t.lower() for t in _TOKEN.findall(e.text)) for e in main]
    wanted: list[tuple[RawElement, list[str]]] = []
    for i, element in enumerate(structure):
        if element.type is not ElementType.HEADING:
            continue
        phrase = " ".join(t.lower() for t in _TOKEN.findall(element.text))
        if not phrase or any(phrase in text for text in main_tokens):
            continue  # a heading's words scattered through paragraphs do not make it present
        after = range(i + 1, len(structure))
        following = next((j for j in after if structure[j].type is not ElementType.HEADING), -1)
        if following >= 0 and flags[following]:
            lead = [t.lower() for t in _TOKEN.findall(structure[following].text)][:8]
            if lead:
                wanted.append((element, lead))
    if not wanted:
        return main
    out: list[RawElement] = []
    at = 0
    for heading, lead in wanted:
        needle = " ".join(lead)
        found = next((k for k in range(at, len(main)) if needle in main_tokens[k]), -1)
        if found < 0:
            continue
        out.extend(main[at:found])
        if not out or out[-1].text != heading.text:
            out.append(heading)
        at = found
    out.extend(main[at:])
    return out


def choose_reading(structure: list[RawElement], main: list[RawElement]) -> tuple[str, list[RawElement]]:
    """Which reading of a page to keep, and its elements.

    * ``"structure"``: the main content is empty, or small (< ``MIN_MAIN_TOKENS``
      tokens) while covering under ``SMALL_SHARE`` of the structure walk's
      tokens: extraction kept too little (link lists, data tables, a notice
      among navigation), so the whole walk is kept.
    * ``"filtered"``: the main content came out flat (paragraphs only) while
      the walk of the same text has headings, lists or tables: the walk's
      elements that the main content holds (``keep_main_elements``).
    * ``"main"``: otherwise, the main content's own elements.

    Args:
        structure: the structure walk's elements.
        main: the main-content elements.

    Returns:
        ``(reading, elements)``.
    """
    main_tokens = _tokens(main)
    if not main_tokens:
        return "structure", structure
    full = _tokens(structure)
    total = sum(full.values())
    share = sum((main_tokens & full).values()) / total if total else 1.0
    if sum(main_tokens.values()) < MIN_MAIN_TOKENS and share < SMALL_SHARE:
        return "structure", structure
    if all(e.type is ElementType.PARAGRAPH for e in main):
        kept = keep_main_elements(structure, main)
        if len(main) * COLLAPSED <= len(kept) and any(e.type is not ElementType.PARAGRAPH for e in kept):
            return "filtered", kept
    return "main", restore_headings(structure, main)


def nesting_depth(root: Tag, limit: int) -> int:
    """The deepest element nesting under ``root``, counted without recursion;
    stops counting once past ``limit`` (returns ``limit + 1`` then)."""
    deepest = 0
    stack: list[tuple[Tag, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return limit + 1
        stack.extend((child, depth + 1) for child in node.contents if isinstance(child, Tag))
    return deepest


def parse_html(data: bytes, *, main_only: bool = True) -> RawParse:
    """Parse an HTML page: its main content as headings, paragraphs, list items and tables.

    The page is decoded (``decode_html``), read twice (``structure_walk``,
    ``main_content``) and one reading is kept (``choose_reading``). List item
    level is the nesting depth (1 = top list); tables become one Markdown
    table each, first row as header; the ``<title>`` goes to metadata.

    Args:
        data: the bytes of an HTML page.
        main_only: look for the main content; ``False`` keeps the structure
            walk (e-mail bodies, XML).

    Returns:
        Elements in document order; metadata ``title`` when present and
        ``reading`` (``main`` or ``structure``).

    Raises:
        TooLargeError: elements nested deeper than ``MAX_HTML_DEPTH``.
    """
    text = decode_html(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)  # XHTML and XML are read this way on purpose
        soup = BeautifulSoup(text, "lxml")
    if nesting_depth(soup, MAX_HTML_DEPTH) > MAX_HTML_DEPTH:
        raise TooLargeError(f"HTML elements nested deeper than {MAX_HTML_DEPTH} levels (not read)")
    meta = _title(soup)
    structure = structure_walk(soup)
    if not main_only:
        return RawParse(structure, 0, meta)
    reading, elements = choose_reading(structure, main_content(text))
    meta["reading"] = reading
    return RawParse(elements, 0, meta)
