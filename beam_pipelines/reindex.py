"""Parser and chunker backfills: a tenant's documents parsed or chunked again
from what ragsync stored of them, rate-limited, resumable, with progress.

``run_reindex(settings, backfill_id)`` runs one ``backfills`` row whose
reason is ``parser`` or ``chunker`` (``POST /v1/backfills``; the control
plane's worker starts ``ragsync reindex BACKFILL_ID``):

1. Work list: the row's tenant's documents (every tenant's for an operator's
   row without one) that are indexed, top-level and hold their own chunks
   (``Catalog.reindex_candidates``; a child document is parsed again with its
   parent, an exact copy follows its holder), whose live version was made by
   another parser (``parser``) or chunker (``chunker``) than the current one.
   The rest are done already: ``total`` counts both, ``done`` starts at the
   rest, so running it again after a crash is the set difference.
2. A Beam pipeline (FnApiRunner by default) reads each document back from the
   catalog and its raw copy in the object store
   (``transforms.fetch.ReadStoredCopies``: nothing is fetched from the
   source), at most ``max_docs_per_s`` a second, and sends it through the
   chain every other write takes (``transforms.chain.IndexFetchedDocuments``:
   detection and parsing in bounded children, the stored elements read back
   when the parser did not change, chunk, diff, embed through the cache, and
   ``ragsync.index.service.IndexService``'s write and flip). Each document moves to
   its new parse or chunks in one flip, so a reader sees the old version or
   the new one, never a mix; unchanged chunks keep their ids and vectors.
   A document a live change overtakes meanwhile is not written back
   (``SourceFile.stored_copy``: the writer's version check, as for events).
3. Progress goes to the row as documents are written or dead-lettered; at
   the end the catalog is read again and the row reads ``done`` with exact
   counts (``failed``: the documents still at the old parser or chunker), and
   ``error`` says how many were left behind (their dead letters say why).

Why in place rather than into a new index version (DESIGN §8): an index
version is one collection of every tenant's chunks behind one alias
(``ragsync.index.versions``), flipped for everyone at once; a tenant's
request may neither build nor flip it. What the version's gate guards (chunk
counts agree, no document half-written) holds per document here: each flip
makes exactly the new chunks live and the old ones go after it. The row's
``target_index`` is kept as the requester's label.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam

from beam_pipelines.listing import root_cause
from beam_pipelines.reembed import RateLimiter
from beam_pipelines.runners import run_to_end
from ragsync.catalog import BackfillRow, Catalog
from ragsync.config import Settings, open_catalog
from ragsync.counters import REINDEX
from ragsync.errors import ConfigurationError
from ragsync.index.versions import live_spec
from ragsync.model import DeadLetter, DocumentPlan
from ragsync.ops.display import host_free
from transforms.chain import IndexFetchedDocuments
from transforms.dead_letters import WriteDeadLetters
from transforms.fetch import ReadStoredCopies
from transforms.metrics import counter_value
from transforms.steps import CatalogDoFn

REASONS = ("parser", "chunker")


@dataclass
class ReindexSummary:
    """What a parser or chunker backfill did. Field names are the ``--json`` keys.

    ``total`` documents were covered, ``done`` of them are at the current
    parser or chunker, ``failed`` were left behind; ``state`` and ``error``
    are the backfill row's afterwards.
    """

    backfill_id: str
    tenant_id: str | None
    reason: str
    state: str
    total: int
    done: int
    failed: int
    error: str | None
    seconds: float
    counters: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _left_to_do(
    settings: Settings, candidates: list[tuple[str, str, str | None, str | None]], reason: str
) -> list[tuple[str, str]]:
    """(tenant id, doc id) of the ``candidates`` (``Catalog.reindex_candidates``)
    whose live version another parser (``reason`` ``parser``) or chunker than
    the current one made."""
    current = settings.parser_version if reason == "parser" else settings.chunker.config_id
    return [
        (tenant, doc)
        for doc, tenant, parser, chunker in candidates
        if (parser if reason == "parser" else chunker) != current
    ]


class _PaceFn(beam.DoFn):
    """(tenant id, doc id) -> the same, at most ``max_docs_per_s`` a second per worker."""

    def __init__(self, max_docs_per_s: float) -> None:
        self.max_docs_per_s = max_docs_per_s

    def setup(self) -> None:
        self._limiter = RateLimiter(self.max_docs_per_s)

    def process(self, item: tuple[str, str]) -> Iterator[tuple[str, str]]:
        self._limiter.acquire(1)
        yield item


class _ProgressFn(CatalogDoFn):
    """A written ``DocumentPlan`` or a ``DeadLetter`` -> nothing; adds the
    document to the backfill row's ``done`` or ``failed`` (top-level documents
    only: a child document is counted with its parent) and counts it."""

    def __init__(self, settings: Settings, backfill_id: str, *, failed: bool) -> None:
        super().__init__(settings)
        self.backfill_id = backfill_id
        self.failed = failed

    def process(self, element: DocumentPlan | DeadLetter) -> Iterator[Any]:
        doc_id = element.doc_id if isinstance(element, DeadLetter) else element.doc.doc_id
        row = self._catalog.documents.get_document(doc_id) if doc_id else None
        if row is None or row.parent_doc_id:
            return iter(())
        if self.failed:
            self.count("documents_reindex_failed")
            self._catalog.backfills.add_backfill_progress(self.backfill_id, failed=1)
        else:
            self.count("documents_reindexed")
            self._catalog.backfills.add_backfill_progress(self.backfill_id, done=1)
        return iter(())


def build_reindex_pipeline(
    p: beam.Pipeline,
    work: Sequence[tuple[str, str]],
    settings: Settings,
    backfill: BackfillRow,
    *,
    show_progress: bool = False,
) -> None:
    """Wire a parser or chunker backfill of ``work`` ((tenant id, doc id)
    pairs) onto ``p`` (module docstring, step 2)."""
    spec = live_spec(settings)
    stored = (
        p
        | "WorkList" >> beam.Create(list(work))
        | "Pace" >> beam.ParDo(_PaceFn(backfill.max_docs_per_s or 0.0))
        | "ReadStoredCopies" >> ReadStoredCopies(settings)
    )
    out = stored["docs"] | "IndexFetchedDocuments" >> IndexFetchedDocuments(
        settings, spec, total=len(work), show_progress=show_progress
    )
    bid = backfill.backfill_id
    for i, written in enumerate(out["written"]):
        written | f"Done{i}" >> beam.ParDo(_ProgressFn(settings, bid, failed=False))
    for i, dead in enumerate([stored["dead"], *out["dead"]]):
        dead | f"WriteDeadLetters{i}" >> WriteDeadLetters(settings)
        dead | f"Failed{i}" >> beam.ParDo(_ProgressFn(settings, bid, failed=True))


def _load(catalog: Catalog, backfill_id: str) -> BackfillRow:
    row = catalog.backfills.get_backfill(backfill_id)
    if row is None:
        raise ConfigurationError(f"no backfill {backfill_id!r} (`ragsync reindex --reason ...` makes one)")
    if row.reason not in REASONS:
        raise ConfigurationError(
            f"backfill {backfill_id!r} is an {row.reason} backfill: run it with `ragsync reembed`"
        )
    return row


def _run_pipeline(
    settings: Settings, work: list[tuple[str, str]], row: BackfillRow, beam_args: Sequence[str], show: bool
) -> dict[str, int]:
    result = run_to_end(
        settings, beam_args, lambda p: build_reindex_pipeline(p, work, settings, row, show_progress=show)
    )
    return {name: counter_value(result, name) for name in REINDEX}


def run_reindex(
    settings: Settings,
    backfill_id: str,
    *,
    beam_args: Sequence[str] = (),
    show_progress: bool = False,
) -> ReindexSummary:
    """Run the parser or chunker backfill ``backfill_id`` (module docstring).

    Args:
        settings: the stores, and the parser and chunker now in use.
        backfill_id: a ``backfills`` row of reason ``parser`` or ``chunker``.
        beam_args: Beam options (default the FnApiRunner).
        show_progress: progress lines on stderr.

    Returns:
        The summary; the row holds the same counts, state and error.

    Raises:
        ConfigurationError: no such row, or one of another reason (nothing
            is recorded on it).
        Exception: what stopped the pipeline; the row is marked ``failed``
            with its cause first.
    """
    start = time.monotonic()
    catalog = open_catalog(settings)
    try:
        row = _load(catalog, backfill_id)
        candidates = catalog.backfills.reindex_candidates(row.tenant_id)
        total, work = len(candidates), _left_to_do(settings, candidates, row.reason)
        catalog.backfills.update_backfill_progress(
            backfill_id, state="running", total=total, done=total - len(work), failed=0, error=""
        )
    finally:
        catalog.close()
    if show_progress:
        print(f"[reindex] {row.reason}: {len(work)} of {total} documents to do", file=sys.stderr)
    counters = dict.fromkeys(REINDEX, 0)
    if work:
        try:
            counters = _run_pipeline(settings, work, row, beam_args, show_progress)
        except Exception as exc:
            # The requester reads it: the innermost cause in one line, no host details.
            _finish(
                settings,
                backfill_id,
                state="failed",
                error=host_free(f"the backfill stopped: {root_cause(exc)}"),
            )
            raise
    # The catalog says what is left: a document written (by this run or by a
    # newer version meanwhile) or gone is done; one still at the old parser
    # or chunker was left behind (its dead letter says why).
    catalog = open_catalog(settings)
    try:
        left = _left_to_do(settings, catalog.backfills.reindex_candidates(row.tenant_id), row.reason)
        failed = len(set(work) & set(left))
    finally:
        catalog.close()
    error = None
    if failed:
        error = (
            f"{failed} of {total} documents could not be {'parsed' if row.reason == 'parser' else 'chunked'} "
            "again and keep their previous version: their dead letters say why (GET /v1/dead-letters)"
        )
    finished = _finish(
        settings, backfill_id, state="done", done=total - failed, failed=failed, error=error or ""
    )
    return ReindexSummary(
        backfill_id=backfill_id,
        tenant_id=row.tenant_id,
        reason=row.reason,
        state=finished.state,
        total=finished.total,
        done=finished.done,
        failed=finished.failed,
        error=finished.error,
        seconds=round(time.monotonic() - start, 3),
        counters=counters,
    )


def _finish(
    settings: Settings,
    backfill_id: str,
    *,
    state: str,
    error: str,
    done: int | None = None,
    failed: int | None = None,
) -> BackfillRow:
    """Record how the backfill ended ('' error: none); returns the row."""
    catalog = open_catalog(settings)
    try:
        row = catalog.backfills.update_backfill_progress(
            backfill_id, state=state, error=error, done=done, failed=failed
        )
        assert row is not None
        return row
    finally:
        catalog.close()
