"""Parsing real files in tests: one file as ragsync parses it, and a
deterministic per-kind sample of the shared corpus with its outcomes.

``tests/test_parsing.py`` (PDF, DOCX, HTML, text by detected mime type) and
``tests/test_parsing_formats.py`` (office, e-mail, tickets by extension)
both draw their corpus sample and check it through these functions.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ragsync.errors import RagsyncError
from ragsync.ingest.detect import detect_mime
from ragsync.parsing import PARSER_VERSION, ParseResult, parse

REGEN = os.environ.get("RAGSYNC_REGEN_GOLDEN") == "1"


def parse_file(path: Path) -> ParseResult:
    """``path`` parsed with the mime type detected from its bytes and name.

    Raises:
        RagsyncError: whatever ``parse`` raises for it.
    """
    data = path.read_bytes()
    return parse(data, detect_mime(data, path.name), filename=path.name)


def assert_golden(path: Path, golden: Path) -> ParseResult:
    """Parse ``path`` and assert that its snapshot (parser version, pages,
    metadata, elements) equals the JSON in ``golden``; with
    ``RAGSYNC_REGEN_GOLDEN=1`` write ``golden`` first. Returns the result."""
    result = parse_file(path)
    got = {
        "parser_version": PARSER_VERSION,
        "pages": result.pages,
        "metadata": result.metadata,
        "elements": [e.to_dict() for e in result.elements],
    }
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    assert golden.exists(), f"missing golden {golden}; run with RAGSYNC_REGEN_GOLDEN=1 and review the diff"
    assert got == json.loads(golden.read_text()), f"{path.name} differs from {golden.name}"
    return result


def quota_sample(items: Iterable[tuple[str, str]], quota: Mapping[str, int]) -> list[str]:
    """A deterministic sample of ``(key, kind)`` items: in the order of the
    SHA-256 of each key, the first ``quota[kind]`` keys of each kind (none of
    a kind ``quota`` does not name). Returns the picked keys, sorted."""
    ordered = sorted(items, key=lambda item: hashlib.sha256(item[0].encode()).hexdigest())
    taken: dict[str, int] = {}
    picked: list[str] = []
    for key, kind in ordered:
        if taken.get(kind, 0) < quota.get(kind, 0):
            taken[kind] = taken.get(kind, 0) + 1
            picked.append(key)
    return sorted(picked)


def parse_outcomes(named: Iterable[tuple[str, Path]]) -> dict[str, str]:
    """Parse each ``(name, path)`` file; ``{name: "ok" or the error class}``.

    Asserts for each file: a parsed one has elements, each with text,
    numbered 0..n-1 in reading order; a failing one raised a
    ``RagsyncError`` whose class is not ``internal``.
    """
    outcomes: dict[str, str] = {}
    for name, path in named:
        try:
            result = parse_file(path)
        except RagsyncError as exc:
            assert exc.error_class != "internal", f"{name}: {exc}"
            outcomes[name] = exc.error_class
            continue
        assert result.elements and all(e.text.strip() for e in result.elements), name
        assert [e.order for e in result.elements] == list(range(len(result.elements))), name
        outcomes[name] = "ok"
    return outcomes
