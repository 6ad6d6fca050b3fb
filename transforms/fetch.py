"""Stage 4: fetch and hash; stop on unchanged content; link exact duplicates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import apache_beam as beam

from connectors.base import Connector, SourceSpec
from connectors.location import source_location
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync import ids
from ragsync.chunking import ChunkerConfig
from ragsync.config import Settings
from ragsync.decisions import FetchAction, choose_canonical, fetch_action
from ragsync.errors import (
    ConfigurationError,
    EmptyDocumentError,
    NoPermissionsError,
    OutsideLocationError,
    TooLargeError,
)
from ragsync.model import FetchedDocument, SourceFile
from ragsync.parsing import PARSER_VERSION
from transforms.common import CatalogDoFn, StageMetrics, ToDeadLetters, counter
from transforms.io import BeamFileSystem, write_bytes_once

UNCHANGED = "unchanged"
ACL_ONLY = "acl_only"
DUPLICATE = "duplicate"


class _FetchFn(CatalogDoFn):
    """SourceFile -> FetchedDocument: to process (main), ``unchanged`` or ``acl_only``.

    Raises a ``RagsyncError`` for permanent problems (no permissions, empty,
    too large, an address outside the source's location) so the wrapper turns
    them into dead letters. Bytes are read only through the source's
    connector (``connectors.registry``), opened from what the catalog holds
    for the source (never from what the work item names): a folder or prefix
    through its ``ContentReader``, an API source through its located HTTP
    client, both under the location and within the byte and time limits.
    """

    def setup(self) -> None:
        super().setup()
        self._seen = counter("documents_seen")
        self._unchanged = counter("documents_unchanged")
        self._bytes = counter("bytes_fetched")
        self._stage = StageMetrics("fetch")
        self._connectors: dict[tuple[str, str], Connector] = {}

    def _connector(self, item: SourceFile) -> Connector:
        """The connector of the item's source (cached per source)."""
        key = (item.tenant_id, item.source_id)
        if key not in self._connectors:
            source = self._catalog.source_state(item.source_id, item.tenant_id)
            if source is None or source.tenant_id != item.tenant_id or not source.uri:
                raise OutsideLocationError(
                    f"source {item.source_id!r} declares no location, so it takes no content_uri "
                    "(register it with `ragsync sources add ... --uri ROOT`)"
                )
            try:
                source_location(source.uri, reserved=self.settings.reserved_locations)
            except ConfigurationError as exc:
                raise OutsideLocationError(f"source {item.source_id!r}: {exc}") from None
            limits = FetchLimits(max_bytes=self.settings.max_bytes, timeout_s=self.settings.fetch_timeout_s)
            spec = SourceSpec.from_row(source.__dict__)
            self._connectors[key] = open_connector(spec, fs=BeamFileSystem(), limits=limits)
        return self._connectors[key]

    def teardown(self) -> None:
        for connector in self._connectors.values():
            connector.close()
        self._connectors = {}
        super().teardown()

    def process(self, item: SourceFile) -> Iterator[Any]:
        yield from self._stage.run(self._fetch, item)

    def _fetch(self, item: SourceFile) -> Iterator[Any]:
        self._seen.inc()
        if not item.acl_groups:
            raise NoPermissionsError(
                f"permissions of {item.uri} could not be read: not indexed (fail closed)"
            )
        if item.size > self.settings.max_bytes:
            raise TooLargeError(f"{item.size} bytes is above the {self.settings.max_bytes}-byte limit")
        data = self._connector(item).fetch(item)
        if not data:
            raise EmptyDocumentError(f"{item.uri} has zero bytes")
        if len(data) > self.settings.max_bytes:
            raise TooLargeError(f"{len(data)} bytes is above the {self.settings.max_bytes}-byte limit")
        self._bytes.inc(len(data))
        chash = ids.content_hash(data)
        raw_uri = self.settings.raw_uri(chash)
        write_bytes_once(raw_uri, data)
        doc_id = ids.doc_id(item.tenant_id, item.source_id, item.source_object_id)
        acl = ids.acl_id(item.tenant_id, item.acl_groups)
        cat = self._catalog
        cat.upsert_acl(acl, item.tenant_id, list(item.acl_groups))
        stored = cat.get_document(doc_id)
        chunker_id = self.settings.chunker.config_id
        rows = (
            len(cat.chunk_ids_for_doc(doc_id)) if stored is not None and stored.status == "indexed" else None
        )
        action = fetch_action(
            stored,
            content_hash=chash,
            acl_id=acl,
            parser_version=PARSER_VERSION,
            chunker_id=chunker_id,
            stored_chunk_rows=rows,
        )
        doc = FetchedDocument(
            doc_id=doc_id,
            source=item,
            content_hash=chash,
            raw_uri=raw_uri,
            size=len(data),
            acl_id=acl,
            canonical_doc_id=doc_id,
        )
        if action == FetchAction.UNCHANGED:
            self._unchanged.inc()
            yield beam.pvalue.TaggedOutput(UNCHANGED, doc)
            return
        if action == FetchAction.ACL_ONLY:
            # The document row keeps its old ACL id until every store holds
            # the new one, so a failed update is retried by the next run.
            yield beam.pvalue.TaggedOutput(ACL_ONLY, doc)
            return
        cat.record_fetch(doc)
        yield doc


class _LinkDuplicatesFn(CatalogDoFn):
    """(tenant|content_hash, [FetchedDocument]) -> the canonical copy to process
    (main) and the other copies (``duplicate``).

    The canonical copy carries every copy's ACL id, so one indexed set of
    chunks serves all copies and each reader sees it through their own copy's
    permissions.
    """

    def setup(self) -> None:
        super().setup()
        self._dups = counter("documents_duplicate")

    def process(self, keyed: tuple[str, Iterable[FetchedDocument]]) -> Iterator[Any]:
        _, docs_iter = keyed
        docs = sorted(docs_iter, key=lambda d: d.doc_id)
        first = docs[0]
        indexed = self._catalog.find_indexed_by_content(first.source.tenant_id, first.content_hash, "")
        group_ids = [d.doc_id for d in docs]
        indexed_id = indexed.doc_id if indexed is not None and indexed.doc_id not in group_ids else None
        canonical = choose_canonical(group_ids, indexed_id)
        acl_ids = tuple(sorted({d.acl_id for d in docs}))
        for d in docs:
            if d.doc_id == canonical:
                others = tuple(a for a in acl_ids if a != d.acl_id)
                yield replace(d, shared_acl_ids=others)
            else:
                self._dups.inc()
                yield beam.pvalue.TaggedOutput(DUPLICATE, replace(d, canonical_doc_id=canonical))


class FetchDocuments(beam.PTransform):
    """Fetch, hash and copy each listed file; decide what needs work.

    Input: ``SourceFile``. ``group_duplicates`` links exact copies that
    arrive in the same bounded run (a GroupByKey); streaming turns it off.
    Outputs (a dict of PCollections):
      ``process``: ``FetchedDocument`` canonical copies to parse and index;
      ``duplicate``: ``FetchedDocument`` exact copies of another document
      (``canonical_doc_id`` names it);
      ``acl_only``: ``FetchedDocument`` with unchanged bytes but new permissions;
      ``unchanged``: ``FetchedDocument`` that need nothing;
      ``dead``: ``DeadLetter`` (no permissions, empty, too large, unreadable).
    """

    def __init__(self, settings: Settings, *, group_duplicates: bool = True) -> None:
        super().__init__()
        if not isinstance(settings.chunker, ChunkerConfig):
            raise TypeError("settings.chunker must be a ChunkerConfig")
        self.settings = settings
        self.group_duplicates = group_duplicates

    def expand(self, files: beam.PCollection) -> dict[str, beam.PCollection]:
        fetched = files | "Fetch" >> beam.ParDo(_FetchFn(self.settings)).with_outputs(
            UNCHANGED, ACL_ONLY, main="fetched"
        ).with_exception_handling(main_tag="fetched")
        keyed = fetched["fetched"] | "KeyByContent" >> beam.Map(
            lambda d: (f"{d.source.tenant_id}|{d.content_hash}", d)
        )
        if self.group_duplicates:
            # Bounded input: copies found in the same run are linked too.
            grouped = keyed | "GroupByContent" >> beam.GroupByKey()
        else:
            # Unbounded input: each document is linked against the catalog
            # alone (no GroupByKey, which would need a window and a trigger).
            grouped = keyed | "AsGroupOfOne" >> beam.Map(lambda kv: (kv[0], [kv[1]]))
        linked = grouped | "LinkDuplicates" >> beam.ParDo(_LinkDuplicatesFn(self.settings)).with_outputs(
            DUPLICATE, main="process"
        )
        return {
            "process": linked["process"],
            DUPLICATE: linked[DUPLICATE],
            ACL_ONLY: fetched[ACL_ONLY],
            UNCHANGED: fetched[UNCHANGED],
            "dead": fetched["bad"] | "FetchDeadLetters" >> ToDeadLetters("fetch"),
        }
