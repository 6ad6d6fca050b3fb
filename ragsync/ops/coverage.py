"""Coverage per source: indexed / (seen - excluded by rule), and why the rest
is not indexed.

Pure functions over the documents' outcome counts
(``Catalog.document_outcomes``: ``(tenant, source, status, error_class, n)``).

* **seen**: the source's documents that are not deleted.
* **indexed**: status ``indexed``, plus ``duplicate`` (an exact copy served
  by its canonical document's chunks, which carry the copy's ACL id).
* **excluded by rule**: dead letters of a class a configured rule decides
  rather than a failure: :data:`EXCLUDED_BY_RULE` (permissions that cannot be
  read are not indexed by policy; documents over ``max_bytes``/``max_pages``
  and archives over their expansion limits are refused by setting).
* **the rest**: other dead-letter classes (corrupt, encrypted, no_text, ...),
  and ``pending`` for documents fetched but not indexed yet.

A source with nothing to index has coverage 1.0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: The design's coverage target.
COVERAGE_TARGET = 0.995

#: Dead-letter classes that a configured rule decides (not pipeline failures).
EXCLUDED_BY_RULE = frozenset({"no_permissions", "too_large", "archive_bomb"})

_INDEXED = ("indexed", "duplicate")


def coverage_by_source(
    outcomes: Iterable[tuple[str, str, str, str, int]], *, target: float = COVERAGE_TARGET
) -> list[dict[str, Any]]:
    """Coverage of each source.

    Args:
        outcomes: ``(tenant_id, source_id, status, error_class, count)`` rows.
        target: the coverage target.

    Returns:
        One dict per ``(tenant_id, source_id)``, sorted: ``seen``,
        ``indexed``, ``excluded`` (by class), ``not_indexed`` (by reason:
        dead-letter class or ``pending``), ``coverage`` (0..1), ``target``
        and ``meets_target``.
    """
    sources: dict[tuple[str, str], dict[str, Any]] = {}
    for tenant_id, source_id, status, error_class, n in outcomes:
        s = sources.setdefault(
            (tenant_id, source_id),
            {
                "tenant_id": tenant_id,
                "source_id": source_id,
                "seen": 0,
                "indexed": 0,
                "excluded": {},
                "not_indexed": {},
            },
        )
        if status == "deleted":
            continue
        s["seen"] += n
        if status in _INDEXED:
            s["indexed"] += n
        elif status == "dead_letter" and error_class in EXCLUDED_BY_RULE:
            s["excluded"][error_class] = s["excluded"].get(error_class, 0) + n
        else:
            reason = error_class if status == "dead_letter" and error_class else "pending"
            s["not_indexed"][reason] = s["not_indexed"].get(reason, 0) + n
    out = []
    for key in sorted(sources):
        s = sources[key]
        denominator = s["seen"] - sum(s["excluded"].values())
        coverage = s["indexed"] / denominator if denominator > 0 else 1.0
        s["coverage"] = round(coverage, 6)
        s["target"] = target
        s["meets_target"] = coverage >= target
        s["excluded"] = dict(sorted(s["excluded"].items()))
        s["not_indexed"] = dict(sorted(s["not_indexed"].items()))
        out.append(s)
    return out
