"""Running ragsync: what an operator sees and how a process behaves.

* ``metrics``, ``coverage``, ``cost``: figures read from the catalog and the
  runs (Prometheus text, coverage per source, CPU seconds per document).
* ``report``: ``ragsync report``, one HTML page with plots.
* ``samples``: the quick start's generated sample corpus.
* ``lifecycle``: stopping cleanly on SIGINT/SIGTERM; no child outlives its process.
* ``console``, ``display``: a quiet console; tenant text made safe to print.
"""
