"""Keyword index on tantivy (local): BM25 over chunk text and headings.

Fields::

    chunk_id   raw, stored, indexed  (the key: delete and upsert by term)
    doc_id     raw, stored
    tenant_id  raw
    acl_ids    raw, multi-valued
    text       en_stem (English stemming), not stored
    heading    en_stem, the document's identity and the heading path (``Chunk.search_prefix``)

tantivy allows one writer per index directory (a second one, in this or
another process, fails with ``LockBusy``). The writer is opened lazily on
the first write and kept until ``close()``; every write call commits before
it returns, so writes are durable and visible to readers after
``index.reload()``, which every read does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ragsync.errors import ConfigurationError, WriteError
from ragsync.index.base import NO_FILTER, ClosesOnExit, Hit, SearchFilter, Settings, check_chunk_tenants
from ragsync.model import Chunk

_PATH_LOCKS: dict[str, threading.Lock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def _path_lock(path: str) -> threading.Lock:
    """The process-wide lock of one index directory."""
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(str(Path(path).resolve()), threading.Lock())


_FORK_GUARD = {"registered": False}


def release_inherited_index_locks() -> int:
    """In a forked child: drop this process's references to tantivy's lock files.

    tantivy locks an index with ``flock``, which belongs to the open file. A
    child forked while any thread of its parent held a writer (the stream
    runs its lane pipelines as threads; Beam forks an isolated parse worker
    whenever a bundle needs one, even for a bundle with nothing to parse)
    would keep the index locked after the parent let go, for as long as the
    child lives, and every later write would fail ``LockBusy``. Each such
    descriptor is pointed at ``/dev/null`` instead (``dup2``, so the number
    stays taken and nothing else can reuse it). Returns how many (Linux; 0
    elsewhere).
    """

    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:  # pragma: no cover - not Linux
        return 0
    released = 0
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        for name in fds:
            try:
                base = os.path.basename(os.readlink(f"/proc/self/fd/{name}"))
            except OSError:
                continue
            if base.startswith(".tantivy-") and base.endswith(".lock") and int(name) != null:
                with contextlib.suppress(OSError):
                    os.dup2(null, int(name))
                    released += 1
    finally:
        os.close(null)
    return released


def _guard_forks() -> None:
    """Once per process: every child forked from now on releases the locks."""
    with _PATH_LOCKS_GUARD:
        if not _FORK_GUARD["registered"] and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=release_inherited_index_locks)
            _FORK_GUARD["registered"] = True


WRITER_HEAP_BYTES = 50_000_000
"""Writer memory budget; tantivy needs at least 15 MB per thread."""

WRITER_THREADS = 1
"""Indexing threads; one is enough for chunk batches and keeps memory flat."""

_FIELDS = ("chunk_id", "doc_id", "tenant_id", "acl_ids", "text", "heading")

# Anything that is not a word character or space is query syntax to tantivy
# (quotes, parentheses, ``+``, ``-``, ``:``, ``^``, ``~``, ``*``, brackets...).
_SYNTAX = re.compile(r"[^\w\s]+")


def _build_schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("doc_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("tenant_id", tokenizer_name="raw")
    builder.add_text_field("acl_ids", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text", tokenizer_name="en_stem")
    builder.add_text_field("heading", tokenizer_name="en_stem")
    return builder.build()


def _user_query_text(text: str) -> str:
    """Turn user text into plain words: syntax characters become spaces and
    the text is lowercased so ``AND``/``OR``/``NOT`` are words, not operators."""
    return _SYNTAX.sub(" ", text).lower().strip()


class TantivyKeywordIndex(ClosesOnExit):
    """``KeywordIndex`` on a tantivy index directory.

    Args:
        path: index directory.
        create: create the directory and an empty index when missing.

    Raises:
        ConfigurationError: the directory holds no index and ``create`` is
            False, or it holds an index with another schema.
    """

    def __init__(self, path: str, *, create: bool = False) -> None:
        import tantivy

        self.path = path
        self._tantivy = tantivy
        directory = Path(path).expanduser()
        exists = directory.is_dir() and tantivy.Index.exists(str(directory))
        if not exists and not create:
            raise ConfigurationError(
                f"keyword index {path!r} does not exist; create it by opening the index with "
                "create=True (e.g. `ragsync init`)"
            )
        self.schema = _build_schema()
        try:
            if exists:
                self._index = tantivy.Index.open(str(directory))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                self._index = tantivy.Index(self.schema, path=str(directory))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot open keyword index {path!r}: {exc}") from exc
        self.schema = self._index.schema
        try:
            for name in _FIELDS:
                tantivy.Query.term_query(self.schema, name, "")
        except ValueError as exc:
            raise ConfigurationError(f"keyword index {path!r} was not created by ragsync: {exc}") from exc
        self._writer: Any = None
        self._closed = False

    # -- helpers -------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("TantivyKeywordIndex is closed")

    def _get_writer(self) -> Any:
        self._require_open()
        if self._writer is None:
            _guard_forks()
            try:
                self._writer = self._index.writer(WRITER_HEAP_BYTES, WRITER_THREADS)
            except ValueError as exc:
                raise WriteError(
                    f"keyword index {self.path!r} is being written by another writer (one writer per "
                    f"index): {exc}"
                ) from exc
        return self._writer

    def _term(self, field: str, value: str) -> Any:
        return self._tantivy.Query.term_query(self.schema, field, value)

    def _terms(self, field: str, values: Sequence[str]) -> Any:
        return self._tantivy.Query.term_set_query(self.schema, field, list(values))

    def _all_of(self, *queries: Any) -> Any:
        occur = self._tantivy.Occur.Must
        return self._tantivy.Query.boolean_query([(occur, q) for q in queries])

    def _document(self, chunk: Chunk) -> Any:
        doc = self._tantivy.Document()
        doc.add_text("chunk_id", chunk.chunk_id)
        doc.add_text("doc_id", chunk.doc_id)
        doc.add_text("tenant_id", chunk.tenant_id)
        for acl in dict.fromkeys(chunk.acl_ids):
            doc.add_text("acl_ids", acl)
        doc.add_text("text", chunk.text)
        doc.add_text("heading", chunk.search_prefix())
        return doc

    def _write(self, operations: Callable[[Any], None]) -> None:
        """Run ``operations`` on the writer and commit; on any failure roll
        back so nothing of the call is kept, and raise ``WriteError``.

        Writers of one index in this process (the stream's lane pipelines run
        in threads) take turns: tantivy allows one writer at a time."""
        with _path_lock(self.path):
            self._write_locked(operations)

    def _write_locked(self, operations: Callable[[Any], None]) -> None:
        writer = self._get_writer()
        try:
            operations(writer)
            writer.commit()
        except Exception as exc:
            error = WriteError(f"keyword index {self.path!r}: write failed: {exc}")
            with contextlib.suppress(Exception):  # the write error is the one to report
                writer.rollback()
            raise error from exc
        finally:
            # Release the writer lock after every call: several steps of one
            # pipeline (write, permission changes, deletes) each hold a
            # client, and tantivy allows one writer per index at a time.
            self._writer = None
            with contextlib.suppress(Exception):
                writer.wait_merging_threads()

    def _searcher(self) -> Any:
        self._require_open()
        self._index.reload()
        return self._index.searcher()

    # -- writes ----------------------------------------------------------------------

    def upsert(self, chunks: Sequence[Chunk]) -> int:
        """Index the chunks, replacing documents with the same chunk id.

        Returns:
            The number of chunks written. Committed when it returns.

        Raises:
            WriteError: another writer holds the index, or the commit failed
                (nothing of this call is kept then).
        """
        if not chunks:
            return 0
        documents = [(chunk.chunk_id, self._document(chunk)) for chunk in chunks]

        def operations(writer: Any) -> None:
            for chunk_id, document in documents:
                writer.delete_documents_by_term("chunk_id", chunk_id)
                writer.add_document(document)

        self._write(operations)
        return len(chunks)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """Delete the tenant's documents with these chunk ids.

        Returns:
            ``len(chunk_ids)`` (the number asked). Committed when it returns.
        """
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        query = self._all_of(self._term("tenant_id", tenant_id), self._terms("chunk_id", ids))
        self._write(lambda writer: writer.delete_documents_by_query(query))
        return len(chunk_ids)

    def set_acl_ids(self, tenant_id: str, chunks: Sequence[Chunk]) -> None:
        """Rewrite the tenant's existing documents with the chunks' acl_ids.

        Chunks that are not in the index (or belong to another tenant there)
        are skipped, so counts never change.

        Raises:
            ValueError: a chunk's ``tenant_id`` is not ``tenant_id``.
        """
        check_chunk_tenants(tenant_id, chunks)
        if not chunks:
            return
        wanted = [c.chunk_id for c in chunks]
        present: set[str] = set()
        searcher = self._searcher()
        query = self._all_of(self._term("tenant_id", tenant_id), self._terms("chunk_id", wanted))
        for doc in self._documents(searcher, query):
            present.add(doc["chunk_id"][0])
        todo = [c for c in chunks if c.chunk_id in present]
        if todo:
            self.upsert(todo)

    # -- reads -----------------------------------------------------------------------

    def search(
        self, tenant_id: str, text: str, acl_ids: Sequence[str], k: int, *, where: SearchFilter = NO_FILTER
    ) -> list[Hit]:
        """BM25 over text and heading, within the tenant and the caller's ACLs.

        Args:
            tenant_id: tenant to search in.
            text: user text; syntax characters are treated as spaces.
            acl_ids: the caller's ACL ids; empty returns ``[]`` (fail closed).
            k: number of hits wanted.
            deny_acl_ids: ACL ids that deny one of the caller's groups: a
                chunk carrying any of them is never returned.
            doc_ids: None, or only rows of these documents (the query's
                source filter pushed down; empty returns ``[]``).

        Returns:
            Up to k hits, best first; ``score`` is the BM25 score.
        """
        deny_acl_ids, doc_ids = where.deny_acl_ids, where.doc_ids
        acl = list(dict.fromkeys(acl_ids))
        words = _user_query_text(text)
        if not acl or k <= 0 or not words or (doc_ids is not None and not doc_ids):
            return []
        searcher = self._searcher()
        query, _errors = self._index.parse_query_lenient(words, ["text", "heading"])
        scope = [self._term("tenant_id", tenant_id), self._terms("acl_ids", acl)]
        if doc_ids is not None:
            scope.append(self._terms("doc_id", list(dict.fromkeys(doc_ids))))
        allowed = self._all_of(*scope)
        Query = self._tantivy.Query
        occur = self._tantivy.Occur
        clauses = [(occur.Must, query), (occur.Must, Query.const_score_query(allowed, 0.0))]
        deny = list(dict.fromkeys(deny_acl_ids))
        if deny:
            clauses.append((occur.MustNot, self._terms("acl_ids", deny)))
        combined = Query.boolean_query(clauses)
        result = searcher.search(combined, k)
        hits: list[Hit] = []
        for score, address in result.hits:
            doc = searcher.doc(address)
            hits.append(Hit(chunk_id=doc["chunk_id"][0], doc_id=doc["doc_id"][0], score=float(score)))
        return hits

    def _documents(self, searcher: Any, query: Any) -> Iterator[Any]:
        total = searcher.num_docs
        if total == 0:
            return
        result = searcher.search(query, total, count=False)
        for _score, address in result.hits:
            yield searcher.doc(address)

    def _scope(self, tenant_id: str | None) -> Any:
        if tenant_id is None:
            return self._tantivy.Query.all_query()
        return self._term("tenant_id", tenant_id)

    def count_by_doc(self, tenant_id: str | None = None) -> dict[str, int]:
        """Document count per doc id, for one tenant or all (``None``).

        Reads every matching document's stored fields: fine at local scale.
        """
        counts: dict[str, int] = {}
        for doc in self._documents(self._searcher(), self._scope(tenant_id)):
            doc_id = doc["doc_id"][0]
            counts[doc_id] = counts.get(doc_id, 0) + 1
        return counts

    def count_ids(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """How many of ``chunk_ids`` the index holds for ``tenant_id`` (term
        queries on the raw id fields, counted without reading documents)."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        query = self._all_of(self._term("tenant_id", tenant_id), self._terms("chunk_id", ids))
        return int(self._searcher().search(query, 1, count=True).count or 0)

    def chunk_ids(self, tenant_id: str | None = None) -> set[str]:
        """Every chunk id present, for one tenant or all (``None``)."""
        return set(self.iter_chunk_ids(tenant_id))

    def iter_chunk_ids(self, tenant_id: str | None = None) -> Iterator[str]:
        """Every chunk id present, streamed (one stored document at a time)."""
        for doc in self._documents(self._searcher(), self._scope(tenant_id)):
            yield str(doc["chunk_id"][0])

    def close(self) -> None:
        """Finish merges and release the writer lock. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.wait_merging_threads()


# -- the backend: directories under home, the alias a file --------------------------

ALIAS_FILE = "keyword.alias"
"""File under ``home`` naming the live tantivy directory (one line)."""

V1_DIR = "keyword"
"""Version 1's tantivy directory under ``home``."""


