"""Dead letters a later success settles: the one rule's SQL side.

A flip of a good version (``documents``), the link of an exact copy
(``copies``) and a completed delete (``gate_state``) resolve, in their own
transaction, the document's open dead letters that success makes moot
(``ragsync.decisions.settles_dead_letter`` decides which).
"""

from __future__ import annotations

from sqlalchemy import Connection, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import _now
from ragsync.decisions.gate import Stamp, settles_dead_letter
from ragsync.model import payload_field


def settle_dead_letters(conn: Connection, doc_id: str, written: Stamp, *, by_event: bool) -> int:
    """Resolve the document's open dead letters that a successful write
    or delete settles (``ragsync.decisions.settles_dead_letter``), in the
    caller's transaction: the flip of a new version, the link of an
    exact copy, a completed delete. A fixed or deleted file then leaves no
    open dead letter behind it (``status`` showed ``corrupt 1`` beside
    the document indexed).

    Args:
        conn: the connection of the transaction that records the success.
        doc_id: the document.
        written: the version written (or deleted), its domain and when
            the source showed it.
        by_event: the work came from a change event.

    Returns:
        Dead letters resolved.
    """
    t = schema.dead_letters
    query = select(t.c.id, t.c.source_version, t.c.created_at, t.c.payload).where(
        t.c.doc_id == doc_id, t.c.resolved_at.is_(None)
    )
    settled = [
        int(row.id)
        for row in conn.execute(query)
        if settles_dead_letter(
            row.source_version or "",
            float(row.created_at),
            from_event=bool(payload_field(row.payload or "", "event_id")),
            written=written,
            by_event=by_event,
        )
    ]
    if settled:
        conn.execute(update(t).where(t.c.id.in_(settled)).values(resolved_at=_now()))
    return len(settled)
