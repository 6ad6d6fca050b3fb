"""ragsync's core, plain Python (nothing in this package imports Apache Beam).

Rooms: ``catalog`` (the only SQL), ``ingest`` (detection, children,
chunking, near duplicates), ``parsing`` (one parser per format family, OCR),
``embedding`` (models and the cache), ``index`` (the stores and the one
service that changes them), ``query`` (permission-filtered search),
``decisions`` (pure decisions of every stage), ``ops`` (metrics, reports,
process lifecycle). What every room shares sits beside them: ``model`` (the
one element model), ``ids``, ``errors``, ``counters``, ``config`` and
``options`` (settings), ``plugins``, ``source_types``.
"""

__version__ = "0.1.0"
