"""Stages 5-6: detect the type from content, route to a lane, parse in isolation."""

from __future__ import annotations

import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import apache_beam as beam

from ragsync.config import Settings
from ragsync.errors import FetchError
from ragsync.ingest.children import expand_children, stale_children
from ragsync.model import Attachment, Element, FetchedDocument, Lane, ParsedDocument
from ragsync.ops import lifecycle
from ragsync.parsing import is_container, parse, route
from transforms import beam_compat  # noqa: F401 - the parse child's teardown without a fixed sleep
from transforms.dead_letters import ToDeadLetters
from transforms.io import read_bytes, write_bytes_once
from transforms.metrics import StageMetrics, counter
from transforms.steps import CatalogDoFn


def start_parse_children_from_a_fork_server() -> None:
    """Make this process start its isolated parse children from a fork server.

    Beam's ``with_exception_handling(use_subprocess=True)`` starts a parse
    child with ``concurrent.futures.ProcessPoolExecutor``, that is with
    multiprocessing's default start method: ``fork`` on Linux. A pipeline
    process is multi-threaded (runner threads, the embedding runtime's thread
    pool, store clients), and a child forked while another thread held a lock
    can block forever in its first steps, where Beam applies no timeout (the
    pool's set-up call has none): the stream then waits on the child for
    good. A forked child also inherits every open file, index locks included.
    A fork server is a fresh single-threaded interpreter that imports the
    parsers once (``set_forkserver_preload``) and forks each child from
    itself: no inherited locks, threads or files, and a child still starts in
    milliseconds (``transforms.fork_server`` also ties the server's and its
    children's lifetime to this process). Runs at import of this module, so it holds in every process
    that can run ``ParseDocuments`` (the launcher, the local runner and remote
    workers, which import this module to unpickle the step). A start method
    chosen explicitly other than ``fork`` is left alone; no-op where fork
    servers do not exist.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - not POSIX
        return
    if multiprocessing.get_start_method(allow_none=True) in (None, "fork"):
        multiprocessing.set_start_method("forkserver", force=True)
        multiprocessing.set_forkserver_preload(["transforms.fork_server"])


def warm_up_fork_server() -> None:
    """Start the fork server in the background (it imports the parsers, about
    as long as this module's own import), so the first document to parse does
    not wait for it. Returns at once; errors surface at the first parse."""
    if multiprocessing.get_start_method(allow_none=True) != "forkserver":
        return
    from multiprocessing import forkserver

    threading.Thread(target=forkserver.ensure_running, name="ragsync-forkserver-start", daemon=True).start()


start_parse_children_from_a_fork_server()


class _DetectFn(beam.DoFn):
    """FetchedDocument -> (the same with ``mime`` and ``lane``, CPU s, wall s),
    run in an isolated child under the parse child's limits: PDFium's look
    for scanned pages decodes the document's streams, and no untrusted bytes
    are decoded in the pipeline process (``ragsync.parsing.route``). Beam
    metrics do not leave the child: ``_LaneFn`` records them in the parent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def setup(self) -> None:
        lifecycle.bound_this_process(self.settings.parse_memory_mb)

    def process(self, doc: FetchedDocument) -> Iterator[tuple[FetchedDocument, float, float]]:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        data = read_bytes(doc.raw_uri)
        name = os.path.basename(doc.source.source_object_id)
        mime, lane = route(data, name, self.settings.archive_limits())
        yield replace(doc, mime=mime, lane=lane), time.process_time() - cpu0, time.perf_counter() - wall0


class _LaneFn(beam.DoFn):
    """(FetchedDocument, CPU s, wall s) -> the document, tagged by lane;
    records the detect stage's metrics and the lane counters."""

    def setup(self) -> None:
        self._stage = StageMetrics("detect")
        warm_up_fork_server()  # the parse step comes next

    def process(self, item: tuple[FetchedDocument, float, float]) -> Iterator[Any]:
        doc, cpu_s, wall_s = item
        self._stage.record(elements=1, cpu_s=cpu_s, wall_s=wall_s)
        if doc.lane == Lane.SLOW.value:
            counter("lane_slow").inc()
            yield beam.pvalue.TaggedOutput(Lane.SLOW.value, doc)
        else:
            counter("lane_fast").inc()
            yield doc


class RouteByType(beam.PTransform):
    """Detect each document's type from its bytes and split by lane.

    Detection runs in an isolated child process with the parse child's
    memory limit and the fast lane's time limit: a document that exhausts
    either (a decompression bomb, a hang) is a dead letter (``crash``,
    ``timeout``), and a PDF whose streams decode past the expansion limits
    one of class ``archive_bomb``, before anything is parsed.

    Input: ``FetchedDocument``. Outputs: ``fast`` and ``slow``
    (``FetchedDocument`` with ``mime``/``lane`` set) and ``dead``
    (``DeadLetter``).
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        detected = docs | "Detect" >> beam.ParDo(_DetectFn(self.settings)).with_exception_handling(
            use_subprocess=True, timeout=self.settings.parse_timeout_s
        )
        routed = detected["good"] | "Route" >> beam.ParDo(_LaneFn()).with_outputs(
            Lane.SLOW.value, main=Lane.FAST.value
        )
        return {
            Lane.FAST.value: routed[Lane.FAST.value],
            Lane.SLOW.value: routed[Lane.SLOW.value],
            "dead": detected["bad"] | "DetectDeadLetters" >> ToDeadLetters("detect"),
        }


def _read_elements(uri: str) -> tuple[Element, ...]:
    return tuple(Element.from_json(line) for line in read_bytes(uri).decode("utf-8").splitlines() if line)


#: ParseDocuments' output of child documents that failed: Beam-style failure records.
CHILD_DEAD = "child_dead"
#: ParseDocuments' output of children an edit of their parent left behind (``SourceFile``).
STALE_CHILDREN = "stale_children"


class _ParseFn(CatalogDoFn):
    """FetchedDocument -> ParsedDocument, run in a child process.

    Elements are stored once per (content hash, parser version): a document
    whose bytes were parsed before is read back, not parsed again (except
    e-mails and archives, whose attachments are not stored). Failure:
    raises the parser's ``RagsyncError``; a hang or crash of the child process
    is reported by Beam's wrapper as TimeoutError/BrokenProcessPool.

    Attachments and archive members become child documents
    (``ragsync.ingest.children``): each is recorded in the catalog under its parent
    and emitted as a ``ParsedDocument`` of its own; a child that fails is
    emitted on ``CHILD_DEAD``; children the parent no longer has go to
    ``STALE_CHILDREN``. A parent whose children cross the archive limits
    raises ``ArchiveBombError`` before anything is emitted.
    """

    def setup(self) -> None:
        # Runs inside the isolated child (``lifecycle.bound_this_process``).
        lifecycle.bound_this_process(self.settings.parse_memory_mb)
        super().setup()

    def process(self, doc: FetchedDocument) -> Iterator[Any]:
        if self._catalog is None:
            # Beam's subprocess wrapper keeps a DoFn whose setup() raised (the
            # catalog was unreachable) and sends it the next elements without
            # calling setup() again: open the catalog now, so that each element
            # fails with the real cause until the catalog is back, then parses.
            CatalogDoFn.setup(self)
        # Beam metrics do not leave the isolated child process: the parse
        # reports its own CPU and wall time on the record, and
        # ``_CountParsedFn`` in the parent records them.
        wall0, usage0 = time.perf_counter(), _cpu_s()
        for parsed in self._parse(doc):
            if isinstance(parsed, ParsedDocument):
                parsed = replace(parsed, cpu_s=_cpu_s() - usage0, wall_s=time.perf_counter() - wall0)
            yield parsed

    def _parse(self, doc: FetchedDocument) -> Iterator[Any]:
        cat = self._catalog
        version = self.settings.parser_version
        stored = None if is_container(doc.mime) else cat.parsed.get_parsed(doc.content_hash, version)
        if stored is not None:
            try:
                elements = _read_elements(stored.elements_uri)
            except (OSError, FetchError):
                # The catalog remembers a parse whose stored elements are gone
                # (a delete of the last document with these bytes removed
                # them, and the file was then re-created with the same
                # bytes): parse the bytes again.
                stored = None
        if stored is not None:
            yield ParsedDocument(
                doc=doc,
                parser_version=version,
                elements=elements,
                pages=stored.pages or 0,
                pages_for_review=tuple(stored.pages_for_review or ()),
                # The identity line of every chunk reads it: as a fresh parse's.
                metadata=dict(stored.doc_metadata),
            )
            yield from self._children(doc, ())
            return
        data = read_bytes(doc.raw_uri)
        result = parse(
            data,
            doc.mime,
            filename=os.path.basename(doc.source.source_object_id),
            max_bytes=self.settings.max_bytes,
            max_pages=self.settings.max_pages,
            limits=self.settings.archive_limits(),
            ocr_languages=self.settings.ocr_languages,
        )
        children = list(self._children(doc, result.attachments))  # raises before any output
        uri = self.settings.parsed_uri(doc.content_hash, version)
        body = "\n".join(e.to_json() for e in result.elements).encode("utf-8")
        write_bytes_once(uri, body)
        metadata = {k: str(v) for k, v in result.metadata.items()}
        cat.parsed.put_parsed(
            doc.content_hash,
            version,
            uri,
            result.pages,
            list(result.pages_for_review),
            result.ocr_confidence,
            metadata,
        )
        yield ParsedDocument(
            doc=doc,
            parser_version=version,
            elements=result.elements,
            pages=result.pages,
            pages_for_review=result.pages_for_review,
            metadata=metadata,
        )
        yield from children

    def _children(self, doc: FetchedDocument, attachments: tuple[Attachment, ...]) -> Iterator[Any]:
        """The child documents of ``doc`` (parsed, or failed) and the stale ones."""
        cat, s = self._catalog, self.settings
        old: list[str] = []
        pending = [doc.doc_id]
        while pending:  # every descendant the catalog holds
            kids = [c.doc_id for c in cat.documents.children_of(pending.pop())]
            old += kids
            pending += kids
        children = expand_children(
            doc,
            attachments,
            raw_uri=s.raw_uri,
            limits=s.archive_limits(),
            max_bytes=s.max_bytes,
            max_pages=s.max_pages,
            ocr_languages=s.ocr_languages,
        )
        for child in children:
            write_bytes_once(child.doc.raw_uri, child.data)
            cat.documents.record_fetch(child.doc, parent_doc_id=child.parent_doc_id)
            if child.error is not None:
                err = child.error
                yield beam.pvalue.TaggedOutput(CHILD_DEAD, (child.doc, (type(err), repr(err), [])))
                continue
            assert child.result is not None
            yield ParsedDocument(
                doc=child.doc,
                parser_version=s.parser_version,
                elements=child.result.elements,
                pages=child.result.pages,
                pages_for_review=child.result.pages_for_review,
                metadata={
                    **{k: str(v) for k, v in child.result.metadata.items()},
                    "parent_doc_id": child.parent_doc_id,
                },
            )
        rows = {r.doc_id: r for r in (cat.documents.get_document(i) for i in old) if r is not None}
        for stale in stale_children(old, [c.doc.doc_id for c in children]):
            row = rows[stale]
            yield beam.pvalue.TaggedOutput(
                STALE_CHILDREN,
                replace(doc.source, source_object_id=row.source_object_id, uri=row.uri, event_id=""),
            )


class ParseDocuments(beam.PTransform):
    """Parse documents of one lane, each in an isolated child process with a
    time and memory limit.

    Input: ``FetchedDocument``. Outputs: ``parsed`` (``ParsedDocument``,
    child documents included), ``stale_children`` (``SourceFile`` of each
    child an edited parent no longer has, to delete) and ``dead`` (a list of
    ``DeadLetter`` PCollections: corrupt, encrypted, unsupported, no text,
    timeout, crash, ...; a failed child's own).
    """

    def __init__(self, settings: Settings, lane: str) -> None:
        super().__init__()
        if lane not in (Lane.FAST.value, Lane.SLOW.value):
            raise ValueError(f"unknown lane {lane!r}")
        self.settings = settings
        self.lane = lane

    def expand(self, docs: beam.PCollection) -> dict[str, beam.PCollection]:
        timeout = self.settings.parse_timeout_s
        if self.lane == Lane.SLOW.value:
            timeout = self.settings.slow_parse_timeout_s
        parsed = docs | "Parse" >> beam.ParDo(_ParseFn(self.settings)).with_outputs(
            CHILD_DEAD, STALE_CHILDREN, main="good"
        ).with_exception_handling(main_tag="good", use_subprocess=True, timeout=timeout)
        return {
            "parsed": parsed["good"] | "CountParsed" >> beam.ParDo(_CountParsedFn()),
            STALE_CHILDREN: parsed[STALE_CHILDREN],
            "dead": [
                parsed["bad"] | "ParseDeadLetters" >> ToDeadLetters("parse"),
                parsed[CHILD_DEAD] | "ChildDeadLetters" >> ToDeadLetters("parse"),
            ],
        }


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (Tesseract runs as one)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class _CountParsedFn(beam.DoFn):
    """ParsedDocument -> itself, recording the parse stage's metrics from the
    CPU and wall time the child measured."""

    def setup(self) -> None:
        self._stage = StageMetrics("parse")

    def process(self, parsed: ParsedDocument) -> Iterator[ParsedDocument]:
        self._stage.record(elements=1, cpu_s=parsed.cpu_s, wall_s=parsed.wall_s)
        yield parsed
