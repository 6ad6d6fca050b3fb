"""Ticket bundles: a ticket's JSON and its attachments in one fetched document.

A ticket system's connector (``connectors.redmine``) fetches an issue with the
bytes of every attachment, so the attachments become *child documents* of the
issue (``ragsync.children``: their own ids, the issue's permissions, deleted
with it, or when an edit of the issue drops them) the way an e-mail's do. The
bundle is JSON that opens with :data:`PREFIX` (``ragsync.detect`` knows it by
that, as :data:`MIME_TICKET_BUNDLE`)::

    {"ragsync_ticket_bundle": 1, "record": {...}, "attachments": [
        {"name": "12-report.pdf", "media_type": "application/pdf", "data": "<base64>"}]}

``record`` is parsed by the ticket parser (``ragsync.parsing.tickets``); the
attachments are named in the text and returned unparsed, within the archive
limits (nesting depth, attachments per container) exactly as an e-mail's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ragsync.errors import CorruptDocumentError
from ragsync.model import Attachment
from ragsync.parsing._common import RawParse

PREFIX = b'{"ragsync_ticket_bundle": 1'
MIME_TICKET_BUNDLE = "application/vnd.ragsync.ticket-bundle+json"


def ticket_bundle(record: Mapping[str, Any], files: Iterable[tuple[str, str, bytes]]) -> bytes:
    """The bundle of one ticket.

    Args:
        record: the ticket's JSON (a shape ``ragsync.parsing.tickets`` reads).
        files: (name, media type, bytes) of each attachment; names unique
            within the ticket (an attachment id in the name keeps them so).

    Returns:
        UTF-8 JSON opening with :data:`PREFIX`.
    """
    body = {
        "ragsync_ticket_bundle": 1,
        "record": record,
        "attachments": [
            {"name": name, "media_type": media, "data": base64.b64encode(data).decode("ascii")}
            for name, media, data in files
        ],
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def parse_bundle(data: bytes, *, depth: int, limits: Any) -> RawParse:
    """Parse a ticket bundle: the ticket's elements, and its attachments unparsed.

    Args:
        data: the bundle.
        depth: containers around it (0 at top level).
        limits: ``ArchiveLimits`` (``max_depth``, ``max_attachments``).

    Returns:
        The ticket's elements (``ragsync.parsing.tickets.parse_json``) and
        ``Attachments: NAMES``; ``attachments`` at ``depth + 1`` (empty ones
        named, not returned); metadata as the ticket parser's plus
        ``attachments`` (count) and ``attachments_skipped`` past a limit.

    Raises:
        CorruptDocumentError: not a bundle (unreadable JSON, no record, an
            attachment that is not base64).
    """
    from ragsync.parsing.email import finish, unique_name
    from ragsync.parsing.tickets import parse_json

    try:
        bundle = json.loads(data)
    except ValueError as exc:
        raise CorruptDocumentError(f"not a ticket bundle: {exc}") from None
    record = bundle.get("record") if isinstance(bundle, dict) else None
    files = bundle.get("attachments") if isinstance(bundle, dict) else None
    if not isinstance(record, dict) or not isinstance(files, list):
        raise CorruptDocumentError("not a ticket bundle: no record or no list of attachments")
    raw = parse_json(json.dumps(record, ensure_ascii=False).encode("utf-8"))
    attachments: list[Attachment] = []
    seen: set[str] = set()
    for index, item in enumerate(files, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("data"), str):
            raise CorruptDocumentError(f"ticket bundle: attachment {index} has no data")
        try:
            body = base64.b64decode(item["data"], validate=True)
        except (binascii.Error, ValueError):
            raise CorruptDocumentError(f"ticket bundle: attachment {index} is not base64") from None
        name = unique_name(str(item.get("name") or ""), seen, f"attachment-{index}")
        attachments.append(Attachment(name, body, str(item.get("media_type") or ""), depth + 1))
    return finish(list(raw.elements), dict(raw.metadata or {}), attachments, depth, limits)
