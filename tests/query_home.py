"""A tiny ragsync home for query tests and the query benchmark: documents
written straight into the catalog, Milvus Lite and tantivy (the rows the
pipeline's write step makes: an ACL row, a fetched-then-flipped document,
one chunk per document in all three stores), without running a pipeline (a
backfill takes ~25 s here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragsync import ids
from ragsync.catalog import FetchRecord, make_indexed_version
from ragsync.model import Chunk

CHUNKER = "chunker-test"
PARSER = "parser-test"


@dataclass(frozen=True)
class Doc:
    """One document of one chunk."""

    tenant: str
    source: str
    object_id: str
    text: str
    groups: tuple[str, ...]
    deny: tuple[str, ...] = ()
    mime: str = "text/plain"
    mtime: float = 1_700_000_000.0
    uri: str = ""
    parent: str | None = None  # the parent's object id (same tenant and source)

    @property
    def doc_id(self) -> str:
        return ids.doc_id(self.tenant, self.source, self.object_id)

    @property
    def acl_id(self) -> str:
        return ids.acl_id(self.tenant, self.groups, self.deny)


@dataclass
class QueryHome:
    """A home with its stores prepared; ``write`` adds documents."""

    home: Path
    settings: Any = field(init=False)
    chunk_ids: dict[str, str] = field(default_factory=dict)  # doc_id -> chunk id

    def __post_init__(self) -> None:
        from ragsync.config import Settings
        from ragsync.embedding.models import default_model
        from ragsync.index.versions import prepare_stores

        self.settings = Settings(home=str(self.home))
        prepare_stores(self.settings, default_model())

    def embedder(self) -> Callable[[Sequence[str]], list[list[float]]]:
        """The live index's model, as the query path embeds with it."""
        from ragsync.embedding.models import model_for
        from ragsync.index.versions import live_spec

        model = model_for(live_spec(self.settings))
        return lambda texts: [[float(x) for x in v] for v in model.encode_passages(list(texts))]

    def write(
        self,
        docs: Sequence[Doc],
        vectors: Sequence[Sequence[float]] | None = None,
        batch: int = 2000,
    ) -> None:
        """Write ``docs`` (one chunk each) to the catalog and both indexes.

        Args:
            docs: the documents.
            vectors: one per document; None: embedded by the live model.
            batch: store writes per call.
        """
        from ragsync.config import open_catalog
        from ragsync.index.backends import open_keyword_index, open_vector_index
        from ragsync.index.versions import live_spec

        spec = live_spec(self.settings)
        vecs = list(vectors) if vectors is not None else self.embedder()([d.text for d in docs])
        cat = open_catalog(self.settings)
        vindex = open_vector_index(self.settings, spec.dim)
        kindex = open_keyword_index(self.settings)
        try:
            chunks: list[Chunk] = []
            for d in {d.acl_id: d for d in docs}.values():  # each ACL once (100k docs share a few)
                cat.acls.upsert_acl(d.acl_id, d.tenant, list(d.groups), list(d.deny))
            for d in docs:
                chash = ids.content_hash(d.text.encode())
                version = f"{d.mtime:.6f}"
                parent = ids.doc_id(d.tenant, d.source, d.parent) if d.parent else None
                cat.documents.record_fetch(
                    FetchRecord(
                        doc_id=d.doc_id,
                        source_id=d.source,
                        tenant_id=d.tenant,
                        source_object_id=d.object_id,
                        uri=d.uri or f"file:///{d.tenant}/{d.source}/{d.object_id}",
                        size=len(d.text),
                        source_version=version,
                        content_hash=chash,
                        acl_id=d.acl_id,
                        canonical_doc_id=d.doc_id,
                        mime=d.mime,
                        version_domain="timestamp",
                        version_observed_at=d.mtime,
                        parent_doc_id=parent,
                    )
                )
                th = ids.text_hash(d.text)
                chunk = Chunk(
                    ids.chunk_id(d.doc_id, CHUNKER, th),
                    d.doc_id,
                    d.tenant,
                    th,
                    0,
                    (),
                    0,
                    d.text,
                    12,
                    (d.acl_id,),
                )
                chunks.append(chunk)
                self.chunk_ids[d.doc_id] = chunk.chunk_id
            for start in range(0, len(chunks), batch):
                part = chunks[start : start + batch]
                vindex.upsert(part, vecs[start : start + batch])
                kindex.upsert(part)
                cat.chunks.write_chunks(part)
            for d in docs:
                chash = ids.content_hash(d.text.encode())
                version = f"{d.mtime:.6f}"
                cat.documents.flip_indexed_version(
                    d.doc_id,
                    content_hash=chash,
                    source_version=version,
                    indexed_version=make_indexed_version(chash, version),
                    chunker_id=CHUNKER,
                    parser_version=PARSER,
                    chunk_count=1,
                    indexed_at=d.mtime,
                    mime=d.mime,
                    version_domain="timestamp",
                    version_observed_at=d.mtime,
                )
        finally:
            kindex.close()
            vindex.close()
            cat.close()

    def write_copy(self, copy: Doc, holder: Doc) -> None:
        """Record ``copy`` (same text as ``holder``, its own ACL) as an exact
        copy served by ``holder``'s chunk, the way ``ragsync.index.service`` does:
        a ``duplicate`` document row, and the holder's chunk carrying the ACL
        ids of both in the catalog and both stores."""
        from ragsync.config import open_catalog

        assert copy.text == holder.text and copy.tenant == holder.tenant
        chash = ids.content_hash(copy.text.encode())
        cat = open_catalog(self.settings)
        try:
            cat.acls.upsert_acl(copy.acl_id, copy.tenant, list(copy.groups), list(copy.deny))
            cat.documents.record_fetch(
                FetchRecord(
                    doc_id=copy.doc_id,
                    source_id=copy.source,
                    tenant_id=copy.tenant,
                    source_object_id=copy.object_id,
                    uri=copy.uri or f"file:///{copy.tenant}/{copy.source}/{copy.object_id}",
                    size=len(copy.text),
                    source_version=f"{copy.mtime:.6f}",
                    content_hash=chash,
                    acl_id=copy.acl_id,
                    canonical_doc_id=holder.doc_id,
                    mime=copy.mime,
                    version_domain="timestamp",
                    version_observed_at=copy.mtime,
                )
            )
            cat.copies.mark_duplicate(copy.doc_id, holder.doc_id, content_hash=chash)
            chunk = cat.chunks.chunks_by_ids([self.chunk_ids[holder.doc_id]])[self.chunk_ids[holder.doc_id]]
            acl_ids = tuple(sorted({*chunk.acl_ids, copy.acl_id}))
        finally:
            cat.close()
        self.set_chunk_acls(holder, acl_ids)

    def set_chunk_acls(self, doc: Doc, acl_ids: Sequence[str]) -> None:
        """Replace the ACL ids of ``doc``'s chunk in the catalog and both stores."""
        from dataclasses import replace

        from ragsync.config import open_catalog
        from ragsync.index.backends import open_keyword_index, open_vector_index
        from ragsync.index.versions import live_spec

        cid = self.chunk_ids[doc.doc_id]
        cat = open_catalog(self.settings)
        vindex = open_vector_index(self.settings, live_spec(self.settings).dim)
        kindex = open_keyword_index(self.settings)
        try:
            chunk = cat.chunks.chunks_by_ids([cid])[cid]
            cat.chunks.set_chunk_acl_ids(doc.doc_id, list(acl_ids), tenant_id=doc.tenant)
            vindex.set_acl_ids(doc.tenant, [cid], list(acl_ids))
            kindex.set_acl_ids(doc.tenant, [replace(chunk, acl_ids=tuple(acl_ids))])
        finally:
            kindex.close()
            vindex.close()
            cat.close()

    def change_acl(self, doc: Doc, groups: Sequence[str], deny: Sequence[str], *, stores: bool) -> str:
        """A permission change of ``doc`` after indexing: its document row
        maps to a new ACL; with ``stores`` its chunk's ACL ids follow (an
        applied change), else they lag behind (a change not yet applied).
        Returns the new ACL id."""
        from ragsync.config import open_catalog

        acl_id = ids.acl_id(doc.tenant, tuple(groups), tuple(deny))
        cat = open_catalog(self.settings)
        try:
            cat.acls.upsert_acl(acl_id, doc.tenant, list(groups), list(deny))
            cat.documents.set_document_acl(doc.doc_id, acl_id)
        finally:
            cat.close()
        if stores:
            self.set_chunk_acls(doc, (acl_id,))
        return acl_id


@dataclass
class QueryWorld:
    """A :class:`QueryHome` served by the control plane (a TestClient), for
    property tests that give each example its own tenant (``n`` counts them)."""

    qh: QueryHome
    client: Any
    app: Any
    n: int = 0


@contextmanager
def query_world(path: Path, **app_options: Any) -> Iterator[QueryWorld]:
    """A :class:`QueryWorld` on a new home at ``path``; ``app_options`` go to
    ``control_plane.app.create_app``. The app's catalog is closed after."""
    from fastapi.testclient import TestClient

    from control_plane.app import create_app

    qh = QueryHome(path)
    app = create_app(qh.settings.catalog_url, settings=qh.settings, **app_options)
    try:
        with TestClient(app) as client:
            yield QueryWorld(qh, client, app)
    finally:
        app.state.catalog.close()
