"""The connector interface, the source a connector serves, and the file-system
interface connectors read object stores through.

A connector translates one source (a folder or bucket prefix, a wiki, a drive,
a ticket system) into ragsync's records: listings (``SourceFile``), change
events (``Event``) and bytes. It never imports Beam; ``transforms/`` adapts
any connector to a bounded or unbounded source. Every byte of content a
connector returns is read through ``connectors.reader`` (bounded, under the
source's location).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from ragsync.model import Event, SourceFile


@dataclass(frozen=True)
class FileInfo:
    """One object found by a file system match."""

    path: str
    size: int
    mtime: float


class FileSystem(Protocol):
    """What a connector needs from a file system.

    ``transforms.io`` adapts Apache Beam's ``FileSystems`` (local, gs://,
    s3://) to this; tests may pass a local implementation.
    """

    def match(self, pattern: str) -> list[FileInfo]: ...

    def open(self, path: str) -> BinaryIO: ...

    def join(self, base: str, *parts: str) -> str: ...


@dataclass(frozen=True)
class SourceSpec:
    """A registered source, as a connector needs it.

    Attributes:
        source_id: the source's id (unique within its tenant).
        tenant_id: the tenant that owns it.
        type: ``object_store``, ``wiki``, ``drive`` or ``tickets``.
        uri: its location (folder, ``gs://``/``s3://`` prefix, API base URL);
            '' when none was declared (such a source takes no ``content_uri``).
        credentials_ref: reference to a secret ('' for public sources).
        options: connector-specific settings.
    """

    source_id: str
    tenant_id: str
    type: str
    uri: str = ""
    credentials_ref: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChangePage:
    """Changes read from a source's change feed.

    Attributes:
        events: change events in the order the source reported them.
        cursor: the cursor to read from next time (persist it only after the
            events are durably queued).
        more: True when the feed has more changes right now.
    """

    events: tuple[Event, ...]
    cursor: str
    more: bool = False


class Connector(Protocol):
    """A source of documents.

    ``list_all`` raises on any failure: an incomplete listing must never be
    taken as complete (it would delete what it missed).
    """

    spec: SourceSpec

    def list_all(self) -> Iterator[SourceFile]:
        """A full listing."""
        ...

    def fetch(self, item: SourceFile) -> bytes:
        """The object's current bytes (bounded, under the source's location)."""
        ...

    def permissions(self, item: SourceFile) -> Sequence[str]:
        """Groups allowed to read the object; [] when they cannot be read."""
        ...
