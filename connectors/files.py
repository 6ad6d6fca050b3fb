"""A folder or object-store prefix as a source (type ``object_store``).

Each file under the root is one document; its ``source_object_id`` is its
path relative to the root, so moving the root keeps ids only if the relative
layout is kept. Its version is its modification time (``%.6f`` epoch
seconds). Permissions: every file gets the source's ``acl_groups`` option
(the backfill's ``--acl-groups``), unless the root holds a
``.ragsync-acl.json`` sidecar::

    {"default": ["everyone"], "deny": ["contractors"],
     "rules": [{"glob": "hr/*", "groups": ["hr"], "deny": ["interns"]}]}

The first matching rule wins. A file matched by a rule with no groups gets
none and is therefore not indexed (fail closed). ``deny`` lists groups
explicitly denied (NTFS/SharePoint-style deny entries): a member of one
never sees the file, even when another of their groups is allowed; a rule
without ``deny`` takes the top-level one.

Versions and evidence times: a file's version is its modification time in
the ``timestamp`` domain, observed at the listing's time; its permissions
were true at the sidecar's modification time (unknown without a sidecar:
the groups then come from configuration, not from the source).

Listing: a local folder is one shard, walked by ``ContentReader.walk`` (only
regular files; a symlink is followed only when its target lies inside the
root). A ``gs://``/``s3://`` prefix is split into shards by the first
character of the key below the prefix (one per letter or digit, plus one for
every other first character), each matched through the ``FileSystem``
(Beam's ``FileSystems.match``) on a worker, so no process holds the whole
listing. A failing match fails the listing.

Hostile names: a file name that is not valid UTF-8 gets the object id
``//`` + its percent-encoded bytes (no valid relative path starts with
``//``, so ids never collide) and a ``file://`` URI that percent-encodes its
bytes, so it travels through JSON and SQL unchanged.

There is no change feed: each sync is a full listing. Object stores notify
changes through webhooks instead: GCS Pub/Sub notifications and S3 event
notifications are translated by :meth:`FolderConnector.webhook_events`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import string
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import quote, unquote_plus

from connectors.base import ChangePage, FileSystem, json_object, make_event
from connectors.location import LOCAL, Location
from connectors.reader import ContentReader, FetchLimits
from ragsync.errors import ConfigurationError, InvalidEventError, OutsideLocationError
from ragsync.model import Event, SourceFile
from ragsync.query.identity import Identities
from ragsync.source_types import SourceSpec

ACL_SIDECAR = ".ragsync-acl.json"
SHARD_ALPHABET = string.digits + string.ascii_letters
"""Object-store keys are listed in one shard per leading character in this
set, plus one shard for keys starting with any other character."""
REST_SHARD = "[!0-9A-Za-z]"


@dataclass(frozen=True)
class AclRules:
    """Groups per relative path, from the source's groups and the sidecar."""

    default: tuple[str, ...]
    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()
    deny: tuple[str, ...] = ()
    rule_deny: tuple[tuple[str, ...] | None, ...] = ()
    observed_at: float = 0.0  # the sidecar's modification time; 0 without one

    def groups_for(self, relative_path: str) -> tuple[str, ...]:
        for pattern, groups in self.rules:
            if fnmatch.fnmatch(relative_path, pattern):
                return groups
        return self.default

    def deny_for(self, relative_path: str) -> tuple[str, ...]:
        """Groups denied for the file (the first matching rule's, else the top-level ones)."""
        for i, (pattern, _) in enumerate(self.rules):
            if fnmatch.fnmatch(relative_path, pattern):
                own = self.rule_deny[i] if i < len(self.rule_deny) else None
                return self.deny if own is None else own
        return self.deny

    @classmethod
    def parse(cls, text: str, default: Sequence[str], observed_at: float = 0.0) -> AclRules:
        """Read a sidecar. Raises ConfigurationError on a malformed one."""

        def names(value: Any) -> tuple[str, ...]:
            if not isinstance(value, list):
                raise TypeError("groups and deny must be lists")
            return tuple(sorted({str(g).strip() for g in value if str(g).strip()}))

        try:
            data = json.loads(text)
            base = tuple(data.get("default", list(default)))
            raw = data.get("rules", [])
            rules = tuple((str(r["glob"]), tuple(str(g) for g in r.get("groups", []))) for r in raw)
            rule_deny = tuple(names(r["deny"]) if "deny" in r else None for r in raw)
            deny = names(data.get("deny", []))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"{ACL_SIDECAR} is malformed: {exc}") from exc
        return cls(default=base, rules=rules, deny=deny, rule_deny=rule_deny, observed_at=observed_at)


def local_object_id(relative: str) -> str:
    """The object id of a file at ``relative`` (a path relative to the root,
    as ``os.fsdecode`` gives it). Valid UTF-8 names are their own id."""
    return _utf8_or_quoted(relative, "//")


def local_uri(path: str) -> str:
    """A readable address for an absolute local ``path``: the path itself
    when it is valid UTF-8, else a ``file://`` URI percent-encoding its bytes
    (``Location.resolve`` decodes it back)."""
    return _utf8_or_quoted(path, "file://")


