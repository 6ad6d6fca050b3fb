"""A folder or object-store prefix as a source.

Each file under the root is one document; its ``source_object_id`` is its
path relative to the root, so moving the root keeps ids only if the relative
layout is kept. Permissions: every file gets the groups given on the command
line, unless the root holds a ``.ragsync-acl.json`` sidecar::

    {"default": ["everyone"],
     "rules": [{"glob": "hr/*", "groups": ["hr"]}]}

The first matching rule wins. A file matched by a rule with no groups gets
none and is therefore not indexed (fail closed).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from connectors.base import FileSystem
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


class FolderConnector:
    """Lists and reads files under ``root`` through a ``FileSystem``."""

    def __init__(
        self,
        fs: FileSystem,
        root: str,
        *,
        tenant_id: str,
        source_id: str,
        acl_groups: Sequence[str],
    ) -> None:
        if not root:
            raise ConfigurationError("a source folder or prefix is required")
        self.fs = fs
        self.root = root.rstrip("/") if root != "/" else root
        self.tenant_id = tenant_id
        self.source_id = source_id
        self._default_groups = tuple(g for g in acl_groups if g)

    def _relative(self, path: str) -> str:
        prefix = self.root + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def acl_rules(self) -> AclRules:
        sidecar = self.fs.join(self.root, ACL_SIDECAR)
        if not self.fs.match(sidecar):
            return AclRules(default=self._default_groups)
        with self.fs.open(sidecar) as fh:
            return AclRules.parse(fh.read().decode("utf-8"), self._default_groups)

    def list_all(self) -> Iterator[SourceFile]:
        """Every file under the root, sorted by path, hidden files skipped."""
        rules = self.acl_rules()
        infos = self.fs.match(self.fs.join(self.root, "**"))
        for info in sorted(infos, key=lambda i: i.path):
            rel = self._relative(info.path)
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            yield SourceFile(
                tenant_id=self.tenant_id,
                source_id=self.source_id,
                source_object_id=rel,
                uri=info.path,
                size=info.size,
                acl_groups=rules.groups_for(rel),
                source_version=f"{info.mtime:.6f}",
            )

    def fetch(self, item: SourceFile) -> bytes:
        with self.fs.open(item.uri) as fh:
            return fh.read()

    def permissions(self, item: SourceFile) -> Sequence[str]:
        return item.acl_groups
