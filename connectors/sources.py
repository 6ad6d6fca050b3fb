"""The source service: a source is registered, then each run resolves,
checks and opens it once and hands the opened connector on. Without Beam.

* :func:`register_source` is what ``ragsync sources add``, a backfill of a
  folder or prefix and the tests use to declare a source: its location is
  checked (``connectors.location.register_location``), its catalog row
  created or updated, its connector settings set, and the row returned.
  (``POST /v1/sources`` checks the tenant's allowed locations first and
  refuses an existing id; it uses the same location check and
  ``Catalog.create_source``.)
* :func:`check_source` resolves a registered source (or takes the row a
  caller already holds) and checks it once: known, not paused when the run
  syncs it, a declared location that is not ragsync's own state.
* :meth:`CheckedSource.open` opens its connector once (with the file system
  and read limits the caller gives); a sync, an identity sync and a dry run
  hand that connector to every step on the launcher.

Pipeline workers open their own connector from the catalog row (a worker
shares nothing with the launcher but the stores); what they read is
confined to the same location by the one bounded reader.

Nothing here imports pipeline code, so a light command starts in well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.location import Location, register_location, source_location
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync.config import Settings, open_catalog
from ragsync.errors import ConfigurationError, SyncError
from ragsync.source_types import SourceSpec

if TYPE_CHECKING:  # pragma: no cover
    from connectors.base import Connector, FileSystem
    from ragsync.catalog import Catalog
    from ragsync.catalog.sources import SourceState


class SourcePausedError(SyncError):
    """The source is paused: nothing is synced until it is resumed."""

    error_class = "configuration"


def register_source(
    settings: Settings,
    source_id: str,
    tenant_id: str,
    type_: str,
    uri: str = "",
    *,
    options: Mapping[str, Any] | None = None,
    credentials_ref: str | None = None,
    sync: str | None = None,
    poll_interval_s: int | None = None,
    version_domain: str | None = None,
) -> CheckedSource | None:
    """Register a source (idempotent) with its location ``uri`` ('' for a
    source that takes no ``content_uri``), then set the connector settings
    given (options, credentials reference, how it syncs, how its versions
    compare: ``revision``, ``timestamp`` or ``etag``).

    Returns:
        The source as registered and checked (its row, spec and location), to
        hand to the run that follows (``run_sync(source=...)``) so it neither
        reads the row back nor checks the location again; None for a source
        without a location.

    Raises:
        ConfigurationError: ``uri`` is not a usable location or overlaps
            ragsync's own home or object store.
        ValueError: the id, type, sync kind, poll interval or version domain
            is out of its domain (``check_source_definition``).
    """
    location = register_location(uri, reserved=settings.reserved_locations) if uri else None
    if location is not None:
        uri = location.uri
    catalog = open_catalog(settings)
    try:
        catalog.sources.create_source(
            tenant_id,
            source_id=source_id,
            type=type_,
            uri=uri,
            if_exists="update",
        )
        catalog.syncs.configure_source(
            source_id,
            tenant_id=tenant_id,
            options=options,
            credentials_ref=credentials_ref,
            sync=sync,
            poll_interval_s=poll_interval_s,
            version_domain=version_domain,
        )
        state = catalog.sources.get_source(source_id, tenant_id=tenant_id)
    finally:
        catalog.close()
    if state is None or location is None:
        return None
    return CheckedSource(state, state.spec(), location)


@dataclass(frozen=True)
class CheckedSource:
    """A registered source, resolved and checked once for this run.

    Attributes:
        state: its catalog row (cursor, pause, failures, options).
        spec: what its connector needs (``state.spec()``).
        location: its checked location.
    """

    state: SourceState
    spec: SourceSpec
    location: Location

    def open(self, settings: Settings, fs: FileSystem | None = None) -> Connector:
        """Its connector, with ``fs`` for object stores (the pipeline's
        launcher passes Beam's file systems) and the settings' read limits.
        The caller closes it.

        Raises:
            ConfigurationError: no connector serves it, or its options or
                credentials are broken.
        """
        return connector_of(self.spec, settings, fs)


def connector_of(spec: SourceSpec, settings: Settings, fs: FileSystem | None = None) -> Connector:
    """The connector of ``spec`` with ``fs`` for object stores and the
    settings' read limits (bytes, time). The caller closes it.

    Raises:
        ConfigurationError: no connector serves it, or its options or
            credentials are broken.
    """
    limits = FetchLimits(max_bytes=settings.max_bytes, timeout_s=settings.fetch_timeout_s)
    return open_connector(spec, fs=fs, limits=limits)


def check_source(
    catalog: Catalog,
    settings: Settings,
    source_id: str,
    *,
    tenant_id: str | None = None,
    registered: CheckedSource | None = None,
    syncing: bool = False,
) -> CheckedSource:
    """Resolve and check a registered source once.

    Args:
        catalog: the catalog.
        settings: the home (its own state is never a source's location).
        source_id: the source.
        tenant_id: its tenant (source ids are unique per tenant; without it
            the id must be unique across tenants).
        registered: what :func:`register_source` returned in this run: its
            row is not read again nor its location checked again.
        syncing: the run syncs the source's documents: a paused source is refused.

    Raises:
        ConfigurationError: unknown source, or no usable location.
        SourcePausedError: ``syncing`` and the source is paused.
    """
    state = registered.state if registered is not None else None
    if state is None:
        state = catalog.sources.get_source(source_id, tenant_id=tenant_id)
    if state is None:
        raise ConfigurationError(f"unknown source {source_id!r}: register it with `ragsync sources add`")
    if syncing and state.paused:
        raise SourcePausedError(
            f"source {source_id} is paused: {state.pause_reason} "
            f"(resume with `ragsync sources resume {source_id}`)"
        )
    if registered is not None:
        return registered
    if not state.uri:
        raise ConfigurationError(f"source {source_id!r} declares no location (`ragsync sources add --uri`)")
    location = source_location(state.uri, reserved=settings.reserved_locations)
    return CheckedSource(state, state.spec(), location)
