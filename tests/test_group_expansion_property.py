"""Nested groups and deny entries, as a user named in a query meets them.

The red team's MEDIUM: a document with ``deny_groups: ["contractors"]`` was
returned to a user whose group reached ``contractors`` through 11 or more
nesting levels (hidden at 3 and 10): the expansion stopped at 10 levels, and
for a deny "fewer groups" is not fail-closed. The expansion is now complete
(one recursive query, any depth, cycles included); past a bound on the groups
reached, the user reads nothing.

Checked against a reference model (a plain graph walk) on random group graphs
with cycles and chains up to 50 levels deep, at the catalog (SQLite and
PostgreSQL) and through ``POST /v1/query`` on real stores (``tests.query_home``:
Milvus Lite, tantivy, SQLite).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ragsync.catalog import Catalog  # noqa: E402
from ragsync.index.versions import live_spec  # noqa: E402
from ragsync.query.identity import Identities  # noqa: E402
from tests.query_home import Doc, QueryWorld, query_world  # noqa: E402

SOURCE = "wiki"
USER = "u"


def reach(direct: set[str], edges: set[tuple[str, str]]) -> set[str]:
    """The reference model: every group reachable from ``direct`` along
    (member group, parent group) edges, by a plain graph walk."""
    seen, todo = set(direct), list(direct)
    while todo:
        group = todo.pop()
        for member, parent in edges:
            if member == group and parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


@st.composite
def group_graphs(draw: Any) -> tuple[set[str], set[tuple[str, str]]]:
    """(the user's direct groups, nesting edges): a chain g0 -> g1 -> ... up to
    50 levels above the user's group, plus random edges among the chain and a
    few side groups (cycles included: an edge may point back down)."""
    depth = draw(st.integers(min_value=0, max_value=50))
    chain = [f"g{i}" for i in range(depth + 1)]
    names = chain + ["side0", "side1", "side2", "contractors", "staff"]
    edges = {(chain[i], chain[i + 1]) for i in range(depth)}
    extra = draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)), max_size=12))
    edges |= {(a, b) for a, b in extra if a != b}
    direct = {"g0"} | set(draw(st.lists(st.sampled_from(names), max_size=2)))
    return direct, edges


# --------------------------------------------------------------------- catalog


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=group_graphs(), noise=group_graphs())
def test_the_catalog_expands_exactly_the_reachable_groups(
    catalog: Catalog,
    graph: tuple[set[str], set[tuple[str, str]]],
    noise: tuple[set[str], set[tuple[str, str]]],
) -> None:
    direct, edges = graph
    users = frozenset((USER, g) for g in direct)
    catalog.identities.replace_identities(
        "t1", SOURCE, Identities(user_groups=users, group_groups=frozenset(edges))
    )
    # Another source of the tenant with other nesting: never followed from this one.
    other_users, other_edges = noise
    catalog.identities.replace_identities(
        "t1",
        "other",
        Identities(user_groups=frozenset(("v", g) for g in other_users), group_groups=frozenset(other_edges)),
    )
    assert catalog.identities.groups_of_user_by_source("t1", USER) == {SOURCE: reach(direct, edges)}


# ------------------------------------------------------------ POST /v1/query


def _tenant(world: QueryWorld) -> tuple[str, str]:
    """A new tenant and its API key (each example has its own)."""
    world.n += 1
    tenant = f"t{world.n}"
    _, key = world.app.state.keys.create_tenant(tenant)
    return tenant, key


def _hits(world: QueryWorld, key: str) -> set[str]:
    """The doc ids ``USER`` finds with a query every document matches."""
    r = world.client.post(
        "/v1/query", json={"text": "hotel", "user": USER, "k": 50}, headers={"X-API-Key": key}
    )
    assert r.status_code == 200, r.text
    return {h["doc_id"] for h in r.json()["hits"]}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueryWorld]:
    with query_world(tmp_path_factory.mktemp("groups")) as served:
        yield served


def _write(world: QueryWorld, docs: list[Doc]) -> None:
    dim = live_spec(world.qh.settings).dim
    world.qh.write(docs, [[1.0] + [0.0] * (dim - 1)] * len(docs))


@pytest.mark.parametrize("depth", [3, 10, 11, 50])
def test_a_deny_applies_through_any_number_of_nesting_levels(world: QueryWorld, depth: int) -> None:
    tenant, key = _tenant(world)
    chain = {(f"g{i}", f"g{i + 1}") for i in range(depth - 1)} | {(f"g{depth - 1}", "contractors")}
    users = frozenset({(USER, "g0"), (USER, "staff")})
    world.app.state.catalog.identities.replace_identities(
        tenant, SOURCE, Identities(user_groups=users, group_groups=frozenset(chain))
    )
    denied = Doc(tenant, SOURCE, "denied", "hotel booking rules", ("staff",), ("contractors",))
    allowed = Doc(tenant, SOURCE, "allowed", "hotel price list", ("staff",))
    _write(world, [denied, allowed])
    assert _hits(world, key) == {allowed.doc_id}


def test_a_user_past_the_bound_of_reached_groups_reads_nothing(
    world: QueryWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragsync.catalog.identities as repo

    tenant, key = _tenant(world)
    chain = frozenset((f"g{i}", f"g{i + 1}") for i in range(30))
    users = frozenset({(USER, "g0"), (USER, "staff")})
    world.app.state.catalog.identities.replace_identities(
        tenant, SOURCE, Identities(user_groups=users, group_groups=chain)
    )
    doc = Doc(tenant, SOURCE, "open", "hotel price list", ("staff",))
    _write(world, [doc])
    assert _hits(world, key) == {doc.doc_id}
    monkeypatch.setattr(repo, "MAX_REACHED_GROUPS", 20)  # 32 groups reached: past it
    assert _hits(world, key) == set()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    graph=group_graphs(),
    acls=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["g0", "g3", "g12", "g49", "side1", "staff"]), min_size=1, max_size=2),
            st.lists(st.sampled_from(["g1", "g11", "g30", "g50", "contractors", "side2"]), max_size=2),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_a_user_reads_exactly_what_the_reference_model_allows(
    world: QueryWorld, graph: tuple[set[str], set[tuple[str, str]]], acls: list[tuple[list[str], list[str]]]
) -> None:
    direct, edges = graph
    tenant, key = _tenant(world)
    world.app.state.catalog.identities.replace_identities(
        tenant,
        SOURCE,
        Identities(user_groups=frozenset((USER, g) for g in direct), group_groups=frozenset(edges)),
    )
    docs = [
        Doc(
            tenant, SOURCE, f"d{i}", f"hotel note {i}", tuple(allow), tuple(g for g in deny if g not in allow)
        )
        for i, (allow, deny) in enumerate(acls)
    ]
    _write(world, docs)
    groups = reach(direct, edges)
    expected = {d.doc_id for d in docs if groups & set(d.groups) and not groups & set(d.deny)}
    assert _hits(world, key) == expected, (sorted(direct), sorted(edges), acls)
