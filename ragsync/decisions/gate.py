"""Pure decisions about event versions (the gate), permission evidence and retries. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ragsync.model import QueuedEvent, SourceFile


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

    def unless_content_newer() -> GateVerdict:
        """STALE when the indexed or the accepted content version is newer
        than the event's, else APPLY."""
        for other in (known.indexed, known.accepted):
            order, s = held(other)
            if order == Order.OLDER and s is not None:
                return drop(GateAction.STALE, "content version", s)
        return GateVerdict(GateAction.APPLY)

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
        return unless_content_newer()
    if tomb is not None and tomb_order != Order.NEWER:
        return drop(GateAction.STALE, "tombstone", tomb)
    order, s = held(known.indexed)
    if order == Order.SAME and known.complete and s is not None:
        return drop(GateAction.DUPLICATE, "content version", s)
    return unless_content_newer()


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
        version: the version that carried it (an acl or upsert event's
            stamp), or None (a listing: only a time).
    """

    groups: tuple[str, ...]
    observed_at: float = 0.0
    deny: tuple[str, ...] = ()
    version: Stamp | None = None


def choose_permissions(held: PermissionEvidence | None, new: PermissionEvidence) -> PermissionEvidence:
    """The permissions a document gets when two pieces of evidence meet.

    The newest evidence wins. A tie, or an unknown time on either side,
    falls back to the two versions (:func:`compare_versions`: an acl event of
    revision 5 beats the content's revision 4 observed in the same second).
    Configuration (a source's default groups: no time, no version) says
    nothing about when it was true of the document, so evidence that does
    (an acl event, a sidecar's time) stands against it. Only when neither
    orders them does it take the narrower set (fail closed): the groups both
    allow, and the denials of both.

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
    if held.version is not None and new.version is not None:
        order = compare_versions(new.version, held.version)
        if order in (Order.NEWER, Order.OLDER):
            return new if order == Order.NEWER else held
    if _configuration(new) != _configuration(held):
        return held if _configuration(new) else new
    if set(new.groups) <= set(held.groups) and set(held.deny) <= set(new.deny):
        return new
    if set(held.groups) <= set(new.groups) and set(new.deny) <= set(held.deny):
        return held
    return PermissionEvidence(
        tuple(sorted(set(held.groups) & set(new.groups))),
        max(held.observed_at, new.observed_at),
        tuple(sorted(set(held.deny) | set(new.deny))),
    )


def _configuration(evidence: PermissionEvidence) -> bool:
    """Groups with neither a time nor a version: configuration (a folder's
    ``--acl-groups`` without a sidecar), not evidence of a moment."""
    return evidence.observed_at <= 0 and evidence.version is None


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


@dataclass(frozen=True)
class Delivery:
    """What a claim does with one due event of the queue.

    Attributes:
        crash_loop: the event already had ``max_deliveries`` counted
            deliveries without finishing: set it aside (a ``crash`` dead
            letter) instead of leasing it again.
        deliveries: the event's delivery count after this claim (unchanged
            when ``crash_loop``).
    """

    crash_loop: bool
    deliveries: int


def next_delivery(deliveries: int, *, lost_with_process: bool, max_deliveries: int) -> Delivery:
    """Count a delivery of an event about to be leased (again).

    A delivery counts towards the crash-loop limit when the event's worker may
    have died on it. When the previous lease was lost with its whole process
    (the stream that held it no longer runs: SIGKILL, OOM kill of the
    process, a reboot), that lease says nothing about the event, so it is not
    counted: the new lease replaces it. A lease lost while its holder still
    runs (a worker died holding it and the run went on), or whose holder is
    unknown, counts as before.

    Args:
        deliveries: the count stored on the event (the lost lease included).
        lost_with_process: the previous lease's holder process is gone.
        max_deliveries: counted deliveries after which the event is a crash loop.

    Returns:
        The ``Delivery``: ``crash_loop`` at ``max_deliveries`` counted
        deliveries, else the count after this lease.
    """
    counted = max(0, deliveries - (1 if lost_with_process and deliveries > 0 else 0))
    if counted >= max_deliveries:
        return Delivery(True, counted)
    return Delivery(False, counted + 1)


class FailureRoute(str, Enum):
    """Where a failed piece of work goes (``failure_route``)."""

    RETRY = "retry"  # back to the event queue after a backoff (a row there, or one written now)
    DEAD_LETTER = "dead_letter"  # the dead-letter table (redrive runs it again)


def failure_route(event_id: str, retryable: bool, attempts: int, max_attempts: int) -> FailureRoute:
    """Where a stage failure goes: never only a log line.

    Work from an event (the local queue, Pub/Sub or Kafka alike) that failed
    in a way that may pass later goes back to the catalog's event queue with
    a backoff until ``max_attempts`` attempts failed; everything else is
    dead-lettered. What the queue answers can still turn a retry into a dead
    letter: see ``retry_dead_letters``.

    Args:
        event_id: the event behind the work ('' for backfill work).
        retryable: ``ragsync.errors.is_retryable`` of the failure's class.
        attempts: failed attempts including this one (1-based).
        max_attempts: attempts after which the event is given up.

    Returns:
        ``FailureRoute.RETRY`` or ``FailureRoute.DEAD_LETTER``.
    """
    if event_id and retryable and attempts < max_attempts:
        return FailureRoute.RETRY
    return FailureRoute.DEAD_LETTER


def retry_dead_letters(queue_state: str) -> bool:
    """Must a retry be dead-lettered after all, given the queue's answer
    (``Catalog.retry_event_later``)? Only ``pending`` means a row will run
    the event again; ``dead`` (its attempts are used up) and ``missing`` (a
    bus event whose event could not be rebuilt) are dead letters, so the
    failure is kept where ``redrive`` and the dead-letter API see it."""
    return queue_state != "pending"


# -- stamps of what the catalog and the work items hold ---------------------------


def event_stamp(qe: QueuedEvent) -> Stamp:
    """An event's version, in its source's domain, observed at its event time."""
    return Stamp(qe.event.source_version, qe.version_domain, qe.event.event_time or 0.0)


def settles_dead_letter(
    failed_version: str, recorded_at: float, *, from_event: bool, written: Stamp, by_event: bool
) -> bool:
    """Whether a successful write (or delete) of a document settles one of
    its open dead letters (a later good version replaces a failed one).

    Between two works from events the versions decide, when they order: the
    written version settles a failure of an older or the same version, never
    one of a newer version (another worker's, failing while this one was
    written: the document is not at its source's version, the dead letter
    stays open). Otherwise (a backfill's listing on either side, versions of
    two domains) the times do: a failure recorded before the source showed
    what was written (a listing's time, an event's time) is settled.

    Args:
        failed_version: the dead letter's ``source_version`` ('' if unknown).
        recorded_at: when the dead letter was recorded (epoch seconds).
        from_event: the failed work came from a change event.
        written: the version written (or the delete's), with its domain and
            when the source showed it.
        by_event: the written work came from a change event.

    Returns:
        True when the dead letter is settled.
    """
    if from_event and by_event:
        order = compare_versions(written, Stamp(failed_version, written.domain))
        if order != Order.UNKNOWN:
            return order in (Order.NEWER, Order.SAME)
    return written.observed_at > 0 and recorded_at <= written.observed_at


def source_file_stamp(item: SourceFile) -> Stamp:
    """A work item's version (a listing's or an event's)."""
    return Stamp(item.source_version, item.version_domain, item.observed_at or item.event_time or 0.0)


def document_stamp(doc: Any, version: str | None) -> Stamp | None:
    """A version the document row holds (its domain and observation time)."""
    if version is None:
        return None
    return Stamp(version, doc.version_domain or "", doc.version_observed_at or 0.0)


def row_stamp(row: dict[str, Any] | None, column: str) -> Stamp | None:
    """The version of a tombstone or permission-version row."""
    if row is None:
        return None
    return Stamp(str(row[column] or ""), row.get("version_domain") or "", row.get("observed_at") or 0.0)
