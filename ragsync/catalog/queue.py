"""The local event queue: table ``events`` (the durable queue of the local
default; Pub/Sub or Kafka in production). Event rows are returned as dicts
of their columns: an event row is also what the Pub/Sub and Kafka readers
build, so the streaming graph takes one shape from every bus. (Tombstones
and permission versions: ``gate_state``; lag per applied event: ``freshness``.)

Event states: ``pending`` -> ``done`` (or ``stale``, ``duplicate``), or
``pending`` -> ``dead`` after the last attempt. ``available_at`` delays a
retry (backoff) and implements leases. Events are keyed by ``(tenant_id,
event_id)`` and served by lane (``priority``: deletes and permission
changes; ``fast`` and ``slow``: content), tenants taking turns within a lane.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from sqlalchemy import and_, case, func, or_, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now
from ragsync.decisions.gate import next_delivery

#: Queue lanes, in the order they are served.
LANES = ("priority", "fast", "slow")

EventKey = tuple[str, str]
"""An event's key in the queue: ``(tenant_id, event_id)``."""


def lane_of_op(op: str) -> str:
    """The lane an event starts in: deletes and permission changes never wait
    behind content."""
    return "priority" if op in ("delete", "acl") else "fast"


class EventScope(NamedTuple):
    """Whose queued events a run may claim: one tenant's, and with
    ``source_id`` only that source's (a sync applies its own source's events,
    never another tenant's; see :func:`scope_filter`)."""

    tenant_id: str
    source_id: str | None = None


def scope_filter(table: Any, scope: EventScope | None) -> list[Any]:
    """The WHERE conditions that keep a queue query inside ``scope``.

    Args:
        table: the ``events`` table (or a table with its ``tenant_id`` and
            ``source_id`` columns).
        scope: the tenant (and source) served, or None for the whole queue
            (``ragsync stream``: the operator's long-running pipeline).

    Returns:
        A list of conditions (empty for the whole queue).
    """
    if scope is None:
        return []
    conditions = [table.c.tenant_id == scope.tenant_id]
    if scope.source_id is not None:
        conditions.append(table.c.source_id == scope.source_id)
    return conditions


class ClaimedEvents(NamedTuple):
    """What ``claim_events`` leased, and what it gave up on."""

    claimed: list[dict[str, Any]]
    crash_looped: list[dict[str, Any]]


