"""Registering a source in a ragsync home, without Beam.

:func:`register_source` is what ``ragsync sources add``, a backfill of a
folder or prefix and the tests use to declare a source: its location is
checked (``connectors.location.register_location``), its catalog row created
or updated, its connector settings set. It imports no pipeline code, so a
light command starts in well under a second. (``POST /v1/sources`` checks the
tenant's allowed locations first and refuses an existing id; it uses the same
location check and ``Catalog.create_source``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors.location import register_location
from ragsync.config import Settings, open_catalog


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
) -> None:
    """Register a source (idempotent) with its location ``uri`` ('' for a
    source that takes no ``content_uri``), then set the connector settings
    given (options, credentials reference, how it syncs, how its versions
    compare: ``revision``, ``timestamp`` or ``etag``).

    Raises:
        ConfigurationError: ``uri`` is not a usable location or overlaps
            ragsync's own home or object store.
        ValueError: the id, type, sync kind, poll interval or version domain
            is out of its domain (``check_source_definition``).
    """
    if uri:
        uri = register_location(uri, reserved=settings.reserved_locations).uri
    catalog = open_catalog(settings)
    try:
        catalog.create_source(
            tenant_id,
            source_id=source_id,
            type=type_,
            uri=uri,
            if_exists="update",
        )
        catalog.configure_source(
            source_id,
            tenant_id=tenant_id,
            options=options,
            credentials_ref=credentials_ref,
            sync=sync,
            poll_interval_s=poll_interval_s,
            version_domain=version_domain,
        )
    finally:
        catalog.close()
