"""Stage 10: write both indexes, flip the version, delete what vanished; and
the dead-letter sink."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import apache_beam as beam

from ragsync import near_dup
from ragsync.config import Settings
from ragsync.decisions import (
    CopyIdentity,
    CopyLink,
    FailureRoute,
    Order,
    backoff_delay,
    compare_versions,
    copy_lost_its_holder,
    failure_route,
    retry_dead_letters,
)
from ragsync.errors import WriteError, is_retryable
from ragsync.model import Chunk, DeadLetter, DocumentPlan, Event, FetchedDocument, payload_field
from ragsync.parsing import PARSER_VERSION
from transforms.copies import CopiesDoFn, retire_holder, sync_copies
from transforms.dead_letters import GuardedStep, ToDeadLetters, batch_item_failure
from transforms.embed import EmbeddedPlan
from transforms.progress import ListingTally, Progress
from transforms.steps import CatalogDoFn

WRITE_BATCH_CHUNKS = 256
"""New chunks per write batch: the documents of one batch share one vector
upsert and one keyword-index commit (a commit syncs files to disk: ~10 ms,
more than the rest of a small document's write)."""


def first_to_crash(marker: str) -> bool:
    """Whether this process may fire a fault hook (tests only).

    Args:
        marker: '' (every process fires), or the path of a file that the
            first process to reach a hook creates (``O_EXCL``, atomic across
            processes): only that process fires, once; every later process
            and run goes on.

    Returns:
        True when the hook fires here.

    Raises:
        OSError: the marker cannot be created for another reason than existing.
    """
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _write_size(embedded: EmbeddedPlan) -> int:
    return max(1, len(embedded.plan.new_ids))


class _WriteFn(CopiesDoFn):
    """A batch of EmbeddedPlans -> the DocumentPlan of each document once
    written (``superseded`` when a newer version overtook it; a document
    that fails goes to ``bad`` on its own, the others of the batch go on).

    Timeline for one document (each step idempotent, so a crash anywhere and a
    replay of the same plan converge):
      1. upsert the new chunks into the vector index, then the keyword index
         (one upsert and one commit for all documents of the batch);
      2. write every chunk row to the catalog (a new row is pending: queries
         do not show it; a kept chunk's row stays live);
      3. flip the document's indexed version (one transaction, which makes
         exactly the new version's chunk rows live and the replaced ones
         pending) - from here a query sees the new version complete, and
         before it only the old one;
      4. delete the vanished chunks from both indexes, then their rows.
    Steps 2-4 run document by document once step 1 is done for the batch, so
    every document is still indexed before it is flipped and flipped before
    its old chunks go. A crash after 1 leaves index rows with no catalog row,
    after 2 pending rows; neither is searchable, and the next run writes the
    same ids again (or the end-of-run sweep and repair remove them).
    Documents of one batch are as independent as documents written by two
    workers at once, which Beam may always do.
    """

    metrics_stage = "write"

    def __init__(self, settings: Settings, dim: int, total: int | ListingTally, show_progress: bool) -> None:
        super().__init__(settings, dim)
        self.total = total
        self.show_progress = show_progress

    def setup(self) -> None:
        super().setup()
        self._progress = Progress("write", "docs", self.total, enabled=self.show_progress)
        self._docs_written = 0
        # Fault injection for crash and signal tests:
        # RAGSYNC_CRASH_AFTER_INDEX_WRITES=N[:SIGNAL] sends SIGNAL (default
        # SIGKILL) to this process once the index upsert of the batch holding
        # the N-th document is done, before any catalog row of that batch
        # exists - the worst place to be stopped.
        after, _, signame = os.environ.get("RAGSYNC_CRASH_AFTER_INDEX_WRITES", "").partition(":")
        self._crash_after = int(after or 0)
        self._crash_signal = getattr(signal, signame or "SIGKILL")
        # RAGSYNC_CRASH_ONCE=PATH: only the first process to create PATH
        # fires that hook (one worker of many, and a re-run goes through).
        self._crash_once = os.environ.get("RAGSYNC_CRASH_ONCE", "")
        # RAGSYNC_CRASH_AFTER_FLIPS=N: SIGKILL after the N-th version flip,
        # before the vanished chunks are deleted.
        self._crash_after_flips = int(os.environ.get("RAGSYNC_CRASH_AFTER_FLIPS", "0") or 0)
        # RAGSYNC_CRASH_BEFORE_FLIPS=N: SIGKILL before the N-th version flip,
        # once that document's new chunks are in both indexes and its chunk
        # rows in the catalog (pending): inside the write -> flip window.
        self._crash_before_flips = int(os.environ.get("RAGSYNC_CRASH_BEFORE_FLIPS", "0") or 0)
        self._flips = 0
        self._seen_versions: dict[str, str] = {}

    def process(self, batch: list[EmbeddedPlan]) -> Iterator[Any]:
        yield from self._stage.run(self._write_batch, batch, elements=len(batch))

    def teardown(self) -> None:
        self._progress.finish()
        super().teardown()

    def _write_batch(self, batch: list[EmbeddedPlan]) -> Iterator[Any]:
        ready: list[EmbeddedPlan] = []
        for embedded in batch:
            try:
                if self._superseded(embedded.plan):
                    # A newer version of this document was accepted (or it
                    # was deleted) while this one was being embedded: writing
                    # it now would roll the document back.
                    self.count("events_stale")
                    yield beam.pvalue.TaggedOutput("superseded", embedded.plan)
                    continue
                self._leave_old_content(embedded.plan)
                ready.append(embedded)
            except Exception as exc:
                yield batch_item_failure(embedded, exc)
        indexed = yield from self._index(ready)
        self._docs_written += len(indexed)
        if (
            self._crash_after
            and self._docs_written >= self._crash_after > self._docs_written - len(indexed)
            and first_to_crash(self._crash_once)
        ):
            print(f"[fault] sending {self._crash_signal.name}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), self._crash_signal)
            # The run is stopped right here, whatever else this thread's
            # bundle holds: park it until the process exits.
            threading.Event().wait()
        for embedded in indexed:
            try:
                self._publish(embedded.plan)
            except Exception as exc:
                yield batch_item_failure(embedded, exc)
                continue
            self._progress.add()
            yield embedded.plan

    def _superseded(self, plan: DocumentPlan) -> bool:
        """True when the catalog holds a newer content version or a tombstone
        at or above this plan's version (event-driven work only; a backfill
        listing has no version order)."""
        from transforms.events import document_stamp, row_stamp, source_file_stamp

        src = plan.doc.source
        if not src.event_id:
            return False
        version = source_file_stamp(src)
        tomb = row_stamp(self._catalog.get_tombstone(plan.doc.doc_id), "source_version")
        if tomb is not None and compare_versions(version, tomb) != Order.NEWER:
            return True
        doc = self._catalog.get_document(plan.doc.doc_id)
        held = document_stamp(doc, doc.source_version or None) if doc is not None else None
        if held is not None:
            # The flip is guarded by the version seen here: a newer version
            # flipped meanwhile (another lane's writer) refuses it.
            self._seen_versions[plan.doc.doc_id] = held.value
        return held is not None and compare_versions(version, held) == Order.OLDER

    def _leave_old_content(self, plan: DocumentPlan) -> None:
        """A document rewritten with other bytes: its old bytes may still be
        another document's, and that copy takes over the old chunks before
        they are rewritten (no re-embedding)."""
        stored = self._catalog.get_document(plan.doc.doc_id)
        if stored is not None and stored.content_hash not in (None, plan.doc.content_hash):
            sync_copies(self, plan.doc.doc_id, leaving=True)

    def _index(self, ready: list[EmbeddedPlan]) -> Generator[Any, None, list[EmbeddedPlan]]:
        """Step 1 for the batch: one upsert into each index. When that fails,
        each document is tried alone, so only the ones that fail alone are
        dead-lettered (yielded as failures). Returns the documents indexed."""
        try:
            self._upsert_new_chunks(ready)
            return ready
        except Exception as exc:
            if len(ready) == 1:
                yield batch_item_failure(ready[0], exc)
                return []
        indexed = []
        for embedded in ready:
            try:
                self._upsert_new_chunks([embedded])
            except Exception as exc:
                yield batch_item_failure(embedded, exc)
                continue
            indexed.append(embedded)
        return indexed

    def _upsert_new_chunks(self, group: list[EmbeddedPlan]) -> None:
        new: list[Chunk] = []
        vectors: list[list[float]] = []
        for embedded in group:
            by_id = {c.chunk_id: c for c in embedded.plan.chunks}
            for cid in embedded.plan.new_ids:
                new.append(by_id[cid])
                vectors.append(embedded.vectors[cid].tolist())
        if new:
            self._vectors.upsert(new, vectors)
            self._keywords.upsert(new)
            self.shadow_upsert(new)

    def _publish(self, plan: DocumentPlan) -> None:
        """Steps 2-4 for one document whose new chunks are indexed."""
        doc = plan.doc
        tenant = doc.source.tenant_id
        # Kept chunks whose permissions changed with the content get the new
        # ACL ids in place (no re-embedding).
        new_ids = set(plan.new_ids)
        stored = self._catalog.chunks_by_ids([c.chunk_id for c in plan.chunks if c.chunk_id not in new_ids])
        moved = [c for c in plan.chunks if c.chunk_id in stored and stored[c.chunk_id].acl_ids != c.acl_ids]
        if moved:
            self._vectors.set_acl_ids(tenant, [c.chunk_id for c in moved], list(plan.acl_ids))
            self._keywords.set_acl_ids(tenant, moved)
            self.shadow_set_acl(tenant, moved, list(plan.acl_ids))
        # New chunk rows stay pending (unseen by queries) until the flip
        # names the new version's chunk ids, in its own transaction.
        self._catalog.write_chunks(list(plan.chunks), pending=True)
        self.count("chunks_written", len(new_ids))
        if self._crash_before_flips and self._flips + 1 >= self._crash_before_flips:
            print("[fault] sending SIGKILL before the flip", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        flipped = self._catalog.flip_indexed_version(
            doc.doc_id,
            content_hash=doc.content_hash,
            source_version=doc.source.source_version,
            indexed_version=doc.source.source_version,
            chunker_id=plan.chunker_id,
            parser_version=plan.parser_version,
            chunk_count=len(plan.chunks),
            indexed_at=time.time(),
            mime=doc.mime,
            version_domain=doc.source.version_domain or None,
            version_observed_at=doc.source.observed_at or doc.source.event_time or None,
            expected_version_guard=self._seen_versions.pop(doc.doc_id, None),
            live_chunk_ids=[c.chunk_id for c in plan.chunks],
        )
        if not flipped:
            # Overtaken between the superseded check and here: the event runs
            # again and is then stale (its chunk rows are the next write's
            # vanished ones).
            raise WriteError(f"{doc.doc_id}: a newer version was written meanwhile; retried")
        self._flips += 1
        if self._crash_after_flips and self._flips >= self._crash_after_flips and plan.vanished_ids:
            os.kill(os.getpid(), signal.SIGKILL)
        # Near-duplicate grouping (MinHash over the document's chunk texts):
        # queries show only the newest document of a group.
        sig = near_dup.signature("\n\n".join(c.text for c in plan.chunks))
        self._catalog.set_near_dup(doc.doc_id, tenant, sig, near_dup.band_keys(sig))
        if plan.vanished_ids:
            vanished = list(plan.vanished_ids)
            self._vectors.delete(tenant, vanished)
            self._keywords.delete(tenant, vanished)
            self.shadow_delete(tenant, vanished)
            self._catalog.delete_chunks(vanished)
            self.count("chunks_deleted", len(vanished))
        # Copies linked in earlier runs or by events read these chunks too.
        sync_copies(self, doc.canonical_doc_id)
        self.count("documents_indexed")


class WriteIndexes(beam.PTransform):
    """Write planned documents to both indexes and the catalog.

    Input: ``EmbeddedPlan``. Outputs: ``written`` (the ``DocumentPlan`` of
    each document now live), ``superseded`` (plans of event-driven work
    overtaken by a newer version or a delete: nothing written) and ``dead`` (a list of ``DeadLetter``
    PCollections, left unflattened: see ``transforms/chain.py``).
    """

    def __init__(
        self, settings: Settings, dim: int, *, total: int | ListingTally = 0, show_progress: bool = False
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.settings = settings
        self.dim = dim
        self.total = total
        self.show_progress = show_progress

    def expand(self, embedded: beam.PCollection) -> dict[str, Any]:
        batches = embedded | "BatchForWrite" >> beam.BatchElements(
            min_batch_size=WRITE_BATCH_CHUNKS,
            max_batch_size=WRITE_BATCH_CHUNKS,
            element_size_fn=_write_size,
        )
        out = batches | "Write" >> beam.ParDo(
            _WriteFn(self.settings, self.dim, self.total, self.show_progress)
        ).with_outputs("superseded", main="written").with_exception_handling(main_tag="written")
        return {
            "written": out["written"],
            "superseded": out["superseded"],
            "dead": [out["bad"] | "WriteDeadLetters" >> ToDeadLetters("write")],
        }


class _RecordDuplicateFn(CopiesDoFn):
    """FetchedDocument (exact copy) -> the same, once its catalog row links
    the canonical copy and the canonical copy's chunks carry the copy's
    groups too (``transforms.copies``).

    A document that held chunks of its own (it was edited into bytes another
    document already serves) first hands them to one of its own copies, if
    any is left, and then loses them.

    The holder may be deleted between the fetch that found it and this link
    (a delete of it in the same stream run): its delete then saw no copy to
    promote. The link is checked after it is recorded
    (``ragsync.decisions.copy_lost_its_holder``); a dangling one raises a
    retryable ``WriteError`` (counted as ``copies_relinked``), so the event
    runs again and the copy is processed on its own or linked to a live
    identity.
    """

    def process(self, doc: FetchedDocument) -> Iterator[FetchedDocument]:
        cat = self._catalog
        stored = cat.get_document(doc.doc_id)
        if stored is not None and (stored.canonical_doc_id or doc.doc_id) == doc.doc_id:
            retire_holder(self, doc.doc_id)
        cat.mark_duplicate(doc.doc_id, doc.canonical_doc_id, content_hash=doc.content_hash)
        sync_copies(self, doc.canonical_doc_id)
        row = cat.get_document(doc.doc_id)
        if row is not None:
            holder = cat.get_document(row.canonical_doc_id) if row.canonical_doc_id else None
            link = CopyLink(row.doc_id, row.status, row.canonical_doc_id, row.content_hash or "")
            held = (
                CopyIdentity(
                    holder.doc_id,
                    holder.acl_id or "",
                    holder.content_hash or "",
                    # A holder not written yet still serves its copies (its own write does).
                    holder.deleted_at is None and holder.status != "deleted",
                )
                if holder is not None
                else None
            )
            if copy_lost_its_holder(link, held):
                self.count("copies_relinked")
                raise WriteError(
                    f"{doc.doc_id} was linked as a copy of {row.canonical_doc_id}, which no longer "
                    "serves its bytes (deleted meanwhile): processed again"
                )
        yield doc


class RecordDuplicates(GuardedStep):
    """Input: ``FetchedDocument`` copies. Outputs: ``recorded`` (the same,
    once recorded) and ``dead`` (``DeadLetter``)."""

    fn = _RecordDuplicateFn
    label_, output, stage, dead_label = "RecordDuplicate", "recorded", "copies", "DuplicateDeadLetters"


class _DeadLetterSinkFn(CatalogDoFn):
    """DeadLetter -> a row in the dead-letter table (once per failure: a
    replay adds none); the document's status becomes ``dead_letter``.

    Work that came from an event and failed in a way that may pass later is
    not dead-lettered yet (``ragsync.decisions.failure_route``): the event
    goes back to the catalog's queue after an exponential backoff with
    jitter, until ``max_attempts`` deliveries failed. An event read from
    Pub/Sub or Kafka has no queue row (its message is acknowledged once the
    stream handled it): the row is written now from the failed work's
    payload (``Catalog.retry_event_later(replay=...)``), so the retry is
    durable and served with the queue's lanes and backoff. When no row can
    run it again (the event cannot be rebuilt, or its attempts are used up)
    it is a dead letter (``ragsync.decisions.retry_dead_letters``), never
    only a log line.
    """

    def __init__(self, settings: Settings, max_attempts: int) -> None:
        super().__init__(settings)
        self.max_attempts = max_attempts

    def process(self, dl: DeadLetter) -> Iterator[str]:
        route = failure_route(dl.event_id, is_retryable(dl.error_class), dl.attempts, self.max_attempts)
        if route == FailureRoute.RETRY:
            state = self._catalog.retry_event_later(
                (dl.tenant_id, dl.event_id),
                backoff_delay(dl.attempts),
                max_attempts=self.max_attempts,
                replay=replay_event(dl),
                attempts=dl.attempts,
            )
            if not retry_dead_letters(state):
                logging.getLogger("ragsync.retry").warning(
                    "event %s: %s failed (%s), queued for retry (attempt %d of %d): %s",
                    dl.event_id,
                    dl.stage,
                    dl.error_class,
                    dl.attempts,
                    self.max_attempts,
                    dl.message,
                )
                self.count("events_retried")
                return
        source_id = payload_field(dl.payload, "source_id")
        self._catalog.record_dead_letter(dl, source_id=source_id, parser_version=PARSER_VERSION)
        if dl.event_id:
            self._catalog.ack_events([(dl.tenant_id, dl.event_id)], "dead")
        self.count("dead_lettered")
        yield dl.error_class


def replay_event(dl: DeadLetter) -> Event | None:
    """The event behind a failed piece of work, to queue again.

    Input: a ``DeadLetter`` whose payload is any stage record of event work
    (the event row, a ``QueuedEvent``, a ``SourceFile`` or a
    ``FetchedDocument``). Output: the validated event with the dead letter's
    tenant, or None when the payload holds no event that still validates.
    Never raises.
    """
    from connectors.events import event_or_none
    from ragsync.catalog.dead_letters import event_of_payload

    data = event_of_payload(dl.payload)
    event = event_or_none(data) if data is not None else None
    if event is None or event.event_id != dl.event_id:
        return None
    return dataclasses.replace(event, tenant_id=dl.tenant_id or event.tenant_id)


class WriteDeadLetters(beam.PTransform):
    """Input: ``DeadLetter``. Output: error classes written (for counting).
    Retryable event failures are re-queued instead (see the sink's doc)."""

    def __init__(self, settings: Settings, *, max_attempts: int = 5) -> None:
        super().__init__()
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.settings = settings
        self.max_attempts = max_attempts

    def expand(self, dead: beam.PCollection) -> beam.PCollection:
        return dead | "WriteDeadLetter" >> beam.ParDo(_DeadLetterSinkFn(self.settings, self.max_attempts))
