"""A connector that exists only for the tests: docs/connectors.md "Adding a connector"
followed literally (``tests/test_adding_a_connector.py`` drives it).

Step 1, the module: :class:`FakeTicketConnector` reads a ticket system's
HTTP API through the real ``ApiClient`` / ``LocatedHttpClient`` (confinement,
limits, ``Retry-After``); the ticket system is :data:`SYSTEM`, an in-memory
one answering through an ``httpx.MockTransport``.

Step 2, the registration: importing this module calls
``register_source_type("fake", ...)``; name it in the ``plugins`` setting
(``RAGSYNC_PLUGINS=tests.fake_connector``) and every process imports it.

The API (all JSON but a ticket's body):

* ``GET /tickets?start=N`` -> ``{"tickets": [{"id", "version"}...], "next": N2 | null}``,
  two tickets a page;
* ``GET /tickets/ID`` -> the ticket as text (``text/plain``);
* ``GET /tickets/ID/acl`` -> ``{"groups": [...]}``; 403 for a ticket whose
  permissions the caller may not read (the connector fails closed: no groups);
* ``GET /changes/latest`` -> ``{"cursor": N}``; ``GET /changes?after=N`` ->
  ``{"changes": [{"seq", "id", "op", "version"}...], "more": bool}``, two a page.

Versions are one counter for the whole system (every change takes the next
number), so they order the events of one ticket.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import httpx

from connectors.api import AccessDeniedError, ApiConnector, ClientFactory
from connectors.base import ChangePage, make_event
from connectors.location import _refuse
from ragsync.errors import FetchError
from ragsync.model import Event, SourceFile
from ragsync.source_types import SourceSpec, register_source_type

BASE_URL = "https://tickets.example.test/api"
"""Where the fake ticket system answers (a source's location)."""

_PAGE = 2


@dataclass
class Ticket:
    title: str
    body: str
    version: int
    groups: tuple[str, ...] | None  # None: the ACL cannot be read (403)


@dataclass
class TicketSystem:
    """The in-memory ticket system and its change log.

    Attributes:
        tickets: id -> ticket (deleted ones removed).
        log: (seq, id, op, version) of every change, seq from 1.
        requests: every request answered (method and path with query).
    """

    tickets: dict[str, Ticket] = field(default_factory=dict)
    log: list[tuple[int, str, str, int]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def put(self, ticket_id: str, title: str, body: str, groups: tuple[str, ...] | None) -> None:
        """Create or edit a ticket (a change in the log)."""
        version = len(self.log) + 1
        self.tickets[ticket_id] = Ticket(title, body, version, groups)
        self.log.append((version, ticket_id, "upsert", version))

    def delete(self, ticket_id: str) -> None:
        """Delete a ticket (a change in the log)."""
        version = len(self.log) + 1
        del self.tickets[ticket_id]
        self.log.append((version, ticket_id, "delete", version))

    def answer(self, request: httpx.Request) -> httpx.Response:
        """The API above (the ``httpx.MockTransport`` handler)."""
        self.requests.append(f"{request.method} {request.url.raw_path.decode()}")
        path = request.url.path.removeprefix("/api")
        q = request.url.params
        if path == "/tickets":
            ids = sorted(self.tickets, key=int)
            start = int(q.get("start", "0"))
            page = [{"id": i, "version": self.tickets[i].version} for i in ids[start : start + _PAGE]]
            more = start + _PAGE < len(ids)
            return _json({"tickets": page, "next": start + _PAGE if more else None})
        if path == "/changes/latest":
            return _json({"cursor": len(self.log)})
        if path == "/changes":
            after = int(q["after"])
            rows = [r for r in self.log if r[0] > after][:_PAGE]
            more = bool(rows) and rows[-1][0] < len(self.log)
            changes = [{"seq": s, "id": i, "op": op, "version": v} for s, i, op, v in rows]
            return _json({"changes": changes, "more": more})
        parts = path.strip("/").split("/")
        ticket = self.tickets.get(parts[1]) if len(parts) >= 2 and parts[0] == "tickets" else None
        if ticket is None:
            return _json({"error": "no such ticket"}, 404)
        if len(parts) == 2:
            return _body(f"{ticket.title}\n\n{ticket.body}\n".encode(), 200, "text/plain")
        if parts[2:] == ["acl"]:
            if ticket.groups is None:
                return _json({"error": "you may not see who may see this"}, 403)
            return _json({"groups": list(ticket.groups)})
        return _json({"error": "not found"}, 404)


def _body(content: bytes, status: int, content_type: str) -> httpx.Response:
    """An answer whose body is streamed, as from the network (the located
    client reads bodies block by block under its byte limit)."""
    return httpx.Response(status, headers={"content-type": content_type}, stream=httpx.ByteStream(content))


def _json(data: Any, status: int = 200) -> httpx.Response:
    return _body(json.dumps(data).encode(), status, "application/json")


SYSTEM = TicketSystem()
"""The one ticket system every connector of this type reads (tests reset it)."""


class FakeTicketConnector(ApiConnector):
    """Tickets of the fake system: one document per ticket (object id: the
    ticket id; version: its change number; permissions: its ACL's groups,
    none when they cannot be read)."""

    supports_changes: ClassVar[bool] = True
    user_agent: ClassVar[str] = "ragsync (fake ticket connector)"

    @classmethod
    def from_spec(cls, spec: Any, *, limits: Any, transport: Any = None, **kw: Any) -> Self:
        """As every API connector (``ApiConnector.from_spec``: the source's
        location, limits and credentials), answered by :data:`SYSTEM` unless
        a transport is given."""
        return super().from_spec(
            spec, limits=limits, transport=transport or httpx.MockTransport(SYSTEM.answer), **kw
        )

    @classmethod
    def from_clients(cls, spec: SourceSpec, client: ClientFactory, auth: dict[str, str]) -> Self:
        return cls(spec, client({"Accept": "application/json", **auth}))

    def ticket_uri(self, ticket_id: str) -> str:
        return self._url(f"tickets/{ticket_id}")

    def _item(self, ticket_id: str, version: int) -> SourceFile:
        item = SourceFile(
            tenant_id=self.spec.tenant_id,
            source_id=self.spec.source_id,
            source_object_id=ticket_id,
            uri=self.ticket_uri(ticket_id),
            source_version=str(version),
        )
        return dataclasses.replace(item, acl_groups=self.permissions(item))

    # -- listing ----------------------------------------------------------------------

    def list_shards(self) -> list[str]:
        return [""]

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every ticket, page by page.

        Raises:
            FetchError (and subclasses): a page failed or is malformed.
        """
        start: Any = 0
        while start is not None:
            data = self.api.get_json(self._url("tickets"), {"start": str(start)})
            if not isinstance(data, dict) or not isinstance(data.get("tickets"), list):
                raise FetchError("the ticket system answered a page without a ticket list")
            for row in data["tickets"]:
                yield self._item(str(row["id"]), int(row["version"]))
            start = data.get("next")

    # -- change feed ------------------------------------------------------------------

    def start_cursor(self) -> str:
        return str(int(self.api.get_json(self._url("changes/latest"))["cursor"]))

    def changes(self, cursor: str) -> ChangePage:
        """One page of changes after ``cursor`` (a change number)."""
        data = self.api.get_json(self._url("changes"), {"after": cursor or "0"})
        if not isinstance(data, dict) or not isinstance(data.get("changes"), list):
            raise FetchError("the ticket system answered a change page without a change list")
        events: list[Event] = []
        last = int(cursor or 0)
        for row in data["changes"]:
            ticket_id, version = str(row["id"]), int(row["version"])
            if row["op"] == "delete":
                events.append(make_event(self.spec, ticket_id, "delete", str(version)))
            else:
                item = self._item(ticket_id, version)
                events.append(
                    make_event(
                        self.spec,
                        ticket_id,
                        "upsert",
                        str(version),
                        acl_groups=item.acl_groups,
                        content_uri=item.uri,
                    )
                )
            last = int(row["seq"])
        return ChangePage(tuple(events), str(last), more=bool(data.get("more")))

    # -- content and permissions ------------------------------------------------------

    def fetch(self, item: SourceFile) -> bytes:
        """The ticket's text; only the address this connector makes for it is read.

        Raises:
            OutsideLocationError: another address.
        """
        if item.uri != self.ticket_uri(item.source_object_id):
            raise _refuse(item.uri)
        return self.api.get_bytes(item.uri)

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        """The ticket's groups; ``()`` when they cannot be read (fail closed)."""
        try:
            data = self.api.get_json(self._url(f"tickets/{item.source_object_id}/acl"))
        except AccessDeniedError:
            return ()
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            return ()
        return tuple(sorted(groups))

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """None: a call only says "read the change feed now"."""
        return None


register_source_type("fake", "tests.fake_connector:FakeTicketConnector")
