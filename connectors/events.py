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
import hashlib
import json
import math
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragsync.errors import InvalidEventError
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


WIRE_STAGE = "decode"
"""Dead-letter stage of a bus message that is not a valid event."""


def wire_message_to_row(raw: bytes | None, *, bus: str) -> dict[str, Any]:
    """A Pub/Sub message body or Kafka record value -> a queue-shaped row
    (``event_id``, ``payload`` the event's JSON, ``attempts`` 0).

    Raises:
        InvalidEventError: empty (a Kafka tombstone), not UTF-8, too long,
            not JSON or not a valid event; the message says which.
    """
    if not raw:
        raise InvalidEventError(f"an empty {bus} message is not an event")
    event = parse_event_line(raw)
    return {"event_id": event.event_id, "payload": event.to_json(), "attempts": 0}


def wire_dead_letter(raw: bytes | None, error: InvalidEventError, *, bus: str, where: str) -> DeadLetter:
    """The dead letter of a bus message that is not a valid event: the reason
    and the raw bytes (base64, the first ``EVENT_LIMITS.event_bytes`` of
    them), so it can be inspected and re-published after a fix.

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
        stage=WIRE_STAGE,
        doc_id="",
        uri=f"{bus}:{where}",
        error_class="invalid_event",
        message=str(error)[:1000],
        payload=json.dumps(payload, sort_keys=True),
    )
