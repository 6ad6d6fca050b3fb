"""HTML parser: main content only, headings, paragraphs, list items, tables."""

from __future__ import annotations

from bs4 import BeautifulSoup
from bs4.element import NavigableString, Tag

from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, decode_text, table_to_markdown

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


def parse_html(data: bytes) -> RawParse:
    """Parse HTML: main content, headings, paragraphs, list items and tables.

    Boilerplate (script, style, nav, header, footer, aside, forms) is dropped;
    when the page has ``<main>`` or ``<article>`` only that is read. List item
    level is the nesting depth (1 = top list). Tables become one Markdown
    table each, first row as header. The ``<title>`` goes to metadata.

    Args:
        data: the bytes of an HTML page.

    Returns:
        Elements in document order plus ``{"title": ...}`` when present.
    """
    soup = BeautifulSoup(decode_text(data), "lxml")
    meta: dict[str, str] = {}
    if soup.title is not None:
        title = clean_text(soup.title.get_text())
        if title:
            meta["title"] = title
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
    return RawParse(walker.out, 0, meta)
