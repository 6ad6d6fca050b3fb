"""Querying: what a reader may find, and how well.

* ``search``: hybrid (vector + BM25) search, permission-filtered: the
  operator's ``ragsync query`` and ``POST /v1/query``.
* ``identity``: which groups a user reads as, from memberships synced from
  the sources (nested groups, deny entries).
* ``evaluation``: golden-set Recall@10 per format and index version.
"""
