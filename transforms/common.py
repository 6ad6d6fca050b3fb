"""Shared pieces of the Beam steps: the catalog/store DoFn bases, dead-letter
conversion, counters, progress."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from ragsync import ids
from ragsync.config import Settings, open_catalog
from ragsync.counters import declared
from ragsync.display import progress_line, safe_text
from ragsync.errors import classify
from ragsync.model import (
    DeadLetter,
    DocumentPlan,
    Event,
    FetchedDocument,
    ParsedDocument,
    QueuedEvent,
    SourceFile,
)
from ragsync.writer import IndexWriter, hooks_from_environment

NAMESPACE = "ragsync"
_TRACEBACK_CHARS = 4000


def counter(name: str) -> Any:
    """A counter in the ragsync namespace (exact in batch runs).

    Raises:
        ValueError: ``name`` is not declared in ``ragsync.counters.COUNTERS``.
    """
    return Metrics.counter(NAMESPACE, declared(name))


#: Namespace of the per-stage metrics (``StageMetrics``): on Dataflow they
#: appear as job metrics ``ragsync_stage/<stage>_elements`` and so on.
STAGE_NAMESPACE = "ragsync_stage"

#: The stages that report ``StageMetrics``, in pipeline order.
STAGES = (
    "list",
    "resolve",
    "gate",
    "fetch",
    "detect",
    "route",
    "parse",
    "chunk",
    "embed",
    "write",
    "acl",
    "delete",
)


class StageMetrics:
    """Beam metrics of one stage: ``<stage>_elements`` (counter),
    ``<stage>_cpu_us`` (counter: CPU microseconds of the thread doing the
    work, or of the process where noted), ``<stage>_latency_us``
    (distribution: wall microseconds per element or batch); errors are
    counted by :class:`ToDeadLetters` as ``<stage>_errors``.

    Create in ``DoFn.setup()`` (metric objects are cheap handles; the values
    live in the runner).
    """

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._elements = Metrics.counter(STAGE_NAMESPACE, f"{stage}_elements")
        self._cpu = Metrics.counter(STAGE_NAMESPACE, f"{stage}_cpu_us")
        self._latency = Metrics.distribution(STAGE_NAMESPACE, f"{stage}_latency_us")

    def record(self, *, elements: int, cpu_s: float, wall_s: float) -> None:
        """Count ``elements`` that took ``cpu_s`` CPU and ``wall_s`` wall seconds."""
        self._elements.inc(elements)
        self._cpu.inc(int(round(cpu_s * 1e6)))
        self._latency.update(int(round(wall_s * 1e6)))

    def run(self, fn: Any, *args: Any, elements: int = 1, process_cpu: bool = False) -> list[Any]:
        """Call ``fn(*args)``, drain what it yields into a list, and record it.

        The outputs are returned, not yielded, so the time of downstream
        steps fused after this one is not counted here. ``process_cpu``
        counts the whole process's CPU (steps whose library runs its own
        threads, e.g. the model); otherwise the calling thread's. Nothing is
        recorded when ``fn`` raises (the dead letter counts the error).
        """
        cpu_clock = time.process_time if process_cpu else time.thread_time
        wall0, cpu0 = time.perf_counter(), cpu_clock()
        out = list(fn(*args))
        self.record(elements=elements, cpu_s=cpu_clock() - cpu0, wall_s=time.perf_counter() - wall0)
        return out


def stage_metrics_of(result: Any) -> dict[str, dict[str, float]]:
    """Per-stage figures of a finished pipeline: ``{stage: {"elements",
    "errors", "cpu_us", "latency_us_sum", "latency_us_count", "latency_us_max"}}``
    for every stage that reported anything."""
    from apache_beam.metrics.metric import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_namespace(STAGE_NAMESPACE))
    out: dict[str, dict[str, float]] = {}

    def slot(name: str) -> tuple[dict[str, float], str]:
        stage, _, kind = name.partition("_")
        entry = out.setdefault(
            stage,
            {
                "elements": 0,
                "errors": 0,
                "cpu_us": 0,
                "latency_us_sum": 0,
                "latency_us_count": 0,
                "latency_us_max": 0,
            },
        )
        return entry, kind

    for c in found["counters"]:
        entry, kind = slot(c.key.metric.name)
        if kind in ("elements", "errors", "cpu_us"):
            entry[kind] += int(c.committed or c.attempted or 0)
    for d in found["distributions"]:
        entry, _ = slot(d.key.metric.name)
        value = d.committed or d.attempted
        if value is not None and value.count:
            entry["latency_us_sum"] += value.sum
            entry["latency_us_count"] += value.count
            entry["latency_us_max"] = max(entry["latency_us_max"], value.max)
    return out


def counter_value(result: Any, name: str) -> int:
    """The value of a ragsync counter in a finished pipeline's result."""
    from apache_beam.metrics.metric import MetricsFilter

    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))["counters"]
    return int(sum(c.committed or c.attempted or 0 for c in counters))


