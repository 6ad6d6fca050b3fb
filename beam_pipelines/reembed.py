"""Re-embedding into a new index version: bounded, rate-limited, resumable, gated.

``run_reembed(settings, "multilingual-e5-small", golden=...)``:

1. Find the ``building`` version for that model (a crashed run to resume) or
   create the next one beside the live version (Milvus ``{collection}_v{n}``,
   tantivy ``HOME/keyword_v{n}``).
2. Work list = catalog chunk ids minus the ids already present in *both* of
   the target's stores (chunk ids are deterministic, so resuming is this set
   difference); target rows whose chunk is gone from the catalog are deleted.
3. A Beam pipeline (FnApiRunner by default) reads the stored chunks from the
   catalog (nothing is fetched, parsed or OCR'd again), embeds them with the
   target model through the embedding cache keyed by (text_hash,
   model_version), and upserts them into the target's vector collection and
   keyword index, at most ``max_docs_per_s`` documents per second. Progress
   (total/done/failed, in chunks) goes to the catalog's ``backfills`` row
   ``reembed-v{n}`` after every written batch.
4. Steps 2-3 repeat (at most ``CATCH_UP_PASSES`` times) until nothing is
   left, which picks up documents the live pipeline changed meanwhile.
   Pipelines that run while the version is ``building`` write every change
   to it too (dual write, ``ragsync.index.service.IndexService``), so it does not
   fall behind before the flip.
5. The gate: the catalog, the target vector collection and the target
   keyword index hold exactly the same chunk ids with no duplicate rows, and
   for every format of the golden set, vector-only and hybrid Recall@10 of
   the target are each >= the live version's minus ``tolerance``. Pass: the
   aliases flip (the old version is retired, kept 7 days). Fail: the target
   is marked ``refused`` and the old version stays live. Without a golden
   set nothing is flipped: the version stays ``building`` (complete) for a
   manual ``ragsync index-versions flip N``.

Fault injection for tests goes through the writer's hooks
(``ragsync.index.service.WriteHooks.after_reembedded_documents``, loaded from
``$RAGSYNC_WRITE_HOOKS``): ``tests/crash_hooks.py`` ends the process there.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import apache_beam as beam
import numpy as np

from beam_pipelines.runners import run_to_end
from ragsync.catalog import Catalog
from ragsync.config import Settings, open_catalog
from ragsync.counters import REEMBED
from ragsync.embedding.models import EmbeddingModel, embed_with_cache, get_model
from ragsync.errors import ConfigurationError
from ragsync.index import versions as iv
from ragsync.index.hooks import hooks_from_environment
from ragsync.index.service import IndexService
from ragsync.model import Chunk
from ragsync.query.evaluation import compare, evaluate, load_golden
from transforms.metrics import counter, counter_value
from transforms.steps import CatalogDoFn

CATCH_UP_PASSES = 3
DEFAULT_TOLERANCE = 0.02


@dataclass
class ReembedSummary:
    """What a re-embedding did. Field names are the ``--json`` keys.

    ``state`` is the target version's state afterwards: ``live`` (flipped),
    ``refused`` or ``building`` (complete but not flipped: no golden set).
    ``chunks_per_s`` is chunks written / pipeline seconds (embedding included).
    """

    version: int
    model: str
    state: str
    total: int
    already_present: int
    chunks_written: int
    chunks_embedded: int
    embedding_cache_hits: int
    failed: int
    orphans_removed: int
    passes: int
    pipeline_seconds: float
    chunks_per_s: float
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RateLimiter:
    """Token bucket: ``rate`` tokens per second, bursts up to ``max(1, rate)``.

    ``rate <= 0`` means unlimited. Thread-safe; ``acquire`` sleeps.
    """

    def __init__(self, rate: float) -> None:
        self.rate = float(rate)
        self.capacity = max(1.0, self.rate)
        self._tokens = self.capacity
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self, n: float = 1.0) -> None:
        if self.rate <= 0:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= n:
                    self._tokens -= n
                    return
                wait = (n - self._tokens) / self.rate
            time.sleep(wait)


# ------------------------------------------------------------- backfills row


def _backfill_id(version: int) -> str:
    return f"reembed-v{version}"


def _progress_start(
    catalog: Catalog, version: iv.IndexVersion, total: int, done: int, max_docs_per_s: float
) -> None:
    """Create or reset the ``backfills`` row of this re-embedding (done = present now)."""
    catalog.backfills.start_backfill(
        _backfill_id(version.version),
        reason="embedding_model",
        target_index=version.vector_collection,
        cursor=json.dumps({"model": version.model_name, "keyword_index": version.keyword_index}),
        total=total,
        done=done,
        max_docs_per_s=max_docs_per_s or None,
    )


def backfill_progress(settings: Settings, version: int) -> dict[str, Any] | None:
    """The ``backfills`` row of re-embedding into ``version`` as a dict (None when absent)."""
    catalog = open_catalog(settings)
    try:
        row = catalog.backfills.get_backfill(_backfill_id(version))
        return asdict(row) if row is not None else None
    finally:
        catalog.close()


# ------------------------------------------------------------------ pipeline


class _ReembedFn(CatalogDoFn):
    """(doc_id, chunk ids) -> nothing; embeds and writes in batches of about
    ``batch_chunks`` chunks. Counters: chunks_written, chunks_embedded,
    embedding_cache_hits, chunks_failed, documents_written."""

    def __init__(
        self,
        settings: Settings,
        live_dim: int,
        version: iv.IndexVersion,
        batch_chunks: int,
        max_docs_per_s: float,
        show_progress: bool,
    ) -> None:
        super().__init__(settings)
        self.live_dim = live_dim
        self.version = version
        self.batch_chunks = batch_chunks
        self.max_docs_per_s = max_docs_per_s
        self.show_progress = show_progress

    def setup(self) -> None:
        self._model: EmbeddingModel = get_model(self.version.model_name, self.settings)
        if self._model.version != self.version.model_version:
            raise ConfigurationError(
                f"index v{self.version.version} was built with {self.version.model_version}, "
                f"but {self.version.model_name} is now {self._model.version}"
            )
        # The version being built is one of the service's building versions;
        # its stores are written through the service only.
        self._service = IndexService.open(self.settings, self.live_dim)
        self._catalog = self._service.catalog
        self._limiter = RateLimiter(self.max_docs_per_s)
        self._hooks = hooks_from_environment()
        self._docs_written = 0
        self._written = counter("chunks_written")
        self._embedded = counter("chunks_embedded")
        self._hits = counter("embedding_cache_hits")
        self._failed = counter("chunks_failed")
        self._docs = counter("documents_written")

    def teardown(self) -> None:
        service = self.__dict__.pop("_service", None)
        if service is not None:
            service.close()  # its catalog too
        self._catalog = None

    def start_bundle(self) -> None:
        self._buffer: list[tuple[str, Sequence[str]]] = []
        self._buffered = 0

    def process(self, element: tuple[str, Sequence[str]]) -> Iterator[Any]:
        self._limiter.acquire(1)
        self._buffer.append(element)
        self._buffered += len(element[1])
        if self._buffered >= self.batch_chunks:
            self._flush()
        return iter(())

    def finish_bundle(self) -> None:
        self._flush()

    def _encode_docs(self, docs: list[list[Chunk]]) -> tuple[list[Chunk], list[np.ndarray], int]:
        """Vectors for every chunk of ``docs`` through the shared embedding
        path (``ragsync.embedding.models.embed_with_cache``: cache first, batches of
        ``embed_batch_size``, a failing text isolated); a document with a
        chunk the model rejects is left out and counted failed (the gate
        then refuses the version). Returns (chunks, vectors, failed chunks)."""
        got = embed_with_cache(
            self._catalog,
            self._model,
            [c for doc in docs for c in doc],
            batch_size=self.settings.embed_batch_size,
        )
        self._hits.inc(got.hits)
        self._embedded.inc(got.embedded)
        out_chunks: list[Chunk] = []
        out_vecs: list[np.ndarray] = []
        failed = 0
        for doc in docs:
            if any(c.text_hash not in got.vectors for c in doc):
                failed += len(doc)
                continue
            out_chunks += doc
            out_vecs += [got.vectors[c.text_hash] for c in doc]
        return out_chunks, out_vecs, failed

    def _flush(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer, self._buffered = self._buffer, [], 0
        stored = self._catalog.chunks.chunks_by_ids([cid for _, ids in batch for cid in ids])
        docs = [[stored[c] for c in ids if c in stored] for _, ids in batch]
        docs = [d for d in docs if d]
        chunks, vectors, failed = self._encode_docs(docs)
        if chunks:
            self._service.write_into_version(self.version.version, chunks, [v.tolist() for v in vectors])
        self._written.inc(len(chunks))
        self._failed.inc(failed)
        self._docs.inc(len(batch))
        progress_id = _backfill_id(self.version.version)
        self._catalog.backfills.add_backfill_progress(progress_id, done=len(chunks), failed=failed)
        self._docs_written += len(batch)
        if self.show_progress:
            print(f"[reembed v{self.version.version}] +{len(chunks)} chunks", file=sys.stderr, flush=True)
        self._hooks.after_reembedded_documents(self._docs_written)


def _target_state(settings: Settings, version: iv.IndexVersion) -> tuple[set[str], set[str], int, int]:
    """(vector ids, keyword ids, vector row count, keyword row count) of the target."""
    vec = iv.open_version_vector(settings, version)
    kw = iv.open_version_keyword(settings, version)
    try:
        return (
            vec.chunk_ids(),
            kw.chunk_ids(),
            sum(vec.count_by_doc().values()),
            sum(kw.count_by_doc().values()),
        )
    finally:
        kw.close()
        vec.close()


def _delete_orphans(settings: Settings, live_dim: int, version: iv.IndexVersion, orphans: set[str]) -> int:
    """Delete target rows whose chunk left the catalog (any tenant), through the index service."""
    if not orphans:
        return 0
    with IndexService.open(settings, live_dim) as service:
        return service.prune_version(version.version, orphans)


def _run_pipeline(
    settings: Settings,
    live_dim: int,
    version: iv.IndexVersion,
    work: list[tuple[str, tuple[str, ...]]],
    *,
    batch_chunks: int,
    max_docs_per_s: float,
    beam_args: Sequence[str],
    show_progress: bool,
) -> dict[str, int]:
    def build(p: beam.Pipeline) -> None:
        _ = (
            p
            | "StoredChunks" >> beam.Create(work)
            | "EmbedAndWrite"
            >> beam.ParDo(
                _ReembedFn(settings, live_dim, version, batch_chunks, max_docs_per_s, show_progress)
            )
        )

    result = run_to_end(settings, beam_args, build)
    return {name: counter_value(result, name) for name in REEMBED}


@dataclass
class _Passes:
    """What the catch-up passes of a re-embedding did (``ReembedSummary``'s fields)."""

    totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("chunks_written", "chunks_embedded", "embedding_cache_hits", "chunks_failed"), 0
        )
    )
    orphans_removed: int = 0
    already_present: int = -1
    pipeline_seconds: float = 0.0
    passes: int = 0


