"""Ticket bundles: a ticket's JSON and its attachments in one fetched document.

A ticket system's connector (``connectors.redmine``) fetches an issue with the
bytes of every attachment, so the attachments become *child documents* of the
issue (``ragsync.ingest.children``: their own ids, the issue's permissions, deleted
with it, or when an edit of the issue drops them) the way an e-mail's do. The
bundle is JSON that opens with :data:`PREFIX` (``ragsync.ingest.detect`` knows it by
that, as :data:`MIME_TICKET_BUNDLE`)::

    {"ragsync_ticket_bundle": 1, "record": {...}, "attachments": [
        {"name": "12-report.pdf", "media_type": "application/pdf", "data": "<base64>"}]}

``ragsync.parsing.tickets.parse_bundle`` parses it: ``record`` as a ticket,
the attachments named in the text and returned unparsed, within the archive
limits (nesting depth, attachments per container) exactly as an e-mail's.
This module only makes bundles (a connector's side): it imports no parser.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

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
