"""The connector interface and the file-system interface connectors read through."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from ragsync.model import SourceFile


@dataclass(frozen=True)
class FileInfo:
    """One object found by a file system match."""

    path: str
    size: int
    mtime: float


class FileSystem(Protocol):
    """What a connector needs from a file system.

    ``transforms.io`` adapts Apache Beam's ``FileSystems`` (local, gs://,
    s3://) to this; tests may pass a local implementation.
    """

    def match(self, pattern: str) -> list[FileInfo]: ...

    def open(self, path: str) -> BinaryIO: ...

    def join(self, base: str, *parts: str) -> str: ...


class Connector(Protocol):
    """A source of documents."""

    source_id: str
    tenant_id: str

    def list_all(self) -> Iterator[SourceFile]:
        """A full listing. Raises on failure: an incomplete listing must
        never be taken as complete (it would delete what it missed)."""
        ...

    def fetch(self, item: SourceFile) -> bytes:
        """The object's current bytes."""
        ...

    def permissions(self, item: SourceFile) -> Sequence[str]:
        """Groups allowed to read the object; [] when they cannot be read."""
        ...