def _catch_up(
    settings: Settings,
    live: iv.IndexVersion,
    target: iv.IndexVersion,
    *,
    batch_chunks: int,
    max_docs_per_s: float,
    beam_args: Sequence[str],
    show_progress: bool,
) -> _Passes:
    """Steps 2-4 of the module docstring: at most ``CATCH_UP_PASSES`` passes,
    each embedding what the catalog holds and the target lacks (a set
    difference of deterministic ids) after pruning what left the catalog."""
    out = _Passes()
    for _ in range(CATCH_UP_PASSES):
        catalog = open_catalog(settings)
        try:
            wanted = catalog.chunks.chunk_docs()
        finally:
            catalog.close()
        vec_ids, kw_ids, _, _ = _target_state(settings, target)
        present = vec_ids & kw_ids & set(wanted)
        out.orphans_removed += _delete_orphans(settings, live.dim, target, (vec_ids | kw_ids) - set(wanted))
        if out.already_present < 0:
            out.already_present = len(present)
        todo: dict[str, list[str]] = {}
        for cid in sorted(set(wanted) - present):
            todo.setdefault(wanted[cid], []).append(cid)
        catalog = open_catalog(settings)
        try:
            _progress_start(catalog, target, len(wanted), len(present), max_docs_per_s)
        finally:
            catalog.close()
        if not todo:
            break
        out.passes += 1
        t0 = time.monotonic()
        got = _run_pipeline(
            settings,
            live.dim,
            target,
            [(doc, tuple(ids)) for doc, ids in sorted(todo.items())],
            batch_chunks=batch_chunks,
            max_docs_per_s=max_docs_per_s,
            beam_args=beam_args,
            show_progress=show_progress,
        )
        out.pipeline_seconds += time.monotonic() - t0
        for k, v in got.items():
            out.totals[k] += v
        if got["chunks_failed"]:
            break  # the same chunks would fail again; the gate reports it
    return out


