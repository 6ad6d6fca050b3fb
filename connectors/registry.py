"""Which connector serves a source, and how one is opened.

The class of each source type is registered in ``ragsync.source_types``
(``register_source_type``: the built-in types and plug-ins' own); this module
imports it when a source is opened. Adding a connector: README "Adding a
connector".
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from connectors.base import Connector, FileSystem
from connectors.location import Location
from connectors.reader import FetchLimits
from ragsync.errors import ConfigurationError
from ragsync.source_types import SourceSpec, source_type


def connector_class(spec: SourceSpec) -> Any:
    """The class serving ``spec``.

    The location decides how content is read: a folder or ``gs://``/``s3://``
    prefix is always read by the folder connector (whatever the source's
    type: a wiki exported to a bucket is a prefix of files); an HTTP(S)
    location by the API connector of the source's type (its registered
    ``"module:Class"``, imported now).

    Raises:
        ConfigurationError: no location, or no connector for the type and location.
    """
    if not spec.uri:
        raise ConfigurationError(
            f"source {spec.source_id!r} declares no location: register it with "
            "`ragsync sources add ID --type TYPE --uri LOCATION`"
        )
    scheme = Location.parse(spec.uri).scheme
    kind = "object_store" if scheme in ("file", "gs", "s3") else spec.type
    registered = source_type(kind)
    if registered is None or (scheme not in ("file", "gs", "s3") and kind == "object_store"):
        raise ConfigurationError(f"no connector reads a {spec.type!r} source at a {scheme}:// location")
    module, _, name = registered.target.partition(":")
    return getattr(importlib.import_module(module), name)


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
