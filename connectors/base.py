"""The connector interface, the source a connector serves, and the file-system
interface connectors read object stores through.

A connector translates one source (a folder or bucket prefix, a wiki, a drive,
a ticket system) into ragsync's records: listings (``SourceFile``), change
events (``Event``) and bytes. It never imports Beam; ``transforms.listing``
turns any connector into a bounded source (a full listing listed by workers,
shard by shard) and ``connectors.feed`` feeds its change events to the queue
the streaming pipeline reads. Every byte of content a connector returns, and
every API answer it reads, goes through ``connectors.reader`` (bounded, under
the source's location).

Adding a connector: one module with a class implementing :class:`Connector`
and a ``from_spec`` constructor, registered with
``ragsync.source_types.register_source_type`` (README "Adding a connector").
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar, Protocol

from ragsync import ids
from ragsync.decisions import ListedObject
from ragsync.errors import FetchError, InvalidEventError
from ragsync.model import Event, SourceFile
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec


@dataclass(frozen=True)
class FileInfo:
    """One object found by a file system match."""

    path: str
    size: int
    mtime: float


class FileSystem(Protocol):
    """What a connector needs from a file system.

    ``transforms.io`` adapts Apache Beam's ``FileSystems`` (local, gs://,
    s3://) to this; tests may pass a local implementation. ``match`` raises
    ``FetchError`` when the listing itself fails (missing bucket, denied,
    unreachable); an empty result means nothing matched.
    """

    def match(self, pattern: str) -> list[FileInfo]: ...

    def open(self, path: str) -> BinaryIO: ...

    def join(self, base: str, *parts: str) -> str: ...


@dataclass(frozen=True)
class ChangePage:
    """Changes read from a source's change feed, one API page at a time.

    Attributes:
        events: change events in the order the source reported them.
        cursor: where to read from next (persist it only after ``events``
            are durably queued).
        more: True when the feed has more changes right now.
    """

    events: tuple[Event, ...]
    cursor: str
    more: bool = False


class CursorExpiredError(FetchError):
    """The source no longer holds changes as old as the cursor (its change
    log was trimmed): only a full listing is complete now."""


class Connector(Protocol):
    """A source of documents.

    Rules every implementation keeps:

    - listing raises on any failure (a page that errors, a denied call, an
      unreachable host): an incomplete listing must never be taken as
      complete, it would delete what it missed;
    - content and API answers are read only through ``connectors.reader``
      (``ContentReader`` or ``LocatedHttpClient``) under ``spec.uri``;
    - permissions fail closed: groups that cannot be read are ``()`` and the
      document is not indexed (``no_permissions`` dead letter).

    Attributes:
        spec: the source served.
        supports_changes: True when the source has a change feed
            (``start_cursor``/``changes``); otherwise every sync is a full
            listing.
    """

    spec: SourceSpec
    supports_changes: ClassVar[bool]

    def list_shards(self) -> list[str]:
        """Independent parts of a full listing (namespaces, key prefixes,
        projects), listed in parallel by workers. Pure: no network call, so
        the launcher can compute it."""
        ...

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every object in one shard (streamed; never held in memory)."""
        ...

    def start_cursor(self) -> str:
        """The change feed's position now. Take it before a full listing so
        nothing changed during the listing is missed."""
        ...

    def changes(self, cursor: str) -> ChangePage:
        """One page of changes since ``cursor``.

        Raises:
            CursorExpiredError: the feed no longer reaches back to ``cursor``.
        """
        ...

    def fetch(self, item: SourceFile) -> bytes:
        """The object's current bytes (bounded, under the source's location)."""
        ...

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        """Groups allowed to read the object now; ``()`` when they cannot be read."""
        ...

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """Translate a webhook call from the source.

        Returns:
            The events it carries; ``None`` when the call only says "something
            changed" (read the change feed now).

        Raises:
            InvalidEventError: the payload is not one this source sends.
        """
        ...

    def list_identities(self) -> Identities | None:
        """The source's users, groups and memberships, for queries by user.

        An optional capability: a connector whose source has no identities
        (a folder, a bucket) returns None, and identity sync leaves the
        catalog unchanged. One that has them returns the complete set, ids as
        its ACLs write them (a partial listing raises instead: it would
        remove memberships it missed).

        Raises:
            FetchError (and subclasses): the listing could not be completed.
        """
        ...

    def close(self) -> None:
        """Release clients."""
        ...


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (API answers are hostile)."""
    return value if isinstance(value, dict) else {}


def json_object(body: bytes) -> dict[str, Any]:
    """A webhook body that must be one JSON object.

    Raises:
        InvalidEventError: not JSON, or JSON that is not an object.
    """
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise InvalidEventError(f"webhook body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidEventError("webhook body must be a JSON object")
    return data


def list_all(connector: Connector) -> Iterator[SourceFile]:
    """A full listing: every shard in order (one process; workers list
    shards in parallel through ``transforms.listing``)."""
    for shard in connector.list_shards():
        yield from connector.list_shard(shard)


def make_event(
    spec: SourceSpec,
    doc_id: str,
    op: str,
    source_version: str,
    *,
    acl_groups: Sequence[str] = (),
    content_uri: str = "",
    event_time: float | None = None,
) -> Event:
    """An event of ``spec``'s source with a content-derived id (a connector
    that reads the same change twice emits the same event id, so the queue
    keeps it once).

    Raises:
        ValueError: an unknown ``op`` or an upsert without ``content_uri``.
    """
    if op not in ("upsert", "delete", "acl"):
        raise ValueError(f"unknown op {op!r}")
    if op == "upsert" and not content_uri:
        raise ValueError("an upsert needs a content_uri")
    from connectors.events import derive_event_id  # pydantic: not at import (the CLI's start)

    groups = tuple(sorted({g for g in acl_groups if g}))
    return Event(
        event_id=derive_event_id(spec.source_id, doc_id, op, source_version, groups),
        source_id=spec.source_id,
        doc_id=doc_id,
        op=op,
        source_version=source_version,
        acl_groups=groups,
        content_uri=content_uri if op == "upsert" else "",
        event_time=time.time() if event_time is None else event_time,
        tenant_id=spec.tenant_id,
    )


def upsert_event(spec: SourceSpec, item: SourceFile, *, event_time: float) -> Event:
    """The upsert event of a listing record: its object, version, groups and address."""
    return make_event(
        spec,
        item.source_object_id,
        "upsert",
        item.source_version,
        acl_groups=item.acl_groups,
        content_uri=item.uri,
        event_time=event_time,
    )


def stamp_listed(item: SourceFile) -> ListedObject:
    """What a listing shows of ``item`` without reading it: size, version
    (an mtime, etag or revision) and the ACL id of its listed permissions,
    for ``ragsync.decisions.skip_unread``."""
    return ListedObject(
        size=item.size,
        source_version=item.source_version,
        version_domain=item.version_domain,
        acl_id=ids.acl_id(item.tenant_id, item.acl_groups, item.deny_groups),
    )
