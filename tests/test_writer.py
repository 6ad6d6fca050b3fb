"""``ragsync.index.service.IndexService`` without Beam, on the real embedded stores
(SQLite, Milvus Lite, tantivy): a batch written, a superseded plan skipped,
the hooks called at their points with their counts, a permission change;
and the tests' fault hooks (``tests/crash_hooks.py``) firing where they should."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragsync import ids
from ragsync.config import Settings
from ragsync.errors import ConfigurationError
from ragsync.index.hooks import WriteHooks, load_hooks
from ragsync.index.service import EmbeddedPlan, IndexService
from ragsync.model import DocumentPlan
from tests import crash_hooks
from tests.write_plans import DIM, empty_home, new_document


def _embedded(name: str, n_chunks: int, *, version: str = "1", event_id: str = "") -> EmbeddedPlan:
    """A new document ``name`` of ``n_chunks`` new chunks readable by ACL ``acl``."""
    return new_document(name, n_chunks, version=version, event_id=event_id)


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return empty_home(tmp_path)


class _Calls:
    """Hooks that record their calls: ``(hook, n, doc name or None)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str | None]] = []

    def hooks(self, *, refuse: str = "") -> WriteHooks:
        """... refusing the flip of the document named ``refuse``."""

        def before(n: int, plan: DocumentPlan) -> None:
            name = plan.doc.source.source_object_id
            self.calls.append(("before_flip", n, name))
            if name == refuse:
                raise RuntimeError(f"hook refused flip {n} of {name}")

        return WriteHooks(
            after_index_writes=lambda n: self.calls.append(("after_index_writes", n, None)),
            before_flip=before,
            after_flip=lambda n, plan: self.calls.append(("after_flip", n, plan.doc.source.source_object_id)),
        )


@pytest.fixture()
def writer_of(settings: Settings) -> Iterator[Any]:
    opened: list[IndexService] = []

    def make(hooks: WriteHooks | None = None) -> IndexService:
        writer = IndexService.open(settings, DIM, hooks=hooks)
        opened.append(writer)
        return writer

    yield make
    for writer in opened:
        writer.close()


def _fetched(writer: IndexService, plans: list[EmbeddedPlan]) -> None:
    """Record the plans' documents as fetched (what the fetch stage does)."""
    for e in plans:
        writer.catalog.documents.record_fetch(e.plan.doc)


def test_a_batch_is_written_to_both_indexes_and_flipped(writer_of: Any) -> None:
    writer = writer_of()
    plans = [_embedded("a", 2), _embedded("b", 3)]
    _fetched(writer, plans)
    outcome = writer.write_batch(plans)
    assert (outcome.written, outcome.superseded, outcome.failed) == (plans, [], [])
    every = {c.chunk_id for e in plans for c in e.plan.chunks}
    assert len(every) == 5
    assert set(writer.vectors.chunk_ids()) == set(writer.keywords.chunk_ids()) == every
    for e in plans:
        row = writer.catalog.documents.get_document(e.plan.doc.doc_id)
        assert (row.status, row.indexed_version, row.chunk_count) == ("indexed", "1", len(e.plan.chunks))
        assert writer.catalog.chunks.chunk_ids_for_doc(e.plan.doc.doc_id) == set(e.plan.new_ids)
    assert writer.catalog.chunks.pending_chunk_ids("t") == set()
    assert dict(writer.counts) == {"chunks_written": 5, "documents_indexed": 2}


def test_a_plan_older_than_a_tombstone_is_superseded_and_nothing_is_written(writer_of: Any) -> None:
    writer = writer_of()
    old = _embedded("gone", 2, version="3", event_id="e-3")
    live = _embedded("kept", 1, version="1", event_id="e-1")
    _fetched(writer, [old, live])
    writer.catalog.gate_state.put_tombstone(old.plan.doc.doc_id, "t", "5")  # deleted at version 5
    outcome = writer.write_batch([old, live])
    assert outcome.superseded == [old.plan]
    assert (outcome.written, outcome.failed) == ([live], [])
    assert set(writer.vectors.chunk_ids()) == set(writer.keywords.chunk_ids()) == set(live.plan.new_ids)
    assert writer.catalog.chunks.chunk_ids_for_doc(old.plan.doc.doc_id) == set()
    assert dict(writer.counts) == {"events_stale": 1, "chunks_written": 1, "documents_indexed": 1}


def _from_stored_copy(e: EmbeddedPlan) -> EmbeddedPlan:
    """``e`` as a parser or chunker backfill makes it: re-read from the stored copy."""
    doc = e.plan.doc
    source = dataclasses.replace(doc.source, event_id="", stored_copy=True)
    return EmbeddedPlan(dataclasses.replace(e.plan, doc=dataclasses.replace(doc, source=source)), e.vectors)


def test_work_re_read_from_a_stored_copy_never_writes_back_a_version_a_newer_one_replaced(
    writer_of: Any,
) -> None:
    """A parser or chunker backfill read version 3; an event wrote version 5
    meanwhile: the backfill's plan is superseded (as an event's would be), not
    written over it. A plan of the live version is written."""
    writer = writer_of()
    old = _embedded("doc", 2, version="3", event_id="e-3")
    _fetched(writer, [old])
    assert writer.write_batch([old]).written == [old]
    newer = _embedded("doc", 1, version="5", event_id="e-5")
    _fetched(writer, [newer])
    assert writer.write_batch([newer]).written == [newer]
    reread = _from_stored_copy(old)
    outcome = writer.write_batch([reread])
    assert (outcome.superseded, outcome.written) == ([reread.plan], [])
    assert writer.catalog.documents.get_document(old.plan.doc.doc_id).source_version == "5"
    assert writer.counts["events_stale"] == 1
    live = _from_stored_copy(newer)
    assert writer.write_batch([live]).written == [live]


