"""The control plane: an authenticated, tenant-scoped HTTP API over the catalog.

* :mod:`control_plane.keys` -- API keys: made, hashed and checked (the rows
  live in the catalog, :class:`ragsync.catalog.Catalog`, like every other row);
* :mod:`control_plane.app` -- ``create_app(catalog_url)``, the FastAPI service;
* :mod:`control_plane.cli` -- ``ragsync tenants ...`` and ``ragsync serve``.

Plain Python: nothing here imports Apache Beam.
"""
