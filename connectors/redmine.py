"""Redmine as a source (type ``redmine``), through its REST API.

The source's location is Redmine's base URL (``https://host/redmine``); every
call and every attachment download stays under it. The credentials are an
administrator's API key (sent as ``X-Redmine-API-Key``), or a whole
``Basic ...`` header value: the permission model and the identities need
what only an administrator may read (users, groups, memberships, roles).

- **Documents**: one per issue (subject, description, status, tracker,
  project, priority, people, dates, custom fields and every public journal
  note as a comment; closed issues too, with their status). Its attachments
  are child documents: the fetched document is a *ticket bundle*
  (``ragsync.parsing.bundle``) carrying the issue's JSON and each attachment's
  bytes, so the parse step makes the children (their own ids, the issue's
  permissions, deleted with it or when they leave it). Private notes (seen
  only by roles with *view private notes*) and custom fields that are not
  visible to all are left out of the document: its ACL cannot say who sees
  them. Object id: the issue id, which survives a move to another project.
- **Versions**: ``updated_on`` in epoch milliseconds; a full listing gives each
  issue ``as_of``: the server's time when it started, less the lag below.
- **Change feed**: ``updated_on`` windows of whole seconds that lie at least
  ``lag_s`` (option, default 2) in the server's past, so no issue can still be
  saved within a second already read. Redmine stores fractions of seconds but
  shows and filters whole ones, so each page is one query sorted by
  ``updated_on``; the last second of a full page is read again by id
  (``issue_id >= next``) until it is done. Cursor: JSON ``{"since": epoch s,
  "until": epoch s, "id": last id in second "since", "known": ids}``.
- **Deletes**: Redmine's API does not report deleted issues. The cursor keeps
  the ids of the issues the source holds (``known``, compressed); at the end of
  each pass the issue count per id range is compared with it and the ranges
  that differ are split until the missing ids are found (a deleted issue, a
  project archived or without issue tracking): a few calls when nothing was
  deleted. A full listing finds them too (the guarded one of every sync).
- **Moves**: an issue moved between projects keeps its id and gets the new
  project's groups; moved out of the source's ``projects`` (option) it is a delete.
- **Permissions and identities**: ``connectors.redmine_access``.
- **Webhooks**: Redmine sends none; a plug-in's JSON call only triggers a
  read of the change feed.
"""

from __future__ import annotations

import base64
import email.utils
import json
import re
import time
import zlib
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, ClassVar, Self

from connectors.api import ApiClient, ApiConnector, ClientFactory
from connectors.base import ChangePage, as_object, json_object, make_event, upsert_event
from connectors.reader import HttpStatusError
from connectors.redmine_access import ProjectAccess, Role, identities, issue_groups
from ragsync.errors import ConfigurationError, FetchError
from ragsync.model import Event, SourceFile
from ragsync.parsing.bundle import ticket_bundle
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec

_PAGE = 100
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_-]{0,99}$")
_ISSUE_INCLUDE = "journals,attachments"
#: Project statuses whose issues stay readable (active, closed); archived ones are not listed.
_READABLE_PROJECTS = "1|5"


def _seconds(text: Any) -> int:
    """Redmine's ``2026-12-07T16:16:55Z`` -> epoch seconds.

    Raises:
        FetchError: not such a time (a record without a usable time fails its
            page rather than being skipped).
    """
    try:
        return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp())
    except ValueError:
        raise FetchError(f"Redmine answered a record with an unreadable time {str(text)[:40]!r}") from None


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode_ids(ids: list[int]) -> str:
    """Sorted ids as a compact text: deltas in LEB128, zlib, base64url."""
    out = bytearray()
    last = 0
    for value in sorted(set(ids)):
        delta = value - last
        last = value
        while True:
            byte = delta & 0x7F
            delta >>= 7
            out.append(byte | (0x80 if delta else 0))
            if not delta:
                break
    return base64.urlsafe_b64encode(zlib.compress(bytes(out), 9)).decode("ascii")


def decode_ids(text: str) -> list[int]:
    """The ids :func:`encode_ids` wrote, sorted.

    Raises:
        ConfigurationError: not such a text.
    """
    if not text:
        return []
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii")))
    except (ValueError, zlib.error):
        raise ConfigurationError("not a Redmine cursor: its known ids are unreadable") from None
    ids: list[int] = []
    last = value = shift = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            last += value
            ids.append(last)
            value = shift = 0
    return ids


