"""The index: the vector and keyword stores, and the one service that changes them.

* ``service``: :class:`~ragsync.index.service.IndexService`, every change to
  the stores and their catalog rows (write and flip, permissions, copies,
  deletes, re-embedding writes, sweep, repair); ``core``, ``stores``,
  ``copies``, ``deletes``, ``maintenance`` and ``hooks`` are its parts.
* ``operations``: the changes the pipeline asks for, in the shape of Beam's
  ``ModelHandler`` (``transforms.index.UpdateIndex`` applies them).
* ``backends``: the registry of vector and keyword backends; ``base`` their
  interfaces; ``milvus``, ``milvus_vectors``, ``milvus_keyword``,
  ``tantivy``, ``elasticsearch`` the stores, each with its backend.
* ``versions``: index versions (blue/green behind aliases: create, flip,
  roll back, drop); ``reconcile``: do the three stores agree.
"""
