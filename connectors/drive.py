"""Google Drive as a source (type ``drive``), through the Drive API v3.

The source's location is the API base, ``https://www.googleapis.com/drive/v3``;
every call (listing, changes, permissions, downloads and exports) goes there
and nowhere else: links in file metadata (``webContentLink``,
``exportLinks``) are never followed.

- **Documents**: one per file that is not a folder, shortcut or other
  non-document Google type. Google Docs, Sheets and Slides are exported
  (``files.export``) as HTML, XLSX and PPTX; other files are downloaded
  (``files.get?alt=media``).
- **Listing**: ``files.list`` with ``trashed = false``, paged by
  ``pageToken``; one shard for My Drive and what is shared with the user
  (``corpora=user``) and one per shared drive named in option ``drive_ids``.
- **Changes**: ``changes.getStartPageToken`` gives the cursor;
  ``changes.list`` pages with ``nextPageToken`` and ends with
  ``newStartPageToken`` (the next cursor). A change with ``removed`` or a
  trashed file is a delete.
- **Versions**: the listing uses ``modifiedTime``, changes use the change's
  ``time`` (both RFC 3339 UTC with milliseconds, so they order as text).
- **Permissions**: ``permissions.list`` (paged): users become
  ``user:EMAIL``, groups ``group:EMAIL``, a domain ``domain:NAME`` and
  ``anyone`` becomes ``everyone``; link-only sharing (``allowFileDiscovery``
  false) grants no group. A file whose permissions cannot be read gets no
  group and is not indexed (fail closed).
- **Credentials**: an access token (``Bearer ya29...``) or Google's
  authorized-user JSON (client id, secret and refresh token), refreshed as
  it expires (``connectors.oauth``).
- **Webhooks**: push notifications (``changes.watch``) carry no change, only
  ``X-Goog-Resource-State``: they trigger a read of the change feed.
- **Identities** (``list_identities``, with option ``identities: true``; the
  credentials must be a Workspace admin's): the Admin SDK Directory API at
  ``https://admin.googleapis.com/admin/directory/v1`` (a second client
  confined there; the Drive client stays under the Drive API): ``users``
  and ``groups`` of ``customer=my_customer``, and each group's ``members``,
  all paged by ``nextPageToken``. Ids are as the permissions write them: a
  user ``alice@example.com`` holds ``user:alice@example.com``,
  ``domain:example.com`` and ``everyone``, and ``group:EMAIL`` of each group
  they are a member of; a member of type ``GROUP`` is a nested group
  (expanded through ``ragsync.query.identity``), ``CUSTOMER`` makes every listed
  user a member. Suspended and archived users, and members whose status is
  not ``ACTIVE``, are left out (fail closed). Without the option the source
  lists no identities.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Self
from urllib.parse import quote

from connectors.api import AccessDeniedError, ApiClient, ApiConnector, ClientFactory
from connectors.base import ChangePage, as_object, make_event
from connectors.location import _refuse
from connectors.reader import HttpStatusError
from ragsync.errors import ConfigurationError, FetchError, InvalidEventError
from ragsync.model import Event, SourceFile
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec

EVERYONE = "everyone"
DRIVE_API = "https://www.googleapis.com/drive/v3"
DIRECTORY_API = "https://admin.googleapis.com/admin/directory/v1"
FOLDER = "application/vnd.google-apps.folder"
#: Google types exported, and the format they are exported as.
_OOXML = "application/vnd.openxmlformats-officedocument"
EXPORTS = {
    "application/vnd.google-apps.document": "text/html",
    "application/vnd.google-apps.spreadsheet": f"{_OOXML}.spreadsheetml.sheet",
    "application/vnd.google-apps.presentation": f"{_OOXML}.presentationml.presentation",
}
_FILE_FIELDS = "id,name,mimeType,modifiedTime,size,trashed"
_CHANGE_FIELDS = (
    f"nextPageToken,newStartPageToken,changes(changeType,removed,fileId,time,file({_FILE_FIELDS}))"
)
_PERMISSION_FIELDS = "nextPageToken,permissions(id,type,role,emailAddress,domain,allowFileDiscovery,deleted)"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_RATE_REASONS = (
    "userRateLimitExceeded",
    "rateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
    "USER_RATE_LIMIT_EXCEEDED",
)


def _is_rate_limited(response: Any) -> bool:
    """Drive answers some rate limits with 403 and a reason in the body: in
    ``error.errors[].reason`` (``userRateLimitExceeded``, ``rateLimitExceeded``)
    or, in the newer shape, ``error.details[].reason`` (``RATE_LIMIT_EXCEEDED``)."""
    if int(response.status_code) != 403:
        return False
    try:
        error = response.json().get("error", {})
        entries = [*error.get("errors", []), *error.get("details", [])]
    except (ValueError, AttributeError, TypeError):
        return False
    return any(isinstance(e, dict) and e.get("reason") in _RATE_REASONS for e in entries)


def _epoch(stamp: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def groups_from_permissions(permissions: list[dict[str, Any]]) -> tuple[str, ...]:
    """Drive permissions -> ragsync groups (see the module docstring)."""
    out: set[str] = set()
    for p in permissions:
        if not isinstance(p, dict) or p.get("deleted"):
            continue
        kind = p.get("type")
        if kind in ("user", "group") and p.get("emailAddress"):
            out.add(f"{kind}:{str(p['emailAddress']).lower()}")
        elif kind == "domain" and p.get("domain") and p.get("allowFileDiscovery", False):
            out.add(f"domain:{str(p['domain']).lower()}")
        elif kind == "anyone" and p.get("allowFileDiscovery", False):
            out.add(EVERYONE)
    return tuple(sorted(out))


def _token_pages(client: ApiClient, url: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """Each page of a Google list call, following ``nextPageToken`` (files,
    permissions, the Directory API's users, groups and members).

    Raises:
        FetchError (and subclasses): a page could not be read, or is not a
            JSON object (a listing is never partial).
    """
    token = ""
    while True:
        data = client.get_json(url, {**params, **({"pageToken": token} if token else {})})
        if not isinstance(data, dict):
            raise FetchError("Google answered a page that is not a JSON object")
        yield data
        token = str(data.get("nextPageToken") or "")
        if not token:
            return


class DriveConnector(ApiConnector):
    """Files of one Google Drive account (and the shared drives it names).

    Args:
        spec: the source (``uri`` = the API base; options ``drive_ids`` and
            ``channel_token``).
        api: the API client (with the source's access token).
    """

    supports_changes: ClassVar[bool] = True
    user_agent: ClassVar[str] = "ragsync (Drive connector)"
    default_uri: ClassVar[str] = DRIVE_API
    oauth_refresh: ClassVar[bool] = True

    def __init__(self, spec: SourceSpec, api: ApiClient, directory: ApiClient | None = None) -> None:
        super().__init__(spec, api)
        drive_ids = spec.options.get("drive_ids", [])
        if not isinstance(drive_ids, list) or not all(isinstance(d, str) and _ID.match(d) for d in drive_ids):
            raise ConfigurationError("option 'drive_ids' must be a list of shared drive ids")
        self.drive_ids = tuple(drive_ids)
        if not isinstance(spec.options.get("identities", False), bool):
            raise ConfigurationError("option 'identities' must be true or false")
        self.directory = directory if spec.options.get("identities", False) else None

    @classmethod
    def from_clients(cls, spec: SourceSpec, client: ClientFactory, auth: dict[str, str]) -> Self:
        directory = None
        if spec.options.get("identities", False) is True:
            directory = client(auth, uri=DIRECTORY_API, is_rate_limited=_is_rate_limited)
        return cls(spec, client(auth, is_rate_limited=_is_rate_limited), directory)

    def close(self) -> None:
        super().close()
        if self.directory is not None:
            self.directory.close()

    # -- addresses ------------------------------------------------------------------

    def content_uri(self, file_id: str, mime: str) -> str:
        """Where a file's bytes are read: an export for Google types, the
        media download otherwise."""
        if mime in EXPORTS:
            return self._url(f"files/{file_id}/export?mimeType={quote(EXPORTS[mime], safe='')}")
        return self._url(f"files/{file_id}?alt=media&supportsAllDrives=true")

    @staticmethod
    def is_document(mime: str) -> bool:
        """Folders, shortcuts, forms and other Google types without an export are not documents."""
        return mime != FOLDER and (not mime.startswith("application/vnd.google-apps.") or mime in EXPORTS)

    def _item(self, f: dict[str, Any], version: str) -> SourceFile:
        file_id = str(f["id"])
        return SourceFile(
            tenant_id=self.spec.tenant_id,
            source_id=self.spec.source_id,
            source_object_id=file_id,
            uri=self.content_uri(file_id, str(f.get("mimeType", ""))),
            size=int(f["size"]) if str(f.get("size", "")).isdigit() else -1,
            acl_groups=self._file_groups(file_id),
            source_version=version,
        )

    # -- listing --------------------------------------------------------------------

    def list_shards(self) -> list[str]:
        return ["user"] + [f"drive:{d}" for d in self.drive_ids]

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every document file of one corpus, with its permissions.

        Raises:
            FetchError (and subclasses): a page could not be read.
        """
        params: dict[str, Any] = {
            "q": "trashed = false",
            "pageSize": "1000",
            "fields": f"nextPageToken,files({_FILE_FIELDS})",
            "supportsAllDrives": "true",
            "includeItemsFromAllDrives": "true",
        }
        if shard == "user":
            params["corpora"] = "user"
        elif shard.startswith("drive:") and shard[6:] in self.drive_ids:
            params.update(corpora="drive", driveId=shard[6:])
        else:
            raise ValueError(f"{shard!r} is not one of this source's corpora")
        for data in _token_pages(self.api, self._url("files"), params):
            for f in data.get("files", []):
                if not isinstance(f, dict) or not _ID.match(str(f.get("id", ""))) or f.get("trashed"):
                    continue
                if self.is_document(str(f.get("mimeType", ""))):
                    yield self._item(f, str(f.get("modifiedTime", "")))

    # -- change feed ------------------------------------------------------------------

    def start_cursor(self) -> str:
        data = self.api.get_json(self._url("changes/startPageToken"), {"supportsAllDrives": "true"})
        token = str(data.get("startPageToken") or "")
        if not token:
            raise FetchError("Drive answered no startPageToken")
        return token

    def changes(self, cursor: str) -> ChangePage:
        """One page of ``changes.list`` from the page token ``cursor``."""
        if not cursor:
            raise ConfigurationError("a Drive change feed needs a page token (take one with start_cursor)")
        data = self.api.get_json(
            self._url("changes"),
            {
                "pageToken": cursor,
                "pageSize": "1000",
                "includeRemoved": "true",
                "supportsAllDrives": "true",
                "includeItemsFromAllDrives": "true",
                "fields": _CHANGE_FIELDS,
            },
        )
        events: list[Event] = []
        for change in data.get("changes", []):
            event = self._change_event(change)
            if event is not None:
                events.append(event)
        if data.get("nextPageToken"):
            return ChangePage(tuple(events), str(data["nextPageToken"]), more=True)
        if not data.get("newStartPageToken"):
            raise FetchError("Drive answered neither nextPageToken nor newStartPageToken")
        return ChangePage(tuple(events), str(data["newStartPageToken"]), more=False)

    def _change_event(self, change: Any) -> Event | None:
        if not isinstance(change, dict) or change.get("changeType", "file") != "file":
            return None  # shared-drive metadata changes
        file_id = str(change.get("fileId", ""))
        if not _ID.match(file_id):
            return None
        stamp = str(change.get("time", ""))
        f = as_object(change.get("file"))
        mime = str(f.get("mimeType", ""))
        if change.get("removed") or f.get("trashed"):
            return make_event(self.spec, file_id, "delete", stamp, event_time=_epoch(stamp))
        if not self.is_document(mime):
            return None
        item = self._item({**f, "id": file_id}, stamp)
        return make_event(
            self.spec,
            file_id,
            "upsert",
            stamp,
            acl_groups=item.acl_groups,
            content_uri=item.uri,
            event_time=_epoch(stamp),
        )

    # -- content and permissions ------------------------------------------------------

    def _file_id(self, item: SourceFile) -> str:
        file_id = item.source_object_id
        if not _ID.match(file_id):
            raise _refuse(item.uri)
        address = self.location.resolve(item.uri)
        allowed = {self.location.resolve(self.content_uri(file_id, m)) for m in (*EXPORTS, "")}
        if address not in allowed:
            raise _refuse(item.uri)  # only this file's download or export is read
        return file_id

    def fetch(self, item: SourceFile) -> bytes:
        """The file's bytes (a download, or an export of a Google type).

        Raises:
            OutsideLocationError: ``item.uri`` is not this file's download or export.
            TooLargeError / FetchTimeoutError: over the read limits.
            FetchError: Drive refused or is unreachable.
        """
        self._file_id(item)
        return self.api.get_bytes(item.uri)

    def _file_groups(self, file_id: str) -> tuple[str, ...]:
        permissions: list[dict[str, Any]] = []
        params = {"pageSize": "100", "supportsAllDrives": "true", "fields": _PERMISSION_FIELDS}
        try:
            for data in _token_pages(self.api, self._url(f"files/{file_id}/permissions"), params):
                permissions.extend(p for p in data.get("permissions", []) if isinstance(p, dict))
        except (AccessDeniedError, HttpStatusError):
            return ()  # permissions we may not read: fail closed
        return groups_from_permissions(permissions)

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        return self._file_groups(self._file_id(item))

    # -- identities -------------------------------------------------------------------

    def _directory_pages(self, path: str, key: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """Every entry of list ``key`` of a Directory API collection, page by page.

        Raises:
            FetchError (and subclasses): a page could not be read (through the
                connector's client policy: 429 and rate-limit 403 waited out).
        """
        assert self.directory is not None
        for data in _token_pages(self.directory, f"{self.directory.base_url}/{path}", params):
            entries = data.get(key) or []
            if not isinstance(entries, list):
                raise FetchError(f"Directory API answered a {key!r} that is not a list")
            yield from (e for e in entries if isinstance(e, dict))

    def list_identities(self) -> Identities | None:
        """The Workspace's users, groups and memberships (see the module
        docstring); None without option ``identities``.

        Returns:
            The complete set; a page that cannot be read raises instead.

        Raises:
            FetchError, AccessDeniedError (not an admin), RateLimitedError.
        """
        if self.directory is None:
            return None
        users: set[str] = set()
        pairs: set[tuple[str, str]] = set()
        nested: set[tuple[str, str]] = set()
        for row in self._directory_pages("users", "users", {"customer": "my_customer", "maxResults": "500"}):
            email = str(row.get("primaryEmail", "")).lower()
            if "@" not in email or row.get("suspended") or row.get("archived"):
                continue
            users.add(email)
            pairs.update({(email, f"user:{email}"), (email, f"domain:{email.rpartition('@')[2]}")})
            pairs.add((email, EVERYONE))
        groups: set[str] = set()
        for group in self._directory_pages(
            "groups", "groups", {"customer": "my_customer", "maxResults": "200"}
        ):
            key, email = str(group.get("id", "")), str(group.get("email", "")).lower()
            if not _ID.match(key) or "@" not in email:
                raise FetchError("Directory API answered a group without an id or e-mail")
            parent = f"group:{email}"
            groups.add(parent)
            for member in self._directory_pages(f"groups/{key}/members", "members", {"maxResults": "200"}):
                if member.get("status", "ACTIVE") != "ACTIVE":
                    continue
                kind, address = member.get("type"), str(member.get("email", "")).lower()
                if kind == "USER" and "@" in address:
                    pairs.add((address, parent))
                elif kind == "GROUP" and "@" in address:
                    nested.add((f"group:{address}", parent))
                elif kind == "CUSTOMER":
                    pairs.update((u, parent) for u in users)
        return Identities(
            users=frozenset(users),
            groups=frozenset(groups | {g for _, g in pairs} | {g for g, _ in nested}),
            user_groups=frozenset(pairs),
            group_groups=frozenset(nested),
        )

    # -- webhooks ---------------------------------------------------------------------

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """A ``changes.watch`` push notification: ``sync`` (channel opened)
        carries nothing; any other state means "read the change feed".

        Raises:
            InvalidEventError: not a Drive notification, or the channel token
                does not match option ``channel_token``.
        """
        lower = {k.lower(): v for k, v in headers.items()}
        state = lower.get("x-goog-resource-state", "")
        if not state or not lower.get("x-goog-channel-id"):
            raise InvalidEventError("not a Drive push notification (no X-Goog-Resource-State / Channel-ID)")
        expected = str(self.spec.options.get("channel_token", ""))
        given = lower.get("x-goog-channel-token", "")
        if expected and not hmac.compare_digest(given.encode(), expected.encode()):
            raise InvalidEventError("Drive notification with a wrong channel token")
        return [] if state == "sync" else None