def _utf8_or_quoted(path: str, prefix: str) -> str:
    """``path`` itself when it is valid UTF-8, else ``prefix`` and its bytes
    (``os.fsencode``: undecodable ones kept as surrogates) percent-encoded."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return prefix + quote(os.fsencode(path), safe="/")


def mtime_version(mtime: float) -> str:
    """The version of a file modified at ``mtime`` (epoch seconds)."""
    return f"{mtime:.6f}"


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


class FolderConnector:
    """Lists and reads files under a local folder or a ``gs://``/``s3://``
    prefix. Every read goes through a ``ContentReader`` confined to the root.

    Args:
        spec: the source; ``spec.uri`` is the root; option ``acl_groups``
            gives the default groups.
        fs: the file system for object stores (``transforms.io.BeamFileSystem``).
        limits: byte and time limits per read.
    """

    supports_changes: ClassVar[bool] = False
    #: Listed permissions come from a sidecar (timed by its mtime) or from
    #: configuration (time unknown), not from the source as of the listing.
    permissions_current: ClassVar[bool] = False

    def __init__(self, spec: SourceSpec, fs: FileSystem, limits: FetchLimits | None = None) -> None:
        if not spec.uri:
            raise ConfigurationError("a source folder or prefix is required")
        self.spec = spec
        self.fs = fs
        self.location = Location.parse(spec.uri)
        self.root = self.location.uri
        self._default_groups = spec.option_groups()
        self.reader = ContentReader(self.location, limits, fs)
        self._rules: AclRules | None = None

    @classmethod
    def from_spec(cls, spec: SourceSpec, *, fs: FileSystem, limits: FetchLimits, **_: Any) -> FolderConnector:
        return cls(spec, fs, limits)

    def close(self) -> None:
        return None

    def list_identities(self) -> Identities | None:
        """None: a folder or bucket has no users or groups to list (its ACLs
        come from sidecars and options)."""
        return None

    # -- listing ------------------------------------------------------------------

    def _relative(self, path: str) -> str:
        prefix = self.root.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def acl_rules(self) -> AclRules:
        """The sidecar's rules, or the default groups when there is none
        (read once per connector).

        Raises:
            ConfigurationError: the sidecar is malformed.
            FetchError / OutsideLocationError: it exists but cannot be read, or
                is a link out of the root (fail closed: the listing fails).
        """
        if self._rules is not None:
            return self._rules
        sidecar = self.location.uri.rstrip("/") + "/" + ACL_SIDECAR
        mtime = 0.0
        if self.location.scheme == LOCAL:
            local = os.path.join(self.location.root, ACL_SIDECAR)
            exists = os.path.lexists(local)
            if exists:
                mtime = os.lstat(local).st_mtime
        else:
            found = [i for i in self.fs.match(sidecar) if i.path == sidecar]
            exists = bool(found)
            if found:
                mtime = float(found[0].mtime or 0.0)
        if not exists:
            self._rules = AclRules(default=self._default_groups)
        else:
            text = self.reader.read(sidecar)
            self._rules = AclRules.parse(
                text.decode("utf-8", errors="replace"), self._default_groups, observed_at=mtime
            )
        return self._rules

    def list_shards(self) -> list[str]:
        """``[""]`` for a local folder (one walk); for object stores one
        match pattern per leading key character plus one for the rest."""
        if self.location.scheme == LOCAL:
            return [""]
        base = self.root.rstrip("/") + "/"
        return [base + c + "**" for c in SHARD_ALPHABET] + [base + REST_SHARD + "**"]

    def whole_shard(self) -> str:
        """One shard covering the whole listing: ``""`` for a local folder,
        ``ROOT/**`` for an object store (one match: one client and one
        paginated listing, for a launcher listing it alone)."""
        if self.location.scheme == LOCAL:
            return ""
        return self.root.rstrip("/") + "/**"

    def _listed(self, shard: str) -> Iterator[tuple[str, str, int, float]]:
        """(uri, relative path, size, mtime) of every file of one shard."""
        if self.location.scheme == LOCAL:
            real_root = self.reader.real_root
            # Entries the reader will not read (links leaving the root,
            # devices, FIFOs, sockets) are listed too: fetching them is
            # refused, so each becomes an ``invalid_event`` dead letter with
            # the reason instead of vanishing from the listing unseen.
            for path, st in self.reader.walk(include_refused=True):
                rel = os.path.relpath(path, real_root)
                uri = local_uri(os.path.join(self.location.root, rel))
                yield uri, rel, st.st_size if st else 0, st.st_mtime if st else 0.0
            return
        if not shard.startswith(self.root.rstrip("/") + "/"):
            raise ValueError(f"shard {shard!r} is not under {self.root}")
        for info in sorted(self.fs.match(shard), key=lambda i: i.path):
            if self.location.contains(info.path):
                yield info.path, self._relative(info.path), info.size, info.mtime

    def list_shard(self, shard: str) -> Iterator[SourceFile]:
        """Every file of one shard, sorted by path, hidden files skipped.

        Raises:
            FetchError: the root cannot be listed (never taken as empty).
        """
        rules = self.acl_rules()
        listed_at = time.time()
        for uri, rel, size, mtime in self._listed(shard):
            if _hidden(rel):
                continue
            object_id = local_object_id(rel)
            yield SourceFile(
                tenant_id=self.spec.tenant_id,
                source_id=self.spec.source_id,
                source_object_id=object_id,
                uri=uri,
                size=size,
                acl_groups=rules.groups_for(object_id),
                source_version=mtime_version(mtime),
                version_domain="timestamp",
                observed_at=listed_at,
                acl_observed_at=rules.observed_at,
                deny_groups=rules.deny_for(object_id),
            )

    # -- no change feed -------------------------------------------------------------

    def start_cursor(self) -> str:
        return ""

    def changes(self, cursor: str) -> ChangePage:
        raise NotImplementedError("object stores have no change feed: every sync is a full listing")

    # -- content and permissions ------------------------------------------------------

    def fetch(self, item: SourceFile) -> bytes:
        return self.reader.read(item.uri)

    def permissions(self, item: SourceFile) -> tuple[str, ...]:
        return self.acl_rules().groups_for(item.source_object_id)

    # -- webhooks ---------------------------------------------------------------------

    def webhook_events(self, body: bytes, headers: Mapping[str, str]) -> list[Event] | None:
        """Translate a GCS Pub/Sub notification (push format) or an S3 event
        notification into events for objects under the root.

        Hidden files and GCS deletes of an overwritten generation (the new
        generation's finalize follows) are skipped.

        Raises:
            InvalidEventError: neither shape, or malformed.
            OutsideLocationError: an object outside the root (another bucket,
                or a key outside the prefix): the whole notification is refused.
        """
        data = json_object(body)
        if isinstance(data.get("message"), dict):
            return self._gcs_events(data["message"])
        if isinstance(data.get("Records"), list):
            return self._s3_events(data["Records"])
        raise InvalidEventError("not a GCS Pub/Sub notification or an S3 event notification")

    def _object_event(self, key_uri: str, op: str, mtime: float) -> Event | None:
        if not self.location.contains(key_uri):
            # Another bucket, a key beside the prefix or one climbing out of
            # it: refused (the notification is configured for the prefix).
            raise OutsideLocationError(
                f"a notification for an object outside the source's location: {key_uri}"
            )
        rel = self._relative(self.location.resolve(key_uri))
        if _hidden(rel):
            return None
        groups = self.acl_rules().groups_for(rel) if op == "upsert" else ()
        return make_event(
            self.spec,
            rel,
            op,
            mtime_version(mtime),
            acl_groups=groups,
            content_uri=key_uri if op == "upsert" else "",
            event_time=mtime,
        )

    def _gcs_events(self, message: dict[str, Any]) -> list[Event]:
        import base64

        attrs = message.get("attributes") or {}
        if not isinstance(attrs, dict) or self.location.scheme != "gs":
            raise InvalidEventError("a GCS notification for a source that is not gs://")
        kind = attrs.get("eventType")
        if kind not in ("OBJECT_FINALIZE", "OBJECT_DELETE", "OBJECT_ARCHIVE", "OBJECT_METADATA_UPDATE"):
            raise InvalidEventError(f"unknown GCS eventType {kind!r}")
        if kind in ("OBJECT_DELETE", "OBJECT_ARCHIVE") and attrs.get("overwrittenByGeneration"):
            return []
        try:
            resource = json.loads(base64.b64decode(message.get("data") or "", validate=True) or b"{}")
            bucket, name = str(attrs["bucketId"]), str(attrs["objectId"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidEventError(f"malformed GCS notification: {exc}") from None
        stamp = resource.get("updated") if isinstance(resource, dict) else None
        when = _rfc3339(stamp or attrs.get("eventTime") or "")
        op = "upsert" if kind in ("OBJECT_FINALIZE", "OBJECT_METADATA_UPDATE") else "delete"
        event = self._object_event(f"gs://{bucket}/{name}", op, when)
        return [event] if event else []

    def _s3_events(self, records: list[Any]) -> list[Event]:
        if self.location.scheme != "s3":
            raise InvalidEventError("an S3 notification for a source that is not s3://")
        out: list[Event] = []
        for record in records:
            try:
                name = str(record["eventName"])
                bucket = str(record["s3"]["bucket"]["name"])
                key = unquote_plus(str(record["s3"]["object"]["key"]))
                when = _rfc3339(str(record["eventTime"]))
            except (KeyError, TypeError) as exc:
                raise InvalidEventError(f"malformed S3 event record: {exc}") from None
            if name.startswith("ObjectCreated:"):
                op = "upsert"
            elif name.startswith("ObjectRemoved:"):
                op = "delete"
            else:
                continue  # restore, replication, lifecycle transitions: no content change
            event = self._object_event(f"s3://{bucket}/{key}", op, when)
            if event:
                out.append(event)
        return out


def _rfc3339(text: str) -> float:
    """Epoch seconds of an RFC 3339 time. Raises InvalidEventError."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InvalidEventError(f"not an RFC 3339 time: {text!r}") from None
