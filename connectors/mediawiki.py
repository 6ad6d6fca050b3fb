"""A MediaWiki wiki as a source (type ``wiki``), through its Action API.

The source's location is the wiki's ``api.php`` URL; every call and every
content read goes to that URL only (``LocatedHttpClient``).

- **Documents**: one per page in the configured namespaces (option
  ``namespaces``, default ``[0]``), redirects excluded. The object id is the
  page id, so a move (rename) keeps the document and only its title changes.
  Content is the rendered page (``action=parse``) wrapped as an HTML document
  whose ``<h1>`` is the current title.
- **Versions** are recent-changes ids (``rcid``): every edit, creation,
  delete, move and restore gets a larger one, so a restore after a delete is
  newer than the delete. A full listing gives each page the largest ``rcid``
  at listing time ("as of").
- **Cursor**: ``TIMESTAMP|RCID`` of the next recent change to read, the
  format of ``rccontinue`` (recent changes are read with ``rcdir=newer`` and
  paged with ``rccontinue``). Each page of changes is resolved against the
  pages' current state (``prop=info``): a page that is missing is deleted; a
  page that became a redirect or left the namespaces is deleted; otherwise it
  is upserted. When the wiki no longer holds changes as old as the cursor
  (recent changes are trimmed after ``$wgRCMaxAge``), ``CursorExpiredError``
  asks for a full listing.
- **Permissions**: a page that an anonymous user may read
  (``intestactions=read`` asked without credentials) is visible to
  ``everyone``; any other page gets the source's ``acl_groups`` option, or no
  group (not indexed: fail closed) when none is configured.
- **Identities** (``list_identities``): every registered user
  (``list=allusers&auprop=groups``) with their MediaWiki groups, by name
  (``sysop``, ``staff``, implicit ``user``/``autoconfirmed``; never ``*``),
  and ``everyone``. A restricted page's ACL is the ``acl_groups`` option, so
  that option names MediaWiki groups for a query by ``user`` to match it.
- **Webhooks**: EventBus notifications carry no recent-changes id, so they
  only trigger a read of the change feed.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, Self
from urllib.parse import urlencode

from connectors.api import AccessDeniedError, ApiClient, ApiConnector, ClientFactory, RateLimitedError
from connectors.base import ChangePage, CursorExpiredError, make_event
from ragsync.errors import ConfigurationError, FetchError, InvalidEventError
from ragsync.model import Event, SourceFile
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec

EVERYONE = "everyone"
_BATCH = 50  # pageids per prop=info call (the anonymous limit)
_RC_LIMIT = 500
_START = "19700101000000|0"


def _mw_timestamp(iso: str) -> str:
    """``2026-12-03T10:28:00Z`` -> ``20261203102800`` (the TS_MW format)."""
    return iso.replace("-", "").replace(":", "").replace("T", "").replace("Z", "")


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def parse_cursor(cursor: str) -> tuple[str, int]:
    """``TIMESTAMP|RCID`` -> (timestamp, rcid). Raises ConfigurationError."""
    ts, sep, rcid = (cursor or _START).partition("|")
    if not sep or len(ts) != 14 or not ts.isdigit() or not rcid.isdigit():
        raise ConfigurationError(f"not a MediaWiki cursor: {cursor!r} (expected TIMESTAMP|RCID)")
    return ts, int(rcid)


class MediaWikiConnector(ApiConnector):
    """Pages of one MediaWiki wiki.

    Args:
        spec: the source (``uri`` = the ``api.php`` URL; options
            ``namespaces`` and ``acl_groups``).
        api: client for every call (with the source's credentials).
        anon: client without credentials for the read test; None when
            ``api`` is anonymous already.
    """

    supports_changes: ClassVar[bool] = True
    user_agent: ClassVar[str] = "ragsync (MediaWiki connector)"

    def __init__(self, spec: SourceSpec, api: ApiClient, anon: ApiClient | None = None) -> None:
        super().__init__(spec, api)
        self.anon = anon
        if not self.location.root.endswith("/api.php"):
            raise ConfigurationError(
                f"wiki source {spec.source_id!r}: give the Action API URL, e.g. https://host/w/api.php"
            )
        namespaces = spec.options.get("namespaces", [0])
        if not isinstance(namespaces, list) or not all(isinstance(n, int) and n >= 0 for n in namespaces):
            raise ConfigurationError("option 'namespaces' must be a list of namespace numbers")
        self.namespaces = tuple(sorted(set(namespaces))) or (0,)
        self.private_groups = spec.option_groups()

    @classmethod
    def from_clients(cls, spec: SourceSpec, client: ClientFactory, auth: dict[str, str]) -> Self:
        return cls(spec, client(auth), client({}) if auth else None)

    def close(self) -> None:
        self.api.close()
        if self.anon is not None:
            self.anon.close()

    # -- API ------------------------------------------------------------------------

    def _query(self, params: Mapping[str, Any], client: ApiClient | None = None) -> dict[str, Any]:
        """One Action API call; MediaWiki's in-band errors raised as ours."""
        full = {"format": "json", "formatversion": "2", **params}
        data = (client or self.api).get_json(self.location.base_url, full)
        if not isinstance(data, dict):
            raise FetchError(f"{self.location.base_url} answered something other than a JSON object")
        error = data.get("error")
        if isinstance(error, dict):
            code, info = str(error.get("code", "")), str(error.get("info", ""))[:300]
            if code in ("maxlag", "ratelimited"):
                raise RateLimitedError(f"MediaWiki {code}: {info}", 5.0)
            if code in ("readapidenied", "permissiondenied", "mwoauth-invalid-authorization"):
                raise AccessDeniedError(f"MediaWiki refused the call ({code}): {info}")
            raise FetchError(f"MediaWiki API error {code}: {info}")
        return data

    def content_uri(self, pageid: int) -> str:
        """The address of a page's rendered content (under the location)."""
        params = {
            "action": "parse",
            "format": "json",
            "formatversion": "2",
            "pageid": str(pageid),
            "prop": "text|displaytitle|revid",
            "disableeditsection": "1",
            "disablelimitreport": "1",
        }
        return f"{self.location.base_url}?{urlencode(params)}"

    def _latest_rc(self) -> tuple[str, int]:
        """(timestamp, rcid) of the newest recent change; ('', 0) when none."""
        return self._edge_rc("older")

    def _oldest_rc(self) -> tuple[str, int]:
        """(timestamp, rcid) of the oldest recent change the wiki keeps; ('', 0) when none."""
        return self._edge_rc("newer")

    def _edge_rc(self, rcdir: str) -> tuple[str, int]:
        """The first recent change listed in direction ``rcdir`` (``older``:
        newest first, ``newer``: oldest first) as (timestamp, rcid)."""
        data = self._query(
            {
                "action": "query",
                "list": "recentchanges",
                "rcdir": rcdir,
                "rclimit": "1",
                "rcprop": "ids|timestamp",
            }
        )
        rows = data.get("query", {}).get("recentchanges", [])
        if not rows:
            return "", 0
        return _mw_timestamp(str(rows[0]["timestamp"])), int(rows[0]["rcid"])

    def _groups(self, readable: bool) -> tuple[str, ...]:
        return (EVERYONE,) if readable else self.private_groups

    def _info_pages(self, pageids: list[int], client: ApiClient | None = None) -> Iterator[dict[str, Any]]:
        """``prop=info`` (with the ``read`` test action) of ``pageids``, in
        batches of ``_BATCH``, asked through ``client`` (default: the
        credentialed one)."""
        for i in range(0, len(pageids), _BATCH):
            batch = pageids[i : i + _BATCH]
            params = {
                "action": "query",
                "prop": "info",
                "intestactions": "read",
                "pageids": "|".join(map(str, batch)),
            }
            data = self._query(params, client)
            yield from data.get("query", {}).get("pages", [])

    def _anon_readable(self, pageids: list[int]) -> set[int]:
        """Page ids an anonymous user may read (asked without credentials)."""
        return {
            int(page["pageid"])
            for page in self._info_pages(pageids, self.anon or self.api)
            if not page.get("missing") and (page.get("actions") or {}).get("read")
        }

    def _page_info(self, pageids: list[int]) -> dict[int, dict[str, Any]]:
        """Current ``prop=info`` of pages (``{"missing": True}`` for deleted ones)."""
        out = {int(page["pageid"]): page for page in self._info_pages(pageids)}
        if self.anon is not None:
            readable = self._anon_readable([p for p, info in out.items() if not info.get("missing")])
            for pid, info in out.items():
                info.setdefault("actions", {})["read"] = pid in readable
        return out

    # -- identities -----------------------------------------------------------------

    def list_identities(self) -> Identities:
        """Every registered user of the wiki and the groups they are in.

        One ``list=allusers&auprop=groups`` listing, paged with ``continue``
        (through the source's credentialed client, with its rate-limit
        handling). MediaWiki has no nested groups. Each user is also in
        ``everyone``, the group of the pages anonymous readers see.

        Returns:
            The complete set (a partial listing raises instead).

        Raises:
            FetchError, AccessDeniedError, RateLimitedError: as for any call.
        """
        users: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        params: dict[str, Any] = {"action": "query", "list": "allusers", "auprop": "groups", "aulimit": "500"}
        while True:
            data = self._query(params)
            for row in data.get("query", {}).get("allusers", []):
                name = str(row["name"])
                users.add(name)
                pairs.add((name, EVERYONE))
                pairs.update((name, str(g)) for g in row.get("groups", []) if g != "*")
            more = data.get("continue")
            if not isinstance(more, dict):
                break
            params = {**params, **{str(k): str(v) for k, v in more.items()}}
        return Identities(
            users=frozenset(users), groups=frozenset(g for _, g in pairs), user_groups=frozenset(pairs)
        )

    # -- listing --------------------------------------------------------------------

    def list_shards(self) -> list[str]:
        """One shard per namespace."""
        return [str(n) for n in self.namespaces]

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every non-redirect page of namespace ``shard``, versioned as of
        the newest recent change when the listing started.

        Raises:
            FetchError (and subclasses): any call failed; the listing is
                incomplete and must not be used to delete anything.
        """
        if not shard.isdigit() or int(shard) not in self.namespaces:
            raise ValueError(f"{shard!r} is not one of this source's namespaces")
        _, as_of = self._latest_rc()
        params: dict[str, Any] = {
            "action": "query",
            "generator": "allpages",
            "gapnamespace": shard,
            "gapfilterredir": "nonredirects",
            "gaplimit": "max",
            "prop": "info",
            "intestactions": "read",
        }
        cont: dict[str, Any] = {}
        batch: dict[int, dict[str, Any]] = {}
        while True:
            data = self._query({**params, **cont})
            for page in data.get("query", {}).get("pages", []):
                batch.setdefault(int(page["pageid"]), {}).update(page)
            if data.get("batchcomplete", False) or "continue" not in data:
                yield from self._listed(batch, as_of)
                batch = {}
            if "continue" not in data:
                return
            cont = {str(k): str(v) for k, v in data["continue"].items()}

    def _listed(self, pages: dict[int, dict[str, Any]], as_of: int) -> Iterator[SourceFile]:
        readable = (
            self._anon_readable(sorted(pages))
            if self.anon is not None
            else {p for p, info in pages.items() if (info.get("actions") or {}).get("read")}
        )
        for pageid in sorted(pages):
            info = pages[pageid]
            if info.get("missing") or info.get("redirect"):
                continue
            yield SourceFile(
                tenant_id=self.spec.tenant_id,
                source_id=self.spec.source_id,
                source_object_id=str(pageid),
                uri=self.content_uri(pageid),
                size=int(info.get("length") or -1),
                acl_groups=self._groups(pageid in readable),
                source_version=str(as_of),
            )

    # -- change feed ------------------------------------------------------------------

    def start_cursor(self) -> str:
        ts, rcid = self._latest_rc()
        return f"{ts}|{rcid + 1}" if ts else _START

    def changes(self, cursor: str) -> ChangePage:
        """One page (up to 500 recent changes) since ``cursor``, resolved to
        upserts and deletes of the pages they touched.

        Raises:
            CursorExpiredError: recent changes no longer reach back to the cursor.
        """
        ts, rcid = parse_cursor(cursor)
        if rcid > 1:
            oldest_ts, oldest_id = self._oldest_rc()
            if oldest_id > rcid - 1 and oldest_ts > ts:
                raise CursorExpiredError(
                    f"the wiki's recent changes start at {oldest_ts} (rcid {oldest_id}), "
                    f"after the cursor {cursor}"
                )
        data = self._query(
            {
                "action": "query",
                "list": "recentchanges",
                "rcdir": "newer",
                "rcprop": "ids|timestamp|loginfo",
                "rctype": "edit|new|log",
                "rclimit": str(_RC_LIMIT),
                "rccontinue": f"{ts}|{rcid}",
            }
        )
        rows = data.get("query", {}).get("recentchanges", [])
        more = "continue" in data
        if more:
            next_cursor = str(data["continue"]["rccontinue"])
        elif rows:
            last = rows[-1]
            next_cursor = f"{_mw_timestamp(str(last['timestamp']))}|{int(last['rcid']) + 1}"
        else:
            next_cursor = f"{ts}|{rcid}"
        return ChangePage(events=tuple(self._resolve(rows)), cursor=next_cursor, more=more)

    def _resolve(self, rows: list[dict[str, Any]]) -> list[Event]:
        """Recent changes -> one event per touched page, from its current state."""
        touched: dict[int, tuple[int, str, int]] = {}  # pageid -> (rcid, timestamp, ns of the entry)
        for row in rows:
            pageid = int(row.get("pageid") or 0)
            if pageid <= 0:
                continue  # log entries about users, blocks...
            rc = int(row["rcid"])
            if pageid not in touched or rc > touched[pageid][0]:
                touched[pageid] = (rc, str(row.get("timestamp", "")), int(row.get("ns", 0)))
        if not touched:
            return []
        info = self._page_info(sorted(touched))
        events: list[Event] = []
        for pageid, (rc, stamp, entry_ns) in sorted(touched.items(), key=lambda kv: kv[1][0]):
            page = info.get(pageid, {"missing": True})
            when = _epoch(stamp)
            gone = (
                page.get("missing") or page.get("redirect") or int(page.get("ns", -1)) not in self.namespaces
            )
            if gone:
                if page.get("missing") and entry_ns not in self.namespaces:
                    continue  # a page of another namespace was deleted
                events.append(make_event(self.spec, str(pageid), "delete", str(rc), event_time=when))
                continue
            readable = bool((page.get("actions") or {}).get("read"))
            events.append(
                make_event(
                    self.spec,
                    str(pageid),
                    "upsert",
                    str(rc),
                    acl_groups=self._groups(readable),
                    content_uri=self.content_uri(pageid),
                    event_time=when,
                )
            )
        return events

    # -- content and permissions ------------------------------------------------------

    def _pageid(self, item: SourceFile) -> int:
        # Only the address this connector makes for the page is read: an event
        # naming another page, another action or another host is refused.
        return self._own_numbered(item, self.content_uri)

    def fetch(self, item: SourceFile) -> bytes:
        """The page rendered as an HTML document titled with its current title.

        Raises:
            OutsideLocationError: ``item.uri`` is not this page's content address.
            FetchError: the page is gone or the wiki cannot be read.
        """
        pageid = self._pageid(item)
        data = self._query(
            {
                "action": "parse",
                "pageid": str(pageid),
                "prop": "text|displaytitle|revid",
                "disableeditsection": "1",
                "disablelimitreport": "1",
            }
        )
        parsed = data.get("parse")
        if not isinstance(parsed, dict) or not isinstance(parsed.get("text"), str):
            raise FetchError(f"MediaWiki answered no rendered text for page {pageid}")
        title = html.escape(str(parsed.get("title", "")))
        page = (
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1>\n{parsed['text']}\n</body></html>\n"
        )
        return page.encode("utf-8")

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        pageid = self._pageid(item)
        return self._groups(pageid in self._anon_readable([pageid]))

    # -- webhooks ---------------------------------------------------------------------

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """An EventBus notification (``page-create``, ``revision-create``,
        ``page-delete``, ``page-move``...) triggers a read of recent changes.

        Raises:
            InvalidEventError: not an EventBus event.
        """
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise InvalidEventError(f"webhook body is not JSON: {exc}") from None
        records = data if isinstance(data, list) else [data]
        if not records or not all(isinstance(r, dict) and isinstance(r.get("meta"), dict) for r in records):
            raise InvalidEventError("not a MediaWiki EventBus event (no 'meta')")
        return None