def counters_of(result: Any, summary: Any, **others: Any) -> dict[str, Any]:
    """The fields of a summary dataclass: ``others`` as given, every other
    field the ragsync counter of the same name in a finished pipeline's result."""
    names = [f.name for f in dataclasses.fields(summary) if f.name not in others]
    return {**{name: counter_value(result, name) for name in names}, **others}


def _unkeyed(element: Any) -> Any:
    """The record of a ``(key, record)`` pair; anything else unchanged."""
    if isinstance(element, tuple) and len(element) == 2 and isinstance(element[0], str):
        return element[1]
    return element


def _records(element: Any) -> list[Any]:
    """The stage records a failed element stands for: the items of a batch
    (``BatchElements``, RunInference, a group of exact copies), else the
    element itself, so every document of a failed batch gets its own dead letter."""
    element = _unkeyed(element)
    if isinstance(element, (str, bytes, dict, tuple)) or dataclasses.is_dataclass(element):
        return [element]  # a record (tuples: RunInference's PredictionResult, ...)
    if isinstance(element, Iterable):
        return list(element) or [element]
    return [element]


def _identity(element: Any) -> dict[str, Any]:
    """doc_id, uri, tenant_id, source_version, attempts and payload of any
    stage record, for its dead letter."""
    element = _unkeyed(element)
    if hasattr(element, "example") and hasattr(element, "inference"):  # RunInference's PredictionResult
        element = element.example
    if isinstance(getattr(element, "plan", None), DocumentPlan):  # the embed stage's wrappers
        element = element.plan
    if isinstance(element, QueuedEvent):
        return {
            "doc_id": element.doc_id,
            "uri": element.event.content_uri,
            "tenant_id": element.tenant_id,
            "source_version": element.event.source_version,
            "attempts": element.attempts + 1,
            "payload": element.to_json(),
            "event_id": element.event.event_id,
        }
    if isinstance(element, DocumentPlan):
        element = element.doc
    if isinstance(element, ParsedDocument):
        element = element.doc
    if isinstance(element, FetchedDocument):
        s = element.source
        return {
            "doc_id": element.doc_id,
            "uri": s.uri,
            "tenant_id": s.tenant_id,
            "source_version": s.source_version,
            "attempts": s.attempts + 1,
            "payload": element.to_json(),
            "event_id": s.event_id,
        }
    if isinstance(element, SourceFile):
        return {
            "doc_id": ids.doc_id(element.tenant_id, element.source_id, element.source_object_id),
            "uri": element.uri,
            "tenant_id": element.tenant_id,
            "source_version": element.source_version,
            "attempts": element.attempts + 1,
            "payload": element.to_json(),
            "event_id": element.event_id,
        }
    if isinstance(element, dict):  # an event row that could not be resolved
        return {
            "doc_id": _row_doc_id(element),
            "uri": "",
            "tenant_id": str(element.get("tenant_id") or ""),
            "source_version": str(element.get("source_version") or ""),
            "attempts": int(element.get("attempts") or 0) + 1,
            "payload": str(element.get("payload", ""))[:4000],
            "event_id": str(element.get("event_id") or ""),
        }
    return {
        "doc_id": "",
        "uri": "",
        "tenant_id": "",
        "source_version": "",
        "attempts": 1,
        "payload": repr(element)[:4000],
    }


