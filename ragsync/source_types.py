"""The kinds of source ragsync knows, registered once for every layer.

A source type names a connector family and the class that serves it, as a
``"module:Class"`` path imported on first use (this module imports no
connector). :func:`register_source_type` is the one way a type is declared:
the built-in five below, and a plug-in's own when its module is imported
(setting ``plugins``, ``ragsync.plugins``). Every reader asks this registry
when it needs the list, so a registered type is accepted everywhere at once:
the catalog (``ragsync.catalog.sources``), ``ragsync sources add --type``,
``POST /v1/sources`` and ``connectors.registry`` (which opens the class).

``SYNC_KINDS`` says how ``ragsync serve`` keeps a source current:
``webhook`` (changes arrive as events) or ``poll`` (listed every
``poll_interval_s``).

A registered source, as a connector needs it, is a :class:`SourceSpec`. It
lives here, in the lowest layer that speaks of sources (plain Python, imports
nothing but ``ragsync.errors``), so that connectors, transforms, the catalog
(``SourceState.spec()``), the pipelines and the control plane all use the same
type. ``ragsync.model`` is not its home: that module holds the records that
flow between pipeline stages as JSON, and a source's definition is not one.

Adding a connector: README "Adding a connector"; ``tests/test_adding_a_connector.py``
follows it with a fake ticket system.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragsync.errors import ConfigurationError

SYNC_KINDS: tuple[str, ...] = ("webhook", "poll")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SourceType:
    """One registered type.

    Attributes:
        name: the type sources declare (``--type``, ``"type"``).
        target: ``"module:Class"`` of its connector class.
        default_uri: the location a source of this type has when none is
            given ('' when one must be given).
    """

    name: str
    target: str
    default_uri: str = ""


@dataclass(frozen=True)
class SourceSpec:
    """A registered source, as a connector needs it: a catalog row gives one
    with ``SourceState.spec()`` (``ragsync.catalog.sources``); tests and
    tools build one directly.

    Attributes:
        source_id: the source's id (unique within its tenant).
        tenant_id: the tenant that owns it.
        type: a registered type (``ragsync.source_types.source_types()``).
        uri: its location (folder, ``gs://``/``s3://`` prefix, API base URL);
            '' when none was declared (such a source takes no ``content_uri``).
        credentials_ref: reference to a secret ('' for public sources); see
            ``connectors.credentials``.
        options: connector-specific settings (JSON-safe values).
        credentials_by: who stored ``credentials_ref``: ``operator`` (any
            reference) or ``tenant`` (only a secret the operator granted the
            tenant); see ``connectors.credentials``.
    """

    source_id: str
    tenant_id: str
    type: str
    uri: str = ""
    credentials_ref: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    credentials_by: str = "operator"

    def option_groups(self, name: str = "acl_groups") -> tuple[str, ...]:
        """A list-of-groups option, cleaned (sorted, no blanks).

        Raises:
            ConfigurationError: the option is not a list of strings.
        """
        value = self.options.get(name, [])
        if isinstance(value, str):
            value = [g for g in value.split(",")]
        if not isinstance(value, list | tuple) or not all(isinstance(g, str) for g in value):
            raise ConfigurationError(f"source option {name!r} must be a list of group names")
        return tuple(sorted({g.strip() for g in value if g.strip()}))


_TYPES: dict[str, SourceType] = {}


def register_source_type(name: str, target: str, *, default_uri: str = "") -> None:
    """Declare source type ``name``, served by the class at ``target``.

    Registering the same type again with the same target and default is a
    no-op (a module imported twice).

    Args:
        name: a lowercase identifier (``[a-z][a-z0-9_]*``, at most 40 characters).
        target: ``"package.module:Class"``; the class implements
            ``connectors.base.Connector`` and has ``from_spec``. Not imported here.
        default_uri: the location of a source declared without one.

    Raises:
        ValueError: a malformed name or target, or ``name`` is already
            registered with another target or default.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"source type {name!r} must be a lowercase identifier ([a-z][a-z0-9_]*)")
    if not isinstance(target, str) or not _TARGET.match(target):
        raise ValueError(f"source type {name!r}: target {target!r} must be 'package.module:Class'")
    new = SourceType(name, target, default_uri)
    current = _TYPES.get(name)
    if current is not None and current != new:
        raise ValueError(
            f"source type {name!r} is already registered as {current.target!r} "
            f"(default uri {current.default_uri!r}); refusing {target!r}"
        )
    _TYPES[name] = new


def source_types() -> tuple[str, ...]:
    """Every registered type, in registration order (the built-in five first)."""
    return tuple(_TYPES)


def source_type(name: str) -> SourceType | None:
    """The registered type ``name``, or None."""
    return _TYPES.get(name)


def default_uri(name: str) -> str:
    """The location a source of type ``name`` has when none is given ('' when
    it must be given, or for an unknown type): Google Drive's API is at one address."""
    registered = _TYPES.get(name)
    return registered.default_uri if registered is not None else ""


register_source_type("object_store", "connectors.files:FolderConnector")
register_source_type("wiki", "connectors.mediawiki:MediaWikiConnector")
register_source_type(
    "drive", "connectors.drive:DriveConnector", default_uri="https://www.googleapis.com/drive/v3"
)
register_source_type("tickets", "connectors.jira:JiraConnector")
register_source_type("redmine", "connectors.redmine:RedmineConnector")
