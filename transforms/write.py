"""Stage 10: write both indexes, flip the version, delete what vanished; and
the dead-letter sink."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync import lifecycle
from ragsync.config import Settings
from ragsync.decisions import FailureRoute, backoff_delay, failure_route, retry_dead_letters
from ragsync.errors import is_retryable
from ragsync.model import DeadLetter, Event, FetchedDocument, payload_field
from ragsync.writer import EmbeddedPlan
from transforms.dead_letters import GuardedStep, ToDeadLetters, batch_item_failure
from transforms.progress import ListingTally, Progress
from transforms.steps import CatalogDoFn, WriterDoFn

WRITE_BATCH_CHUNKS = 256
"""New chunks per write batch: the documents of one batch share one vector
upsert and one keyword-index commit (a commit syncs files to disk: ~10 ms,
more than the rest of a small document's write)."""


def _write_size(embedded: EmbeddedPlan) -> int:
    return max(1, len(embedded.plan.new_ids))


class _WriteFn(WriterDoFn):
    """A batch of EmbeddedPlans -> the DocumentPlan of each document once
    written (``superseded`` when a newer version overtook it; a document
    that fails goes to ``bad`` on its own, the others of the batch go on).
    The writing, its order and what a crash anywhere leaves:
    ``ragsync.writer.IndexWriter.write_batch``."""

    metrics_stage = "write"

    def __init__(self, settings: Settings, dim: int, total: int | ListingTally, show_progress: bool) -> None:
        super().__init__(settings, dim)
        self.total = total
        self.show_progress = show_progress

    def setup(self) -> None:
        super().setup()
        self._progress = Progress("write", "docs", self.total, enabled=self.show_progress)

    def process(self, batch: list[EmbeddedPlan]) -> Iterator[Any]:
        yield from self._stage.run(self._write_batch, batch, elements=len(batch))

    def teardown(self) -> None:
        self._progress.finish()
        super().teardown()

    def _write_batch(self, batch: list[EmbeddedPlan]) -> Iterator[Any]:
        outcome = self.writer.write_batch(batch)
        for plan in outcome.superseded:
            yield beam.pvalue.TaggedOutput("superseded", plan)
        for item, exc in outcome.failed:
            yield batch_item_failure(item, exc)
        for embedded in outcome.written:
            self._progress.add()
            yield embedded.plan


class WriteIndexes(beam.PTransform):
    """Write planned documents to both indexes and the catalog.

    Input: ``EmbeddedPlan``. Outputs: ``written`` (the ``DocumentPlan`` of
    each document now live), ``superseded`` (plans of event-driven work
    overtaken by a newer version or a delete: nothing written) and ``dead`` (a list of ``DeadLetter``
    PCollections, left unflattened: see ``transforms/chain.py``).
    """

    def __init__(
        self, settings: Settings, dim: int, *, total: int | ListingTally = 0, show_progress: bool = False
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.settings = settings
        self.dim = dim
        self.total = total
        self.show_progress = show_progress

    def expand(self, embedded: beam.PCollection) -> dict[str, Any]:
        batches = embedded | "BatchForWrite" >> beam.BatchElements(
            min_batch_size=WRITE_BATCH_CHUNKS,
            max_batch_size=WRITE_BATCH_CHUNKS,
            element_size_fn=_write_size,
        )
        out = batches | "Write" >> beam.ParDo(
            _WriteFn(self.settings, self.dim, self.total, self.show_progress)
        ).with_outputs("superseded", main="written").with_exception_handling(main_tag="written")
        return {
            "written": out["written"],
            "superseded": out["superseded"],
            "dead": [out["bad"] | "WriteDeadLetters" >> ToDeadLetters("write")],
        }


class _RecordDuplicateFn(WriterDoFn):
    """FetchedDocument (exact copy) -> the same, once its catalog row links
    the canonical copy and the canonical copy's chunks carry the copy's
    groups too (``ragsync.writer.IndexWriter.record_duplicate``; a copy whose
    holder was deleted meanwhile raises a retryable ``WriteError``)."""

    def process(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        self.writer.record_duplicate(doc)
        yield doc


class RecordDuplicates(GuardedStep):
    """Input: ``FetchedDocument`` copies. Outputs: ``recorded`` (the same,
    once recorded) and ``dead`` (``DeadLetter``)."""

    fn = _RecordDuplicateFn
    label_, output, stage, dead_label = "RecordDuplicate", "recorded", "copies", "DuplicateDeadLetters"


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
            state = self._catalog.retry_event_later(
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
        self._catalog.record_dead_letter(dl, source_id=source_id, parser_version=self.settings.parser_version)
        if dl.event_id:
            self._catalog.ack_events([(dl.tenant_id, dl.event_id)], "dead")
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