def _row_doc_id(row: dict[str, Any]) -> str:
    """The document id an unresolved event row names ('' when its payload is
    not an event or its tenant is unknown), so the refusal shows in that
    document's status."""
    tenant = str(row.get("tenant_id") or "")
    try:
        event = Event.from_json(str(row.get("payload") or ""))
    except (ValueError, TypeError, KeyError):
        return ""
    tenant = tenant or event.tenant_id
    return ids.doc_id(tenant, event.source_id, event.doc_id) if tenant else ""


def dead_letter_from_beam(stage: str, bad: tuple[Any, tuple[Any, str, list[str]]]) -> DeadLetter:
    """Convert Beam's ``with_exception_handling`` record to a DeadLetter.

    Beam emits ``(element, (exc_type, repr(exc), traceback_lines))``; hangs
    and crashes of an isolated step arrive as TimeoutError/BrokenProcessPool.
    A batch element is one record here: see :func:`dead_letters_from_beam`.
    """
    element, (exc_type, exc_repr, tb) = bad
    type_name = getattr(exc_type, "__name__", str(exc_type))
    error_class = getattr(exc_type, "error_class", None) or classify(type_name, exc_repr)
    message = exc_repr
    if error_class == "timeout":
        message = f"{stage} ran past its time limit ({exc_repr})"
    elif error_class == "crash":
        message = f"{stage} process died (segfault or out of memory): {exc_repr}"
    return DeadLetter(
        stage=stage,
        error_class=str(error_class),
        message=message[:2000],
        traceback="".join(tb)[-_TRACEBACK_CHARS:],
        **_identity(element),
    )


def dead_letters_from_beam(stage: str, bad: tuple[Any, tuple[Any, str, list[str]]]) -> list[DeadLetter]:
    """One DeadLetter per stage record of a failed element (a batch gives one per item).

    Args:
        stage: the failing stage.
        bad: ``(element, (exc_type, repr(exc), traceback_lines))`` from
            ``with_exception_handling`` (a ``BatchElements`` batch or a
            RunInference batch as the element, too).

    Returns:
        The dead letters, all with the same error.
    """
    element, error = bad
    return [dead_letter_from_beam(stage, (record, error)) for record in _records(element)]


def batch_item_failure(item: Any, exc: BaseException) -> Any:
    """The failure of one item of a batch (a ``BatchElements`` list), as
    ``with_exception_handling`` records a failed batch on its ``bad``
    output, with a batch of that one item: a step that takes batches yields
    this for the item that failed and goes on with the others, and the item
    becomes its own dead letter with its own error."""
    trace = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return beam.pvalue.TaggedOutput("bad", ([item], (type(exc), repr(exc), trace)))


class ListingTally:
    """What a listing found so far, kept as small files in ``directory`` so the
    steps after it (later bundles, other worker processes on this machine)
    learn a backfill's total once every shard is listed.

    Files: ``listed-<shard digest>`` holds one listed shard's count (written
    when the shard's listing completed); ``unread`` gets one line per batch
    of listed objects that ``SkipUnread`` dropped. Progress is advisory: a
    directory that cannot be written or read (a worker on another machine)
    leaves the total unknown, never fails a step, and a retried bundle of
    ``SkipUnread`` may count its objects twice (a lower total; a listed
    shard counts once whatever its retries).

    Args:
        directory: a directory of this run only (made on first write).
        shards: how many shards the listing has.
        started: ``time.monotonic()`` when the listing started (a clock
            every process of this machine shares); default now.
    """

    def __init__(self, directory: str, shards: int, started: float | None = None) -> None:
        if shards <= 0:
            raise ValueError("a listing has at least one shard")
        self.directory = directory
        self.shards = shards
        self.started = time.monotonic() if started is None else started

    def shard_listed(self, shard: str, count: int) -> None:
        """Record that ``shard`` is listed completely with ``count`` objects."""
        name = "listed-" + hashlib.sha256(shard.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        try:
            os.makedirs(self.directory, exist_ok=True)
            tmp = os.path.join(self.directory, f".{name}.{os.getpid()}")
            with open(tmp, "w", encoding="ascii") as f:
                f.write(str(count))
            os.replace(tmp, os.path.join(self.directory, name))  # readers see a whole count
        except OSError:
            pass

    def add_unread(self, n: int) -> None:
        """Record ``n`` listed objects that will not be read (unchanged)."""
        if n <= 0:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(os.path.join(self.directory, "unread"), "a", encoding="ascii") as f:
                f.write(f"{n}\n")  # one short append: whole lines even from several processes
        except OSError:
            pass

    def listed(self) -> int | None:
        """Objects listed, once every shard is listed; None before (or when
        the directory cannot be read)."""
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith("listed-")]
            if len(names) < self.shards:
                return None
            found = 0
            for name in names:
                with open(os.path.join(self.directory, name), encoding="ascii") as f:
                    found += int(f.read() or 0)
        except (OSError, ValueError):
            return None
        return found

    def total(self) -> int | None:
        """Objects listed minus those not read, once every shard is listed;
        None before (or when the directory cannot be read)."""
        found = self.listed()
        if found is None:
            return None
        try:
            with open(os.path.join(self.directory, "unread"), encoding="ascii") as f:
                unread = sum(int(line) for line in f if line.strip())
        except FileNotFoundError:
            unread = 0
        except (OSError, ValueError):
            return None
        return max(found - unread, 0)