class QueueRepository(Repository):
    """Events, leases, tombstones, permission versions and freshness."""

    # -- the local event queue ----------------------------------------------

    def _event_tenants(self, conn: Any, events: Sequence[Any]) -> list[str]:
        """The tenant of each event: its own ``tenant_id``, else its source's
        only owner, else '' for an unknown source (queued all the same: the
        stream turns it into an ``invalid_event`` dead letter, so a bad event
        in a batch neither blocks the others nor vanishes). Raises ValueError
        for a source several tenants own (the sender must name the tenant)."""
        s = schema.sources
        missing = sorted({e.source_id for e in events if not getattr(e, "tenant_id", "")})
        owners: dict[str, list[str]] = {}
        for batch in _batches(missing):
            query = select(s.c.source_id, s.c.tenant_id).where(s.c.source_id.in_(batch))
            for sid, tid in conn.execute(query):
                owners.setdefault(sid, []).append(tid)
        out = []
        for e in events:
            tenant = getattr(e, "tenant_id", "") or ""
            if not tenant:
                found = owners.get(e.source_id, [])
                if len(found) > 1:
                    raise ValueError(f"source {e.source_id!r} belongs to several tenants: give the tenant")
                tenant = found[0] if found else ""
            out.append(tenant)
        return out

    def _default_groups(self, conn: Any, events: Sequence[Any], tenants: Sequence[str]) -> list[Any]:
        """``events`` with their source's default groups (its ``acl_groups``
        option: ``sources add --acl-groups`` or a backfill's ``--acl-groups``)
        in place of missing ones on upserts and permission changes; events
        that carry groups, deletes and sources without defaults are unchanged."""
        s = schema.sources
        bare = {(tid, e.source_id) for e, tid in zip(events, tenants, strict=True) if e.needs_groups}
        defaults: dict[tuple[str, str], tuple[str, ...]] = {}
        for tid, sid in sorted(bare):
            query = select(s.c.options).where(s.c.tenant_id == tid, s.c.source_id == sid)
            raw = conn.execute(query).scalar()
            groups = (json.loads(raw) if raw else {}).get("acl_groups") or []
            defaults[(tid, sid)] = tuple(str(g) for g in groups)
        return [
            e.with_default_groups(defaults[(tid, e.source_id)]) if e.needs_groups else e
            for e, tid in zip(events, tenants, strict=True)
        ]

    def enqueue_events(self, events: Sequence[Any], *, now: float | None = None) -> tuple[int, int]:
        """Add events (``ragsync.model.Event``) to the queue.

        Idempotent on ``(tenant, event_id)``: a redelivered event is not
        queued twice; one tenant's ids never meet another's. Deletes and
        permission changes go to the ``priority`` lane, content to ``fast``
        (the pipeline moves a document it finds slow to the ``slow`` lane).
        An upsert or permission change without groups gets its source's
        default groups (see ``_default_groups``); with none it stays without
        (fail closed: a ``no_permissions`` dead letter).

        Raises:
            ValueError: an event without a tenant whose source several
                tenants own (nothing is queued).

        Returns:
            (newly queued, duplicates ignored).
        """
        t = schema.events
        ts = _now() if now is None else now
        if not events:
            return 0, 0
        with self._engine.begin() as conn:
            tenants = self._event_tenants(conn, events)
            events = self._default_groups(conn, events, tenants)
            rows = [_event_row(e, tenant, ts) for e, tenant in zip(events, tenants, strict=True)]
            existing: set[tuple[str, str]] = set()
            for tenant in sorted(set(tenants)):
                ids = [r["event_id"] for r in rows if r["tenant_id"] == tenant]
                for batch in _batches(ids):
                    query = select(t.c.event_id).where(t.c.tenant_id == tenant, t.c.event_id.in_(batch))
                    existing.update((tenant, eid) for eid in conn.execute(query).scalars())
            unique: dict[tuple[str, str], dict[str, Any]] = {}
            for r in rows:
                key = (r["tenant_id"], r["event_id"])
                if key not in existing:
                    unique.setdefault(key, r)
            if unique:
                self._upsert(conn, t, list(unique.values()), ["tenant_id", "event_id"], None)
        return len(unique), len(rows) - len(unique)

    def pending_events(self, *, limit: int = 500, now: float | None = None) -> list[dict[str, Any]]:
        """Pending events that are due, oldest first (rows as dicts)."""
        t = schema.events
        ts = _now() if now is None else now
        query = (
            select(t)
            .where(t.c.state == "pending")
            .where(t.c.available_at <= ts)
            .order_by(t.c.enqueued_at, t.c.tenant_id, t.c.event_id)
            .limit(limit)
        )
        with self._read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def get_event(self, event_id: str, tenant_id: str | None = None) -> dict[str, Any] | None:
        """The queued event (row as a dict), or None. Without ``tenant_id``
        the id must be unique across tenants (operator tools and tests)."""
        if tenant_id is not None:
            return self._find(schema.events, tenant_id=tenant_id, event_id=event_id)
        t = schema.events
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.event_id == event_id).limit(2)).mappings().all()
        return dict(rows[0]) if len(rows) == 1 else None

    @staticmethod
    def _keyed(t: Any, keys: Sequence[EventKey]) -> Any:
        """A WHERE clause matching the (tenant_id, event_id) ``keys``."""
        return or_(*(and_(t.c.tenant_id == tenant, t.c.event_id == eid) for tenant, eid in keys))

    def ack_events(self, keys: Sequence[EventKey], state: str = "done") -> int:
        """Mark events finished (``done``, ``stale``, ``duplicate`` or ``dead``).

        Args:
            keys: ``(tenant_id, event_id)`` pairs.
        """
        t = schema.events
        n = 0
        with self._engine.begin() as conn:
            for batch in _batches(list(dict.fromkeys(keys)), 200):
                stmt = (
                    update(t)
                    .where(self._keyed(t, batch))
                    .values(state=state, finished_at=_now(), lease_holder=None)
                )
                n += conn.execute(stmt).rowcount
        return n

    def retry_event_later(
        self,
        key: EventKey,
        delay_s: float,
        *,
        max_attempts: int = 5,
        replay: Any = None,
        attempts: int = 1,
    ) -> str:
        """Count a failed attempt; requeue after ``delay_s`` or mark ``dead``.

        An event read from Pub/Sub or Kafka has no row here: the bus message
        is acknowledged once the stream has handled it, so with ``replay``
        (the event, ``ragsync.model.Event``) the retry is written now as a
        row of this queue - its lane by op, due after ``delay_s``, having
        failed ``attempts`` times - and whatever serves the queue (``ragsync
        stream``, the worker of ``ragsync serve``) applies it, with the
        queue's backoff and attempt limit from then on.

        Args:
            key: ``(tenant_id, event_id)``.
            delay_s: backoff before the next attempt.
            max_attempts: failed attempts after which the event is ``dead``.
            replay: the event to queue when it has no row (None: none).
            attempts: failed attempts of ``replay`` so far (its new row's count).

        Returns:
            The event's new state: ``pending``, ``dead``, or ``missing`` (no
            row and no ``replay``: nothing retries it, the caller must
            dead-letter it).
        """
        t = schema.events
        where = self._keyed(t, [key])
        with self._engine.begin() as conn:
            row = conn.execute(select(t.c.attempts).where(where)).first()
            if row is None and replay is None:
                return "missing"
            if row is None:
                ts = _now()
                fresh = _event_row(replay, key[0], ts)
                state = "dead" if attempts >= max_attempts else "pending"
                fresh.update(event_id=key[1], attempts=attempts, state=state, available_at=ts + delay_s)
                if state == "dead":
                    fresh["finished_at"] = ts
                # DO NOTHING: a row another worker wrote meanwhile is the same retry.
                self._upsert(conn, t, [fresh], ["tenant_id", "event_id"], None)
                return state
            attempts = int(row[0]) + 1
            state = "dead" if attempts >= max_attempts else "pending"
            values = {
                "attempts": attempts,
                "state": state,
                "available_at": _now() + delay_s,
                "lease_holder": None,
            }
            if state == "dead":
                values["finished_at"] = _now()
            conn.execute(update(t).where(where).values(**values))
        return state

    def requeue_event(self, tenant_id: str, event_id: str) -> bool:
        """Put a finished or dead event back in the queue (dead-letter retry):
        attempts and deliveries start again from zero."""
        t = schema.events
        with self._engine.begin() as conn:
            stmt = (
                update(t)
                .where(self._keyed(t, [(tenant_id, event_id)]))
                .values(
                    state="pending",
                    attempts=0,
                    deliveries=0,
                    available_at=_now(),
                    finished_at=None,
                    lease_holder=None,
                )
            )
            return conn.execute(stmt).rowcount == 1

    def move_to_lane(self, keys: Sequence[EventKey], lane: str, *, now: float | None = None) -> int:
        """Hand leased events to another lane (a document found to need the
        slow lane): their lease ends now, so that lane's reader takes them."""
        if lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}")
        t = schema.events
        n = 0
        with self._engine.begin() as conn:
            for batch in _batches(list(dict.fromkeys(keys)), 200):
                stmt = (
                    update(t)
                    .where(self._keyed(t, batch), t.c.state == "pending")
                    .values(
                        lane=lane,
                        available_at=_now() if now is None else now,
                        deliveries=0,
                        lease_holder=None,
                    )
                )
                n += conn.execute(stmt).rowcount
        return n

    def extend_leases(
        self,
        keys: Sequence[EventKey],
        lease_s: float,
        *,
        now: float | None = None,
        claimed: Mapping[EventKey, tuple[int, str]] | None = None,
    ) -> set[EventKey]:
        """Heartbeat: push the lease of events still being worked on
        ``lease_s`` ahead. Returns the keys still held (the others were
        acknowledged, or handed back, and need no more heartbeats).

        Args:
            claimed: ``{key: (attempts, lane)}`` as they were when the caller
                leased the events; an event whose attempts or lane changed
                since (requeued after a failure, handed to the slow lane) is
                no longer the caller's and is left alone.
        """
        t = schema.events
        ts = _now() if now is None else now
        alive: set[EventKey] = set()
        with self._engine.begin() as conn:
            for batch in _batches(list(dict.fromkeys(keys)), 200):
                where = and_(self._keyed(t, batch), t.c.state == "pending")
                rows = conn.execute(select(t.c.tenant_id, t.c.event_id, t.c.attempts, t.c.lane).where(where))
                held = [
                    (str(tid), str(eid))
                    for tid, eid, attempts, lane in rows
                    if claimed is None or claimed.get((str(tid), str(eid))) == (int(attempts or 0), str(lane))
                ]
                if held:
                    conn.execute(update(t).where(self._keyed(t, held)).values(available_at=ts + lease_s))
                alive.update(held)
        return alive

    def claim_events(
        self,
        *,
        limit: int = 100,
        lease_s: float = 300.0,
        lanes: Sequence[str] = LANES,
        max_deliveries: int = 5,
        now: float | None = None,
        scope: EventScope | None = None,
        holder: str = "",
        holder_gone: Callable[[str], bool] | None = None,
    ) -> ClaimedEvents:
        """Lease up to ``limit`` due pending events of ``lanes`` (of ``scope``
        only, when given: a sync claims its own tenant's and source's events
        and leaves every other event queued, untouched).

        Order: the ``priority`` lane first; within a lane, round-robin over
        tenants (the n-th oldest event of every tenant before the n+1-th of
        any), so one tenant's backlog never holds another's work; then age.

        A leased event stays ``pending`` with ``available_at`` moved
        ``lease_s`` ahead: if the worker dies before acknowledging it, it is
        delivered again when the lease ends (at-least-once). Each lease counts
        a delivery; an event already delivered ``max_deliveries`` times
        without being finished (its worker died every time: a poison
        document) is not leased again but marked ``dead`` and returned in
        ``crash_looped`` for a dead letter.

        The lease names its ``holder`` (``events.lease_holder``). A lease that
        ended because its holder's whole process is gone (``holder_gone``:
        the stream was killed, not a worker on this event) is not counted
        as a delivery (``ragsync.decisions.next_delivery``), so restarting a
        killed stream any number of times never dead-letters its events.

        Args:
            limit: events to lease at most.
            lease_s: how long the lease hides them from other readers.
            lanes: the lanes served.
            max_deliveries: counted deliveries after which an event is a
                crash loop.
            now: the time (tests).
            holder: who leases (``ragsync.ops.lifecycle.run_identity``; '' for none).
            holder_gone: whether a previous holder's process no longer runs
                (None: never known, every delivery counts).

        Returns:
            ``ClaimedEvents(claimed, crash_looped)``, rows as dicts.
        """
        t = schema.events
        ts = _now() if now is None else now
        with self._engine.begin() as conn:
            keys = [(str(a), str(b)) for a, b in conn.execute(_due_events(ts, lanes, scope, limit)).all()]
            if not keys:
                return ClaimedEvents([], [])
            order = {k: i for i, k in enumerate(keys)}
            rows = [dict(r) for r in conn.execute(select(t).where(self._keyed(t, keys))).mappings()]
            rows.sort(key=lambda r: order[(r["tenant_id"], r["event_id"])])
            claimed, looped = _count_deliveries(rows, holder, holder_gone, max_deliveries)
            if looped:
                dead = [(r["tenant_id"], r["event_id"]) for r in looped]
                conn.execute(
                    update(t)
                    .where(self._keyed(t, dead))
                    .values(state="dead", finished_at=ts, lease_holder=None)
                )
            counts: dict[int, list[EventKey]] = {}
            for r in claimed:
                counts.setdefault(r["deliveries"], []).append((r["tenant_id"], r["event_id"]))
            for deliveries, keys_at in sorted(counts.items()):
                for batch in _batches(keys_at, 200):
                    conn.execute(
                        update(t)
                        .where(self._keyed(t, batch), t.c.state == "pending")
                        .values(available_at=ts + lease_s, deliveries=deliveries, lease_holder=holder or None)
                    )
        return ClaimedEvents(claimed, looped)

    def release_orphaned_leases(self, holder_gone: Callable[[str], bool], *, now: float | None = None) -> int:
        """End at once the leases of pending events whose holder process is
        gone (a killed stream), so a restarted stream takes them without
        waiting for the lease to run out. The holder stays on the row: the
        next claim sees the lease was lost with its process and does not count
        it as a delivery (``claim_events``).

        Args:
            holder_gone: whether a holder (``ragsync.ops.lifecycle.run_identity``)
                no longer runs.

        Returns:
            How many events were released.
        """
        t = schema.events
        ts = _now() if now is None else now
        leased = and_(t.c.state == "pending", t.c.available_at > ts, t.c.lease_holder.is_not(None))
        with self._read_engine.connect() as conn:
            holders = [
                str(h) for h in conn.execute(select(t.c.lease_holder).where(leased).distinct()).scalars()
            ]
        dead = [h for h in holders if holder_gone(h)]
        if not dead:
            return 0
        with self._engine.begin() as conn:
            stmt = update(t).where(leased, t.c.lease_holder.in_(dead)).values(available_at=ts)
            return int(conn.execute(stmt).rowcount)

    def unfinished_events(self, lanes: Sequence[str] = LANES, *, scope: EventScope | None = None) -> int:
        """Pending events of ``lanes`` (of ``scope`` only, when given), leased
        or not (drained at 0)."""
        t = schema.events
        query = select(func.count()).where(
            t.c.state == "pending", t.c.lane.in_(list(lanes)), *scope_filter(t, scope)
        )
        with self._read_engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)

    def event_sources(self, tenant_id: str, event_ids: Iterable[str]) -> dict[str, str]:
        """``{event_id: source_id}`` for the tenant's ids already in the queue."""
        wanted = sorted(set(event_ids))
        t = schema.events
        out: dict[str, str] = {}
        with self._read_engine.connect() as conn:
            for batch in _batches(wanted):
                query = select(t.c.event_id, t.c.source_id).where(
                    t.c.tenant_id == tenant_id, t.c.event_id.in_(batch)
                )
                out.update({eid: sid for eid, sid in conn.execute(query).all()})
        return out

    def tenant_event(self, tenant_id: str, event_id: str) -> dict[str, Any] | None:
        """A queued event of the tenant (row as a dict), else None."""
        return self._find(schema.events, tenant_id=tenant_id, event_id=event_id)

    # -- tombstones and permission versions --------------------------------

    def note_event(self, key: EventKey, note: str) -> None:
        """Keep why an event was dropped (a stale one names both versions)."""
        t = schema.events
        with self._engine.begin() as conn:
            conn.execute(update(t).where(self._keyed(t, [key])).values(note=note[:2000]))

    # -- freshness ----------------------------------------------------------------


