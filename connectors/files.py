"""A folder or object-store prefix as a source.

Each file under the root is one document; its ``source_object_id`` is its
path relative to the root, so moving the root keeps ids only if the relative
layout is kept. Permissions: every file gets the groups given on the command
line, unless the root holds a ``.ragsync-acl.json`` sidecar::

    {"default": ["everyone"],
     "rules": [{"glob": "hr/*", "groups": ["hr"]}]}

The first matching rule wins. A file matched by a rule with no groups gets
none and is therefore not indexed (fail closed).

Hostile folders: only regular files are listed; a symlink is followed only
when its target lies inside the root; a file name that is not valid UTF-8
gets the object id ``//`` + its percent-encoded bytes (no valid relative
path starts with ``//``, so ids never collide) and a ``file://`` URI that
percent-encodes its bytes, so it travels through JSON and SQL unchanged.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from connectors.base import FileSystem
from connectors.location import LOCAL, Location
from connectors.reader import ContentReader, FetchLimits
from ragsync.errors import ConfigurationError
from ragsync.model import SourceFile

ACL_SIDECAR = ".ragsync-acl.json"


@dataclass(frozen=True)
class AclRules:
    """Groups per relative path, from the command line and the sidecar."""

    default: tuple[str, ...]
    rules: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def groups_for(self, relative_path: str) -> tuple[str, ...]:
        for pattern, groups in self.rules:
            if fnmatch.fnmatch(relative_path, pattern):
                return groups
        return self.default

    @classmethod
    def parse(cls, text: str, default: Sequence[str]) -> AclRules:
        """Read a sidecar. Raises ConfigurationError on a malformed one."""
        try:
            data = json.loads(text)
            base = tuple(data.get("default", list(default)))
            rules = tuple(
                (str(r["glob"]), tuple(str(g) for g in r.get("groups", []))) for r in data.get("rules", [])
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"{ACL_SIDECAR} is malformed: {exc}") from exc
        return cls(default=base, rules=rules)


def local_object_id(relative: str) -> str:
    """The object id of a file at ``relative`` (a path relative to the root,
    as ``os.fsdecode`` gives it). Valid UTF-8 names are their own id."""
    try:
        relative.encode("utf-8")
        return relative
    except UnicodeEncodeError:
        return "//" + quote(os.fsencode(relative), safe="/")


def local_uri(path: str) -> str:
    """A readable address for an absolute local ``path``: the path itself
    when it is valid UTF-8, else a ``file://`` URI percent-encoding its bytes
    (``Location.resolve`` decodes it back)."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return "file://" + quote(os.fsencode(path), safe="/")


class FolderConnector:
    """Lists and reads files under ``root``: a local folder, or a ``gs://`` /
    ``s3://`` prefix read through a ``FileSystem``.

    Every read goes through a ``ContentReader`` confined to ``root``.
    """

    def __init__(
        self,
        fs: FileSystem,
        root: str,
        *,
        tenant_id: str,
        source_id: str,
        acl_groups: Sequence[str],
        limits: FetchLimits | None = None,
    ) -> None:
        if not root:
            raise ConfigurationError("a source folder or prefix is required")
        self.fs = fs
        self.location = Location.parse(root)
        self.root = self.location.uri
        self.tenant_id = tenant_id
        self.source_id = source_id
        self._default_groups = tuple(g for g in acl_groups if g)
        self.reader = ContentReader(self.location, limits, fs)

    def _relative(self, path: str) -> str:
        prefix = self.root.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def acl_rules(self) -> AclRules:
        """The sidecar's rules, or the default groups when there is none.

        Raises:
            ConfigurationError: the sidecar is malformed.
            FetchError / OutsideLocationError: it exists but cannot be read, or
                is a link out of the root (fail closed: the listing fails).
        """
        sidecar = self.location.uri.rstrip("/") + "/" + ACL_SIDECAR
        if self.location.scheme == LOCAL:
            exists = os.path.lexists(os.path.join(self.location.root, ACL_SIDECAR))
        else:
            exists = any(i.path == sidecar for i in self.fs.match(sidecar))
        if not exists:
            return AclRules(default=self._default_groups)
        text = self.reader.read(sidecar)
        return AclRules.parse(text.decode("utf-8", errors="replace"), self._default_groups)

    def _listed(self) -> Iterator[tuple[str, str, int, float]]:
        """(uri, relative path, size, mtime) of every file, sorted by path."""
        if self.location.scheme == LOCAL:
            real_root = self.reader.real_root
            for path, st in self.reader.walk():
                rel = os.path.relpath(path, real_root)
                uri = local_uri(os.path.join(self.location.root, rel))
                yield uri, rel, st.st_size, st.st_mtime
            return
        infos = self.fs.match(self.fs.join(self.root, "**"))
        for info in sorted(infos, key=lambda i: i.path):
            if self.location.contains(info.path):
                yield info.path, self._relative(info.path), info.size, info.mtime

    def list_all(self) -> Iterator[SourceFile]:
        """Every file under the root, sorted by path, hidden files skipped.

        Raises:
            FetchError: the root cannot be listed (never taken as empty).
        """
        rules = self.acl_rules()
        for uri, rel, size, mtime in self._listed():
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            object_id = local_object_id(rel)
            yield SourceFile(
                tenant_id=self.tenant_id,
                source_id=self.source_id,
                source_object_id=object_id,
                uri=uri,
                size=size,
                acl_groups=rules.groups_for(object_id),
                source_version=f"{mtime:.6f}",
            )

    def fetch(self, item: SourceFile) -> bytes:
        return self.reader.read(item.uri)

    def permissions(self, item: SourceFile) -> Sequence[str]:
        return item.acl_groups
