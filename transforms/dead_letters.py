"""Failures of the steps as dead letters: Beam's ``with_exception_handling``
records to ``DeadLetter`` rows (:func:`dead_letter_from_beam`,
:func:`dead_letters_from_beam`, one per document of a failed batch), one
failed item of a batch (:func:`batch_item_failure`), the transforms
that route a step's failures (:class:`ToDeadLetters`, :class:`GuardedStep`),
and the sink that records them or queues their event again
(:class:`WriteDeadLetters`)."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from ragsync import ids
from ragsync.config import Settings
from ragsync.decisions import FailureRoute, backoff_delay, failure_route, retry_dead_letters
from ragsync.errors import classify, is_retryable
from ragsync.model import (
    DeadLetter,
    DocumentPlan,
    Event,
    FetchedDocument,
    ParsedDocument,
    QueuedEvent,
    SourceFile,
    payload_field,
)
from ragsync.ops import lifecycle
from transforms.metrics import STAGE_NAMESPACE
from transforms.steps import CatalogDoFn

_TRACEBACK_CHARS = 4000


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


class _DeadLetterSinkFn(CatalogDoFn):
    """DeadLetter -> a row in the dead-letter table (once per failure: a
    replay adds none); the document's status becomes ``dead_letter``.

    Work that came from an event and failed in a way that may pass later is
    not dead-lettered yet (``ragsync.decisions.failure_route``): the event
    goes back to the catalog's queue after an exponential backoff with
    jitter, until ``max_attempts`` deliveries failed. An event read from
    Pub/Sub or Kafka has no queue row (its message is acknowledged once the
    stream handled it): the row is written now from the failed work's
    payload (``Catalog.retry_event_later(replay=...)``), so the retry is
    durable and served with the queue's lanes and backoff. When no row can
    run it again (the event cannot be rebuilt, or its attempts are used up)
    it is a dead letter (``ragsync.decisions.retry_dead_letters``), never
    only a log line.
    """

    def __init__(self, settings: Settings, max_attempts: int) -> None:
        super().__init__(settings)
        self.max_attempts = max_attempts

    def process(self, dl: DeadLetter) -> Iterator[str]:
        if lifecycle.stopping():
            # The process is being stopped: this failure may be the stop's own
            # doing (a parse child it ended). Not recorded: the next run redoes it.
            return
        route = failure_route(dl.event_id, is_retryable(dl.error_class), dl.attempts, self.max_attempts)
        if route == FailureRoute.RETRY:
            state = self._catalog.queue.retry_event_later(
                (dl.tenant_id, dl.event_id),
                backoff_delay(dl.attempts),
                max_attempts=self.max_attempts,
                replay=replay_event(dl),
                attempts=dl.attempts,
            )
            if not retry_dead_letters(state):
                logging.getLogger("ragsync.retry").warning(
                    "event %s: %s failed (%s), queued for retry (attempt %d of %d): %s",
                    dl.event_id,
                    dl.stage,
                    dl.error_class,
                    dl.attempts,
                    self.max_attempts,
                    dl.message,
                )
                self.count("events_retried")
                return
        source_id = payload_field(dl.payload, "source_id")
        self._catalog.dead_letters.record_dead_letter(
            dl, source_id=source_id, parser_version=self.settings.parser_version
        )
        if dl.event_id:
            self._catalog.queue.ack_events([(dl.tenant_id, dl.event_id)], "dead")
        self.count("dead_lettered")
        yield dl.error_class


def replay_event(dl: DeadLetter) -> Event | None:
    """The event behind a failed piece of work, to queue again.

    Input: a ``DeadLetter`` whose payload is any stage record of event work
    (the event row, a ``QueuedEvent``, a ``SourceFile`` or a
    ``FetchedDocument``). Output: the validated event with the dead letter's
    tenant, or None when the payload holds no event that still validates.
    Never raises.
    """
    from connectors.events import event_or_none
    from ragsync.catalog.dead_letters import event_of_payload

    data = event_of_payload(dl.payload)
    event = event_or_none(data) if data is not None else None
    if event is None or event.event_id != dl.event_id:
        return None
    return dataclasses.replace(event, tenant_id=dl.tenant_id or event.tenant_id)


class WriteDeadLetters(beam.PTransform):
    """Input: ``DeadLetter``. Output: error classes written (for counting).
    Retryable event failures are re-queued instead (see the sink's doc)."""

    def __init__(self, settings: Settings, *, max_attempts: int = 5) -> None:
        super().__init__()
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.settings = settings
        self.max_attempts = max_attempts

    def expand(self, dead: beam.PCollection) -> beam.PCollection:
        return dead | "WriteDeadLetter" >> beam.ParDo(_DeadLetterSinkFn(self.settings, self.max_attempts))
