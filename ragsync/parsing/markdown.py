"""Markdown parser (CommonMark + GFM tables via markdown-it-py)."""

from __future__ import annotations

import re
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from ragsync.model import ElementType
from ragsync.parsing._common import RawElement, RawParse, clean_text, decode_text, table_to_markdown

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def _front_matter(text: str) -> tuple[str, dict[str, str]]:
    match = _FRONT_MATTER.match(text)
    if not match:
        return text, {}
    body = text[match.end() :]
    raw = match.group(1)
    meta: dict[str, str] = {}
    loaded: Any = None
    try:
        import yaml

        loaded = yaml.safe_load(raw)
    except Exception:  # noqa: BLE001 - fall back to the simple reader below
        loaded = None
    if isinstance(loaded, dict):
        for key, value in loaded.items():
            if isinstance(value, (list, tuple)):
                meta[str(key)] = ", ".join(str(v) for v in value)
            elif value is not None:
                meta[str(key)] = str(value)
    else:
        for line in raw.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() and not key.startswith((" ", "\t", "-")):
                meta[key.strip()] = value.strip().strip("'\"")
    return body, meta


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(_inline_text(child) if child.children else child.content)
        elif child.type in ("html_inline",):
            continue
    return clean_text("".join(parts))


def parse_markdown(data: bytes) -> RawParse:
    """Parse Markdown into headings, paragraphs, list items and tables.

    YAML front matter is removed from the text and returned as metadata
    (lists joined with ``", "``). Fenced and indented code become paragraphs
    (text kept verbatim); raw HTML blocks become paragraphs with tags stripped.
    A page whose body holds no text but whose front matter names a ``title``
    (a wiki's redirect or landing stub) is that title, as one paragraph (the
    chunker keeps headings as paths, not as text): it is found by its name
    instead of failing as ``no_text``.

    Args:
        data: the bytes of a Markdown file.

    Returns:
        Elements in document order plus front-matter metadata.
    """
    text, meta = _front_matter(decode_text(data))
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    out: list[RawElement] = []
    list_depth = 0
    in_item = 0
    heading_level = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        t = tok.type
        if t in ("bullet_list_open", "ordered_list_open"):
            list_depth += 1
        elif t in ("bullet_list_close", "ordered_list_close"):
            list_depth -= 1
        elif t == "list_item_open":
            in_item += 1
        elif t == "list_item_close":
            in_item -= 1
        elif t == "heading_open":
            heading_level = int(tok.tag[1:])
        elif t == "heading_close":
            heading_level = 0
        elif t == "inline":
            content = _inline_text(tok)
            if content:
                if heading_level:
                    out.append(RawElement(ElementType.HEADING, content, heading_level))
                elif in_item:
                    out.append(RawElement(ElementType.LIST_ITEM, content, list_depth))
                else:
                    out.append(RawElement(ElementType.PARAGRAPH, content))
        elif t in ("fence", "code_block"):
            code = tok.content.strip("\n")
            if code.strip():
                out.append(RawElement(ElementType.PARAGRAPH, code))
        elif t == "html_block":
            html_text = clean_text(_TAG.sub(" ", tok.content))
            if html_text:
                out.append(RawElement(ElementType.PARAGRAPH, html_text))
        elif t == "table_open":
            rows: list[list[str]] = []
            row: list[str] = []
            i += 1
            while i < len(tokens) and tokens[i].type != "table_close":
                sub = tokens[i]
                if sub.type == "tr_open":
                    row = []
                elif sub.type == "tr_close":
                    rows.append(row)
                elif sub.type == "inline":
                    row.append(_inline_text(sub))
                i += 1
            md = table_to_markdown(rows)
            if md:
                out.append(RawElement(ElementType.TABLE, md))
        i += 1
    if not out and meta.get("title", "").strip():
        out.append(RawElement(ElementType.PARAGRAPH, clean_text(meta["title"])))
    if "title" not in meta:
        first = next((e for e in out if e.type is ElementType.HEADING and e.level == 1), None)
        if first is not None:
            meta["title"] = first.text
    return RawParse(out, 0, meta)
