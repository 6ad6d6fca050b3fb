"""What a run would change: the plan a dry run prints (``ragsync backfill
--dry-run``, ``ragsync sync --dry-run``).

Pure: :func:`classify_listed` decides one listed object against its catalog
row with the pipeline's own decision (``ragsync.decisions.fetch_action``),
:func:`classify_event` one change-feed event; :class:`ChangePlan` holds the
result. ``beam_pipelines.dry_run`` gathers the inputs without writing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ragsync.decisions import FetchAction, fetch_action

ADD, UPDATE, PERMISSIONS, DELETE, UNCHANGED = "add", "update", "permissions", "delete", "unchanged"


@dataclass(frozen=True)
class PlannedChange:
    """One object the run would change.

    Attributes:
        object_id: the source's own id of the object (a path for folders).
        uri: where it is read from ('' for deletes and feed events without one).
        reason: why (new object, new content, new permissions, vanished, ...).
    """

    object_id: str
    uri: str = ""
    reason: str = ""


@dataclass
class ChangePlan:
    """The plan of one run; ``to_dict`` is the ``--json`` output.

    Attributes:
        source_id, tenant_id: the source.
        mode: ``full`` (a listing compared with the catalog) or ``incremental``
            (the change feed since the stored cursor).
        adds, updates, permission_changes, deletes: the changes, by object id.
        unchanged: objects the run would leave as they are.
        dead_letters: objects the run would dead-letter before parsing
            (unreadable permissions, too large, empty, unreadable), with the class.
        deletes_held: True when the partial-listing guard would hold the
            deletes back (then none is applied and the source is paused).
        queued: the source's own events already waiting in the queue, which the run would also apply.
    """

    source_id: str
    tenant_id: str
    mode: str
    adds: list[PlannedChange] = field(default_factory=list)
    updates: list[PlannedChange] = field(default_factory=list)
    permission_changes: list[PlannedChange] = field(default_factory=list)
    deletes: list[PlannedChange] = field(default_factory=list)
    unchanged: int = 0
    dead_letters: list[PlannedChange] = field(default_factory=list)
    deletes_held: bool = False
    queued: int = 0

    def add(self, kind: str, change: PlannedChange) -> None:
        """File ``change`` under ``kind`` (add, update, permissions, delete, unchanged)."""
        if kind == UNCHANGED:
            self.unchanged += 1
            return
        target = {
            ADD: self.adds,
            UPDATE: self.updates,
            PERMISSIONS: self.permission_changes,
            DELETE: self.deletes,
        }[kind]
        target.append(change)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("adds", "updates", "permission_changes", "deletes", "dead_letters"):
            data[name] = sorted(data[name], key=lambda c: c["object_id"])
        data["totals"] = {
            name: len(data[name])
            for name in ("adds", "updates", "permission_changes", "deletes", "dead_letters")
        } | {"unchanged": self.unchanged}
        return data


def classify_listed(
    stored: Any | None,
    *,
    content_hash: str,
    acl_id: str,
    parser_version: str,
    chunker_id: str,
    stored_chunk_rows: int | None,
) -> tuple[str, str]:
    """What a full listing does with one object it read.

    Args:
        stored: the document's catalog row (``DocumentRow``) or None.
        content_hash, acl_id: of the bytes and permissions just read.
        parser_version, chunker_id: the current ones.
        stored_chunk_rows: the document's chunk rows (None when not indexed).

    Returns:
        ``(kind, reason)``: ``add`` (new, or deleted before), ``update``
        (new content, a new parser or chunker, not indexed yet, unfinished
        write), ``permissions`` (same content, new permissions) or ``unchanged``.
    """
    if stored is None or stored.status == "deleted":
        return ADD, "new object" if stored is None else "deleted before, listed again"
    action = fetch_action(
        stored,
        content_hash=content_hash,
        acl_id=acl_id,
        parser_version=parser_version,
        chunker_id=chunker_id,
        stored_chunk_rows=stored_chunk_rows,
    )
    if action == FetchAction.ACL_ONLY:
        return PERMISSIONS, "new permissions, same content"
    if action == FetchAction.UNCHANGED:
        return UNCHANGED, ""
    if stored.content_hash != content_hash:
        return UPDATE, "new content"
    if stored.status != "indexed":
        return (
            UPDATE,
            f"not indexed yet ({stored.status}{': ' + stored.error_class if stored.error_class else ''})",
        )
    if stored.parser_version != parser_version or stored.chunker_id != chunker_id:
        return UPDATE, "new parser or chunker version"
    return UPDATE, "an earlier write did not finish"


def classify_event(op: str, stored: Any | None) -> tuple[str, str]:
    """What applying one change-feed event does: ``(kind, reason)``.

    ``upsert`` adds an unknown (or deleted) document and updates a known one;
    ``acl`` changes permissions; ``delete`` deletes (a document the catalog
    does not hold is still planned: its tombstone blocks older upserts).
    """
    if op == "delete":
        return DELETE, "deleted at the source"
    if op == "acl":
        return PERMISSIONS, "permissions changed at the source"
    if stored is None or stored.status == "deleted":
        return ADD, "created at the source"
    return UPDATE, "changed at the source"
