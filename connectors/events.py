"""The change-event envelope every connector emits: ONE schema, used by the API,
``ragsync events push``, the Pub/Sub and Kafka parsers and the queue.

Wire format (one JSON object; ``POST /internal/events``, a JSONL line for
``ragsync events push``, a Pub/Sub or Kafka message)::

    {"source_id": "wiki-eng", "doc_id": "pages/1234", "op": "upsert",
     "source_version": 17, "acl_groups": ["eng"], "content_uri": "gs://b/p/1234.html",
     "event_time": "2026-12-01T10:00:00Z", "event_id": "optional-idempotency-key"}

- ``doc_id`` is the source's own object id; ragsync derives its internal,
  tenant-namespaced id from (tenant, source_id, doc_id).
- ``source_version`` orders events of one document: an integer, or a string
  (numeric strings compare as numbers, others as text, e.g. ISO timestamps).
- ``op`` is ``upsert`` (needs ``content_uri``, an address under the source's
  location), ``delete`` or ``acl``.
- ``acl_groups`` are the groups allowed to read the document now; an upsert
  or acl event with no groups takes its source's default groups (``sources
  add --acl-groups``, a backfill's ``--acl-groups``); without those it is
  accepted but the document is not indexed (fail closed) and ends as a
  ``no_permissions`` dead letter.
- ``event_id`` is optional: without it the id is derived from the content of
  the event, so a sender that retries produces the same id.

Limits (``ragsync.model.EventLimits``) are the catalog's column sizes, so
whatever this schema accepts the queue can store.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragsync.errors import AmbiguousSourceError, InvalidEventError, UnknownSourceError
from ragsync.model import EVENT_LIMITS, DeadLetter, Event

OPS = ("upsert", "delete", "acl")
_L = EVENT_LIMITS


def _plain_text(value: Any, *, max_chars: int) -> str:
    """A printable string (ints become their text), within ``max_chars``."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    text = str(value)
    if len(text) > max_chars:
        raise ValueError(f"is longer than {max_chars} characters")
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in text):
        raise ValueError("contains control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode") from None
    return text


def _epoch_seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("must be an ISO 8601 time or epoch seconds")
    if isinstance(value, int | float):
        t = float(value)
    elif isinstance(value, str) and value and len(value) <= 64:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not ISO 8601") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        t = dt.timestamp()
    else:
        raise ValueError("is required (ISO 8601 or epoch seconds)")
    if not math.isfinite(t) or not 0 <= t < 32503680000:  # year 3000
        raise ValueError("is out of range")
    return t