def _gate(
    settings: Settings,
    live: iv.IndexVersion,
    target: iv.IndexVersion,
    golden_set: Any,
    tolerance: float,
    groups: Sequence[str],
) -> tuple[set[str], dict[str, int], dict[str, Any], str]:
    """Step 5: chunk counts agree and, with a golden set, Recall@10 holds per
    format and mode; then flip, refuse or leave the target building. Returns
    (catalog chunk ids, row counts, the gate's report, the target's state)."""
    catalog = open_catalog(settings)
    try:
        wanted_ids = set(catalog.chunks.chunk_docs())
    finally:
        catalog.close()
    vec_ids, kw_ids, vec_rows, kw_rows = _target_state(settings, target)
    counts = {"catalog": len(wanted_ids), "vector": vec_rows, "keyword": kw_rows}
    gate: dict[str, Any] = {"tolerance": tolerance, "counts_agree": False, "reasons": []}
    reasons: list[str] = gate["reasons"]
    if not (wanted_ids == vec_ids == kw_ids and vec_rows == kw_rows == len(wanted_ids)):
        reasons.append(
            f"chunk counts disagree: catalog {len(wanted_ids)}, vector {vec_rows} rows "
            f"({len(vec_ids)} ids), keyword {kw_rows} rows ({len(kw_ids)} ids)"
        )
    else:
        gate["counts_agree"] = True
    if golden_set is not None and not reasons:
        before = evaluate(settings, golden_set, version=live, groups=groups)
        after = evaluate(
            settings, golden_set, version=iv.get_version(settings, target.version), groups=groups
        )
        _, why = compare(before, after, tolerance)
        reasons += why
        gate["live"] = before.to_dict()
        gate["candidate"] = after.to_dict()
    return wanted_ids, counts, gate, _settle(settings, target, gate, golden_set is not None)


