"""The control plane: an authenticated, tenant-scoped HTTP API over the catalog.

* :mod:`control_plane.store` -- the control plane's rows (tenants, API keys,
  sources, sync requests, backfills, dead-letter retries) on the catalog
  database, usable without the web app (the backfill worker updates progress
  through it);
* :mod:`control_plane.app` -- ``create_app(catalog_url)``, the FastAPI service;
* :mod:`control_plane.cli` -- ``ragsync tenants ...`` and ``ragsync serve``.

Plain Python: nothing here imports Apache Beam.
"""
