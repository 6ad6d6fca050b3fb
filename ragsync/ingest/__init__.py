"""From bytes to chunks: what is decided about a document between its fetch
and its write.

* ``detect``: the content type from the bytes, and the lane (fast or slow OCR).
* ``children``: attachments and archive members as documents of their own.
* ``chunking``: structure-first chunks of the model's own tokens.
* ``near_dup``: MinHash signatures that group near-duplicate documents.
* ``change_plan``: what a run would change (the plan a dry run prints).

Parsing itself is ``ragsync.parsing``; the pure decisions every stage takes
(version gate, fetch action, chunk diff, sync plans) are ``ragsync.decisions``.
"""
