"""Which connector serves which source type, and how one is opened.

Adding a connector: write ``connectors/<name>.py`` with a class that
implements ``connectors.base.Connector`` and a ``from_spec`` class method
taking the keyword arguments below, then add it to :data:`CONNECTORS`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from connectors.base import Connector, FileSystem, SourceSpec
from connectors.location import Location
from connectors.reader import FetchLimits
from ragsync.errors import ConfigurationError

#: source type -> "module:Class" (imported on first use); the keys are
#: ``ragsync.source_types.SOURCE_TYPES``.
CONNECTORS: dict[str, str] = {
    "object_store": "connectors.files:FolderConnector",
    "wiki": "connectors.mediawiki:MediaWikiConnector",
    "drive": "connectors.drive:DriveConnector",
    "tickets": "connectors.jira:JiraConnector",
}


def connector_class(spec: SourceSpec) -> Any:
    """The class serving ``spec``.

    The location decides how content is read: a folder or ``gs://``/``s3://``
    prefix is always read by the folder connector (whatever the source's
    type: a wiki exported to a bucket is a prefix of files); an HTTP(S)
    location by the API connector of the source's type.

    Raises:
        ConfigurationError: no location, or no connector for the type and location.
    """
    if not spec.uri:
        raise ConfigurationError(
            f"source {spec.source_id!r} declares no location: register it with "
            "`ragsync sources add ID --type TYPE --uri LOCATION`"
        )
    scheme = Location.parse(spec.uri).scheme
    source_type = "object_store" if scheme in ("file", "gs", "s3") else spec.type
    target = CONNECTORS.get(source_type)
    if target is None or (scheme not in ("file", "gs", "s3") and source_type == "object_store"):
        raise ConfigurationError(f"no connector reads a {spec.type!r} source at a {scheme}:// location")
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def default_uri(source_type: str) -> str:
    """The location a source of this type has when none is given ('' when
    it must be given): Google Drive's API is at one address."""
    return "https://www.googleapis.com/drive/v3" if source_type == "drive" else ""


def open_connector(
    spec: SourceSpec,
    *,
    fs: FileSystem | None = None,
    limits: FetchLimits | None = None,
    transport: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Connector:
    """A connector for ``spec``.

    Args:
        spec: the registered source; it must declare a location (``uri``).
        fs: file system for object stores (``transforms.io.BeamFileSystem``).
        limits: byte and time limits per read.
        transport: ``httpx`` transport for API connectors (tests replay
            recorded answers through ``httpx.MockTransport``).
        sleep: how rate-limit waits sleep (tests record them).

    Raises:
        ConfigurationError: unknown type, no location, unusable options or
            credentials.
    """
    cls = connector_class(spec)
    if cls.__name__ == "FolderConnector" and fs is None:
        raise ConfigurationError("object-store sources are read through a file system; none was given")
    connector: Connector = cls.from_spec(
        spec, fs=fs, limits=limits or FetchLimits(), transport=transport, sleep=sleep
    )
    return connector