class Progress:
    """Prints a progress line to stderr (``ragsync.display.progress_line``):
    the first item, then at most one line every ``every_s`` seconds, and one
    last line when the phase ends.

    Args:
        phase: shown at the start of each line.
        total: expected number of items, for percent and ETA: a number (0
            when unknown), or the ``ListingTally`` of a backfill's listing
            (unknown, so count and rate only, until the listing completes).
        enabled: print nothing when False.
    """

    def __init__(
        self,
        phase: str,
        unit: str,
        total: int | ListingTally = 0,
        *,
        enabled: bool = True,
        every_s: float = 2.0,
    ):
        self.phase = phase
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.every_s = every_s
        self.done = 0
        # The clock starts at the first item, not at setup: loading a model
        # or opening stores before it is not the phase's rate.
        self._start: float | None = None
        self._last = 0.0
        self._finished = False

    def add(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if not self.enabled or now - self._last < self.every_s:
            return
        self._last = now
        total = self.total.total() if isinstance(self.total, ListingTally) else self.total
        line = progress_line(self.phase, self.unit, self.done, now - self._start, total)
        print(safe_text(line), file=sys.stderr, flush=True)

    def finish(self) -> None:
        """Print the phase's last line (count, time, rate), once, when it
        counted anything: the periodic lines alone end wherever the last
        interval fell, not at the phase's real end."""
        if not self.enabled or self.done <= 0 or self._finished or self._start is None:
            return
        self._finished = True
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = self.done / elapsed
        line = f"[{self.phase}] done: {self.done} {self.unit} in {elapsed:.1f}s ({rate:.1f} {self.unit}/s)"
        print(safe_text(line), file=sys.stderr, flush=True)


class ToDeadLetters(beam.PTransform):
    """Beam dead-letter records of one stage -> ``DeadLetter`` records.

    Input: ``(element, (exc_type, repr, traceback))`` from
    ``with_exception_handling``. Output: ``DeadLetter``, one per record (a
    failed batch gives one per document in it).
    """

    def __init__(self, stage: str) -> None:
        super().__init__()
        self.stage = stage

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "ToDeadLetter" >> beam.ParDo(_ToDeadLettersFn(self.stage))


class GuardedStep(beam.PTransform):
    """A transform that is one DoFn over its input, the DoFn's failures
    turned into dead letters of its stage.

    Subclasses state only what differs: ``label_`` (the ParDo's label),
    ``output`` (the name of the processed records' output), ``stage`` and
    ``dead_label`` (the stage of the dead letters and the label of that
    step), and the DoFn: ``fn`` built from the settings and ``dim``, or
    :meth:`make_fn` overridden. Outputs: ``{output: ..., "dead": DeadLetter}``.

    Args:
        settings: stores and limits, for the DoFn.
        dim: the vectors' dimension (the steps that write the stores).
    """

    fn: Any
    label_: str
    output: str
    stage: str
    dead_label: str

    def __init__(self, settings: Settings, dim: int = 0) -> None:
        super().__init__()
        self.settings = settings
        self.dim = dim

    def make_fn(self) -> beam.DoFn:
        """The DoFn of the step (default: ``fn(settings, dim)``)."""
        return self.fn(self.settings, self.dim)

    def expand(self, pcoll: beam.PCollection) -> dict[str, beam.PCollection]:
        out = pcoll | self.label_ >> beam.ParDo(self.make_fn()).with_exception_handling()
        return {self.output: out["good"], "dead": out["bad"] | self.dead_label >> ToDeadLetters(self.stage)}


class _ToDeadLettersFn(beam.DoFn):
    """Beam's failure record -> DeadLetters, counting ``<stage>_errors``."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def setup(self) -> None:
        self._errors = Metrics.counter(STAGE_NAMESPACE, f"{self.stage}_errors")

    def process(self, bad: tuple[Any, tuple[Any, str, list[str]]]) -> Iterator[DeadLetter]:
        letters = dead_letters_from_beam(self.stage, bad)
        self._errors.inc(len(letters))
        yield from letters


class CatalogDoFn(beam.DoFn):
    """Base for steps that read or write the catalog: one ``Catalog`` per DoFn
    instance, opened in ``setup()`` and closed in ``teardown()`` (a Catalog
    holds a connection pool and does not pickle).

    Steps count with :meth:`count` (ragsync counters by name) and, when
    ``metrics_stage`` names their stage, time their work with
    ``self._stage`` (``StageMetrics`` made in ``setup()``).

    Args:
        settings: where the catalog is; None runs the step without one
            (``self._catalog`` stays None: the gate's catalog-free tests).
    """

    settings: Settings
    metrics_stage: str = ""
    _stage: StageMetrics

    def __init__(self, settings: Settings | None) -> None:
        # None only for the gate's catalog-free tests; every other step has settings.
        self.settings = settings  # type: ignore[assignment]
        self._catalog: Any = None
        self._counters: dict[str, Any] = {}

    def setup(self) -> None:
        if self.settings is not None:
            self._catalog = open_catalog(self.settings)
        if self.metrics_stage:
            self._stage = StageMetrics(self.metrics_stage)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the ragsync counter ``name`` (its handle made once per instance)."""
        handle = self._counters.get(name)
        if handle is None:
            handle = self._counters[name] = counter(name)
        handle.inc(n)

    def teardown(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None


class ProgressDoFn(CatalogDoFn):
    """A catalog step that prints progress lines: ``self._progress`` (made in
    ``setup()``) counts ``progress_unit`` of phase ``progress_phase``.

    Args:
        settings: where the catalog is.
        total: expected items, for percent and ETA (0 when unknown; a
            ``ListingTally`` while a backfill lists).
        show_progress: print the lines (to stderr).
    """

    progress_phase: str
    progress_unit: str

    def __init__(
        self, settings: Settings, *, total: int | ListingTally = 0, show_progress: bool = False
    ) -> None:
        super().__init__(settings)
        self.total = total
        self.show_progress = show_progress

    def setup(self) -> None:
        super().setup()
        phase, unit = self.progress_phase, self.progress_unit
        self._progress = Progress(phase, unit, self.total, enabled=self.show_progress)

    def teardown(self) -> None:
        self._progress.finish()
        super().teardown()


class CatalogStep(beam.PTransform):
    """A transform that is one catalog DoFn over its input: subclasses name
    the DoFn class (``fn``, built from the settings) and the step's label.
    """

    fn: type[CatalogDoFn]
    label_: str

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | self.label_ >> beam.ParDo(self.fn(self.settings))


class WriterDoFn(CatalogDoFn):
    """Base for steps that write the catalog and both indexes: they call one
    ``ragsync.writer.IndexWriter`` (``self.writer``), opened in ``setup()``
    (with the hooks ``$RAGSYNC_WRITE_HOOKS`` names, and this step's counters)
    and closed in ``teardown()``. ``self._catalog`` is the writer's catalog.

    Args:
        settings: the home.
        dim: the live vectors' dimension.
    """

    writer: IndexWriter  # set by setup()

    def __init__(self, settings: Settings, dim: int) -> None:
        super().__init__(settings)
        self.dim = dim

    def setup(self) -> None:
        if self.metrics_stage:
            self._stage = StageMetrics(self.metrics_stage)
        self.writer = IndexWriter.open(
            self.settings, self.dim, hooks=hooks_from_environment(), count=self.count
        )
        self._catalog = self.writer.catalog

    def teardown(self) -> None:
        writer = self.__dict__.pop("writer", None)
        if writer is not None:
            writer.close()  # its catalog too
        self._catalog = None
