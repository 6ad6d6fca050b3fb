"""Acknowledge events once their work is finished, and measure freshness."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ragsync.catalog.queue import lane_of_op
from ragsync.model import DocumentPlan, FetchedDocument, Lane, QueuedEvent
from transforms.steps import CatalogDoFn, CatalogStep


@dataclass(frozen=True)
class Outcome:
    """How an event ended.

    Attributes:
        event_id: the event ('' for backfill work, which is not acknowledged).
        source_id: its source.
        tenant_id: its tenant.
        op: upsert, delete or acl.
        lane: fast or slow (the lane its document took); priority for
            deletes and permission changes.
        event_time: when the change happened (epoch seconds).
        state: done, stale or duplicate.
    """

    event_id: str
    source_id: str
    tenant_id: str
    op: str
    lane: str
    event_time: float
    state: str


def outcome_of(record: Any, state: str = "done") -> Outcome:
    """The Outcome of a finished record of any stage."""
    if isinstance(record, DocumentPlan):
        record = record.doc
    if isinstance(record, FetchedDocument):
        s = record.source
        return Outcome(
            s.event_id,
            s.source_id,
            s.tenant_id,
            "upsert",
            record.lane or Lane.FAST.value,
            s.event_time,
            state,
        )
    if isinstance(record, QueuedEvent):
        e = record.event
        # Deletes and permission changes are served by the queue's priority
        # lane (``ragsync.catalog.queue.lane_of_op``): their freshness is that lane's.
        return Outcome(e.event_id, e.source_id, record.tenant_id, e.op, lane_of_op(e.op), e.event_time, state)
    raise TypeError(f"no outcome for {type(record).__name__}")


class _AckFn(CatalogDoFn):
    """Outcome -> event row finished; applied events get a freshness row."""

    def process(self, outcome: Outcome) -> Iterator[str]:
        if not outcome.event_id:
            return
        if outcome.state == "done":
            self._catalog.freshness.record_freshness(
                [
                    {
                        "event_id": outcome.event_id,
                        "source_id": outcome.source_id,
                        "tenant_id": outcome.tenant_id,
                        "op": outcome.op,
                        "lane": outcome.lane,
                        "event_time": outcome.event_time,
                        "applied_at": time.time(),
                    }
                ]
            )
            self.count("events_applied")
        self._catalog.queue.ack_events([(outcome.tenant_id, outcome.event_id)], outcome.state)
        yield outcome.event_id


class AckEvents(CatalogStep):
    """Input: ``Outcome``. Output: acknowledged event ids."""

    fn = _AckFn
    label_ = "Ack"