class RedmineConnector(ApiConnector):
    """Issues of one Redmine (and their attachments, as child documents).

    Args:
        spec: the source (``uri`` = Redmine's base URL; options ``projects``
            (identifiers; default every project), ``attachments`` (default
            true), ``lag_s`` (default 2)).
        api: the client with the source's credentials.
    """

    supports_changes: ClassVar[bool] = True
    user_agent: ClassVar[str] = "ragsync (Redmine connector)"

    def __init__(self, spec: SourceSpec, api: ApiClient) -> None:
        super().__init__(spec, api)
        opts = spec.options
        projects = opts.get("projects", [])
        if not isinstance(projects, list) or not all(
            isinstance(p, str) and _IDENTIFIER.match(p) for p in projects
        ):
            raise ConfigurationError("option 'projects' must be a list of Redmine project identifiers")
        self.projects = tuple(projects)
        if not isinstance(opts.get("attachments", True), bool):
            raise ConfigurationError("option 'attachments' must be true or false")
        self.attachments = bool(opts.get("attachments", True))
        lag = opts.get("lag_s", 2)
        if isinstance(lag, bool) or not isinstance(lag, int) or not 1 <= lag <= 3600:
            raise ConfigurationError("option 'lag_s' must be a whole number of seconds from 1 to 3600")
        self.lag_s = lag
        self._project_ids: dict[str, int] | None = None
        self._visible_fields: frozenset[int] | None = None

    @classmethod
    def from_clients(cls, spec: SourceSpec, client: ClientFactory, auth: dict[str, str]) -> Self:
        secret = auth.get("Authorization", "")
        if secret.startswith(("Basic ", "Bearer ")):
            headers = {"Authorization": secret}
        else:
            headers = {"X-Redmine-API-Key": secret} if secret else {}
        return cls(spec, client({"Accept": "application/json", **headers}))

    # -- calls ----------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], int]:
        """One call: (its JSON object, the server's time in epoch seconds).

        Raises:
            FetchError (and subclasses): as for every call, or not a JSON object.
        """
        response = self.api.get(self._url(path), params)
        try:
            data = response.json()
        except ValueError:
            raise FetchError(f"Redmine did not answer JSON for {path}") from None
        if not isinstance(data, dict):
            raise FetchError(f"Redmine answered {path} with something other than a JSON object")
        try:
            now = int(email.utils.parsedate_to_datetime(response.headers.get("date", "")).timestamp())
        except (TypeError, ValueError, IndexError):
            now = int(time.time())
        return data, now

    def _pages(self, path: str, key: str, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Every record of an offset-paged listing (``limit``/``offset``/``total_count``).

        Raises:
            FetchError: a page failed or holds no list of ``key``.
        """
        offset = 0
        while True:
            data, _ = self._get(path, {**params, "limit": str(_PAGE), "offset": str(offset)})
            rows = data.get(key)
            if not isinstance(rows, list):
                raise FetchError(f"Redmine answered a page of {path} without a list of {key}")
            yield from (as_object(r) for r in rows)
            offset += len(rows)
            if not rows or offset >= int(data.get("total_count", 0) or 0):
                return

    def _issues_path(self, shard: str) -> tuple[str, dict[str, str]]:
        """Where one shard's issues are listed: a project's own issues, or every issue."""
        if shard:
            return f"projects/{shard}/issues.json", {"status_id": "*", "subproject_id": "!*"}
        return "issues.json", {"status_id": "*"}

    def _keyset(self, shard: str, low: int = 1, high: int = 0) -> Iterator[dict[str, Any]]:
        """Every issue of a shard in id order (ids from ``low``, to ``high``
        when given), paged by id (``issue_id >= next``): an issue deleted
        while listing shifts no page. The listing ends when a page holds all
        that is left (``total_count``), never on a short page alone.

        Raises:
            FetchError: a page failed.
        """
        path, params = self._issues_path(shard)
        after = low - 1
        while True:
            ids = f"><{after + 1}|{high}" if high else f">={after + 1}"
            rows, total = self._issue_page(path, {**params, "sort": "id", "issue_id": ids})
            for issue in rows:
                after = max(after, int(issue["id"]))
                yield issue
            if not rows or len(rows) >= total:
                return

    @staticmethod
    def _issue(row: Any) -> dict[str, Any]:
        if not isinstance(row, dict) or isinstance(row.get("id"), bool) or not isinstance(row.get("id"), int):
            raise FetchError("Redmine answered an issue without a numeric id")
        return row

    def project_ids(self) -> dict[str, int]:
        """The configured projects' ids by identifier (read once).

        Raises:
            ConfigurationError: a configured project does not exist or is not readable.
        """
        if self._project_ids is None:
            found: dict[str, int] = {}
            for identifier in self.projects:
                try:
                    data, _ = self._get(f"projects/{identifier}.json")
                except HttpStatusError:
                    raise ConfigurationError(f"Redmine project {identifier!r} is not there") from None
                found[identifier] = int(as_object(data.get("project")).get("id", 0))
            self._project_ids = found
        return self._project_ids

    def _in_scope(self, issue: Mapping[str, Any]) -> bool:
        return not self.projects or as_object(issue.get("project")).get("id") in self.project_ids().values()

    def issue_uri(self, issue_id: int) -> str:
        return self._url(f"issues/{issue_id}.json?include={_ISSUE_INCLUDE}")

    def _record(self, issue: Mapping[str, Any], version: int) -> SourceFile:
        return SourceFile(
            tenant_id=self.spec.tenant_id,
            source_id=self.spec.source_id,
            source_object_id=str(issue["id"]),
            uri=self.issue_uri(int(issue["id"])),
            source_version=str(version),
            acl_groups=issue_groups(issue),
        )

    # -- listing --------------------------------------------------------------------

    def list_shards(self) -> list[str]:
        """One shard per configured project, else one for every issue."""
        return list(self.projects) or [""]

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every issue of one project (or of the whole Redmine), open and
        closed, versioned as of the listing's start.

        Raises:
            FetchError (and subclasses): a page failed; the listing is
                incomplete and must not be used to delete anything.
        """
        if shard and shard not in self.projects:
            raise ValueError(f"{shard!r} is not one of this source's projects")
        _, now = self._get("issues.json", {"limit": "1"})
        as_of = (now - self.lag_s) * 1000 - 1
        for issue in self._keyset(shard):
            yield self._record(issue, as_of)

    # -- change feed ------------------------------------------------------------------

    def _known_now(self) -> list[int]:
        return sorted(int(i["id"]) for shard in self.list_shards() for i in self._keyset(shard))

    def start_cursor(self) -> str:
        """The feed's position now, and the ids of every issue of the source
        (the deletes of the next passes are found against them)."""
        _, now = self._get("issues.json", {"limit": "1"})
        known = self._known_now()
        return json.dumps({"since": now - self.lag_s, "known": encode_ids(known)})

    def changes(self, cursor: str) -> ChangePage:
        """One page of issues updated in the current window (see the module docstring).

        Raises:
            ConfigurationError: not a cursor of this connector.
            FetchError (and subclasses): a call failed (nothing is skipped:
                the same cursor reads the page again).
        """
        try:
            state = json.loads(cursor)
            since, known = int(state["since"]), decode_ids(str(state.get("known", "")))
            until = int(state.get("until", 0))
            after = int(state["id"]) if "id" in state else None
        except (ValueError, KeyError, TypeError):
            raise ConfigurationError(f"not a Redmine cursor: {cursor[:200]!r}") from None
        if not until:
            _, now = self._get("issues.json", {"limit": "1"})
            until = now - self.lag_s
        rows, since, after = self._window(since, until, after)
        events, known_set = [], set(known)
        for issue in rows:
            event = self._event(issue, known_set)
            if event is not None:
                events.append(event)
        if since > until:
            _, now = self._get("issues.json", {"limit": "1"})
            for gone in self._vanished(sorted(known_set)):
                known_set.discard(gone)
                events.append(make_event(self.spec, str(gone), "delete", str(now * 1000), event_time=now))
            nxt: dict[str, Any] = {"since": until + 1, "known": encode_ids(sorted(known_set))}
            return ChangePage(tuple(events), json.dumps(nxt), more=False)
        nxt = {"since": since, "until": until, "known": encode_ids(sorted(known_set))}
        if after is not None:
            nxt["id"] = after
        return ChangePage(tuple(events), json.dumps(nxt), more=True)

    def _window(
        self, since: int, until: int, after: int | None
    ) -> tuple[list[dict[str, Any]], int, int | None]:
        """The next issues of window ``[since, until]`` (whole seconds of
        ``updated_on``); with ``after``, the rest of second ``since`` by id.

        Returns:
            (issues, the second to go on from (past ``until``: the window is
            done), the last id read in that second, None to read it by time).
        """
        if since > until:
            return [], since, None
        if after is not None:  # the rest of second ``since``, by id
            span = f"><{_iso(since)}|{_iso(since + 1)}"
            page, total = self._issue_page(
                "issues.json", {"updated_on": span, "sort": "id", "issue_id": f">={after + 1}"}
            )
            rows = [r for r in page if _seconds(r.get("updated_on")) == since]
            if page and len(page) < total:
                return rows, since, max(int(r["id"]) for r in page)
            return rows, since + 1, None
        span = f"><{_iso(since)}|{_iso(until + 1)}"
        page, total = self._issue_page("issues.json", {"updated_on": span, "sort": "updated_on,id"})
        rows = [r for r in page if since <= _seconds(r.get("updated_on")) <= until]
        if not page or len(page) >= total:
            return rows, until + 1, None
        last = _seconds(page[-1].get("updated_on"))
        # The last second of a full page may go on past it: it is read again, whole, by id.
        return [r for r in rows if _seconds(r.get("updated_on")) < last], max(last, since), 0

    def _issue_page(self, path: str, query: Mapping[str, str]) -> tuple[list[dict[str, Any]], int]:
        """One page of issues, open and closed: (the issues, how many match in all).

        Raises:
            FetchError: the page failed or holds no list of issues.
        """
        data, _ = self._get(path, {"status_id": "*", "limit": str(_PAGE), **query})
        rows = data.get("issues")
        if not isinstance(rows, list):
            raise FetchError(f"Redmine answered a page of {path} without a list of issues")
        try:
            total = int(data.get("total_count", 0))
        except (TypeError, ValueError):
            raise FetchError(f"Redmine answered a page of {path} whose total_count is not a number") from None
        return [self._issue(r) for r in rows], total

    def _event(self, issue: dict[str, Any], known: set[int]) -> Event | None:
        """The event of one changed issue (an upsert; a delete when it left
        the source's projects), noting it in ``known``."""
        issue_id = int(issue["id"])
        updated = _seconds(issue.get("updated_on"))
        if not self._in_scope(issue):
            if issue_id not in known:
                return None
            known.discard(issue_id)
            return make_event(self.spec, str(issue_id), "delete", str(updated * 1000), event_time=updated)
        known.add(issue_id)
        return upsert_event(self.spec, self._record(issue, updated * 1000), event_time=updated)

    def _count(self, low: int, high: int) -> int:
        """Issues of the source with ids in ``[low, high]`` now."""
        total = 0
        for shard in self.list_shards():
            path, params = self._issues_path(shard)
            total += self._issue_page(path, {**params, "issue_id": f"><{low}|{high}", "limit": "1"})[1]
        return total

    def _vanished(self, known: list[int]) -> list[int]:
        """The ids of ``known`` Redmine no longer has in the source: ranges
        whose count differs are halved until they hold a page of ids, which
        is listed."""
        gone: list[int] = []
        spans = [(0, len(known))]
        while spans:
            lo, hi = spans.pop()
            if lo >= hi or self._count(known[lo], known[hi - 1]) == hi - lo:
                continue
            if hi - lo <= _PAGE:
                shards = self.list_shards()
                present = {int(i["id"]) for s in shards for i in self._keyset(s, known[lo], known[hi - 1])}
                gone += [i for i in known[lo:hi] if i not in present]
                continue
            mid = (lo + hi) // 2
            spans += [(lo, mid), (mid, hi)]
        return sorted(gone)

    # -- content and permissions ------------------------------------------------------

    def _issue_id(self, item: SourceFile) -> int:
        """The issue an item names; only the address this connector makes for it is read."""
        return self._own_numbered(item, self.issue_uri)

    def _read_issue(self, issue_id: int, include: str = "") -> dict[str, Any]:
        params = {"include": include} if include else None
        try:
            data, _ = self._get(f"issues/{issue_id}.json", params)
        except HttpStatusError as exc:
            if exc.status == 404:
                raise FetchError(
                    f"Redmine issue {issue_id} is gone (deleted, or its project archived)"
                ) from None
            raise
        issue = data.get("issue")
        if not isinstance(issue, dict):
            raise FetchError(f"Redmine answered no issue for {issue_id}")
        return issue

    def visible_fields(self) -> frozenset[int]:
        """Ids of the issue custom fields every reader of an issue sees (read once;
        none when the list cannot be read: fail closed)."""
        if self._visible_fields is None:
            try:
                data, _ = self._get("custom_fields.json")
            except FetchError:
                data = {}
            self._visible_fields = frozenset(
                int(f["id"])
                for f in data.get("custom_fields") or []
                if isinstance(f, dict)
                and f.get("customized_type") == "issue"
                and f.get("visible") is True
                and isinstance(f.get("id"), int)
            )
        return self._visible_fields

    def fetch(self, item: SourceFile) -> bytes:
        """The issue as a ticket bundle: its JSON (private notes and restricted
        custom fields left out) and its attachments' bytes.

        Raises:
            OutsideLocationError: ``item.uri`` is not this issue's address, or
                an attachment's link leaves the location.
            FetchError: the issue is gone or Redmine cannot be read.
        """
        issue = self._read_issue(self._issue_id(item), _ISSUE_INCLUDE)
        issue["journals"] = [
            j
            for j in issue.get("journals") or []
            if isinstance(j, dict) and j.get("private_notes") is not True
        ]
        visible = self.visible_fields()
        issue["custom_fields"] = [
            f for f in issue.get("custom_fields") or [] if isinstance(f, dict) and f.get("id") in visible
        ]
        files: list[tuple[str, str, bytes]] = []
        for att in issue.get("attachments") or [] if self.attachments else []:
            if (
                not isinstance(att, dict)
                or isinstance(att.get("id"), bool)
                or not isinstance(att.get("id"), int)
            ):
                continue
            # Its download address is made here, under the location (Redmine's
            # content_url names whatever host the request came through).
            data = self.api.get_bytes(self._url(f"attachments/download/{att['id']}"))
            name = f"{att['id']}-{att.get('filename') or 'attachment'}"
            files.append((name, str(att.get("content_type") or ""), data))
        return ticket_bundle({"redmine_issue": issue}, files)

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        issue = self._read_issue(self._issue_id(item))
        return issue_groups(issue) if self._in_scope(issue) else ()

    # -- identities -------------------------------------------------------------------

    def _roles(self) -> tuple[dict[int, Role], int | None]:
        """Every role by id, and the builtin Non member role's id.

        The REST API lists only the roles that can be given; the two builtin
        ones (Non member, then Anonymous, created in that order) are the ids
        below the first listed role that answer. None when not found (fail closed).
        """
        data, _ = self._get("roles.json")
        listed = sorted(int(r["id"]) for r in data.get("roles") or [] if isinstance(r, dict))
        builtin: list[int] = []
        for role_id in range(1, (listed[0] if listed else 3)):
            try:
                self._get(f"roles/{role_id}.json")
                builtin.append(role_id)
            except HttpStatusError:
                continue
        roles = {}
        for role_id in builtin + listed:
            record, _ = self._get(f"roles/{role_id}.json")
            roles[role_id] = Role.from_api(as_object(record.get("role")))
        return roles, builtin[0] if len(builtin) == 2 else None

    def _projects(self) -> list[ProjectAccess]:
        """Every readable project with its memberships."""
        non_member = {
            int(g["id"])
            for g in self._pages("groups.json", "groups", {"builtin": "1"})
            if g.get("builtin") == "non_member"
        }
        out = []
        params = {"status": _READABLE_PROJECTS, "include": "enabled_modules"}
        for project in self._pages("projects.json", "projects", params):
            members: dict[int, tuple[int, ...]] = {}
            non_member_roles: tuple[int, ...] | None = None
            for row in self._pages(f"projects/{project['id']}/memberships.json", "memberships", {}):
                roles = tuple(int(r["id"]) for r in row.get("roles") or [] if isinstance(r, dict))
                user, group = as_object(row.get("user")), as_object(row.get("group"))
                if user.get("id"):
                    members[int(user["id"])] = tuple(sorted({*members.get(int(user["id"]), ()), *roles}))
                elif group.get("id") in non_member:
                    non_member_roles = roles
            modules = {
                str(m.get("name")) for m in project.get("enabled_modules") or [] if isinstance(m, dict)
            }
            out.append(
                ProjectAccess(
                    id=int(project["id"]),
                    public=project.get("is_public") is True,
                    issues="issue_tracking" in modules,
                    members=members,
                    non_member_roles=non_member_roles,
                )
            )
        return out

    def list_identities(self) -> Identities:
        """Every active user and the groups they hold (``connectors.redmine_access``).

        Raises:
            FetchError, AccessDeniedError (a key that is not an
            administrator's), RateLimitedError: the listing is incomplete and
            the catalog keeps what it had.
        """
        users = {
            int(u["id"]): (str(u.get("login", "")), u.get("admin") is True)
            for u in self._pages("users.json", "users", {"status": "1"})
            if u.get("login")
        }
        members_of: dict[int, list[int]] = {}
        for group in self._pages("groups.json", "groups", {}):
            data, _ = self._get(f"groups/{group['id']}.json", {"include": "users"})
            found = as_object(data.get("group")).get("users") or []
            members_of[int(group["id"])] = [int(u["id"]) for u in found if isinstance(u, dict)]
        roles, non_member_role = self._roles()
        return identities(users, members_of, self._projects(), roles, non_member_role)

    # -- webhooks ---------------------------------------------------------------------

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """Redmine has no webhooks of its own; a plug-in's JSON notification
        triggers a read of the change feed.

        Raises:
            InvalidEventError: the body is not a JSON object.
        """
        json_object(body)
        return None
