"""Boilerplate across a source's documents: the paragraphs a sizeable share of them hold.

A disclaimer, a signature block or a standard notice repeated in many
documents of one source is boilerplate. Counted per paragraph
(``chunking.paragraph_hash``: words lower-cased, no heading path, no
document identity), so it is found inside chunks that also hold the
document's own text, and by its *share* of the source's documents, so it is
found in a source of eleven memos as in one of a million files:

* a paragraph is boilerplate when at least :data:`MIN_HOLDERS` documents of
  the source hold it and either they are at least ``share`` of the source's
  live documents or they are at least ``min_docs`` (``Settings.boilerplate_share``,
  ``Settings.boilerplate_min_docs``; ``min_docs = 0`` turns it off);
* a document chunked once ``min_docs`` other documents of its source hold a
  paragraph leaves it out of its chunks (``chunk_elements(boilerplate=...)``,
  ``indexing_rule``): at that count it is indexed by the documents that held
  it first. The share alone never drops text at indexing: which documents
  come first depends on the order work is done in, and two runs over the
  same files (one process, or workers and a re-run after a crash) must write
  the same chunks;
* a query (``ragsync.query.search``) ranks a hit below unique text by the
  share of its text that is boilerplate, and shows one hit per boilerplate
  paragraph among the hits made mostly of it, so copies indexed before the
  paragraph was known (one backfill chunks every document before any is
  written) still appear once.

Pure decisions here; the counts are the catalog's (``catalog.paragraphs``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragsync.ingest.chunking import MIN_BOILERPLATE_CHARS, paragraph_hash

MIN_HOLDERS = 3
"""A paragraph two documents share is not boilerplate, whatever the source's size."""


@dataclass(frozen=True)
class BoilerplateRule:
    """When a paragraph is boilerplate (see the module docstring).

    Attributes:
        share: share of the source's live documents (0-1].
        min_docs: this many holders suffice whatever the share; 0 = off.
    """

    share: float = 0.2
    min_docs: int = 50

    @property
    def enabled(self) -> bool:
        return self.min_docs > 0

    def is_boilerplate(self, holders: int, source_docs: int) -> bool:
        """Whether a paragraph ``holders`` documents hold, in a source of
        ``source_docs`` live documents, is boilerplate."""
        if not self.enabled or holders < MIN_HOLDERS:
            return False
        return holders >= self.min_docs or holders >= self.share * max(source_docs, holders)


def indexing_rule(min_docs: int) -> BoilerplateRule:
    """The rule the chunker applies (module docstring): a paragraph is left
    out of a document only when ``min_docs`` documents hold it; ``share`` is
    the query's alone."""
    return BoilerplateRule(share=math.inf, min_docs=min_docs)


def boilerplate_of(
    hashes: Sequence[str],
    holders: Mapping[str, int],
    source_docs: int,
    rule: BoilerplateRule,
    *,
    plus: int = 0,
) -> frozenset[str]:
    """The hashes among ``hashes`` that are boilerplate.

    Args:
        hashes: paragraph hashes.
        holders: documents of the source holding each (``catalog.paragraphs.holders``).
        source_docs: the source's live documents.
        rule: the rule.
        plus: documents to add to every count (1 for the document being
            chunked, which ``holders`` leaves out).
    """
    return frozenset(h for h in hashes if rule.is_boilerplate(holders.get(h, 0) + plus, source_docs + plus))


def text_paragraphs(text: str) -> list[tuple[str, int]]:
    """A chunk's countable paragraphs (``\\n\\n``-separated, at least
    ``MIN_BOILERPLATE_CHARS`` long; a list item's ``- `` marker dropped) as
    ``(hash, characters)``."""
    out = []
    for para in text.split("\n\n"):
        para = para.strip()
        body = para[2:] if para.startswith("- ") else para
        if len(body) >= MIN_BOILERPLATE_CHARS:
            out.append((paragraph_hash(body), len(para)))
    return out


def boilerplate_share(text: str, boilerplate: frozenset[str]) -> tuple[float, str | None]:
    """How much of a chunk's text is boilerplate, and its main boilerplate paragraph.

    Returns:
        ``(share of the text's characters, hash of the longest boilerplate
        paragraph or None)``.
    """
    paras = [(h, n) for h, n in text_paragraphs(text) if h in boilerplate]
    if not paras:
        return 0.0, None
    total = max(len(text.strip()), 1)
    main = max(paras, key=lambda p: (p[1], p[0]))[0]
    return min(1.0, sum(n for _, n in paras) / total), main
