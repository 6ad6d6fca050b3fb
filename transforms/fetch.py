"""Stage 4: fetch and hash; stop on unchanged content; link exact duplicates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import apache_beam as beam

from connectors.base import Connector
from connectors.location import source_location
from connectors.sources import connector_of
from ragsync import ids
from ragsync.catalog.documents import LIVE_STATUSES
from ragsync.config import Settings
from ragsync.decisions import (
    FetchAction,
    choose_canonical,
    choose_permissions,
    fetch_action,
)
from ragsync.errors import (
    ConfigurationError,
    EmptyDocumentError,
    NoPermissionsError,
    OutsideLocationError,
    TooLargeError,
)
from ragsync.index.service import IndexService
from ragsync.index.versions import live_spec
from ragsync.ingest.chunking import ChunkerConfig
from ragsync.model import FetchedDocument, SourceFile
from transforms.dead_letters import ToDeadLetters
from transforms.events import held_permissions, item_permissions
from transforms.io import BeamFileSystem, delete_if_exists, write_bytes_once
from transforms.steps import CatalogDoFn

#: The version domain of permission evidence read by a listing (compared by time only).
LISTING_EVIDENCE = "listing"

UNCHANGED = "unchanged"
ACL_ONLY = "acl_only"
DUPLICATE = "duplicate"
LEFT_COPY = "left_copy"


def fetch_decision(
    catalog: Any, stored: Any, *, content_hash: str, acl_id: str, parser_version: str, chunker_id: str
) -> FetchAction:
    """``fetch_action`` for one object the fetch step read, with what it
    needs from ``catalog``: the document's chunk rows (when indexed) and
    whether it is an exact copy linked to a holder that is live and holds
    the copy's bytes.

    Args:
        catalog: the catalog.
        stored: the document's row (``DocumentRow``) or None.
        content_hash, acl_id: of the bytes and permissions just read.
        parser_version, chunker_id: the current ones.

    Returns:
        The ``FetchAction``.
    """
    rows = (
        len(catalog.chunks.chunk_ids_for_doc(stored.doc_id))
        if stored is not None and stored.status == "indexed"
        else None
    )
    copy_of_live = False
    if stored is not None and stored.status == "duplicate" and stored.canonical_doc_id:
        holder = catalog.documents.get_document(stored.canonical_doc_id)
        copy_of_live = (
            holder is not None
            and holder.deleted_at is None
            and holder.status in LIVE_STATUSES
            and holder.content_hash == stored.content_hash
        )
    return fetch_action(
        stored,
        content_hash=content_hash,
        acl_id=acl_id,
        parser_version=parser_version,
        chunker_id=chunker_id,
        stored_chunk_rows=rows,
        copy_of_live=copy_of_live,
    )


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

    metrics_stage = "fetch"

    def setup(self) -> None:
        super().setup()
        self._connectors: dict[tuple[str, str], Connector] = {}
        self._service: IndexService | None = None
        self._domains: dict[tuple[str, str], str] = {}

    def _connector(self, item: SourceFile) -> Connector:
        """The connector of the item's source (cached per source)."""
        key = (item.tenant_id, item.source_id)
        if key not in self._connectors:
            self._open_connector(item, key)
        return self._connectors[key]

    def _domain(self, item: SourceFile) -> str:
        """The source's declared version domain ('' when undeclared)."""
        key = (item.tenant_id, item.source_id)
        if key not in self._domains:
            source = self._catalog.sources.get_source(item.source_id, tenant_id=item.tenant_id)
            self._domains[key] = source.version_domain if source is not None else ""
        return self._domains[key]

    def _open_connector(self, item: SourceFile, key: tuple[str, str]) -> None:
        source = self._catalog.sources.get_source(item.source_id, tenant_id=item.tenant_id)
        if source is None or source.tenant_id != item.tenant_id or not source.uri:
            raise OutsideLocationError(
                f"source {item.source_id!r} declares no location, so it takes no content_uri "
                "(register it with `ragsync sources add ... --uri ROOT`)"
            )
        try:
            source_location(source.uri, reserved=self.settings.reserved_locations)
        except ConfigurationError as exc:
            raise OutsideLocationError(f"source {item.source_id!r}: {exc}") from None
        self._connectors[key] = connector_of(source.spec(), self.settings, BeamFileSystem())

    def teardown(self) -> None:
        for connector in self._connectors.values():
            connector.close()
        self._connectors = {}
        if self._service is not None:
            self._service.close()
            self._service = None
        super().teardown()

    def process(self, item: SourceFile) -> Iterator[Any]:
        yield from self._stage.run(self._fetch, item)

    def _fetch(self, item: SourceFile) -> Iterator[Any]:
        self.count("documents_seen")
        doc_id = ids.doc_id(item.tenant_id, item.source_id, item.source_object_id)
        if not item.version_domain:
            item = replace(item, version_domain=self._domain(item))
        if not item.acl_groups:
            raise NoPermissionsError(
                f"permissions of {item.uri} could not be read: not indexed (fail closed)"
            )
        # Weighed against the evidence the catalog holds, the groups may come
        # out empty (an acl event said nobody may read it; two pieces of
        # evidence that do not order share no group): the permissions were
        # read, and the document gets an ACL no user holds, as an acl event
        # naming no groups gives it.
        item = self._permissions(doc_id, item)
        if item.size > self.settings.max_bytes:
            raise TooLargeError(f"{item.size} bytes is above the {self.settings.max_bytes}-byte limit")
        data = self._connector(item).fetch(item)
        if not data:
            raise EmptyDocumentError(f"{item.uri} has zero bytes")
        if len(data) > self.settings.max_bytes:
            raise TooLargeError(f"{len(data)} bytes is above the {self.settings.max_bytes}-byte limit")
        self.count("bytes_fetched", len(data))
        chash = ids.content_hash(data)
        raw_uri = self.settings.raw_uri(chash)
        write_bytes_once(raw_uri, data)
        acl = ids.acl_id(item.tenant_id, item.acl_groups, item.deny_groups)
        cat = self._catalog
        cat.acls.upsert_acl(acl, item.tenant_id, list(item.acl_groups), list(item.deny_groups))
        stored = cat.documents.get_document(doc_id)
        chunker_id = self.settings.chunker.config_id
        action = fetch_decision(
            cat,
            stored,
            content_hash=chash,
            acl_id=acl,
            parser_version=self.settings.parser_version,
            chunker_id=chunker_id,
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
            self.count("documents_unchanged")
            if stored is not None and (stored.source_version, stored.size) != (
                item.source_version,
                len(data),
            ):
                # Same bytes, new listing stamp (a touched file): the next listing skips it unread.
                cat.syncs.note_same_bytes(
                    doc_id, chash, item.source_version, size=len(data), observed_at=item.observed_at or None
                )
            yield beam.pvalue.TaggedOutput(UNCHANGED, doc)
            return
        if action == FetchAction.ACL_ONLY:
            # The document row keeps its old ACL id until every store holds
            # the new one, so a failed update is retried by the next run.
            yield beam.pvalue.TaggedOutput(ACL_ONLY, doc)
            return
        cat.documents.record_fetch(doc)
        if stored is not None and stored.status in LIVE_STATUSES and stored.acl_id != acl:
            # New bytes and new permissions: the permissions apply to the live
            # version now, whether or not the new bytes parse (here, before
            # this document's write can touch the same rows).
            self._index_service().apply_document_acl(doc_id, item.tenant_id, acl)
        was_copy = stored is not None and stored.status == "duplicate"
        if was_copy and stored.canonical_doc_id not in (None, doc_id):
            # A copy changed: its old holder's chunks lose its groups.
            yield beam.pvalue.TaggedOutput(LEFT_COPY, (str(stored.canonical_doc_id), doc))
        yield doc

    def _index_service(self) -> IndexService:
        """The writer of the indexes, opened on first use (only a document
        whose bytes and permissions both changed needs them here)."""
        if self._service is None:
            self._service = IndexService.open(
                self.settings, live_spec(self.settings).dim, count=self.count, remove_object=delete_if_exists
            )
        return self._service

    def _permissions(self, doc_id: str, item: SourceFile) -> SourceFile:
        """Weigh the item's permissions against the evidence the catalog holds
        (newest wins, a tie or unknown order takes the narrower set) and keep
        the winner as the new evidence when it is not the held one."""
        held = held_permissions(self._catalog, doc_id)
        new = item_permissions(item)
        chosen = choose_permissions(held, new)
        if chosen is held and held is not None:
            return replace(item, acl_groups=held.groups, deny_groups=held.deny)
        if held is None and (item.event_id or not chosen.observed_at):
            # An upsert's permissions are versioned apart from acl events;
            # configuration has no time to order an acl event against.
            return item
        # A listing's first timed evidence (a sidecar's mtime) is recorded
        # too: an acl event older than it is then stale at the gate, as on
        # every later run.
        acl = ids.acl_id(item.tenant_id, chosen.groups, chosen.deny)
        self._catalog.acls.upsert_acl(acl, item.tenant_id, list(chosen.groups), list(chosen.deny))
        # An upsert event's evidence carries its own version; a listing's is
        # only a time (a sidecar's mtime, the listing time), kept in a domain
        # of its own so an acl event is always ordered against it by time.
        version, domain = (
            (item.source_version, item.version_domain)
            if item.event_id
            else (f"{chosen.observed_at:.6f}", LISTING_EVIDENCE)
        )
        self._catalog.gate_state.set_acl_version(
            doc_id, item.tenant_id, version, acl, version_domain=domain, observed_at=chosen.observed_at
        )
        return replace(item, acl_groups=chosen.groups, deny_groups=chosen.deny)


class _LinkDuplicatesFn(CatalogDoFn):
    """(tenant|content_hash, [FetchedDocument]) -> the canonical copy to process
    (main) and the other copies (``duplicate``).

    The canonical copy carries every copy's ACL id, so one indexed set of
    chunks serves all copies and each reader sees it through their own copy's
    permissions.
    """

    def process(self, keyed: tuple[str, Iterable[FetchedDocument]]) -> Iterator[Any]:
        _, docs_iter = keyed
        docs = sorted(docs_iter, key=lambda d: d.doc_id)
        first = docs[0]
        indexed = self._catalog.documents.find_indexed_by_content(
            first.source.tenant_id, first.content_hash, ""
        )
        group_ids = [d.doc_id for d in docs]
        # The copy that holds the chunks keeps the role, in this run's group
        # or not: nothing is re-embedded and the others become its copies.
        indexed_id = indexed.doc_id if indexed is not None else None
        canonical = choose_canonical(group_ids, indexed_id)
        acl_ids = tuple(sorted({d.acl_id for d in docs}))
        for d in docs:
            if d.doc_id == canonical:
                others = tuple(a for a in acl_ids if a != d.acl_id)
                yield replace(d, shared_acl_ids=others)
            else:
                self.count("documents_duplicate")
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
      ``left_copy``: ``(holder doc id, FetchedDocument)``: an exact copy
      whose bytes changed, so its old holder's chunks lose its groups;
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
            UNCHANGED, ACL_ONLY, LEFT_COPY, main="fetched"
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
            LEFT_COPY: fetched[LEFT_COPY],
            "dead": fetched["bad"] | "FetchDeadLetters" >> ToDeadLetters("fetch"),
        }