def test_hooks_are_called_at_their_points_with_running_counts(writer_of: Any) -> None:
    calls = _Calls()
    writer = writer_of(calls.hooks())
    first = [_embedded("a", 1), _embedded("b", 2), _embedded("c", 1)]
    second = [_embedded("d", 1)]
    _fetched(writer, first + second)
    writer.write_batch(first)
    writer.write_batch(second)
    assert calls.calls == [
        # the batch's index upsert first, one call per document, then each document's flip
        ("after_index_writes", 1, None),
        ("after_index_writes", 2, None),
        ("after_index_writes", 3, None),
        ("before_flip", 1, "a"),
        ("after_flip", 1, "a"),
        ("before_flip", 2, "b"),
        ("after_flip", 2, "b"),
        ("before_flip", 3, "c"),
        ("after_flip", 3, "c"),
        # the counts run on across batches of one writer
        ("after_index_writes", 4, None),
        ("before_flip", 4, "d"),
        ("after_flip", 4, "d"),
    ]


def test_a_hook_that_raises_fails_its_document_alone_before_the_flip(writer_of: Any) -> None:
    calls = _Calls()
    writer = writer_of(calls.hooks(refuse="b"))
    plans = [_embedded("a", 1), _embedded("b", 2), _embedded("c", 1)]
    _fetched(writer, plans)
    outcome = writer.write_batch(plans)
    assert outcome.written == [plans[0], plans[2]]
    assert [(item, str(exc)) for item, exc in outcome.failed] == [(plans[1], "hook refused flip 2 of b")]
    # b's chunks are indexed and its rows pending (unseen by queries), its version not flipped.
    b = plans[1].plan
    assert writer.catalog.chunks.pending_chunk_ids("t") == set(b.new_ids)
    assert writer.catalog.documents.get_document(b.doc.doc_id).status == "fetched"
    # The failed flip is not counted: the next document's flip is number 2 again.
    assert [c for c in calls.calls if c[0] != "after_index_writes"] == [
        ("before_flip", 1, "a"),
        ("after_flip", 1, "a"),
        ("before_flip", 2, "b"),
        ("before_flip", 2, "c"),
        ("after_flip", 2, "c"),
    ]


def test_apply_document_acl_moves_the_chunks_to_the_new_acl(writer_of: Any) -> None:
    writer = writer_of()
    plan = _embedded("a", 3)
    _fetched(writer, [plan])
    writer.write_batch([plan])
    writer.catalog.acls.upsert_acl("acl-hr", "t", ["hr"])
    assert writer.apply_document_acl(plan.plan.doc.doc_id, "t", "acl-hr") == 3
    assert writer.catalog.documents.get_document(plan.plan.doc.doc_id).acl_id == "acl-hr"
    stored = writer.catalog.chunks.chunks_for_doc(plan.plan.doc.doc_id)
    assert [c.acl_ids for c in stored] == [("acl-hr",)] * 3
    assert writer.apply_document_acl(ids.doc_id("t", "s", "unknown"), "t", "acl-hr") == 0


def test_load_hooks_names_a_factory_or_fails_with_a_configuration_error() -> None:
    assert load_hooks("") == WriteHooks()
    assert isinstance(load_hooks(crash_hooks.FACTORY), WriteHooks)
    for bad in ("tests.crash_hooks", "tests.no_such_module:from_env", "tests.crash_hooks:nope"):
        with pytest.raises(ConfigurationError, match="RAGSYNC_WRITE_HOOKS"):
            load_hooks(bad)
    with pytest.raises(ConfigurationError, match="not WriteHooks"):
        load_hooks("tests.crash_hooks:crash_env")  # a dict


def test_crash_hooks_fire_at_the_counts_their_variables_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops: list[tuple[signal.Signals, str]] = []
    monkeypatch.setattr(crash_hooks, "_stop", lambda signum, why, group=False: stops.append((signum, why)))
    marker = tmp_path / "once"
    environ = {"RAGSYNC_CRASH_AFTER_INDEX_WRITES": "2:SIGTERM", "RAGSYNC_CRASH_ONCE": str(marker)}
    hooks = crash_hooks.hooks_for(environ)
    hooks.after_index_writes(1)
    assert stops == [] and not marker.exists()
    hooks.after_index_writes(2)
    assert stops == [(signal.SIGTERM, "")] and marker.exists()
    crash_hooks.hooks_for(environ).after_index_writes(2)  # another process: the marker exists
    assert stops == [(signal.SIGTERM, "")]

    stops.clear()
    plan = _embedded("a", 1).plan
    vanishing = dataclasses.replace(_embedded("b", 1).plan, vanished_ids=("old-chunk",))
    flips = crash_hooks.hooks_for({"RAGSYNC_CRASH_BEFORE_FLIPS": "2", "RAGSYNC_CRASH_AFTER_FLIPS": "1"})
    flips.before_flip(1, plan)
    assert stops == []
    flips.before_flip(2, plan)
    assert stops == [(signal.SIGKILL, " before the flip")]
    stops.clear()
    flips.after_flip(1, plan)  # nothing vanished: nothing to crash before
    assert stops == []
    flips.after_flip(1, vanishing)
    assert stops == [(signal.SIGKILL, " after the flip")]

    stops.clear()
    quiet = crash_hooks.hooks_for({})
    quiet.after_index_writes(1)
    quiet.before_flip(1, vanishing)
    quiet.after_flip(1, vanishing)
    assert stops == []