def _settle(settings: Settings, target: iv.IndexVersion, gate: dict[str, Any], flip: bool) -> str:
    """Record the gate on the target and flip, refuse or keep it building; returns its state."""
    note = json.dumps(gate, sort_keys=True)
    catalog = open_catalog(settings)
    try:
        if gate["reasons"]:
            iv.mark_refused(settings, target.version, note)
            state = iv.REFUSED
        elif not flip:
            iv.set_note(settings, target.version, note)
            state = iv.BUILDING
        else:
            iv.set_note(settings, target.version, note)
            iv.flip(settings, target.version)
            state = iv.LIVE
        progress = {iv.LIVE: "flipped", iv.REFUSED: "refused", iv.BUILDING: "built"}[state]
        catalog.backfills.update_backfill_progress(_backfill_id(target.version), state=progress)
    finally:
        catalog.close()
    return state


def run_reembed(
    settings: Settings,
    model_name: str,
    *,
    max_docs_per_s: float = 0.0,
    tolerance: float = DEFAULT_TOLERANCE,
    golden: str | None = None,
    groups: Sequence[str] = ("everyone",),
    batch_chunks: int | None = None,
    beam_args: Sequence[str] = (),
    show_progress: bool = False,
) -> ReembedSummary:
    """Re-embed every stored chunk with ``model_name`` into a new (or the
    resumable ``building``) index version and gate the flip (module docstring).

    Args:
        settings: the stores.
        model_name: a registered model (``ragsync.embedding.models.get_model``).
        max_docs_per_s: documents per second; 0 = unlimited.
        tolerance: largest allowed Recall@10 drop per format and mode.
        golden: golden JSONL file; None = build only, never flip.
        groups: groups the golden queries run as.
        batch_chunks: chunks per embed/write batch (default
            ``settings.embed_batch_size``).
        beam_args: Beam options (default the FnApiRunner).
        show_progress: progress lines on stderr.

    Returns:
        The summary; ``state`` says whether it went live.

    Raises:
        ConfigurationError: unknown model, nothing indexed yet, a model/dim
            mismatch with the version being resumed, Elasticsearch keyword
            index, or an unreadable golden file.
    """
    start = time.monotonic()
    live = iv.live_version(settings)
    if not settings.embed_backend:  # unset: stay on the live index's backend
        settings = iv.settings_for_version(settings, live)
    model = get_model(model_name, settings)
    golden_set = load_golden(golden) if golden else None
    target = iv.building_version(settings, model_name)
    if target is not None and target.model_version != model.version:
        target = None
    if target is None:
        target = iv.create_version(settings, model.name, model.version, model.dim)
    if show_progress:
        print(
            f"[reembed] {model.version} into index v{target.version} (live: v{live.version})", file=sys.stderr
        )

    passes = _catch_up(
        settings,
        live,
        target,
        batch_chunks=batch_chunks or settings.embed_batch_size,
        max_docs_per_s=max_docs_per_s,
        beam_args=beam_args,
        show_progress=show_progress,
    )
    wanted_ids, counts, gate, state = _gate(settings, live, target, golden_set, tolerance, groups)
    totals, written = passes.totals, passes.totals["chunks_written"]
    return ReembedSummary(
        version=target.version,
        model=model.version,
        state=state,
        total=len(wanted_ids),
        already_present=max(passes.already_present, 0),
        chunks_written=written,
        chunks_embedded=totals["chunks_embedded"],
        embedding_cache_hits=totals["embedding_cache_hits"],
        failed=totals["chunks_failed"],
        orphans_removed=passes.orphans_removed,
        passes=passes.passes,
        pipeline_seconds=round(passes.pipeline_seconds, 3),
        chunks_per_s=round(written / passes.pipeline_seconds, 2) if passes.pipeline_seconds > 0 else 0.0,
        seconds=round(time.monotonic() - start, 3),
        counts=counts,
        gate=gate,
    )