class _StoredCopyFn(CatalogDoFn):
    """(tenant id, doc id) -> the document's ``FetchedDocument`` as the catalog
    holds its live version: its raw copy in the object store, its version,
    permissions and exact copies. Nothing is fetched from the source. A
    document that is no longer a live holder of that tenant (deleted, or
    become an exact copy since the work list was made) is skipped and counted
    ``documents_reindex_skipped``."""

    metrics_stage = "fetch"

    def process(self, item: tuple[str, str]) -> Iterator[FetchedDocument]:
        yield from self._stage.run(self._stored, item)

    def _stored(self, item: tuple[str, str]) -> Iterator[FetchedDocument]:
        tenant_id, doc_id = item
        cat = self._catalog
        row = cat.documents.get_document(doc_id, tenant_id=tenant_id)
        live = row is not None and row.status in LIVE_STATUSES and bool(row.indexed_version)
        if row is None or not live or row.canonical_doc_id not in (None, row.doc_id) or row.deleted_at:
            self.count("documents_reindex_skipped")
            return
        assert row.content_hash is not None  # a live version has its bytes
        acl = row.acl_id or ""
        source = SourceFile(
            tenant_id=row.tenant_id,
            source_id=row.source_id,
            source_object_id=row.source_object_id,
            uri=row.uri,
            size=row.size,
            acl_groups=tuple(cat.acls.get_acl_groups(acl) or ()),
            source_version=row.source_version or "",
            version_domain=row.version_domain or "",
            observed_at=row.version_observed_at or 0.0,
            deny_groups=tuple(cat.acls.get_acl_deny(acl)),
            stored_copy=True,
        )
        # The chunks carry every exact copy's ACL id too (as a run that links them gives).
        shared = sorted({d.acl_id for d in cat.copies.duplicates_of(doc_id) if d.acl_id} - {acl})
        yield FetchedDocument(
            doc_id=row.doc_id,
            source=source,
            content_hash=row.content_hash,
            raw_uri=self.settings.raw_uri(row.content_hash),
            size=row.size,
            acl_id=acl,
            canonical_doc_id=row.doc_id,
            mime=row.mime,
            shared_acl_ids=tuple(shared),
        )


class ReadStoredCopies(beam.PTransform):
    """The documents a parser or chunker backfill works on, read back from
    what ragsync stored of them (DESIGN §8: nothing is fetched again; the
    parse step re-reads the raw copy or the stored elements).

    Input: ``(tenant id, doc id)``. Outputs: ``docs`` (``FetchedDocument``
    with ``source.stored_copy`` set: the writer writes it only while the
    catalog holds that version) and ``dead`` (``DeadLetter``).
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def expand(self, items: beam.PCollection) -> dict[str, beam.PCollection]:
        read = items | "StoredCopy" >> beam.ParDo(_StoredCopyFn(self.settings)).with_exception_handling()
        return {"docs": read["good"], "dead": read["bad"] | "StoredCopyDeadLetters" >> ToDeadLetters("fetch")}
