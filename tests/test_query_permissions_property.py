"""Property test of ``POST /v1/query``'s permission rules (hypothesis), on
one home written straight into the stores (``tests.query_home``) and reused:
each example gets its own tenant, plus a neighbour tenant holding the same
texts readable by every group.

Per example: random documents of a tiny vocabulary (so every query hits),
random allowed groups and deny entries, exact copies (same text, another
document, another ACL: one chunk carrying both ACL ids) and permission
changes after indexing, either applied to the chunks or still lagging behind
in the stores and the catalog's chunk rows. Then, for random readers:

* no hit is of another tenant, and every hit's document is readable by the
  reader through its own current ACL (an allowed group, no denied one);
* with k large, every document whose chunk is readable (each ACL
  on the chunk denies none of the groups, one allows; its current ACL agrees)
  is returned, as itself or as the smallest-id readable copy of its text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ragsync.index.versions import live_spec  # noqa: E402
from tests.query_home import Doc, QueryWorld, query_world  # noqa: E402

GROUPS = ("g0", "g1", "g2", "g3")
WORDS = ("hotel", "canteen", "laptop")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueryWorld]:
    with query_world(tmp_path_factory.mktemp("query-perm"), allow_caller_groups=True) as served:
        yield served


groups_st = st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True)
doc_st = st.fixed_dictionaries(
    {
        "word": st.sampled_from(WORDS),
        "allow": groups_st,
        "deny": st.lists(st.sampled_from(GROUPS), max_size=1, unique=True),
        # None: no copy; else the copy's allowed groups and deny entries
        "copy": st.none() | st.tuples(groups_st, st.lists(st.sampled_from(GROUPS), max_size=1, unique=True)),
        # None: no change; else the new ACL and whether the stores follow
        "change": st.none()
        | st.tuples(groups_st, st.lists(st.sampled_from(GROUPS), max_size=1), st.booleans()),
    }
)


def _reads(groups: set[str], allow: set[str], deny: set[str]) -> bool:
    return bool(groups & allow) and not groups & deny


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=st.lists(doc_st, min_size=1, max_size=5),
    readers=st.lists(st.lists(st.sampled_from(GROUPS), max_size=3, unique=True), min_size=1, max_size=4),
)
def test_query_returns_exactly_the_readable_documents(
    world: QueryWorld, specs: list[dict[str, Any]], readers: list[list[str]]
) -> None:
    world.n += 1
    tenant, neighbour = f"t{world.n}", f"n{world.n}"
    holders: list[Doc] = []
    for i, s in enumerate(specs):
        allow = tuple(s["allow"])
        deny = tuple(g for g in s["deny"] if g not in allow)
        holders.append(Doc(tenant, "src", f"d{i}", f"{s['word']} note {i}", allow, deny))
    others = [Doc(neighbour, "src", f"d{i}", d.text, GROUPS) for i, d in enumerate(holders)]
    dim = live_spec(world.qh.settings).dim
    world.qh.write(holders + others, [[1.0] + [0.0] * (dim - 1)] * (len(holders) + len(others)))

    # (doc id, its current allow, deny) of every document; chunk ACLs per holder
    current: dict[str, tuple[set[str], set[str]]] = {d.doc_id: (set(d.groups), set(d.deny)) for d in holders}
    chunk_acls: dict[str, list[tuple[set[str], set[str]]]] = {d.doc_id: [current[d.doc_id]] for d in holders}
    copies_of: dict[str, list[str]] = {d.doc_id: [] for d in holders}
    for i, (s, d) in enumerate(zip(specs, holders, strict=True)):
        if s["copy"] is not None:
            c_allow = tuple(s["copy"][0])
            c_deny = tuple(g for g in s["copy"][1] if g not in c_allow)
            copy = Doc(tenant, "src", f"c{i}", d.text, c_allow, c_deny)
            world.qh.write_copy(copy, d)
            current[copy.doc_id] = (set(c_allow), set(c_deny))
            chunk_acls[d.doc_id].append(current[copy.doc_id])
            copies_of[d.doc_id].append(copy.doc_id)
        if s["change"] is not None:
            n_allow, n_deny, applied = s["change"]
            n_deny = [g for g in n_deny if g not in n_allow]
            world.qh.change_acl(d, n_allow, n_deny, stores=applied)
            current[d.doc_id] = (set(n_allow), set(n_deny))
            if applied:
                # the holder's chunk now carries its new ACL (and no copy's:
                # set_chunk_acls replaces them all, as a lone document's change does)
                chunk_acls[d.doc_id] = [current[d.doc_id]]

    _, key = world.app.state.keys.create_tenant(tenant)
    for reader in readers:
        groups = set(reader)
        for word in WORDS[:1]:
            r = world.client.post(
                "/v1/query", json={"text": word, "groups": reader, "k": 100}, headers={"X-API-Key": key}
            )
            assert r.status_code == 200, r.text
            hits = r.json()["hits"]
            got = {h["doc_id"] for h in hits}
            # safety: own tenant only, readable through the shown document's own current ACL
            for h in hits:
                assert h["doc_id"] in current, (h, "another tenant's or unknown document")
                assert _reads(groups, *current[h["doc_id"]]), (h["doc_id"], reader, current[h["doc_id"]])
            # completeness: each holder whose chunk the reader may read (all
            # vectors are equal, so with k large every readable chunk is a hit)
            expected: set[str] = set()
            for d in holders:
                acls = chunk_acls[d.doc_id]
                if not any(groups & a for a, _ in acls) or any(groups & deny for _, deny in acls):
                    continue  # the stores refuse the chunk: deny wins, fail closed
                shown = sorted(x for x in [d.doc_id, *copies_of[d.doc_id]] if _reads(groups, *current[x]))
                if shown:
                    expected.add(shown[0])
            assert got == expected, (reader, word, specs)