def _due_events(ts: float, lanes: Sequence[str], scope: EventScope | None, limit: int) -> Any:
    """The query of the keys of up to ``limit`` due pending events of
    ``lanes`` (and ``scope``): the ``priority`` lane first; within a lane,
    round-robin over tenants (the n-th oldest event of every tenant before the
    n+1-th of any); then age."""
    t = schema.events
    rank = case({"priority": 0, "fast": 1, "slow": 2}, value=t.c.lane, else_=3)
    turn = (
        func.row_number()
        .over(partition_by=(t.c.lane, t.c.tenant_id), order_by=(t.c.enqueued_at, t.c.event_id))
        .label("turn")
    )
    due = (
        select(t.c.tenant_id, t.c.event_id, rank.label("rank"), turn, t.c.enqueued_at)
        .where(
            t.c.state == "pending",
            t.c.available_at <= ts,
            t.c.lane.in_(list(lanes)),
            *scope_filter(t, scope),
        )
        .subquery()
    )
    return (
        select(due.c.tenant_id, due.c.event_id)
        .order_by(due.c.rank, due.c.turn, due.c.enqueued_at, due.c.tenant_id, due.c.event_id)
        .limit(limit)
    )


def _count_deliveries(
    rows: list[dict[str, Any]],
    holder: str,
    holder_gone: Callable[[str], bool] | None,
    max_deliveries: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split leased rows into (claimed, crash-looped), each row's
    ``deliveries`` set to its new count (``ragsync.decisions.next_delivery``:
    a lease lost with its holder's whole process is not counted). Whether a
    previous holder is gone is asked once per holder."""
    claimed: list[dict[str, Any]] = []
    looped: list[dict[str, Any]] = []
    gone: dict[str, bool] = {}
    for r in rows:
        previous = str(r.get("lease_holder") or "")
        if previous and previous not in gone:
            gone[previous] = previous != holder and holder_gone is not None and holder_gone(previous)
        delivery = next_delivery(
            int(r.get("deliveries") or 0),
            lost_with_process=bool(previous) and gone[previous],
            max_deliveries=max_deliveries,
        )
        r["deliveries"] = delivery.deliveries
        (looped if delivery.crash_loop else claimed).append(r)
    return claimed, looped


def _event_row(event: Any, tenant: str, ts: float) -> dict[str, Any]:
    """The ``events`` row of a new, pending ``event`` (``ragsync.model.Event``) of ``tenant``."""
    return {
        "tenant_id": tenant,
        "event_id": event.event_id,
        "source_id": event.source_id,
        "doc_id": event.doc_id,
        "op": event.op,
        "source_version": event.source_version,
        "payload": replace(event, tenant_id=tenant).to_json(),
        "event_time": event.event_time,
        "enqueued_at": ts,
        "attempts": 0,
        "state": "pending",
        "available_at": ts,
        "lane": lane_of_op(event.op),
        "deliveries": 0,
    }
