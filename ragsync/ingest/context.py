"""A document's identity, put on every chunk: what is embedded and what BM25
indexes carries it, so a question that names the company, the year and the
statement finds that filing's page even when the page itself names none.

The identity is one line of up to four parts, each found in what the parser
already returns (no model, no network):

* **title**: the format's own title (PDF ``Title``, HTML ``<title>``, front
  matter) unless it is a word processor's placeholder or a file name; else the
  first heading near the start;
* **issuer or author**: an organisation named on the first pages (a name
  ending in Inc., Corporation, plc, Ltd, LLC, AG, N.V., Group, Holdings ...),
  else the format's ``author`` when it reads as a name;
* **period or date**: "fiscal year ended December 31, 2022", "quarterly
  period ended ...", "FY2022", "Q3 2021", else the year named most often on
  the first pages (of two named as often, the first);
* **name**: the source's object name without its folder and extension, words
  split at ``_``/``-``/``.`` ("AMD_2022_10K.pdf" -> "AMD 2022 10K"), unless it
  is an opaque id (digits, a hash).

Parts that repeat an earlier one are left out. Pure functions; nothing here
imports Beam.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from ragsync.model import Element, ElementType

MAX_CONTEXT_CHARS = 300
"""The identity is cut to this many characters (about 60 tokens)."""

FIRST_PAGES_CHARS = 6000
"""How much text from the start of a document is read for the issuer and period."""

_PLACEHOLDER_TITLE = re.compile(
    r"^(microsoft (word|excel|powerpoint)\b|untitled|document\d*$|slide \d+$|title$|none$|no title)", re.I
)
_FILE_LIKE = re.compile(r"\.(pdf|docx?|xlsx?|pptx?|html?|txt|md|rtf|odt)$", re.I)
_ORG_SUFFIX = (
    r"Inc\.?|Incorporated|Corporation|Corp\.|Company|Co\.|Ltd\.?|Limited|plc|PLC|LLC|L\.L\.C\.|L\.P\.|"
    r"N\.V\.|S\.A\.|SE|AG|Group|Holdings|Bancorp|Trust"
)
# A name of capitalised words on one line, then a legal suffix ("Group plc" counts as one).
_ORG = re.compile(
    r"\b((?:[A-Z0-9][\w&'.-]*,?[ \t]+){0,5}?(?:[A-Z][\w&'.-]*,?[ \t]+)(?:(?:Group|Holdings)[ \t]+)?(?:"
    + _ORG_SUFFIX
    + r"))(?=[\s,.;:)]|$)"
)
_ORG_NOISE = re.compile(r"^(The|This|Our|Each|Such|Any|All|A|An|In|Of|For|And|See|Item|Part)\s+", re.I)
_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December|"
    r"Jan\.?|Feb\.?|Mar\.?|Apr\.?|Jun\.?|Jul\.?|Aug\.?|Sept?\.?|Oct\.?|Nov\.?|Dec\.?)"
)
_PERIOD = re.compile(
    r"\b((?:fiscal\s+)?(?:year|quarter|quarterly\s+period|period|(?:three|six|nine|twelve)\s+months)\s+"
    r"ended\s+" + _MONTH + r"\s+\d{1,2},?\s+(?:19|20)\d{2})",
    re.I,
)
_SHORT_PERIOD = re.compile(r"\b((?:FY|fiscal\s+year\s+)'?\d{2,4}|Q[1-4]\s*(?:FY)?'?(?:19|20)?\d{2})\b", re.I)
_YEAR = re.compile(r"(?<![\d.,$])((?:19|20)\d{2})(?![\d,.]\d)")
_OPAQUE = re.compile(r"^(?:[0-9a-f]{12,}|[\d\W_]+)$", re.I)
_SPLIT_NAME = re.compile(r"[_\-.\s]+")
_WS = re.compile(r"\s+")


def _clean(text: str) -> str:
    return _WS.sub(" ", text).strip(" |;,")


def _title(elements: Sequence[Element], metadata: Mapping[str, str]) -> str:
    meta = _clean(metadata.get("title", ""))
    if 3 <= len(meta) <= 200 and not _PLACEHOLDER_TITLE.match(meta) and not _FILE_LIKE.search(meta):
        return meta
    for el in elements[:25]:
        if el.type == ElementType.HEADING and (el.level or 1) <= 2 and len(el.text) <= 200:
            return _clean(el.text)
    return ""


def _issuer(head: str, metadata: Mapping[str, str]) -> str:
    names: Counter[str] = Counter()
    first: dict[str, int] = {}
    for m in _ORG.finditer(head):
        name = _ORG_NOISE.sub("", _clean(m.group(1)))
        if len(name) < 4 or not any(c.islower() or c.isupper() for c in name.split()[0]):
            continue
        names[name] += 1
        first.setdefault(name, m.start())
    if names:
        return max(names, key=lambda n: (names[n], -first[n]))
    author = _clean(metadata.get("author", ""))
    if 3 <= len(author) <= 100 and (" " in author or author[:1].isupper()) and "@" not in author:
        return author
    return ""


def _period(head: str) -> str:
    for pattern in (_PERIOD, _SHORT_PERIOD):
        m = pattern.search(head)
        if m:
            return _clean(m.group(1))
    found = _YEAR.findall(head)
    years = Counter(found)
    if years:
        return max(years, key=lambda y: (years[y], -found.index(y)))  # a tie: the one named first
    return ""


def _name(object_id: str) -> str:
    base = object_id.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    stem = base.rsplit(".", 1)[0] if "." in base[1:] else base
    if not stem or _OPAQUE.match(stem):
        return ""
    return _clean(" ".join(w for w in _SPLIT_NAME.split(stem) if w))


def document_context(elements: Sequence[Element], metadata: Mapping[str, str], object_id: str = "") -> str:
    """The identity line of a document (see the module docstring).

    Args:
        elements: the parsed elements in reading order.
        metadata: the parser's metadata (``title``, ``author``, front matter).
        object_id: the source's object id (a path, a page title, an issue key).

    Returns:
        ``title | issuer | period | name`` with the empty and repeated parts
        left out, at most :data:`MAX_CONTEXT_CHARS` characters; ``""`` when
        nothing is found.
    """
    head_parts: list[str] = []
    size = 0
    for el in elements:
        if size >= FIRST_PAGES_CHARS:
            break
        head_parts.append(" ".join(el.text.split()))
        size += len(el.text) + 1
    head = "\n".join(head_parts)[:FIRST_PAGES_CHARS]  # one element a line: a name never spans two
    parts: list[str] = []
    for part in (_title(elements, metadata), _issuer(head, metadata), _period(head), _name(object_id)):
        folded = part.lower()
        if part and not any(folded in p.lower() for p in parts):
            parts.append(part)
    return " | ".join(parts)[:MAX_CONTEXT_CHARS]
