"""Parsed documents: the element list stored once per (content hash, parser
version) (table ``parsed_docs``), and the pages listed for OCR review."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _json_list, _json_object, _tuple_from_json, row_to
from ragsync.catalog.documents import ParsedRow


class ParsedRepository(Repository):
    """Parsed element lists and the pages a reviewer should look at."""

    def get_parsed(self, content_hash: str, parser_version: str) -> ParsedRow | None:
        """The stored parse of some bytes by a parser version, or None."""
        row = self._find(schema.parsed_docs, content_hash=content_hash, parser_version=parser_version)
        if row is None:
            return None
        pages = tuple(int(p) for p in _tuple_from_json(row["pages_for_review"]))
        meta = {str(k): str(v) for k, v in _json_object(row.get("doc_metadata")).items()}
        return row_to(ParsedRow, row, pages_for_review=pages, doc_metadata=meta)

    def put_parsed(
        self,
        content_hash: str,
        parser_version: str,
        elements_uri: str,
        pages: int,
        pages_for_review: Sequence[int] = (),
        ocr_confidence: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Record (or overwrite) where a parse of some bytes is stored.

        Args:
            content_hash: sha256 hex of the bytes.
            parser_version: version of the parser.
            elements_uri: object-store uri of the elements.
            pages: number of pages.
            pages_for_review: pages not indexed.
            ocr_confidence: mean OCR confidence, or None.
            metadata: the parser's metadata (read back with the parse).
        """
        row = {
            "content_hash": content_hash,
            "parser_version": parser_version,
            "elements_uri": elements_uri,
            "pages": pages,
            "pages_for_review": _json_list(int(p) for p in pages_for_review),
            "ocr_confidence": ocr_confidence,
            "doc_metadata": json.dumps(dict(metadata or {}), sort_keys=True, ensure_ascii=False),
        }
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.parsed_docs,
                [row],
                ["content_hash", "parser_version"],
                ["elements_uri", "pages", "pages_for_review", "ocr_confidence", "doc_metadata"],
            )

    def pages_for_review(self, *, limit: int = 20) -> dict[str, Any]:
        """Pages not indexed because OCR fell below the bar: totals and the
        documents holding them (uri and page numbers)."""
        p, d = schema.parsed_docs, schema.documents
        query = (
            select(d.c.doc_id, d.c.uri, p.c.pages_for_review)
            .select_from(p.join(d, d.c.content_hash == p.c.content_hash))
            .where(p.c.pages_for_review.is_not(None))
            .where(p.c.pages_for_review != "[]")
            .where(d.c.deleted_at.is_(None))
        )
        docs = []
        with self._read_engine.connect() as conn:
            # Sorted here, not in SQL: an ORDER BY doc_id makes the planner
            # walk every document in key order instead of starting from the
            # few parses with pages for review (ix_parsed_docs_review).
            for doc_id, uri, pages_json in sorted(conn.execute(query).all()):
                pages = sorted(set(json.loads(pages_json or "[]")))
                if pages:
                    docs.append({"doc_id": doc_id, "uri": uri, "pages": pages})
        return {
            "documents": len(docs),
            "pages": sum(len(x["pages"]) for x in docs),
            "items": docs[:limit],
        }
