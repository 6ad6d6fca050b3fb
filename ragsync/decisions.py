"""Pure decisions, each returning a named action. No I/O here.

These are the rules that keep the indexes correct; the Beam steps only call
them and act on the answer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from ragsync.model import Chunk


class FetchAction(str, Enum):
    """What to do with a document after fetching and hashing it."""

    UNCHANGED = "unchanged"  # same bytes, same permissions, same pipeline versions: stop
    ACL_ONLY = "acl_only"  # same bytes, new permissions: update metadata, no re-embed
    PROCESS = "process"  # parse, chunk, diff, embed, write


class StoredDocument(Protocol):
    """The catalog fields the fetch decision reads."""

    status: str
    content_hash: str | None
    acl_id: str | None
    chunker_id: str | None
    parser_version: str | None
    chunk_count: int | None


def fetch_action(
    stored: StoredDocument | None,
    *,
    content_hash: str,
    acl_id: str,
    parser_version: str,
    chunker_id: str,
    stored_chunk_rows: int | None,
    copy_of_live: bool = False,
) -> FetchAction:
    """Decide whether a fetched document needs work.

    Args:
        stored: the catalog row, or None for a new document.
        content_hash: hash of the bytes just fetched.
        acl_id: ACL id of the permissions just read.
        parser_version: current parser version.
        chunker_id: current chunker config id.
        stored_chunk_rows: chunk rows the catalog holds for the document
            (None when not looked up). A mismatch with the row's
            ``chunk_count`` means an earlier run died between flipping the
            version and deleting vanished chunks: process again to finish.
        copy_of_live: the stored row is an exact copy (``duplicate``) linked
            to a holder that is live and holds the stored bytes.

    Returns:
        UNCHANGED only when the document is indexed from these exact bytes by
        the current parser and chunker with its chunk rows complete, or is
        a linked copy of a live holder with these bytes and permissions.
        ACL_ONLY for the same with other permissions (a copy's new
        permissions change the union its holder's chunks carry).
    """
    if stored is not None and stored.status == "duplicate" and copy_of_live:
        if stored.content_hash == content_hash:
            return FetchAction.ACL_ONLY if stored.acl_id != acl_id else FetchAction.UNCHANGED
        return FetchAction.PROCESS
    if stored is None or stored.status != "indexed" or stored.content_hash != content_hash:
        return FetchAction.PROCESS
    if stored.parser_version != parser_version or stored.chunker_id != chunker_id:
        return FetchAction.PROCESS
    if stored_chunk_rows is not None and stored_chunk_rows != (stored.chunk_count or 0):
        return FetchAction.PROCESS
    if stored.acl_id != acl_id:
        return FetchAction.ACL_ONLY
    return FetchAction.UNCHANGED


@dataclass(frozen=True)
class ChunkDiff:
    """Result of comparing a document's new chunks with the stored ones.

    Attributes:
        new: chunks whose ids are not stored: embed and write these.
        kept: chunks already stored: no embedding, no index write.
        vanished: stored ids no longer produced: delete after the flip.
    """

    new: tuple[Chunk, ...]
    kept: tuple[Chunk, ...]
    vanished: tuple[str, ...]


def diff_chunks(stored_ids: Iterable[str], chunks: Sequence[Chunk]) -> ChunkDiff:
    """Split ``chunks`` into new and kept and list the vanished stored ids.

    Vanished ids are sorted, so a replay deletes exactly the same ids.
    """
    stored = set(stored_ids)
    current = {c.chunk_id for c in chunks}
    new = tuple(c for c in chunks if c.chunk_id not in stored)
    kept = tuple(c for c in chunks if c.chunk_id in stored)
    return ChunkDiff(new=new, kept=kept, vanished=tuple(sorted(stored - current)))


def choose_canonical(candidates: Sequence[str], indexed_canonical: str | None) -> str:
    """The document that owns the chunks of content shared by ``candidates``.

    An already indexed canonical keeps the role (no re-embedding); otherwise
    the smallest doc id wins, so every run picks the same one.
    """
    if indexed_canonical:
        return indexed_canonical
    if not candidates:
        raise ValueError("no candidates")
    return min(candidates)


@dataclass(frozen=True)
class CopyIdentity:
    """One identity (document) that may serve some indexed content.

    Attributes:
        doc_id: the document.
        acl_id: its own permissions (each copy keeps its own).
        content_hash: hash of the content the identity holds now.
        live: False once the document is deleted (or being deleted).
    """

    doc_id: str
    acl_id: str
    content_hash: str
    live: bool = True


@dataclass(frozen=True)
class CopiesPlan:
    """Who serves a piece of indexed content and who may read it.

    Attributes:
        holder: the identity whose chunks serve the content after the
            change (None: no live identity is left; the chunks go).
        promote: True when ``holder`` is not the identity that owns the
            chunks now: the chunks are re-keyed to it (no re-embedding).
        acl_ids: the union of the live identities' ACL ids: what the
            chunks carry.
        duplicates: the other live identities, linked to ``holder``.
    """

    holder: str | None
    promote: bool
    acl_ids: tuple[str, ...]
    duplicates: tuple[str, ...]


def plan_copies(owner: str, content_hash: str, identities: Iterable[CopyIdentity]) -> CopiesPlan:
    """Decide who serves the content ``owner``'s chunks hold, after a copy
    was added, deleted, edited away or re-permissioned.

    Only live identities that still hold ``content_hash`` count. The owner
    keeps the role while it counts (nothing is re-keyed); otherwise the
    smallest doc id among the rest is promoted, so every replay and every
    order of events picks the same one (as a fresh backfill does).

    Args:
        owner: the document whose chunk rows hold the content now.
        content_hash: hash of that content.
        identities: the owner and every document linked to it as a copy
            (others are ignored when their hash or liveness rules them out).

    Returns:
        The plan; ``holder`` is None when no live identity holds the content.
    """
    members = {i.doc_id: i for i in identities if i.live and i.content_hash == content_hash}
    if not members:
        return CopiesPlan(None, False, (), ())
    holder = owner if owner in members else min(members)
    acl_ids = tuple(sorted({m.acl_id for m in members.values() if m.acl_id}))
    duplicates = tuple(sorted(d for d in members if d != holder))
    return CopiesPlan(holder, holder != owner, acl_ids, duplicates)


@dataclass(frozen=True)
class CopyLink:
    """A copy's catalog row as :func:`copy_lost_its_holder` reads it.

    Attributes:
        doc_id: the copy.
        status: its status (``duplicate`` while linked).
        canonical_doc_id: the document it links to.
        content_hash: its bytes.
    """

    doc_id: str
    status: str
    canonical_doc_id: str | None
    content_hash: str


def copy_lost_its_holder(copy: CopyLink, holder: CopyIdentity | None) -> bool:
    """After an exact copy was linked to a holder, is the link dangling?

    A copy is linked against the catalog as it was when the copy was
    fetched; the holder may be deleted (or edited into other bytes) before
    the link is recorded - a delete of the holder in the same stream run. The
    holder's delete then found no copy to promote, so the copy's content
    would vanish from search. Such a copy must be processed again (it is
    promoted to hold its own chunks, or linked to another live identity).

    Args:
        copy: the copy's row after the link was recorded.
        holder: the identity it links to (None: no such document).

    Returns:
        True when the copy still links to ``holder`` and ``holder`` does not
        serve the copy's bytes (gone, deleted or other content); False when
        the link holds, or the copy was already promoted or re-linked.
    """
    if copy.status != "duplicate" or copy.canonical_doc_id in (None, copy.doc_id):
        return False
    if holder is None or holder.doc_id != copy.canonical_doc_id:
        return True
    return not holder.live or holder.content_hash != copy.content_hash


class GateAction(str, Enum):
    """What the version gate does with an event."""

    APPLY = "apply"
    STALE = "stale"  # older than what is applied or in flight: drop, count
    DUPLICATE = "duplicate"  # this exact version is already applied: drop, count


#: How a source's versions compare (``sources.version_domain``): ``revision``
#: numbers order numerically, ``timestamp`` values (epoch seconds or ISO 8601)
#: order in time, ``etag`` values only tell equal from different. ``""`` is
#: an undeclared domain: numbers numerically, then text (the old rule).
VERSION_DOMAINS = ("revision", "timestamp", "etag")


@dataclass(frozen=True)
class Stamp:
    """A version as the gate compares it.

    Attributes:
        value: the version text (``source_version``).
        domain: its domain (one of :data:`VERSION_DOMAINS`, or ``""`` when the
            source declared none).
        observed_at: when the source said so (an event's ``event_time``, a
            listing's time), epoch seconds; 0 when unknown.
    """

    value: str
    domain: str = ""
    observed_at: float = 0.0


class Order(str, Enum):
    """How one stamp relates to another."""

    OLDER = "older"
    SAME = "same"
    NEWER = "newer"
    UNKNOWN = "unknown"  # different domains or etags and no usable observation times


def _parse_time(text: str) -> float | None:
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _domain_key(domain: str, value: str) -> tuple[Any, ...] | None:
    """A sort key within ``domain``, or None when the value does not order there."""
    v = value.strip()
    if domain == "":
        return version_key(v)
    if domain == "revision":
        try:
            return (int(v),)
        except ValueError:
            return None
    if domain == "timestamp":
        t = _parse_time(v)
        return None if t is None else (t,)
    return None  # etag: equality only


def compare_versions(a: Stamp, b: Stamp) -> Order:
    """Where ``a`` stands relative to ``b``.

    Two versions of one domain compare by value (an etag only by equality).
    Otherwise - two domains, two different etags, a value that does not parse
    in its domain - they are ordered by the time each was observed at the
    source; never by comparing the text of two domains.

    Returns:
        OLDER, SAME or NEWER; UNKNOWN when neither rule orders them (a tie
        of observation times, or one unknown).
    """
    if a.domain == b.domain:
        ka, kb = _domain_key(a.domain, a.value), _domain_key(b.domain, b.value)
        if ka is not None and kb is not None:
            return Order.NEWER if ka > kb else Order.OLDER if ka < kb else Order.SAME
        if a.value.strip() == b.value.strip():
            return Order.SAME
    if a.observed_at > 0 and b.observed_at > 0 and a.observed_at != b.observed_at:
        return Order.NEWER if a.observed_at > b.observed_at else Order.OLDER
    return Order.UNKNOWN


def as_stamp(version: str | Stamp) -> Stamp:
    """A bare version string is a stamp of the undeclared domain, time unknown."""
    return version if isinstance(version, Stamp) else Stamp(str(version))


@dataclass(frozen=True)
class DocVersions:
    """The versions the catalog (the authority) holds for one document.

    Attributes:
        indexed: content version that is live (``documents.indexed_version``).
        accepted: newest content version fetched, live or in flight
            (``documents.source_version``).
        deleted: version of the tombstone, if the document was deleted.
        acl: version of the last applied permission change.
        complete: the live version's chunk rows are all there (False after a
            crash between flipping the version and deleting vanished chunks:
            a redelivered event must then run again to finish the delete).
        delete_complete: the tombstone's delete finished everywhere (False
            while a failed delete is retried: the retry must run again).

    Each version is a :class:`Stamp` (or a bare string: undeclared domain).
    """

    indexed: str | Stamp | None = None
    accepted: str | Stamp | None = None
    deleted: str | Stamp | None = None
    acl: str | Stamp | None = None
    complete: bool = True
    delete_complete: bool = True


def version_key(version: str) -> tuple[int, int, str]:
    """Sort key for versions of an undeclared domain: numbers numerically,
    then text (e.g. ISO timestamps, which sort correctly as text)."""
    v = version.strip()
    if v.isdigit():
        return (0, int(v), "")
    return (1, 0, v)


@dataclass(frozen=True)
class GateVerdict:
    """The gate's answer with the version that decided it.

    Attributes:
        action: APPLY, STALE or DUPLICATE.
        held: the held version the event lost or tied to ('' on APPLY).
        reason: one line naming both versions ('' on APPLY).
    """

    action: GateAction
    held: str = ""
    reason: str = ""


def _describe(s: Stamp) -> str:
    domain = s.domain or "undeclared"
    when = f", observed {s.observed_at:.3f}" if s.observed_at else ""
    return f"{s.value!r} ({domain}{when})"


def gate_verdict(op: str, version: str | Stamp, known: DocVersions) -> GateVerdict:
    """Version gate: apply only what is newer than what the document holds.

    Content (upsert, delete) and permissions (acl) are versioned separately,
    so a late content event never rolls back a newer permission change and a
    late permission event never blocks newer content. A tombstone blocks every
    upsert and permission change at or below its version; an upsert above it
    recreates the document. Ties between a delete and an upsert of the same
    version go to the delete (fail closed). Versions are compared with
    :func:`compare_versions`: where the order is UNKNOWN, a delete applies and
    an upsert or permission change does not pass a tombstone (fail closed);
    otherwise the event, the latest to arrive, applies.

    Args:
        op: upsert, delete or acl.
        version: the event's stamp (or bare source version).
        known: what the catalog holds.

    Returns:
        The action, with the held version that made an event stale or a duplicate.
    """
    v = as_stamp(version)

    def held(other: str | Stamp | None) -> tuple[Order | None, Stamp | None]:
        if other is None:
            return None, None
        s = as_stamp(other)
        return compare_versions(v, s), s

    def drop(action: GateAction, what: str, s: Stamp) -> GateVerdict:
        word = "stale" if action == GateAction.STALE else "duplicate"
        return GateVerdict(
            action, s.value, f"{op} {_describe(v)} is {word}: the document holds {what} {_describe(s)}"
        )

    if op not in ("acl", "delete", "upsert"):
        raise ValueError(f"unknown op {op!r}")
    tomb_order, tomb = held(known.deleted)
    if op == "acl":
        order, s = held(known.acl)
        if order == Order.SAME and s is not None:
            return drop(GateAction.DUPLICATE, "permission version", s)
        if order == Order.OLDER and s is not None:
            return drop(GateAction.STALE, "permission version", s)
        if tomb is not None and tomb_order != Order.NEWER:
            return drop(GateAction.STALE, "tombstone", tomb)
        if tomb is not None and evidence_predates_delete(v.observed_at, tomb.observed_at):
            # A tombstone's version is the last content version, not the
            # delete's time: a permission change made before the delete is
            # about the deleted document, never a re-created one.
            return drop(GateAction.STALE, "tombstone", tomb)
        return GateVerdict(GateAction.APPLY)
    if op == "delete":
        if tomb is not None and tomb_order == Order.SAME:
            if known.delete_complete:
                return drop(GateAction.DUPLICATE, "tombstone", tomb)
            return GateVerdict(GateAction.APPLY)
        if tomb is not None and tomb_order == Order.OLDER:
            return drop(GateAction.STALE, "tombstone", tomb)
        for other in (known.indexed, known.accepted):
            order, s = held(other)
            if order == Order.OLDER and s is not None:
                return drop(GateAction.STALE, "content version", s)
        return GateVerdict(GateAction.APPLY)
    if tomb is not None and tomb_order != Order.NEWER:
        return drop(GateAction.STALE, "tombstone", tomb)
    order, s = held(known.indexed)
    if order == Order.SAME and known.complete and s is not None:
        return drop(GateAction.DUPLICATE, "content version", s)
    for other in (known.indexed, known.accepted):
        order, s = held(other)
        if order == Order.OLDER and s is not None:
            return drop(GateAction.STALE, "content version", s)
    return GateVerdict(GateAction.APPLY)


def gate_event(op: str, version: str | Stamp, known: DocVersions) -> GateAction:
    """The action of :func:`gate_verdict`."""
    return gate_verdict(op, version, known).action


@dataclass(frozen=True)
class PermissionEvidence:
    """Who may read a document, and when the source said so.

    Attributes:
        groups: allowed groups.
        observed_at: when this was true at the source (an ``acl`` event's
            ``event_time``, a folder ACL sidecar's modification time, the
            listing time of a connector that returns current permissions);
            0 when unknown.
        deny: groups explicitly denied.
    """

    groups: tuple[str, ...]
    observed_at: float = 0.0
    deny: tuple[str, ...] = ()


def choose_permissions(held: PermissionEvidence | None, new: PermissionEvidence) -> PermissionEvidence:
    """The permissions a document gets when two pieces of evidence meet.

    The newest evidence wins. A tie, or an unknown time on either side,
    takes the narrower set (fail closed): the groups both allow, and the
    denials of both.

    Args:
        held: what the catalog applied last with a known time (None: nothing).
        new: what a listing or event says now.

    Returns:
        The evidence to apply (``held`` or ``new`` themselves when one wins).
    """
    if held is None:
        return new
    if held.observed_at > 0 and new.observed_at > 0 and held.observed_at != new.observed_at:
        return new if new.observed_at > held.observed_at else held
    if set(new.groups) <= set(held.groups) and set(held.deny) <= set(new.deny):
        return new
    if set(held.groups) <= set(new.groups) and set(new.deny) <= set(held.deny):
        return held
    return PermissionEvidence(
        tuple(sorted(set(held.groups) & set(new.groups))),
        max(held.observed_at, new.observed_at),
        tuple(sorted(set(held.deny) | set(new.deny))),
    )


def evidence_predates_delete(observed_at: float, deleted_observed_at: float | None) -> bool:
    """Was permission evidence true at the source at or before the
    document's delete? Such evidence is about the deleted document and is
    ignored for a document re-created under the same id (by an event or a
    backfill): its permissions come from newer evidence.

    Args:
        observed_at: when the evidence was true at the source (0: unknown).
        deleted_observed_at: when the delete was observed at the source (a
            delete event's event time, the listing that found the file gone);
            None or 0 when there is no delete or its time is unknown.

    Returns:
        True only when both times are known and the evidence's is not later.
    """
    return bool(observed_at > 0 and deleted_observed_at and observed_at <= deleted_observed_at)


def backoff_delay(attempt: int, *, base_s: float = 2.0, cap_s: float = 300.0, jitter: float = 0.5) -> float:
    """Exponential backoff with jitter for retry number ``attempt`` (1-based).

    ``jitter`` in [0, 1] is the random share: the delay is drawn uniformly from
    [(1 - jitter) * d, d] where d = min(cap, base * 2**(attempt-1)).
    """
    import random

    if attempt < 1:
        raise ValueError("attempt is 1-based")
    d = min(cap_s, base_s * 2 ** (attempt - 1))
    return d * (1 - jitter * random.random())


# -- syncing sources -------------------------------------------------------------


@dataclass(frozen=True)
class ListingVerdict:
    """The partial-listing guard's answer for one full listing.

    Attributes:
        delete: True when the documents the listing no longer holds may be deleted.
        reason: why not ('' when they may).
    """

    delete: bool
    reason: str = ""


def listing_verdict(
    *, known: int, vanished: int, max_delete_share: float, listed: int | None = None
) -> ListingVerdict:
    """May a complete listing delete the ``vanished`` of ``known`` documents?

    A listing that silently missed part of a source (a page an API dropped,
    a prefix it could not see) looks like mass deletion; so does a source
    emptied by mistake. Either way, deleting more than ``max_delete_share``
    of the source's documents in one listing is held back for an operator.

    Args:
        known: documents of the source before the listing.
        vanished: of those, the ones the listing did not return.
        max_delete_share: largest share (0..1) deleted without an operator;
            1.0 allows any.
        listed: objects the listing returned, when known. An empty listing
            of a source that has documents never deletes: a missing bucket, a
            denied listing or an unmounted share look exactly like that.

    Returns:
        A verdict; ``delete`` is False when the guard trips.
    """
    if not 0.0 <= max_delete_share <= 1.0:
        raise ValueError("max_delete_share must be within 0..1")
    if vanished < 0 or known < 0 or vanished > known:
        raise ValueError("need 0 <= vanished <= known")
    if known == 0 or vanished == 0:
        return ListingVerdict(True)
    if listed == 0:
        return ListingVerdict(
            False,
            f"the listing returned no object but the source has {known} documents (a missing bucket, a "
            "denied listing or an unmounted share look like that): nothing was deleted",
        )
    share = vanished / known
    if share > max_delete_share:
        return ListingVerdict(
            False,
            f"the listing would delete {vanished} of {known} documents ({share:.0%}, above the "
            f"{max_delete_share:.0%} limit): nothing was deleted",
        )
    return ListingVerdict(True)


class SyncMode(str, Enum):
    """How a sync reads its source."""

    INCREMENTAL = "incremental"  # changes since the cursor
    FULL = "full"  # a full listing; what vanished is deleted


@dataclass(frozen=True)
class SyncPlan:
    """What one sync of a source will do, decided before anything is read
    (``ragsync sync --dry-run`` can print it).

    Attributes:
        source_id: the source.
        mode: incremental or full.
        reason: why this mode.
        cursor: where an incremental sync starts ('' for a full one).
        max_delete_share: the partial-listing guard's limit (full syncs).
    """

    source_id: str
    mode: SyncMode
    reason: str
    cursor: str = ""
    max_delete_share: float = 0.5


def plan_sync(
    source_id: str,
    *,
    supports_changes: bool,
    cursor: str | None,
    full_requested: bool,
    max_delete_share: float = 0.5,
) -> SyncPlan:
    """Choose between reading the change feed and a full listing.

    Returns:
        FULL when asked for, when the source has no change feed, or when no
        cursor is stored yet (the first sync lists everything); otherwise
        INCREMENTAL from the stored cursor.
    """
    if full_requested:
        return SyncPlan(source_id, SyncMode.FULL, "a full listing was requested", "", max_delete_share)
    if not supports_changes:
        return SyncPlan(source_id, SyncMode.FULL, "the source has no change feed", "", max_delete_share)
    if not cursor:
        return SyncPlan(source_id, SyncMode.FULL, "first sync: no cursor yet", "", max_delete_share)
    return SyncPlan(
        source_id, SyncMode.INCREMENTAL, "changes since the stored cursor", cursor, max_delete_share
    )


@dataclass(frozen=True)
class FailureOutcome:
    """What a failed sync does to its source.

    Attributes:
        failures: consecutive failures now.
        pause: True when the source must be paused.
        reason: the pause reason ('' when not paused).
    """

    failures: int
    pause: bool
    reason: str = ""


def after_failure(
    previous_failures: int, *, error: str, pause_after: int, listing_failed: bool
) -> FailureOutcome:
    """Count a failed sync and decide whether its source is paused.

    A full listing that failed (an error, a timeout, or the partial-listing
    guard) pauses the source at once: the next scheduled listing would most
    likely fail the same way, and an operator should look. Any other failure
    (the change feed) pauses it after ``pause_after`` failures in a row.
    """
    if pause_after < 1:
        raise ValueError("pause_after must be >= 1")
    failures = previous_failures + 1
    if listing_failed:
        return FailureOutcome(failures, True, error)
    if failures >= pause_after:
        return FailureOutcome(failures, True, f"{failures} syncs failed in a row; last error: {error}")
    return FailureOutcome(failures, False)


@dataclass(frozen=True)
class SourceSchedule:
    """What the scheduler knows about one source.

    Attributes:
        source_id: the source.
        sync: ``poll``, ``webhook`` or None (syncs only on request).
        poll_interval_s: seconds between polls (``poll``).
        paused: paused sources are never scheduled.
        last_sync_at: when the last sync (of any mode) started, None if never.
        last_full_at: when the last full listing succeeded, None if never.
        retry_at: no sync before this time (a rate limit asked to wait).
        busy: a sync of this source is queued or running.
    """

    source_id: str
    sync: str | None
    poll_interval_s: int | None
    paused: bool
    last_sync_at: float | None
    last_full_at: float | None
    retry_at: float | None = None
    busy: bool = False


def due_syncs(
    sources: Iterable[SourceSchedule], now: float, *, full_every_s: float = 86_400.0
) -> list[tuple[str, SyncMode]]:
    """Syncs the scheduler should request now.

    Every source that syncs by poll or webhook gets a full listing every
    ``full_every_s`` (deletes are only seen by listings for most sources);
    polled sources get an incremental sync every ``poll_interval_s``.
    Paused sources, sources with a sync queued or running, and sources a
    rate limit asked to wait are skipped.
    """
    out: list[tuple[str, SyncMode]] = []
    for s in sources:
        if s.paused or s.busy or s.sync not in ("poll", "webhook"):
            continue
        if s.retry_at is not None and now < s.retry_at:
            continue
        if s.last_full_at is None or now - s.last_full_at >= full_every_s:
            out.append((s.source_id, SyncMode.FULL))
        elif s.sync == "poll" and (
            s.last_sync_at is None or now - s.last_sync_at >= (s.poll_interval_s or 300)
        ):
            out.append((s.source_id, SyncMode.INCREMENTAL))
    return out


# -- repairing the indexes ---------------------------------------------------------


@dataclass(frozen=True)
class RepairPlan:
    """What ``ragsync reconcile --repair`` does, per store.

    Attributes:
        rewrite: ``{store: chunk ids}`` held by the catalog for a document
            that is not deleted but missing from that store: written again
            from the catalog's chunk rows.
        orphans: ``{store: chunk ids}`` in that store with no chunk row in
            the catalog: deleted from that store.
        dead_rows: chunk rows of documents that are deleted or unknown (a
            delete that stopped part-way): deleted from every store and the
            catalog.
    """

    rewrite: dict[str, tuple[str, ...]]
    orphans: dict[str, tuple[str, ...]]
    dead_rows: tuple[str, ...]

    @property
    def empty(self) -> bool:
        """True when there is nothing to repair."""
        return not (any(self.rewrite.values()) or any(self.orphans.values()) or self.dead_rows)


def plan_repair(
    catalog_chunks: Mapping[str, str], gone_docs: Collection[str], stores: Mapping[str, Collection[str]]
) -> RepairPlan:
    """Compare chunk ids, not just counts, between the catalog and each store.

    Args:
        catalog_chunks: ``{chunk_id: doc_id}`` of the catalog's chunk rows.
        gone_docs: documents that are deleted or unknown to the catalog.
        stores: ``{store name: chunk ids it holds}``.

    Returns:
        The plan; every id list is sorted, so a replay repairs the same ids.
    """
    gone = set(gone_docs)
    dead = {cid for cid, doc in catalog_chunks.items() if doc in gone}
    wanted = set(catalog_chunks) - dead
    rewrite = {name: tuple(sorted(wanted - set(ids))) for name, ids in stores.items()}
    orphans = {name: tuple(sorted(set(ids) - set(catalog_chunks))) for name, ids in stores.items()}
    return RepairPlan(rewrite=rewrite, orphans=orphans, dead_rows=tuple(sorted(dead)))


# ------------------------------------------------------------- skip unread

#: A file whose modification time lies this close to (or after) the time the
#: catalog recorded its listing may have changed again within the file
#: system's timestamp granularity without a new mtime: it is read again.
RACY_WINDOW_S = 2.0

#: Dead-letter classes decided by the bytes and the parser alone: the same
#: bytes fail the same way under the same parser version, so an unchanged
#: object is not read again. Classes decided by settings, permissions or
#: transient failures are always retried.
CONTENT_DEAD_CLASSES = frozenset({"empty", "encrypted", "corrupt", "unsupported", "no_text"})


@dataclass(frozen=True)
class ListedObject:
    """What a listing shows of an object (no bytes read).

    Attributes:
        size: bytes (-1 when the connector does not say).
        source_version: the connector's version (mtime, etag, revision).
        version_domain: ``timestamp`` for an mtime (the racy check applies).
        acl_id: ACL id of the listed permissions.
    """

    size: int
    source_version: str
    version_domain: str
    acl_id: str


@dataclass(frozen=True)
class KnownObject:
    """What the catalog holds of a document (``Catalog.unread_states``).

    Attributes:
        size, source_version, acl_id, status, error_class, parser_version,
        chunker_id, chunk_count, indexed_version: the document row's
            (``indexed_version`` is the source version that is live; another
            ``source_version`` means a newer fetch has not been written yet).
        observed_at: when the listing that recorded ``source_version`` ran
            (None: unknown).
        chunk_rows: chunk rows the catalog holds for it.
        holder_live: a ``duplicate``'s holder is live with the same bytes.
        open_dead_letter: an unresolved dead letter names the document (a
            resolved one was asked to be retried).
    """

    size: int
    source_version: str | None
    acl_id: str | None
    status: str
    error_class: str | None
    parser_version: str | None
    chunker_id: str | None
    observed_at: float | None
    chunk_count: int = 0
    chunk_rows: int = 0
    holder_live: bool = False
    open_dead_letter: bool = False
    indexed_version: str | None = None


def skip_unread(
    listed: ListedObject,
    known: KnownObject | None,
    *,
    parser_version: str,
    chunker_id: str,
    reread: bool = False,
) -> bool:
    """Whether a listed object can be left unread: its listing metadata
    matches what the catalog holds and its last outcome is final.

    True only when (all of): ``reread`` is off; the catalog knows the
    document with the listed size, version and ACL id; for a ``timestamp``
    version, the mtime lies more than :data:`RACY_WINDOW_S` before the
    recorded listing time; and the outcome is final: ``indexed`` by the
    current parser and chunker with its chunk rows complete and the listed
    version live (not one fetched and not yet written), a ``duplicate``
    of a live holder, or a ``dead_letter`` of a :data:`CONTENT_DEAD_CLASSES`
    class by the current parser, still open. An ``empty`` dead letter listed
    with size 0 is final whatever else the row holds (no bytes to misread).
    Anything else (new, changed, stale, pending, unknown order) is read.
    """
    if reread or known is None or listed.size < 0:
        return False
    dead = known.status == "dead_letter" and known.open_dead_letter
    if dead and known.error_class == "empty" and listed.size == 0:
        return True
    if known.size != listed.size or known.source_version != listed.source_version:
        return False
    if known.acl_id != listed.acl_id:
        return False
    if listed.version_domain == "timestamp":
        try:
            mtime = float(listed.source_version)
        except ValueError:
            return False
        if known.observed_at is None or mtime >= known.observed_at - RACY_WINDOW_S:
            return False
    if known.status == "indexed":
        return (
            known.parser_version == parser_version
            and known.chunker_id == chunker_id
            and known.chunk_rows == known.chunk_count
            and known.indexed_version == listed.source_version
        )
    if known.status == "duplicate":
        return known.holder_live
    return dead and known.error_class in CONTENT_DEAD_CLASSES and known.parser_version == parser_version
