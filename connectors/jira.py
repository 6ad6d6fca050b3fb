"""Jira as a source (type ``tickets``), through its REST API.

The source's location is the Jira base URL (``https://host/jira``); search,
issues, comments and attachment downloads are read under it only: an
attachment whose ``content`` link points elsewhere is refused when fetched
(dead letter ``invalid_event``).

- **Documents**: one per issue (its JSON with every comment, read by the
  ticket parser) and one per attachment (object id
  ``ISSUE_ID/attachments/ATTACHMENT_ID``, read as a file). Object ids use the
  numeric issue id, which survives a move to another project (the key does
  not).
- **Versions**: ``fields.updated`` of the issue, and ``created`` of an
  attachment, as epoch milliseconds.
- **Search**: ``GET /rest/api/2/search`` paged with ``startAt``/``maxResults``
  (``total`` says when it ends), or the newer ``/rest/api/3/search/jql``
  paged with ``nextPageToken`` (option ``search_api: "jql"``).
- **Cursor**: JSON ``{"since": ISO-UTC}`` (plus the paging position while a
  feed is read). Changes are ``updated >= "since"`` ordered by ``updated``;
  JQL takes minutes in the Jira user's time zone, so ``since`` is written in
  that zone (option ``timezone``, else the offset of the server's
  ``serverInfo.serverTime``) and one minute earlier: re-read issues give the
  same event ids and are queued once.
- **Deletes**: Jira's search does not report deleted issues or removed
  attachments: a full listing finds them (vanished objects).
- **Permissions**: an issue with a security level gets the groups of option
  ``security_levels`` (``{"Level name": ["group"]}``), else none (fail
  closed). Without one: ``everyone`` when the source is read anonymously
  (whatever anonymous users may read is public), else option ``acl_groups``
  (none: fail closed).
- **Webhooks**: ``jira:issue_created``/``jira:issue_updated``/comment events
  become upserts, ``jira:issue_deleted`` a delete.
- **Identities** (``list_identities``, with option ``identities: true``; the
  credentials need the *Browse users and groups* permission): Jira Cloud's
  ``GET /rest/api/3/users/search`` (paged by ``startAt``/``maxResults``,
  read until an empty page), ``/rest/api/3/group/bulk`` and
  ``/rest/api/3/group/member?groupId=`` (paged until ``isLast``). A user id
  is the ``accountId``; only active ``atlassian`` accounts are kept (apps
  and customers are not readers). Groups are named as ``security_levels``
  and ``acl_groups`` name them (the group's ``name``); each user is also in
  ``everyone``. Jira has no nested groups. Without the option the source
  lists no identities.
- **Paging**: every paged call (search, comments, users, groups, members)
  reads its pages through :func:`_pages`; a page that is not the JSON object
  (or array) the call answers is a ``FetchError``: a listing is never partial.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, ClassVar, Literal, Self
from urllib.parse import urlencode

from connectors.api import ApiClient, ApiConnector, ClientFactory
from connectors.base import ChangePage, as_object, make_event, upsert_event
from connectors.location import _refuse
from ragsync.errors import ConfigurationError, FetchError, InvalidEventError
from ragsync.model import Event, SourceFile
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec

EVERYONE = "everyone"
ISSUE_FIELDS = (
    "summary,description,comment,issuetype,status,priority,resolution,reporter,assignee,components,"
    "labels,fixVersions,created,resolutiondate,updated,security,attachment,project"
)
_LIST_FIELDS = "updated,security,attachment,project"
_PAGE = 100
_PROJECT = re.compile(r"^[A-Z][A-Z0-9_]{0,49}$")
_DIGITS = re.compile(r"^[0-9]{1,20}$")
_OVERLAP = timedelta(minutes=1)


def jira_time(text: str) -> datetime:
    """``2019-03-14T13:08:10.254+0000`` (Jira's format) -> aware datetime.

    Raises:
        ValueError: not a Jira time.
    """
    text = text.strip()
    if re.search(r"[+-]\d{4}$", text):
        text = text[:-2] + ":" + text[-2:]
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def millis(text: str) -> str:
    """The version of a Jira time: epoch milliseconds as digits.

    Raises:
        FetchError: not a Jira time (a record without a usable time fails its
            listing rather than being skipped, which would delete it).
    """
    try:
        return str(int(jira_time(text).timestamp() * 1000))
    except ValueError:
        raise FetchError(f"Jira answered a record with an unreadable time {text[:40]!r}") from None


Paging = Literal["total", "isLast", "empty", "token"]


def _pages(
    client: ApiClient,
    url: str,
    params: Mapping[str, str],
    key: str,
    *,
    paging: Paging,
    position: str = "",
) -> Iterator[tuple[list[Any], str]]:
    """Each page of a paged Jira call, from ``position`` on: (the page's
    entries, the position of the next page, '' after the last). Every search,
    comment and identity listing reads its pages here.

    Args:
        client: the source's API client.
        url: the call.
        params: its query (the paging parameters are added).
        key: the member holding the page's entries (``issues``, ``comments``,
            ``values``); for ``paging="empty"`` only named in errors.
        paging: how Jira pages this call and says it is done:
            ``total``: ``startAt``/``maxResults`` until an empty page or
            ``total`` entries (``search``, an issue's ``comment``);
            ``isLast``: ``startAt``/``maxResults`` page beans until ``isLast``
            (an empty page when it is missing: ``group/bulk``, ``group/member``);
            ``empty``: ``startAt``/``maxResults`` answering a bare JSON array,
            until an empty one (``users/search``);
            ``token``: ``nextPageToken`` until ``isLast`` or no token (``search/jql``).
        position: where to start: a ``startAt`` offset or a page token ('' = the first page).

    Raises:
        FetchError (and subclasses): a page could not be read, is not a JSON
            object (a JSON array for ``empty``), or holds no list of entries:
            a listing is never partial.
    """
    while True:
        query = {**params, "maxResults": str(_PAGE)}
        if paging == "token":
            if position:
                query["nextPageToken"] = position
        else:
            start = int(position or 0)
            query["startAt"] = str(start)
        data = client.get_json(url, query)
        if paging == "empty":
            if not isinstance(data, list):
                raise FetchError(f"Jira answered a page of {key} that is not a JSON array")
            entries = data
        else:
            if not isinstance(data, dict):
                raise FetchError(f"Jira answered a page of {key} that is not a JSON object")
            found = data.get(key)
            if not isinstance(found, list):
                raise FetchError(f"Jira answered a page without a list of {key}")
            entries = found
        if paging == "token":
            token = str(data.get("nextPageToken") or "")
            position = "" if data.get("isLast", not token) else token
        else:
            start += len(entries)
            if paging == "total":
                last = not entries or start >= _total(data)
            elif paging == "isLast":
                last = bool(data.get("isLast", not entries))
            else:
                last = not entries
            position = "" if last else str(start)
        yield entries, position
        if not position:
            return


def _total(page: Any) -> int:
    """A page's ``total``.

    Raises:
        FetchError: it is not a number.
    """
    try:
        return int(page.get("total", 0))
    except (TypeError, ValueError):
        raise FetchError("Jira answered a page whose total is not a number") from None


class JiraConnector(ApiConnector):
    """Issues (and their attachments) of one Jira site.

    Args:
        spec: the source (``uri`` = the Jira base URL; options ``jql``,
            ``projects``, ``search_api``, ``timezone``, ``security_levels``,
            ``acl_groups``, ``attachments``).
        api: the API client.
        anonymous: True when no credentials are sent.
    """

    supports_changes: ClassVar[bool] = True
    user_agent: ClassVar[str] = "ragsync (Jira connector)"

    def __init__(self, spec: SourceSpec, api: ApiClient, *, anonymous: bool) -> None:
        super().__init__(spec, api)
        self.anonymous = anonymous
        opts = spec.options
        self.jql = str(opts.get("jql", "")).strip()
        projects = opts.get("projects", [])
        if not isinstance(projects, list) or not all(
            isinstance(p, str) and _PROJECT.match(p) for p in projects
        ):
            raise ConfigurationError("option 'projects' must be a list of Jira project keys (e.g. LUCENE)")
        self.projects = tuple(projects)
        self.search_api = str(opts.get("search_api", "v2"))
        if self.search_api not in ("v2", "jql"):
            raise ConfigurationError(
                "option 'search_api' must be 'v2' (startAt paging) or 'jql' (nextPageToken)"
            )
        levels = opts.get("security_levels", {})
        if not isinstance(levels, dict):
            raise ConfigurationError("option 'security_levels' must map level names to lists of groups")
        self.security_levels = {str(k): tuple(sorted(str(g) for g in v)) for k, v in levels.items()}
        self.groups = spec.option_groups()
        self.attachments = bool(opts.get("attachments", True))
        if not isinstance(opts.get("identities", False), bool):
            raise ConfigurationError("option 'identities' must be true or false")
        self.identities = bool(opts.get("identities", False))
        self._tz: tzinfo | None = None

    @classmethod
    def from_clients(cls, spec: SourceSpec, client: ClientFactory, auth: dict[str, str]) -> Self:
        return cls(spec, client({"Accept": "application/json", **auth}), anonymous=not auth)

    # -- records ----------------------------------------------------------------------

    def issue_uri(self, issue_id: str) -> str:
        return self._url(f"rest/api/2/issue/{issue_id}?{urlencode({'fields': ISSUE_FIELDS})}")

    def _upsert(self, item: SourceFile) -> Event:
        """The upsert event of a listing record (its version is the update time in milliseconds)."""
        return upsert_event(self.spec, item, event_time=int(item.source_version) / 1000)

    def _issue_groups(self, fields: dict[str, Any]) -> tuple[str, ...]:
        security = fields.get("security")
        if isinstance(security, dict) and security:
            return self.security_levels.get(str(security.get("name", "")), ())
        return (EVERYONE,) if self.anonymous else self.groups

    def _items(self, issue: Any) -> Iterator[SourceFile]:
        """The issue and its attachments as listing records."""
        if not isinstance(issue, dict) or not _DIGITS.match(str(issue.get("id", ""))):
            raise FetchError("Jira answered an issue without a numeric id")
        fields = as_object(issue.get("fields"))
        issue_id = str(issue["id"])
        groups = self._issue_groups(fields)
        base = {"tenant_id": self.spec.tenant_id, "source_id": self.spec.source_id, "acl_groups": groups}
        yield SourceFile(
            source_object_id=issue_id,
            uri=self.issue_uri(issue_id),
            source_version=millis(str(fields.get("updated", ""))),
            **base,  # type: ignore[arg-type]
        )
        if not self.attachments:
            return
        for att in fields.get("attachment") or []:
            if (
                not isinstance(att, dict)
                or not _DIGITS.match(str(att.get("id", "")))
                or not att.get("content")
            ):
                continue
            yield SourceFile(
                source_object_id=f"{issue_id}/attachments/{att['id']}",
                uri=str(att["content"]),  # checked against the location when fetched
                size=int(att["size"]) if str(att.get("size", "")).isdigit() else -1,
                source_version=millis(str(att.get("created") or fields.get("updated", ""))),
                **base,  # type: ignore[arg-type]
            )

    # -- search -----------------------------------------------------------------------

    def _search(self, jql: str, fields: str, position: str = "") -> Iterator[tuple[list[Any], str]]:
        """The pages of a search from ``position``: (issues, next position or '' at the end)."""
        jql_api = self.search_api == "jql"
        path = "rest/api/3/search/jql" if jql_api else "rest/api/2/search"
        paging: Paging = "token" if jql_api else "total"
        params = {"jql": jql, "fields": fields}
        return _pages(self.api, self._url(path), params, "issues", paging=paging, position=position)

    def _scope(self, project: str = "") -> str:
        """JQL of the source's issues: one project, else every configured
        project, and the ``jql`` option."""
        if project:
            parts = [f'project = "{project}"']
        elif self.projects:
            parts = ["project in (" + ", ".join(f'"{p}"' for p in self.projects) + ")"]
        else:
            parts = []
        if self.jql:
            parts.append(f"({self.jql})")
        return " AND ".join(parts)

    def list_shards(self) -> list[str]:
        """One shard per configured project, else one for the whole JQL scope."""
        return list(self.projects) or [""]

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every issue of one project (ordered by creation, so issues created
        during the listing only append), and its attachments.

        Raises:
            FetchError (and subclasses): a page failed.
        """
        if shard and shard not in self.projects:
            raise ValueError(f"{shard!r} is not one of this source's projects")
        scope = self._scope(shard)
        jql = (f"{scope} " if scope else "") + "ORDER BY created ASC, key ASC"
        for issues, _ in self._search(jql, _LIST_FIELDS):
            for issue in issues:
                yield from self._items(issue)

    # -- change feed ------------------------------------------------------------------

    def _zone(self) -> tzinfo:
        """The time zone JQL dates are read in."""
        if self._tz is None:
            name = str(self.spec.options.get("timezone", ""))
            if name:
                from zoneinfo import ZoneInfo

                self._tz = ZoneInfo(name)
            else:
                info = self.api.get_json(self._url("rest/api/2/serverInfo"))
                self._tz = jira_time(str(info.get("serverTime", ""))).tzinfo or timezone.utc
        return self._tz

    def start_cursor(self) -> str:
        info = self.api.get_json(self._url("rest/api/2/serverInfo"))
        now = jira_time(str(info.get("serverTime", "")))
        return json.dumps({"since": now.astimezone(timezone.utc).isoformat()})

    def changes(self, cursor: str) -> ChangePage:
        """One search page of issues updated since the cursor."""
        try:
            state = json.loads(cursor) if cursor else {}
            since = datetime.fromisoformat(str(state["since"]))
        except (ValueError, KeyError, TypeError):
            raise ConfigurationError(f"not a Jira cursor: {cursor[:200]!r}") from None
        local = (since - _OVERLAP).astimezone(self._zone())
        scope = self._scope()
        jql = (
            f"({scope}) AND " if scope else ""
        ) + f'updated >= "{local:%Y/%m/%d %H:%M}" ORDER BY updated ASC, key ASC'
        issues, position = next(self._search(jql, ISSUE_FIELDS, str(state.get("position", ""))))
        newest = datetime.fromisoformat(str(state.get("newest", since.isoformat())))
        events: list[Event] = []
        for issue in issues:
            for item in self._items(issue):
                events.append(self._upsert(item))
            updated = jira_time(str(issue.get("fields", {}).get("updated", "")))
            newest = max(newest, updated.astimezone(timezone.utc))
        if position:
            nxt = {"since": since.isoformat(), "position": position, "newest": newest.isoformat()}
            return ChangePage(tuple(events), json.dumps(nxt), more=True)
        return ChangePage(tuple(events), json.dumps({"since": newest.isoformat()}), more=False)

    # -- content and permissions ------------------------------------------------------

    def _check(self, item: SourceFile) -> None:
        """Only this connector's addresses are read: the issue's REST address,
        or an attachment's link under the location."""
        address = self.location.resolve(item.uri)  # another host: refused here
        issue_id, _, rest = item.source_object_id.partition("/")
        if not _DIGITS.match(issue_id):
            raise _refuse(item.uri)
        if not rest and address != self.location.resolve(self.issue_uri(issue_id)):
            raise _refuse(item.uri)
        if rest and (not rest.startswith("attachments/") or not _DIGITS.match(rest[len("attachments/") :])):
            raise _refuse(item.uri)

    def fetch(self, item: SourceFile) -> bytes:
        """An issue as JSON with all its comments, or an attachment's bytes.

        Raises:
            OutsideLocationError: the address is not under the Jira base URL.
            TooLargeError / FetchTimeoutError / FetchError: as for every read.
        """
        self._check(item)
        if "/" in item.source_object_id:
            return self.api.get_bytes(item.uri)
        issue = self.api.get_json(item.uri)
        if not isinstance(issue, dict) or not isinstance(issue.get("fields"), dict):
            raise FetchError(f"Jira answered no issue for {item.source_object_id}")
        block = issue["fields"].get("comment")
        if isinstance(block, dict) and int(block.get("total", 0)) > len(block.get("comments") or []):
            block["comments"] = list(self._all_comments(item.source_object_id))
            block["startAt"], block["maxResults"] = 0, len(block["comments"])
        return json.dumps(issue, ensure_ascii=False).encode("utf-8")

    def _all_comments(self, issue_id: str) -> Iterator[Any]:
        url = self._url(f"rest/api/2/issue/{issue_id}/comment")
        for comments, _ in _pages(self.api, url, {"orderBy": "created"}, "comments", paging="total"):
            yield from comments

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        self._check(item)
        issue_id = item.source_object_id.partition("/")[0]
        issue = self.api.get_json(self._url(f"rest/api/2/issue/{issue_id}"), {"fields": "security"})
        return self._issue_groups(issue.get("fields") or {})

    # -- identities -------------------------------------------------------------------

    def _accounts(self, path: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """Entries of a paged v3 listing: ``users/search`` answers a bare list
        (read until an empty page), the others a page bean (until ``isLast``).

        Raises:
            FetchError (and subclasses): a page could not be read, or is not
                the JSON array or object the call answers.
        """
        url = self._url(path)
        if path.endswith("users/search"):
            pages = _pages(self.api, url, params, "users", paging="empty")
        else:
            pages = _pages(self.api, url, params, "values", paging="isLast")
        for page, _ in pages:
            yield from (v for v in page if isinstance(v, dict))

    def list_identities(self) -> Identities | None:
        """The site's active users, groups and memberships (see the module
        docstring); None without option ``identities``.

        Returns:
            The complete set; a page that cannot be read raises instead.

        Raises:
            FetchError, AccessDeniedError, RateLimitedError: as for any call.
        """
        if not self.identities:
            return None

        def person(row: dict[str, Any]) -> str:
            ok = row.get("accountType", "atlassian") == "atlassian" and row.get("active", True) is True
            return str(row.get("accountId", "")) if ok else ""

        users = {u for u in map(person, self._accounts("rest/api/3/users/search", {})) if u}
        pairs = {(u, EVERYONE) for u in users}
        groups: set[str] = set()
        for group in self._accounts("rest/api/3/group/bulk", {}):
            name, group_id = str(group.get("name", "")), str(group.get("groupId", ""))
            if not name or not group_id:
                raise FetchError("Jira answered a group without a name or groupId")
            groups.add(name)
            members = self._accounts(
                "rest/api/3/group/member", {"groupId": group_id, "includeInactiveUsers": "false"}
            )
            pairs.update((u, name) for u in map(person, members) if u)
        return Identities(
            users=frozenset(users),
            groups=frozenset(groups | {g for _, g in pairs}),
            user_groups=frozenset(pairs),
        )

    # -- webhooks ---------------------------------------------------------------------

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """A Jira webhook call -> events.

        Raises:
            InvalidEventError: not a Jira issue or comment webhook.
        """
        try:
            data = json.loads(body)
            kind = str(data["webhookEvent"])
            issue = data["issue"]
            stamp = int(data.get("timestamp") or time.time() * 1000)
        except (ValueError, KeyError, TypeError):
            raise InvalidEventError("not a Jira webhook (webhookEvent, issue)") from None
        if not isinstance(issue, dict) or not _DIGITS.match(str(issue.get("id", ""))):
            raise InvalidEventError("Jira webhook without a numeric issue id")
        if kind == "jira:issue_deleted":
            return [make_event(self.spec, str(issue["id"]), "delete", str(stamp), event_time=stamp / 1000)]
        if kind not in ("jira:issue_created", "jira:issue_updated") and not kind.startswith("comment_"):
            return []
        fields = as_object(issue.get("fields"))
        if not fields.get("updated"):
            fields = {**fields, "updated": datetime.fromtimestamp(stamp / 1000, timezone.utc).isoformat()}
        try:
            items = list(self._items({**issue, "fields": fields}))
        except (ValueError, FetchError) as exc:
            raise InvalidEventError(f"malformed Jira webhook issue: {exc}") from None
        return [self._upsert(i) for i in items]
