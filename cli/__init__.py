"""The ``ragsync`` command line, the top layer: nothing in the product imports it.

* :mod:`cli.main` -- ``main()`` (the ``ragsync`` console script), the parser and
  the core commands (backfill, query, reconcile, status, report, parse,
  sample-corpus);
* :mod:`cli.common` -- what the command modules share (settings from the
  flags, a command's output, comma-separated lists);
* :mod:`cli.sources` -- ``sources ...`` and ``sync``;
* :mod:`cli.stream` -- ``events ...``, ``stream`` and dead letters;
* :mod:`cli.reembed` -- ``reembed``, ``index-versions``, ``eval-retrieval``;
* :mod:`cli.control_plane` -- ``tenants ...``, ``serve`` and ``worker``.

Imports stay lazy: a command loads Beam, the catalog or FastAPI only when it runs.
"""
