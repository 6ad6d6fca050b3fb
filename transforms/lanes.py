"""Lanes of the local event queue: hand slow work to the slow lane.

The stream serves the queue's lanes with two pipelines (``beam_pipelines.
streaming``): one for the ``priority`` lane (deletes, permission changes)
and the ``fast`` lane (content), one for the ``slow`` lane (scans, very
large files). Whether a document is slow is known only after its bytes are
fetched and its type detected; the fast pipeline then hands the event over
instead of parsing it, so an OCR job never shares a bundle with a wiki edit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from ragsync.model import FetchedDocument
from transforms.dead_letters import GuardedStep
from transforms.steps import CatalogDoFn

SLOW = "slow"


class _HandToSlowLaneFn(CatalogDoFn):
    """FetchedDocument (detected slow, from an event) -> its event moved to the
    ``slow`` lane, its lease ended so the slow pipeline takes it at once."""

    def process(self, doc: FetchedDocument) -> Iterator[Any]:
        src = doc.source
        if not src.event_id:
            raise ValueError("slow-lane hand-off applies to event-driven work only")
        self._catalog.queue.move_to_lane([(src.tenant_id, src.event_id)], SLOW)
        self.count("events_to_slow_lane")
        yield src.event_id


class HandToSlowLane(GuardedStep):
    """Input: ``FetchedDocument`` routed to the slow lane. Outputs: ``handed``
    (event ids moved to the slow lane) and ``dead`` (``DeadLetter``)."""

    label_, output, stage, dead_label = "Hand", "handed", "route", "HandDeadLetters"

    def make_fn(self) -> beam.DoFn:
        return _HandToSlowLaneFn(self.settings)