class EventIn(BaseModel):
    """One change event as senders write it (the schema the API publishes)."""

    model_config = ConfigDict(extra="forbid")

    source_id: str = Field(description="the registered source", min_length=1, max_length=_L.source_id)
    doc_id: str = Field(description="the source's own object id", min_length=1, max_length=_L.doc_id)
    op: Literal["upsert", "delete", "acl"]
    source_version: str | int = Field(description="orders events of one document")
    acl_groups: list[str] = Field(default_factory=list, max_length=_L.groups)
    deny_groups: list[str] = Field(
        default_factory=list,
        max_length=_L.groups,
        description="groups explicitly denied: their members never see the document, even when "
        "another of their groups is in acl_groups (NTFS/SharePoint-style deny entries)",
    )
    content_uri: str | None = Field(
        default=None,
        max_length=_L.content_uri,
        description="upsert only: an address under the source's location",
    )
    event_time: str | float = Field(description="ISO 8601 or epoch seconds")
    event_id: str | None = Field(
        default=None, max_length=_L.event_id, description="idempotency key (unique within the tenant)"
    )
    tenant_id: str | None = Field(
        default=None,
        max_length=_L.source_id,
        description="the source's tenant: optional (the API takes it from the caller's key and "
        "refuses another); a bus shared by tenants must set it",
    )

    @field_validator("source_id", "doc_id", "event_id", "tenant_id", mode="before")
    @classmethod
    def _ids(cls, value: Any, info: Any) -> Any:
        if value is None:
            return value
        limit = getattr(_L, "source_id" if info.field_name == "tenant_id" else info.field_name)
        return _plain_text(value, max_chars=limit)

    @field_validator("source_version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        text = _plain_text(value, max_chars=_L.source_version)
        if not text:
            raise ValueError("is required")
        return text

    @field_validator("acl_groups", "deny_groups", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
            raise ValueError("must be a list of strings")
        if len(value) > _L.groups:
            raise ValueError(f"holds more than {_L.groups} groups")
        return [_plain_text(g, max_chars=_L.group) for g in value]

    @field_validator("content_uri", mode="before")
    @classmethod
    def _uri(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        return _plain_text(value, max_chars=_L.content_uri)

    @field_validator("event_time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> float:
        return _epoch_seconds(value)

    @model_validator(mode="after")
    def _content_uri_for_upserts(self) -> EventIn:
        if self.op == "upsert" and not self.content_uri:
            raise ValueError("'content_uri' is required for op=upsert")
        return self

    def to_event(self) -> Event:
        """The validated record (groups sorted and de-duplicated, event id
        derived when absent)."""
        version = str(self.source_version)
        groups = tuple(sorted({g.strip() for g in self.acl_groups if g.strip()}))
        deny = tuple(sorted({g.strip() for g in self.deny_groups if g.strip()}))
        # Denials join the derived id only when present, so ids of events
        # without them stay what they were.
        keyed = groups + tuple("!" + g for g in deny)
        event_id = self.event_id or derive_event_id(self.source_id, self.doc_id, self.op, version, keyed)
        return Event(
            event_id=event_id,
            source_id=self.source_id,
            doc_id=self.doc_id,
            op=self.op,
            source_version=version,
            acl_groups=groups,
            content_uri=(self.content_uri or "") if self.op == "upsert" else "",
            event_time=float(self.event_time),
            tenant_id=self.tenant_id or "",
            deny_groups=deny,
        )


def event_or_none(data: dict[str, Any]) -> Event | None:
    """``parse_event`` for a re-drive: the validated event, or None when the
    stored event is no longer valid (``Catalog.redrive_dead_letter``)."""
    try:
        return parse_event(data)
    except (ValueError, InvalidEventError, TypeError, OverflowError, RecursionError):
        return None


def derive_event_id(
    source_id: str, doc_id: str, op: str, source_version: str, acl_groups: tuple[str, ...]
) -> str:
    """Content-derived idempotency key for senders that give none."""
    raw = "\x1f".join([source_id, doc_id, op, source_version, *acl_groups])
    return "ev" + hashlib.blake2b(raw.encode("utf-8"), digest_size=16).hexdigest()


def _message(exc: ValidationError) -> str:
    """One line naming every field at fault (never echoing the input, except
    an unknown ``op``, which is one short word)."""
    parts = []
    unknown = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()) if not isinstance(p, int)) or "event"
        kind = err.get("type")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            unknown.append(loc)
        elif kind == "missing":
            parts.append(f"'{loc}' is required")
        elif kind == "literal_error" and loc == "op":
            got = err.get("input")
            shown = repr(got)[:40] if isinstance(got, str | int) else type(got).__name__
            parts.append(f"'op' must be one of {', '.join(OPS)}, got {shown}")
        elif loc == "event":
            parts.append(msg)
        else:
            parts.append(f"'{loc}' {msg}")
    if unknown:
        parts.append(f"unknown fields: {', '.join(sorted(unknown))}")
    return "; ".join(parts)


def parse_event(data: Any) -> Event:
    """Validate one decoded event.

    Args:
        data: a decoded JSON value.

    Returns:
        The validated Event.

    Raises:
        InvalidEventError: with a message naming the field(s) at fault.
    """
    if not isinstance(data, dict):
        raise InvalidEventError("an event must be a JSON object")
    try:
        return EventIn.model_validate(data).to_event()
    except ValidationError as exc:
        raise InvalidEventError(_message(exc)) from None


def decode_event_json(raw: bytes | str) -> Any:
    """Decode the JSON of one event (bytes must be UTF-8).

    Raises:
        InvalidEventError: not UTF-8, longer than the event limit, not JSON,
            or nested too deeply to decode.
    """
    if len(raw) > _L.event_bytes:
        raise InvalidEventError(f"an event is longer than {_L.event_bytes} bytes")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEventError(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidEventError("not valid JSON: nested too deeply") from None
    except ValueError as exc:
        raise InvalidEventError(f"not valid JSON: {exc}") from None


def parse_event_line(line: bytes | str) -> Event:
    """Decode and validate one JSON line or message body. Raises InvalidEventError."""
    return parse_event(decode_event_json(line))


def read_event_lines(fh: Any, *, max_bytes: int = _L.event_bytes) -> Any:
    """Lines of a JSONL stream, each on its own and bounded in memory.

    Args:
        fh: a binary file object.
        max_bytes: longest line kept; a longer one is skipped to its end
            without being held in memory.

    Yields:
        ``(line_number, raw_bytes)`` for a line that fits, or
        ``(line_number, None)`` for one that was too long. Blank lines are
        skipped (but counted).
    """
    number = 0
    while True:
        line = fh.readline(max_bytes + 1)
        if not line:
            return
        number += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # drop the rest of the line
                line = fh.readline(1024 * 1024)
            yield number, None
            continue
        if line.strip():
            yield number, line


def check_content_uri(event: Event, location_uri: str) -> None:
    """Refuse an upsert whose ``content_uri`` does not resolve under its
    source's location (pure string work: the answer is the same whether or
    not something exists at the address).

    Raises:
        OutsideLocationError: the source has no location, or the address
            lies outside it.
    """
    from connectors.location import Location
    from ragsync.errors import ConfigurationError, OutsideLocationError

    if event.op != "upsert":
        return
    if not location_uri:
        raise OutsideLocationError(
            f"source {event.source_id!r} declares no location, so it takes no content_uri"
        )
    try:
        Location.parse(location_uri).resolve(event.content_uri)
    except ConfigurationError as exc:
        raise OutsideLocationError(f"source {event.source_id!r}: {exc}") from None


ADMIT_STAGE = "admit"
"""Dead-letter stage of an event refused at the pipeline's door: a bus
message that is not a valid event, or an event whose source is not
registered or whose ``content_uri`` lies outside the source."""


class Admitted(NamedTuple):
    """An event let in (:meth:`EventAdmission.admit`): its tenant set and
    its source's default groups applied, with its source's version domain."""

    event: Event
    version_domain: str


class EventAdmission:
    """The one admission of a change event, whatever brought it: ``ragsync
    events push``, the Pub/Sub relay (``connectors.pubsub``), a bus the
    runner reads (Pub/Sub on Dataflow, Kafka) and the stream's resolve step
    for queued events.

    An event is let in when, in this order: its tenant is known (the one it
    came for: ``--tenant``, a queue row's; else its own ``tenant_id``, and
    the two agree; else its source's only owner); its source is registered
    for that tenant; an upsert's ``content_uri`` lies under the source's
    location. It then carries that tenant, and an upsert or permission
    change that names no groups takes the source's default groups
    (``sources add --acl-groups``; without defaults it stays without and
    fails closed later: a ``no_permissions`` dead letter).

    Args:
        catalog: where sources are registered (``get_source``).
        ttl_s: how long a looked-up source, or its absence, is reused (a
            source registered while a stream runs is seen within this time).
        clock: monotonic seconds (tests).
    """

    def __init__(
        self, catalog: Any, *, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._catalog = catalog
        self._ttl_s = ttl_s
        self._clock = clock
        self._sources: dict[tuple[str, str], tuple[float, Any]] = {}

    def _source(self, tenant: str, source_id: str) -> Any:
        key = (tenant, source_id)
        now = self._clock()
        cached = self._sources.get(key)
        if cached is None or now - cached[0] > self._ttl_s:
            try:
                found = self._catalog.sources.get_source(source_id, tenant_id=tenant or None)
            except AmbiguousSourceError as exc:
                raise InvalidEventError(str(exc)) from None
            cached = self._sources[key] = (now, found)
        return cached[1]

    def admit(self, event: Event, tenant: str = "") -> Admitted:
        """Let ``event`` in (class docstring).

        Args:
            event: a validated event (``parse_event``).
            tenant: the tenant it came for ('' when the channel names none).

        Returns:
            The event as it is applied, and its source's version domain.

        Raises:
            UnknownSourceError: no such source (of that tenant).
            OutsideLocationError: an upsert's address outside the source.
            InvalidEventError: the event's ``tenant_id`` is not ``tenant``,
                or no tenant is known and several own a source of that id.
        """
        if tenant and event.tenant_id and event.tenant_id != tenant:
            raise InvalidEventError(f"'tenant_id' {event.tenant_id!r} is not the tenant {tenant!r}")
        source = self._source(tenant or event.tenant_id, event.source_id)
        if source is None:
            raise UnknownSourceError(
                f"unknown source {event.source_id!r}: register it with `ragsync sources add` first"
            )
        check_content_uri(event, source.uri)
        admitted = dataclasses.replace(event, tenant_id=source.tenant_id)
        return Admitted(admitted.with_default_groups(source.spec().option_groups()), source.version_domain)


def queue_row(event: Event) -> dict[str, Any]:
    """An admitted bus event as a row of the shape the queue's reader gives
    the stream (``event_id``, ``payload`` the event's JSON, ``tenant_id``,
    ``attempts`` 0)."""
    return {
        "event_id": event.event_id,
        "payload": event.to_json(),
        "tenant_id": event.tenant_id,
        "attempts": 0,
    }


def admit_bus_message(
    raw: bytes | None, admission: EventAdmission, *, bus: str, where: str
) -> Admitted | DeadLetter:
    """A Pub/Sub message body or Kafka record value through the one
    admission: the admitted event, or the dead letter of a message that is
    not a valid event (empty, not UTF-8, too long, not JSON, a field at
    fault) or that :class:`EventAdmission` refuses. Never raises for what
    the message holds.

    Args:
        raw: the body as received.
        admission: the stream's (or relay's) admission.
        bus: ``pubsub`` or ``kafka``.
        where: the subscription or topic, with the message's id when known.
    """
    try:
        if not raw:
            raise InvalidEventError(f"an empty {bus} message is not an event")
        return admission.admit(parse_event_line(raw))
    except InvalidEventError as exc:
        return wire_dead_letter(raw, exc, bus=bus, where=where)


def refused_event_dead_letter(row: dict[str, Any], error: InvalidEventError, doc_id: str = "") -> DeadLetter:
    """The dead letter of a queued event the admission refused (its source
    was removed, or it never existed): stage ``admit``, the reason as is, the
    event's JSON and id, so ``ragsync dead-letters retry`` can re-drive it
    once the source is registered."""
    return DeadLetter(
        stage=ADMIT_STAGE,
        doc_id=doc_id,
        uri="",
        error_class=error.error_class,
        message=str(error)[:1000],
        payload=str(row.get("payload") or ""),
        attempts=int(row.get("attempts") or 0) + 1,
        tenant_id=str(row.get("tenant_id") or ""),
        source_version=str(row.get("source_version") or ""),
        event_id=str(row.get("event_id") or ""),
    )


def wire_dead_letter(raw: bytes | None, error: InvalidEventError, *, bus: str, where: str) -> DeadLetter:
    """The dead letter of a bus message that is not a valid event, or that
    the admission refused: the reason and the raw bytes (base64, the first
    ``EVENT_LIMITS.event_bytes`` of them), so it can be inspected and
    re-published after a fix.

    Args:
        raw: the message body as received.
        error: why it was refused.
        bus: ``pubsub`` or ``kafka``.
        where: the subscription or topic it came from.
    """
    data = raw or b""
    kept = data[: _L.event_bytes]
    payload = {
        "bus": bus,
        "from": where,
        "bytes": len(data),
        "raw_base64": base64.b64encode(kept).decode("ascii"),
        "truncated": len(kept) < len(data),
    }
    return DeadLetter(
        stage=ADMIT_STAGE,
        doc_id="",
        uri=f"{bus}:{where}",
        error_class="invalid_event",
        message=str(error)[:1000],
        payload=json.dumps(payload, sort_keys=True),
    )
