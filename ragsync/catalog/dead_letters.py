"""Dead letters: failed work set aside with its reason, and retries of it.

Rows: :class:`DeadLetterRow` (``dead_letters``); retry requests go to
``dead_letter_retries``. A dead letter's ``payload`` is the JSON of the stage
record that failed (a ``SourceFile``, ``FetchedDocument``, ``QueuedEvent``, a
raw event row's event, ...); :func:`event_id_of_payload` and
:func:`event_of_payload` are the one place that reads the change event out of
it, for every shape.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, case, select, update

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _now, new_id, row_to
from ragsync.catalog.documents import LIVE_STATUSES, STATUS_STALE
from ragsync.catalog.queue import QueueRepository
from ragsync.catalog.sources import SourcesRepository
from ragsync.model import DeadLetter, Event, payload_field

# Characters the payload JSON keeps verbatim, so a LIKE on the raw id
# pre-filters dead letters whose payload names it.
_LIKE_SAFE = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")


def event_id_of_payload(payload: str) -> str:
    """The id of the change event behind a dead letter, from its payload.

    Args:
        payload: the dead letter's ``payload`` (any stage record's JSON).

    Returns:
        The event id wherever the record keeps it (top level for an event or
        a ``SourceFile``, under ``event`` for a ``QueuedEvent``, under
        ``source`` for a ``FetchedDocument``); '' for backfill work and for
        payloads that are not JSON.
    """
    return payload_field(payload, "event_id")


def event_of_payload(payload: str) -> dict[str, Any] | None:
    """The change event behind a dead letter, as the wire-format dict to queue again.

    Args:
        payload: the dead letter's ``payload``.

    Returns:
        The event object (from an event or a ``QueuedEvent`` payload), an
        ``upsert`` event rebuilt from the ``SourceFile`` of a fetch/parse/...
        payload that came from an event, or None when the work did not come
        from an event or the payload is not JSON. The result is not
        validated: pass it through ``connectors.events.parse_event``.
    """
    if not event_id_of_payload(payload):
        return None
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    for candidate in (data.get("event"), data):
        if isinstance(candidate, dict) and "op" in candidate and candidate.get("event_id"):
            return candidate
    source = data.get("source") if isinstance(data.get("source"), dict) else data
    if not isinstance(source, dict) or "source_object_id" not in source:
        return None
    return {
        "event_id": source.get("event_id"),
        "source_id": source.get("source_id"),
        "doc_id": source.get("source_object_id"),
        "op": "upsert",
        "source_version": source.get("source_version"),
        "acl_groups": source.get("acl_groups") or [],
        "deny_groups": source.get("deny_groups") or [],
        "content_uri": source.get("uri"),
        "event_time": source.get("event_time"),
    }


def _object_id_of(payload: str) -> str:
    """The source's own id of the object behind a dead letter (a listed
    file's or an event's), or '' (the column's default) when the payload
    names none."""
    found = payload_field(payload, "source_object_id")
    if not found:
        event = event_of_payload(payload)
        found = str(event.get("doc_id") or "") if event is not None else ""
    return found


@dataclass(frozen=True)
class DeadLetterRow:
    """One row of ``dead_letters``.

    Attributes:
        id: row id, increasing in insertion order.
        created_at: epoch seconds when it was recorded.
        tenant_id: owner tenant ('' when unknown).
        source_id: source ('' when unknown).
        doc_id: affected document ('' when unknown).
        uri: affected object's uri.
        stage: pipeline stage that failed.
        error_class: one of ``ragsync.errors.ERROR_CLASSES``.
        message: human-readable reason.
        traceback: truncated traceback ('' for expected errors).
        attempts: attempts made.
        payload: JSON of the input record, for a retry.
        source_version: version of the failed input.
        resolved_at: epoch seconds when resolved, None while open.
    """

    id: int
    created_at: float
    tenant_id: str
    source_id: str
    doc_id: str
    uri: str
    stage: str
    error_class: str
    message: str
    traceback: str
    attempts: int
    payload: str
    source_version: str
    resolved_at: float | None

    @property
    def event_id(self) -> str:
        """The change event behind the failed work ('' for backfill files): :func:`event_id_of_payload`."""
        return event_id_of_payload(self.payload)

    @property
    def key(self) -> str:
        """The dead letter's one identity, for the catalog, the CLI and the API:
        its event id, or its row id when no event is behind it (a backfill file,
        a stream message that is not an event)."""
        return self.event_id or str(self.id)

    def to_dead_letter(self) -> DeadLetter:
        """The pipeline record this row was made from (without ids and times)."""
        return DeadLetter(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DeadLetter)})


@dataclass(frozen=True)
class Redrive:
    """What re-driving one dead letter did.

    Attributes:
        key: the dead letter's identity (:attr:`DeadLetterRow.key`).
        tenant_id: its tenant.
        kind: ``event`` (the event is back in the queue) or ``file`` (a
            backfill file: the next backfill of its source retries it).
        state: ``requeued`` or ``requested``.
        retry_id: the recorded retry.
        resolved: dead letters resolved by it.
    """

    key: str
    tenant_id: str
    kind: str
    state: str
    retry_id: str
    resolved: int


#: Validates a dead letter's event (wire-format dict) into an Event, or None.
EventParser = Callable[[dict[str, Any]], Event | None]

_ROW_ID = re.compile(r"^[0-9]{1,18}$")


class DeadLettersRepository(Repository):
    """Dead letters and dead-letter retry requests. A re-drive puts events
    back on the queue (``queue``) of the tenant's own sources (``sources``)."""

    def __init__(self, engine: Engine, queue: QueueRepository, sources: SourcesRepository) -> None:
        super().__init__(engine)
        self._queue = queue
        self._sources = sources

    def redrive_dead_letter(
        self, key: str, *, parse: EventParser, tenant_id: str | None = None
    ) -> list[Redrive]:
        """Re-drive the dead letters named ``key`` - the one function behind
        ``ragsync dead-letters retry`` and ``POST /v1/dead-letters/{key}/retry``.

        ``key`` is an event id (every dead letter of work from that event, of
        every class and stage) or, for work no event is behind, the row id
        (:attr:`DeadLetterRow.key`); a row id of an event-backed dead letter
        also names its event. An event in the local queue is put back
        (attempts from zero); an event that never was in it (read from
        Pub/Sub or Kafka) is queued again from the dead letter's payload; a
        backfill file's dead letter is resolved and a retry request recorded
        for the next backfill. A stream message that never parsed as an event
        names nothing to run again and is left open.

        Args:
            key: the dead letter's identity.
            parse: validates the payload's event (``connectors.events``).
            tenant_id: only this tenant's (the API); None for every tenant
                (the operator's CLI).

        Returns:
            One :class:`Redrive` per tenant whose dead letters ``key`` named;
            ``[]`` when it named none (or another tenant's).
        """
        tenants = [tenant_id] if tenant_id is not None else self._tenants_of_key(key)
        out: list[Redrive] = []
        for tenant in tenants:
            done = self._redrive_event(tenant, key, parse)
            if done is None and _ROW_ID.match(key):
                done = self._redrive_row(tenant, int(key), parse)
            if done is not None:
                out.append(done)
        return out

    def _tenants_of_key(self, key: str) -> list[str]:
        t, e = schema.dead_letters, schema.events
        with self._read_engine.connect() as conn:
            found = set(conn.execute(select(e.c.tenant_id).where(e.c.event_id == key)).scalars())
            query = select(t.c.tenant_id).where(t.c.resolved_at.is_(None))
            if _LIKE_SAFE.match(key):
                query = query.where(t.c.payload.contains(key, autoescape=True))
            found.update(conn.execute(query).scalars())
            if _ROW_ID.match(key):
                found.update(conn.execute(select(t.c.tenant_id).where(t.c.id == int(key))).scalars())
        return sorted(found)

    def _redrive_event(self, tenant: str, event_id: str, parse: EventParser) -> Redrive | None:
        q = self._queue
        event = q.tenant_event(tenant, event_id)
        letters = self.open_dead_letters_for_event(tenant, event_id)
        if event is not None and (letters or event["state"] == "dead"):
            q.requeue_event(tenant, event_id)
        elif event is None and letters:
            data = event_of_payload(letters[-1][1])
            replay = parse(data) if data is not None else None
            if replay is None or not self._sources.owned_source_ids(tenant, [replay.source_id]):
                return None
            if q.event_sources(tenant, [replay.event_id]):
                q.requeue_event(tenant, replay.event_id)
            else:
                q.enqueue_events([dataclasses.replace(replay, tenant_id=tenant)])
        else:
            return None
        resolved = self.resolve_dead_letters(tenant, [i for i, _ in letters])
        retry_id = self.record_retry(
            tenant,
            kind="event",
            state="requeued",
            event_id=event_id,
            dead_letter_id=letters[-1][0] if letters else None,
        )
        return Redrive(event_id, tenant, "event", "requeued", retry_id, resolved)

    def _open_payload(self, tenant_id: str, dead_letter_id: int) -> str | None:
        """The payload of the tenant's open dead letter with this row id, or None."""
        t = schema.dead_letters
        with self._read_engine.connect() as conn:
            row = conn.execute(
                select(t.c.payload).where(
                    t.c.id == dead_letter_id, t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None)
                )
            ).first()
        return None if row is None else str(row[0])

    def _redrive_row(self, tenant: str, row_id: int, parse: EventParser) -> Redrive | None:
        payload = self._open_payload(tenant, row_id)
        if payload is None:
            return None
        event_id = event_id_of_payload(payload)
        if event_id:
            return self._redrive_event(tenant, event_id, parse)
        if not payload_field(payload, "source_object_id"):
            return None  # a stream message that is not an event: nothing to run again
        resolved = self.resolve_dead_letters(tenant, [row_id])
        retry_id = self.record_retry(
            tenant, kind="file", state="requested", event_id=None, dead_letter_id=row_id
        )
        return Redrive(str(row_id), tenant, "file", "requested", retry_id, resolved)

    def add_dead_letter(self, dl: DeadLetter, source_id: str = "") -> int:
        """Record a dead letter (every call adds a row).

        Args:
            dl: the pipeline's dead-letter record.
            source_id: source of the failed work ('' when unknown).

        Returns:
            The new row's id.
        """
        row = {
            "created_at": _now(),
            "tenant_id": dl.tenant_id,
            "source_id": source_id,
            "doc_id": dl.doc_id,
            "uri": dl.uri,
            "stage": dl.stage,
            "error_class": dl.error_class,
            "message": dl.message,
            "traceback": dl.traceback,
            "attempts": dl.attempts,
            "payload": dl.payload,
            "source_version": dl.source_version,
        }
        with self._engine.begin() as conn:
            result = conn.execute(schema.dead_letters.insert().values(**row))
            pk = result.inserted_primary_key
            assert pk is not None
            return int(pk[0])

    def record_dead_letter(
        self, dl: DeadLetter, source_id: str = "", parser_version: str | None = None
    ) -> tuple[int, bool]:
        """Record a dead letter once and mark its document.

        A replay of the same failure (same document, stage, error class and
        source version, still unresolved) adds no second row. The document's
        row gets status ``dead_letter`` (``stale`` when it has a live version,
        which stays searchable) and the error class; a document that
        failed before it had a row (say, an empty file) gets a minimal row so
        coverage counts see it. A row without a live version also records
        ``parser_version`` (the parser that failed), so an unchanged object
        is not read again until the parser changes (``decisions.skip_unread``).

        Returns:
            (dead letter id, True when a new row was added).
        """
        t = schema.dead_letters
        if dl.doc_id:
            query = (
                select(t.c.id)
                .where(t.c.doc_id == dl.doc_id)
                .where(t.c.stage == dl.stage)
                .where(t.c.error_class == dl.error_class)
                .where(t.c.source_version == dl.source_version)
                .where(t.c.resolved_at.is_(None))
                .limit(1)
            )
            with self._read_engine.connect() as conn:
                existing = conn.execute(query).scalar()
            if existing is not None:
                self._mark_dead(dl, source_id, parser_version)
                return int(existing), False
        new_id = self.add_dead_letter(dl, source_id=source_id)
        self._mark_dead(dl, source_id, parser_version)
        return new_id, True

    def _mark_dead(self, dl: DeadLetter, source_id: str, parser_version: str | None = None) -> None:
        """The document's status becomes ``dead_letter``, or ``stale`` when
        it has a live version: a failed update leaves the last good version
        searchable (the error class says why it is stale)."""
        if not dl.doc_id:
            return
        t = schema.documents
        live = and_(t.c.status.in_(LIVE_STATUSES), t.c.indexed_version.is_not(None))
        with self._engine.begin() as conn:
            updated = conn.execute(
                update(t)
                .where(t.c.doc_id == dl.doc_id)
                .values(
                    status=case((live, STATUS_STALE), else_="dead_letter"),
                    error_class=dl.error_class,
                    updated_at=_now(),
                    **(
                        {"parser_version": case((live, t.c.parser_version), else_=parser_version)}
                        if parser_version
                        else {}
                    ),
                )
            ).rowcount
            if updated == 0:
                row = {
                    "doc_id": dl.doc_id,
                    "source_id": source_id,
                    "tenant_id": dl.tenant_id,
                    # The source's own id, so a listing that no longer holds
                    # the object deletes this row (and settles its dead letter).
                    "source_object_id": _object_id_of(dl.payload),
                    "uri": dl.uri,
                    "source_version": dl.source_version,
                    "status": "dead_letter",
                    "error_class": dl.error_class,
                    "parser_version": parser_version,
                    "updated_at": _now(),
                }
                self._upsert(conn, t, [row], ["doc_id"], ["status", "error_class", "updated_at"])

    def resolve_dead_letter(self, dead_letter_id: int, resolved_at: float | None = None) -> bool:
        """Mark a dead letter resolved (kept for audit, hidden from open lists).

        Returns:
            True if an open dead letter was resolved; False if unknown or already resolved.
        """
        t = schema.dead_letters
        stmt = (
            update(t)
            .where(t.c.id == dead_letter_id, t.c.resolved_at.is_(None))
            .values(resolved_at=_now() if resolved_at is None else resolved_at)
        )
        with self._engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def resolve_dead_letters(self, tenant_id: str, dead_letter_ids: Iterable[int]) -> int:
        """Mark the tenant's open dead letters resolved. Returns how many changed."""
        wanted = sorted(set(dead_letter_ids))
        if not wanted:
            return 0
        t = schema.dead_letters
        with self._engine.begin() as conn:
            return int(
                conn.execute(
                    update(t)
                    .where(t.c.id.in_(wanted), t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None))
                    .values(resolved_at=_now())
                ).rowcount
            )

    def open_dead_letter_at(self, tenant_id: str, source_id: str, uri: str) -> int | None:
        """The id of an open dead letter of the tenant's source at ``uri``
        (a webhook keeps one per distinct payload), or None."""
        t = schema.dead_letters
        query = (
            select(t.c.id)
            .where(t.c.source_id == source_id, t.c.tenant_id == tenant_id, t.c.uri == uri)
            .where(t.c.resolved_at.is_(None))
            .limit(1)
        )
        with self._read_engine.connect() as conn:
            found = conn.execute(query).scalar()
        return None if found is None else int(found)

    def list_dead_letters(
        self,
        *,
        tenant_id: str | None = None,
        source_id: str | None = None,
        unresolved_only: bool = True,
        limit: int = 100,
    ) -> list[DeadLetterRow]:
        """Dead letters, oldest first (by id).

        Args:
            tenant_id: only this tenant's, when given.
            source_id: only this source's, when given.
            unresolved_only: skip resolved ones.
            limit: maximum number of rows.

        Returns:
            The rows.
        """
        t = schema.dead_letters
        query = select(t).order_by(t.c.id).limit(limit)
        if tenant_id is not None:
            query = query.where(t.c.tenant_id == tenant_id)
        if source_id is not None:
            query = query.where(t.c.source_id == source_id)
        if unresolved_only:
            query = query.where(t.c.resolved_at.is_(None))
        with self._read_engine.connect() as conn:
            return [row_to(DeadLetterRow, r) for r in conn.execute(query).mappings()]

    def last_dead_letter_message(self, doc_id: str, *, tenant_id: str) -> str | None:
        """The message of the tenant's newest dead letter for a document (resolved or not), or None."""
        t = schema.dead_letters
        query = (
            select(t.c.message)
            .where(t.c.doc_id == doc_id, t.c.tenant_id == tenant_id)
            .order_by(t.c.id.desc())
            .limit(1)
        )
        with self._read_engine.connect() as conn:
            message = conn.execute(query).scalar()
        return None if message is None else str(message)

    def dead_letter_counts(self) -> dict[str, int]:
        """Number of unresolved dead letters per error class."""
        t = schema.dead_letters
        return self._count_by(t.c.error_class, t.c.resolved_at.is_(None))

    def open_dead_letters_for_event(self, tenant_id: str, event_id: str) -> list[tuple[int, str]]:
        """The tenant's open dead letters of work that came from the event ``event_id``.

        Returns:
            ``[(dead letter id, payload)]``, oldest first.
        """
        t = schema.dead_letters
        query = select(t.c.id, t.c.payload).where(t.c.tenant_id == tenant_id, t.c.resolved_at.is_(None))
        if _LIKE_SAFE.match(event_id):
            query = query.where(t.c.payload.contains(event_id, autoescape=True))
        out: list[tuple[int, str]] = []
        with self._read_engine.connect() as conn:
            for dl_id, payload in conn.execute(query.order_by(t.c.id)).all():
                if event_id_of_payload(payload) == event_id:
                    out.append((int(dl_id), payload))
        return out

    def record_retry(
        self, tenant_id: str, *, kind: str, state: str, event_id: str | None, dead_letter_id: int | None
    ) -> str:
        """Record a dead-letter retry request.

        Args:
            tenant_id: caller's tenant.
            kind: ``event`` (requeued in the event queue) or ``file`` (a backfill
                file; a backfill run picks ``requested`` rows up).
            state: ``requeued`` or ``requested``.
            event_id: the event id, for ``event``.
            dead_letter_id: the dead letter row, when there is one.

        Returns:
            The retry id.
        """
        retry_id = new_id("retry")
        with self._engine.begin() as conn:
            conn.execute(
                schema.dead_letter_retries.insert().values(
                    retry_id=retry_id,
                    tenant_id=tenant_id,
                    dead_letter_id=dead_letter_id,
                    event_id=event_id,
                    kind=kind,
                    state=state,
                    requested_at=_now(),
                )
            )
        return retry_id
