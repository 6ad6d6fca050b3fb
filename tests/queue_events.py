"""Change events for tests that feed the queue directly (as a Pub/Sub or
Kafka message would arrive): built as the wire format, parsed and enqueued
by the catalog like ``ragsync events push``."""

from __future__ import annotations

import time
from typing import Any

from beam_pipelines.streaming import StreamSummary, run_stream
from connectors.events import parse_event
from ragsync.config import Settings, open_catalog


def change_event(
    source_id: str,
    doc: str,
    op: str,
    version: int,
    groups: list[str],
    uri: str = "",
    eid: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """One event as JSON-ready dict; ``event_time`` one second ago, no
    ``content_uri``/``event_id`` unless given; ``extra`` adds fields
    (``tenant_id=...``)."""
    data: dict[str, Any] = {
        "source_id": source_id,
        **extra,
        "doc_id": doc,
        "op": op,
        "source_version": version,
        "acl_groups": groups,
        "event_time": time.time() - 1,
    }
    if uri:
        data["content_uri"] = uri
    if eid:
        data["event_id"] = eid
    return data


def push_events(settings: Settings, events: list[dict[str, Any]]) -> tuple[int, int]:
    """Parse ``events`` and enqueue them; returns the catalog's (accepted, duplicate) counts.

    Raises:
        InvalidEventError: an event the parser rejects.
    """
    cat = open_catalog(settings)
    try:
        return cat.queue.enqueue_events([parse_event(e) for e in events])
    finally:
        cat.close()


def stream_until_idle(settings: Settings) -> StreamSummary:
    """``run_stream`` until the queue is idle (no progress bar); its summary."""
    summary = run_stream(settings, until_idle=True, show_progress=False)
    assert summary is not None
    return summary


def apply_events(settings: Settings, events: list[dict[str, Any]]) -> StreamSummary:
    """Enqueue ``events`` (``push_events``) and stream until idle; the stream's summary."""
    push_events(settings, events)
    return stream_until_idle(settings)
