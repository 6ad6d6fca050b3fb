"""Reading a source's change feed into the event queue (no Beam).

The change feed feeds the streaming pipeline through the queue: each page of
changes is first queued durably (``EventSink.queue``), then the cursor that
follows it is saved. A crash between the two re-reads that page next time;
the queue keeps an event once (ids are content-derived), so nothing is lost
and nothing applies twice.

``ragsync sync --dry-run`` (to come) can pass a sink that only collects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from connectors.base import Connector
from ragsync.model import Event

MAX_PAGES = 100_000
"""A feed that never says "no more" is a bug or an attack: stop after this."""


class EventSink(Protocol):
    """Where read events go."""

    def queue(self, events: Sequence[Event]) -> int:
        """Store ``events`` durably; return how many were new."""
        ...


@dataclass
class CollectingSink:
    """A sink that only keeps the events (for dry runs and tests)."""

    events: list[Event] = field(default_factory=list)

    def queue(self, events: Sequence[Event]) -> int:
        self.events.extend(events)
        return len(events)


@dataclass(frozen=True)
class FeedResult:
    """What reading the feed did.

    Attributes:
        pages: pages read.
        events_read: events the pages held.
        events_queued: of those, new to the queue.
        upserts / deletes / acls: events read, by operation.
        cursor: the cursor saved last.
    """

    pages: int
    events_read: int
    events_queued: int
    upserts: int
    deletes: int
    acls: int
    cursor: str


def read_feed(
    connector: Connector,
    cursor: str,
    sink: EventSink,
    save_cursor: Callable[[str], None],
    *,
    max_pages: int = MAX_PAGES,
) -> FeedResult:
    """Read every page of changes since ``cursor``.

    Args:
        connector: the source's connector (``supports_changes``).
        cursor: where to start.
        sink: where events go (the catalog's queue).
        save_cursor: persists a cursor; called after each page's events are queued.
        max_pages: stop (with an error) after this many pages.

    Raises:
        CursorExpiredError: the feed no longer reaches back to ``cursor``
            (nothing was queued or saved).
        RuntimeError: the feed did not end within ``max_pages``, or asked
            for more without moving its cursor.
        whatever the connector raises; pages queued before stay queued and
            their cursor saved.
    """
    pages = read = queued = upserts = deletes = acls = 0
    while True:
        page = connector.changes(cursor)
        pages += 1
        read += len(page.events)
        queued += sink.queue(page.events)
        for event in page.events:
            upserts += event.op == "upsert"
            deletes += event.op == "delete"
            acls += event.op == "acl"
        if page.more and page.cursor == cursor:
            raise RuntimeError(f"the change feed says there is more but did not move past {cursor!r}")
        if page.cursor != cursor:
            save_cursor(page.cursor)
            cursor = page.cursor
        if not page.more:
            return FeedResult(pages, read, queued, upserts, deletes, acls, cursor)
        if pages >= max_pages:
            raise RuntimeError(f"the change feed did not end after {max_pages} pages")
