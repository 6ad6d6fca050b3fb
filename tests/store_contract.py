"""The store contract (``ragsync/index/base.py``) as plain check functions.

Each check takes a ``Harness`` that opens one kind of store at a fresh
location and hides the difference between vector and keyword stores (a
vector store is queried with the target chunk's own vector, a keyword
store with words from its text). ``tests/test_stores.py`` runs the checks
against the local stores, ``tests/test_stores_servers.py`` against servers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from ragsync.errors import ConfigurationError
from ragsync.index.base import Hit, SearchFilter
from ragsync.model import Chunk

DIM = 8

TOPICS = (
    "Quarterly revenue report for the finance team with margins and forecasts",
    "Instructions for resetting your VPN password on a company laptop",
    "Kubernetes cluster upgrade runbook for the platform engineers",
    "Holiday leave policy and how to request vacation days",
    "Expense claims: receipts, travel reimbursement and per diem rules",
    "Onboarding checklist for new hires in the sales department",
)

QUERIES = {
    TOPICS[1]: "how do I reset my VPN password?",
    TOPICS[2]: "kubernetes upgrade",
    TOPICS[3]: "request vacation (holiday) days",
}


def make_chunk(
    n: int,
    *,
    tenant: str = "t1",
    doc: str = "d1",
    acl: Sequence[str] = ("acl-a",),
    text: str | None = None,
) -> Chunk:
    """A chunk with a 32-hex id derived from ``n`` and ``tenant``."""
    chunk_id = hashlib.sha256(f"{tenant}:{n}".encode()).hexdigest()[:32]
    body = text if text is not None else TOPICS[n % len(TOPICS)]
    return Chunk(
        chunk_id=chunk_id,
        doc_id=doc,
        tenant_id=tenant,
        text_hash=hashlib.sha256(body.encode()).hexdigest(),
        ordinal=n,
        heading_path=("Handbook", f"Section {n}"),
        page=1,
        text=body,
        token_count=len(body.split()),
        acl_ids=tuple(acl),
    )


def vector_for(chunk_id: str, dim: int = DIM) -> list[float]:
    """A seeded random unit vector per chunk id."""
    seed = int(hashlib.sha256(chunk_id.encode()).hexdigest()[:16], 16)
    vec = np.random.default_rng(seed).normal(size=dim)
    return (vec / np.linalg.norm(vec)).tolist()


class Harness:
    """Opens one kind of store and adapts writes/queries to it."""

    kind = "base"

    def __init__(self, name: str, opener: Callable[[bool], Any]) -> None:
        self.name = name
        self._opener = opener

    def open(self, create: bool = True) -> Any:
        return self._opener(create)

    def write(self, store: Any, chunks: Sequence[Chunk]) -> int:
        raise NotImplementedError

    def query_for(self, target: Chunk) -> Any:
        """What finds ``target`` in this kind of store: its vector or words from its text."""
        raise NotImplementedError

    def search_for(
        self,
        store: Any,
        tenant: str,
        target: Chunk,
        acl: Sequence[str],
        k: int = 10,
        deny: Sequence[str] = (),
        doc_ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        query = self.query_for(target)
        where = SearchFilter(tuple(deny), None if doc_ids is None else tuple(doc_ids))
        return list(store.search(tenant, query, acl, k, where=where))

    def set_acl(self, store: Any, tenant: str, chunks: Sequence[Chunk], acl: Sequence[str]) -> None:
        raise NotImplementedError


class VectorHarness(Harness):
    kind = "vector"

    def write(self, store: Any, chunks: Sequence[Chunk]) -> int:
        return int(store.upsert(chunks, [vector_for(c.chunk_id) for c in chunks]))

    def query_for(self, target: Chunk) -> list[float]:
        return vector_for(target.chunk_id)

    def set_acl(self, store: Any, tenant: str, chunks: Sequence[Chunk], acl: Sequence[str]) -> None:
        store.set_acl_ids(tenant, [c.chunk_id for c in chunks], acl)


class KeywordHarness(Harness):
    kind = "keyword"

    def write(self, store: Any, chunks: Sequence[Chunk]) -> int:
        return int(store.upsert(chunks))

    def query_for(self, target: Chunk) -> str:
        return QUERIES.get(target.text, target.text)

    def set_acl(self, store: Any, tenant: str, chunks: Sequence[Chunk], acl: Sequence[str]) -> None:
        store.set_acl_ids(tenant, [dataclasses.replace(c, acl_ids=tuple(acl)) for c in chunks])


def _ids(hits: Sequence[Hit]) -> list[str]:
    return [h.chunk_id for h in hits]


# -- checks for every store ------------------------------------------------------------


def idempotent_upsert(h: Harness) -> None:
    store = h.open()
    try:
        chunks = [make_chunk(i, doc=f"d{i % 2}") for i in range(6)]
        assert h.write(store, chunks) == 6
        assert h.write(store, chunks) == 6
        assert h.write(store, chunks[:2]) == 2
        assert store.count_by_doc("t1") == {"d0": 3, "d1": 3}
        assert store.chunk_ids() == {c.chunk_id for c in chunks}
        assert sorted(store.iter_chunk_ids("t1")) == sorted(c.chunk_id for c in chunks)
        assert list(store.iter_chunk_ids("t9")) == []
        assert h.write(store, []) == 0
    finally:
        store.close()


def delete_scoped_by_tenant(h: Harness) -> None:
    store = h.open()
    try:
        mine = [make_chunk(i, tenant="t1") for i in range(3)]
        theirs = [make_chunk(i, tenant="t2") for i in range(3)]
        h.write(store, mine + theirs)
        # Wrong tenant: nothing goes.
        assert store.delete("t2", [mine[0].chunk_id, mine[1].chunk_id]) == 2
        assert store.chunk_ids("t1") == {c.chunk_id for c in mine}
        # Right tenant: only that tenant's rows go, the other tenant's survive.
        store.delete("t1", [mine[0].chunk_id, theirs[0].chunk_id, "0" * 32])
        assert store.chunk_ids("t1") == {mine[1].chunk_id, mine[2].chunk_id}
        assert store.chunk_ids("t2") == {c.chunk_id for c in theirs}
        assert store.delete("t1", []) == 0
        assert mine[0].chunk_id not in _ids(h.search_for(store, "t1", mine[0], ["acl-a"]))
    finally:
        store.close()


def acl_and_tenant_filtering(h: Harness) -> None:
    store = h.open()
    try:
        secret = make_chunk(1, acl=("acl-a",))
        shared = make_chunk(2, acl=("acl-a", "acl-b"))
        other_tenant = make_chunk(1, tenant="t2", acl=("acl-b",))
        h.write(store, [secret, shared, other_tenant])
        assert secret.chunk_id in _ids(h.search_for(store, "t1", secret, ["acl-a"]))
        assert secret.chunk_id in _ids(h.search_for(store, "t1", secret, ["acl-x", "acl-a"]))
        for target in (secret, shared):
            hits = _ids(h.search_for(store, "t1", target, ["acl-b"]))
            assert secret.chunk_id not in hits
            assert other_tenant.chunk_id not in hits
        assert shared.chunk_id in _ids(h.search_for(store, "t1", shared, ["acl-b"]))
        assert _ids(h.search_for(store, "t2", other_tenant, ["acl-b"])) == [other_tenant.chunk_id]
        # Fail closed: no ACL ids, no results.
        assert h.search_for(store, "t1", secret, []) == []
        assert h.search_for(store, "t1", secret, ["acl-nobody"]) == []
        assert h.search_for(store, "t3", secret, ["acl-a"]) == []
    finally:
        store.close()


def set_acl_ids_changes_visibility(h: Harness) -> None:
    store = h.open()
    try:
        chunks = [make_chunk(i, acl=("acl-a",)) for i in range(4)]
        h.write(store, chunks)
        before = store.count_by_doc()
        h.set_acl(store, "t1", chunks[:2], ["acl-b"])
        assert store.count_by_doc() == before
        assert chunks[0].chunk_id not in _ids(h.search_for(store, "t1", chunks[0], ["acl-a"]))
        assert chunks[0].chunk_id in _ids(h.search_for(store, "t1", chunks[0], ["acl-b"]))
        assert chunks[2].chunk_id in _ids(h.search_for(store, "t1", chunks[2], ["acl-a"]))
        # Another tenant's call changes nothing; unknown ids are not created.
        h.set_acl(store, "t2", [dataclasses.replace(chunks[2], tenant_id="t2")], ["acl-c"])
        assert chunks[2].chunk_id in _ids(h.search_for(store, "t1", chunks[2], ["acl-a"]))
        h.set_acl(store, "t1", [make_chunk(99)], ["acl-b"])
        assert store.count_by_doc() == before
    finally:
        store.close()


def search_ranks_match_first(h: Harness) -> None:
    store = h.open()
    try:
        chunks = [make_chunk(i, doc=f"d{i}") for i in range(len(TOPICS))]
        h.write(store, chunks)
        for target in (chunks[1], chunks[2], chunks[3]):
            hits = h.search_for(store, "t1", target, ["acl-a"], k=3)
            assert hits, f"no hits for {target.text!r}"
            assert hits[0].chunk_id == target.chunk_id
            assert hits[0].doc_id == target.doc_id
            assert len(hits) <= 3
            scores = [hit.score for hit in hits]
            assert scores == sorted(scores, reverse=True)
            assert all(math.isfinite(s) for s in scores)
    finally:
        store.close()


def count_by_doc_exact(h: Harness) -> None:
    store = h.open()
    try:
        chunks = [make_chunk(i, doc=f"doc-{i % 3}") for i in range(11)]
        chunks += [make_chunk(i, tenant="t2", doc="doc-0") for i in range(4)]
        h.write(store, chunks)
        assert store.count_by_doc("t1") == {"doc-0": 4, "doc-1": 4, "doc-2": 3}
        assert store.count_by_doc("t2") == {"doc-0": 4}
        assert store.count_by_doc() == {"doc-0": 8, "doc-1": 4, "doc-2": 3}
        assert store.count_by_doc("nobody") == {}
        assert len(store.chunk_ids()) == 15
        assert len(store.chunk_ids("t2")) == 4
    finally:
        store.close()


def count_ids_by_id(h: Harness) -> None:
    """``count_ids`` counts the given chunk ids of one tenant: other ids, the
    same ids in another tenant and deleted rows do not count."""
    store = h.open()
    try:
        chunks = [make_chunk(i, doc=f"doc-{i % 3}") for i in range(11)]
        other_tenant = [make_chunk(i, tenant="t2", doc="doc-0") for i in range(4)]
        h.write(store, chunks + other_tenant)
        doc0 = [c.chunk_id for c in chunks if c.doc_id == "doc-0"]
        assert store.count_ids("t1", doc0) == 4
        assert store.count_ids("t1", doc0 + doc0 + ["absent"]) == 4
        assert store.count_ids("t2", doc0) == 0  # t2's chunk ids differ (tenant in the id)
        assert store.count_ids("t2", [c.chunk_id for c in other_tenant]) == 4
        assert store.count_ids("t1", [c.chunk_id for c in other_tenant]) == 0
        assert store.count_ids("t1", []) == 0
        store.delete("t1", doc0[:2])
        store.delete("t2", doc0[2:])  # another tenant's delete leaves t1's rows
        assert store.count_ids("t1", doc0) == 2
        assert store.count_ids("t2", [c.chunk_id for c in other_tenant]) == 4
    finally:
        store.close()


def missing_without_create_fails(h: Harness) -> None:
    with pytest.raises(ConfigurationError, match="create"):
        h.open(create=False)


def persists_after_reopen(h: Harness) -> None:
    store = h.open(create=True)
    chunks = [make_chunk(i, doc=f"d{i % 2}") for i in range(5)]
    h.write(store, chunks)
    store.close()
    store.close()  # idempotent
    store = h.open(create=False)
    try:
        assert store.count_by_doc("t1") == {"d0": 3, "d1": 2}
        assert _ids(h.search_for(store, "t1", chunks[1], ["acl-a"], k=1)) == [chunks[1].chunk_id]
        store.delete("t1", [chunks[0].chunk_id])
    finally:
        store.close()
    store = h.open(create=True)  # create=True on an existing store keeps the data
    try:
        assert store.count_by_doc("t1") == {"d0": 2, "d1": 2}
    finally:
        store.close()


def deny_acl_ids_hide_rows(h: Harness) -> None:
    """A row carrying an ACL that denies one of the caller's groups is never
    returned, even when another of its ACLs allows the caller."""
    store = h.open()
    try:
        shared = make_chunk(1, acl=("acl-a", "acl-deny"))  # one copy allows, another denies
        plain = make_chunk(2, acl=("acl-a",))
        h.write(store, [shared, plain])
        assert shared.chunk_id in _ids(h.search_for(store, "t1", shared, ["acl-a"]))
        assert shared.chunk_id not in _ids(h.search_for(store, "t1", shared, ["acl-a"], deny=["acl-deny"]))
        assert plain.chunk_id in _ids(h.search_for(store, "t1", plain, ["acl-a"], deny=["acl-deny"]))
    finally:
        store.close()


def doc_ids_restrict_rows(h: Harness) -> None:
    """``doc_ids`` (a query's source filter pushed down) returns only rows of
    those documents; an empty list returns nothing; None does not restrict."""
    store = h.open()
    try:
        a, b = make_chunk(1, doc="d-a"), make_chunk(2, doc="d-b")
        other_tenant = make_chunk(3, tenant="t2", doc="d-b")
        h.write(store, [a, b, other_tenant])
        assert a.chunk_id in _ids(h.search_for(store, "t1", a, ["acl-a"]))
        assert set(_ids(h.search_for(store, "t1", a, ["acl-a"], doc_ids=["d-b"]))) <= {b.chunk_id}
        assert _ids(h.search_for(store, "t1", b, ["acl-a"], doc_ids=["d-b", "d-x"])) == [b.chunk_id]
        assert h.search_for(store, "t1", a, ["acl-a"], doc_ids=[]) == []
        assert h.search_for(store, "t1", b, ["acl-other"], doc_ids=["d-b"]) == []  # ACLs still apply
    finally:
        store.close()


CONTRACT: list[Callable[[Harness], None]] = [
    idempotent_upsert,
    deny_acl_ids_hide_rows,
    doc_ids_restrict_rows,
    delete_scoped_by_tenant,
    acl_and_tenant_filtering,
    set_acl_ids_changes_visibility,
    search_ranks_match_first,
    count_by_doc_exact,
    count_ids_by_id,
    missing_without_create_fails,
    persists_after_reopen,
]


# -- checks for vector stores only -----------------------------------------------------


def vector_validation(h: Harness) -> None:
    store = h.open()
    try:
        good = make_chunk(1)
        bad = make_chunk(2)
        ok_vec = vector_for(good.chunk_id)
        with pytest.raises(ValueError, match="dimension"):
            store.upsert([good, bad], [ok_vec, ok_vec[:-1]])
        with pytest.raises(ValueError, match="finite"):
            store.upsert([good, bad], [ok_vec, [math.nan] + ok_vec[1:]])
        with pytest.raises(ValueError, match="finite"):
            store.upsert([good, bad], [ok_vec, [math.inf] + ok_vec[1:]])
        with pytest.raises(ValueError):
            store.upsert([good, bad], [ok_vec])
        assert store.count_by_doc() == {}
        assert store.chunk_ids() == set()
        with pytest.raises(ValueError):
            store.search("t1", ok_vec[:-1], ["acl-a"], 3)
    finally:
        store.close()


def dimension_mismatch_on_reopen(h: Harness, reopen_with_dim: Callable[[int], Any]) -> None:
    h.open().close()
    with pytest.raises(ConfigurationError, match="dimension"):
        reopen_with_dim(DIM + 1)


VECTOR_CONTRACT: list[Callable[[Harness], None]] = [vector_validation]
