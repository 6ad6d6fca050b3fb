"""The control plane: an authenticated, tenant-scoped HTTP API over the catalog.

* :mod:`control_plane.keys` -- API keys: made, hashed and checked (the rows
  live in the catalog, :class:`ragsync.catalog.Catalog`, like every other row);
* :mod:`control_plane.app` -- ``create_app(catalog_url)``, the FastAPI service
  (wiring only): :mod:`control_plane.routers` has one router per resource,
  :mod:`control_plane.deps` the shared dependencies (tenant, catalog),
  :mod:`control_plane.errors` the error shape, :mod:`control_plane.middleware`
  the body size limit;
* its commands (``ragsync tenants ...``, ``serve``, ``worker``) are in :mod:`cli.control_plane`.

Plain Python: nothing here imports Apache Beam.
"""
