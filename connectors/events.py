"""The change-event envelope every connector emits, and its validation.

Wire format (one JSON object; ``POST /internal/events``, a JSONL line for
``ragsync events push``, a Pub/Sub or Kafka message)::

    {"source_id": "wiki-eng", "doc_id": "pages/1234", "op": "upsert",
     "source_version": 17, "acl_groups": ["eng"], "content_uri": "gs://b/p/1234.html",
     "event_time": "2026-12-01T10:00:00Z", "event_id": "optional-idempotency-key"}

- ``doc_id`` is the source's own object id; ragsync derives its internal,
  tenant-namespaced id from (tenant, source_id, doc_id).
- ``source_version`` orders events of one document: an integer, or a string
  (numeric strings compare as numbers, others as text, e.g. ISO timestamps).
- ``op`` is ``upsert`` (needs ``content_uri``), ``delete`` or ``acl``.
- ``acl_groups`` are the groups allowed to read the document now; an upsert
  or acl event with no groups is accepted but the document is not indexed
  (fail closed) and ends as a ``no_permissions`` dead letter.
- ``event_id`` is optional: without it the id is derived from the content of
  the event, so a sender that retries produces the same id.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from ragsync.errors import InvalidEventError
from ragsync.model import Event

OPS = ("upsert", "delete", "acl")
_MAX_FIELD = 2048
_MAX_GROUPS = 256


def _text(data: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise InvalidEventError(f"'{name}' is required")
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidEventError(f"'{name}' must be a string, got {type(value).__name__}")
    text = str(value)
    if len(text) > _MAX_FIELD:
        raise InvalidEventError(f"'{name}' is longer than {_MAX_FIELD} characters")
    if any(ord(c) < 32 for c in text):
        raise InvalidEventError(f"'{name}' contains control characters")
    return text


def _event_time(value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidEventError("'event_time' must be an ISO 8601 time or epoch seconds")
    if isinstance(value, int | float):
        t = float(value)
    elif isinstance(value, str) and value:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidEventError(f"'event_time' {value!r} is not ISO 8601") from exc
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        t = dt.timestamp()
    else:
        raise InvalidEventError("'event_time' is required (ISO 8601 or epoch seconds)")
    if not 0 <= t < 32503680000:  # year 3000
        raise InvalidEventError("'event_time' is out of range")
    return t


def derive_event_id(
    source_id: str, doc_id: str, op: str, source_version: str, acl_groups: tuple[str, ...]
) -> str:
    """Content-derived idempotency key for senders that give none."""
    raw = "\x1f".join([source_id, doc_id, op, source_version, *acl_groups])
    return "ev" + hashlib.blake2b(raw.encode("utf-8"), digest_size=16).hexdigest()


def parse_event(data: Any) -> Event:
    """Validate one decoded event.

    Args:
        data: a decoded JSON value.

    Returns:
        The validated Event.

    Raises:
        InvalidEventError: with a message naming the field that is wrong.
    """
    if not isinstance(data, dict):
        raise InvalidEventError("an event must be a JSON object")
    unknown = set(data) - {
        "event_id",
        "source_id",
        "doc_id",
        "op",
        "source_version",
        "acl_groups",
        "content_uri",
        "event_time",
    }
    if unknown:
        raise InvalidEventError(f"unknown fields: {', '.join(sorted(unknown))}")
    op = _text(data, "op")
    if op not in OPS:
        raise InvalidEventError(f"'op' must be one of {', '.join(OPS)}, got {op!r}")
    source_id = _text(data, "source_id")
    doc_id = _text(data, "doc_id")
    version = _text(data, "source_version")
    groups_raw = data.get("acl_groups", [])
    if not isinstance(groups_raw, list) or not all(isinstance(g, str) for g in groups_raw):
        raise InvalidEventError("'acl_groups' must be a list of strings")
    if len(groups_raw) > _MAX_GROUPS:
        raise InvalidEventError(f"'acl_groups' holds more than {_MAX_GROUPS} groups")
    groups = tuple(sorted({g.strip() for g in groups_raw if g.strip()}))
    content_uri = _text(data, "content_uri", required=op == "upsert")
    event_time = _event_time(data.get("event_time"))
    event_id = _text(data, "event_id", required=False) or derive_event_id(
        source_id, doc_id, op, version, groups
    )
    return Event(
        event_id=event_id,
        source_id=source_id,
        doc_id=doc_id,
        op=op,
        source_version=version,
        acl_groups=groups,
        content_uri=content_uri if op == "upsert" else "",
        event_time=event_time,
    )


def parse_event_line(line: str) -> Event:
    """Decode and validate one JSON line. Raises InvalidEventError."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise InvalidEventError(f"not valid JSON: {exc}") from exc
    return parse_event(data)