def resolve_alias(home: str) -> str:
    """Directory the alias file under ``home`` points to (read on every open,
    so a flip is seen by the next one).

    Returns ``home/keyword`` when the file is missing or empty. Only a plain
    directory name under ``home`` is followed.

    Raises:
        ConfigurationError: the file names something outside ``home``.
    """
    try:
        with open(os.path.join(home, ALIAS_FILE), encoding="utf-8") as fh:
            name = fh.read().strip()
    except FileNotFoundError:
        name = ""
    return _under_home(home, name or V1_DIR)


def _under_home(home: str, name: str) -> str:
    """``home/name`` for a plain directory name.

    Raises:
        ConfigurationError: ``name`` is a path, not a name under ``home``.
    """
    if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
        raise ConfigurationError(f"{ALIAS_FILE} must name a directory under {home}, got {name!r}")
    return os.path.join(home, name)


class TantivyBackend:
    """tantivy directories under ``home`` (``keyword``, ``keyword_v{n}``); the
    alias is the file ``HOME/keyword.alias``. One writing process."""

    name = "tantivy"

    def one_process(self, settings: Settings) -> str:
        return (
            "the tantivy keyword index has one writer: use --keyword-index milvus (RAGSYNC_KEYWORD_INDEX"
            "=milvus, BM25 in the vectors' Milvus server) or elasticsearch (--es-url)"
        )

    def open(self, settings: Settings, physical: str | None, *, create: bool) -> TantivyKeywordIndex:
        path = resolve_alias(settings.home) if physical is None else _under_home(settings.home, physical)
        if create:
            os.makedirs(path, exist_ok=True)
        return TantivyKeywordIndex(path, create=create)

    def version_name(self, settings: Settings, version: int) -> str:
        return f"{V1_DIR}_v{version}"

    def live_name(self, settings: Settings) -> str:
        return os.path.basename(resolve_alias(settings.home))

    def point_alias(self, settings: Settings, physical: str) -> None:
        _under_home(settings.home, physical)
        path = os.path.join(settings.home, ALIAS_FILE)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(physical + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def drop(self, settings: Settings, physical: str) -> None:
        shutil.rmtree(_under_home(settings.home, physical), ignore_errors=True)


BACKEND = TantivyBackend()
"""The one instance ``ragsync.index.backends`` registers."""
