"""``POST /v1/query`` over real HTTP (uvicorn on loopback), on a tiny home
written straight into the catalog, Milvus Lite and tantivy
(``tests.query_home``): tenants, ACLs, deny entries, filters, k bounds, bad
bodies; and a property test over random ACLs and deny entries."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from control_plane.app import create_app  # noqa: E402
from ragsync.catalog import Catalog  # noqa: E402
from ragsync.query.identity import Identities  # noqa: E402
from ragsync.query.search import QueryFilters, highlight, hybrid_query  # noqa: E402
from tests.query_home import Doc, QueryHome  # noqa: E402
from tests.serving import served  # noqa: E402

JAN_2024 = datetime(2024, 1, 10, tzinfo=UTC).timestamp()
JUN_2025 = datetime(2025, 6, 1, tzinfo=UTC).timestamp()
WIKI = "https://wiki.example.org/w/api.php?action=parse&pageid=7"

DOCS = {
    "a1": Doc(
        "tenant-a",
        "wiki-a",
        "Oslo",
        "Hotel nights in Oslo are capped at 210 EUR per night.",
        ("staff",),
        mime="text/html",
        mtime=JAN_2024,
        uri=WIKI,
    ),
    "a2": Doc(
        "tenant-a",
        "files-a",
        "bergen.pdf",
        "Hotel nights in Bergen are capped at 180 EUR per night.",
        ("staff",),
        deny=("contractors",),
        mime="application/pdf",
        mtime=JUN_2025,
    ),
    "a3": Doc(
        "tenant-a",
        "files-a",
        "bergen.pdf#receipt.pdf",
        "Hotel receipts for nights in Bergen are kept.",
        ("staff",),
        mime="application/pdf",
        mtime=JUN_2025,
        parent="bergen.pdf",
    ),
    "a4": Doc(
        "tenant-a",
        "wiki-a",
        "Exec",
        "Hotel nights for executives are capped at 400 EUR per night.",
        ("managers",),
        mime="text/html",
        mtime=JAN_2024,
    ),
    "b1": Doc(
        "tenant-b",
        "wiki-b",
        "Oslo",
        "Hotel nights in Oslo are capped at 300 EUR per night.",
        ("staff",),
        mime="text/html",
        mtime=JAN_2024,
    ),
}
NAME = {d.doc_id: name for name, d in DOCS.items()}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> QueryHome:
    h = QueryHome(tmp_path_factory.mktemp("query-api"))
    h.write(list(DOCS.values()))
    return h


@pytest.fixture(scope="module")
def api(home: QueryHome) -> Iterator[tuple[Any, Any]]:
    app = create_app(home.settings.catalog_url, settings=home.settings, allow_caller_groups=True)
    _, key_a = app.state.keys.create_tenant("tenant-a")
    _, key_b = app.state.keys.create_tenant("tenant-b")
    with served(app) as port:
        base = f"http://127.0.0.1:{port}"
        with (
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key_a}"}, timeout=60) as a,
            httpx.Client(base_url=base, headers={"X-API-Key": key_b}, timeout=60) as b,
        ):
            yield a, b
    app.state.catalog.close()


def _names(client: Any, **body: Any) -> set[str]:
    r = client.post("/v1/query", json={"text": "hotel nights", **body})
    assert r.status_code == 200, r.text
    return {NAME[h["doc_id"]] for h in r.json()["hits"]}


def test_each_tenant_sees_only_its_chunks_readable_by_the_groups(api: tuple[Any, Any]) -> None:
    a, b = api
    assert _names(a, groups=["staff"]) == {"a1", "a2", "a3"}
    assert _names(a, groups=["managers"]) == {"a4"}
    assert _names(a, groups=["staff", "managers"]) == {"a1", "a2", "a3", "a4"}
    assert _names(b, groups=["staff"]) == {"b1"}
    assert _names(b, groups=["managers"]) == set()


def test_no_groups_or_unknown_groups_get_nothing(api: tuple[Any, Any]) -> None:
    a, _ = api
    assert _names(a, groups=[]) == set()
    assert _names(a, groups=["nobody"]) == set()


def test_a_deny_entry_hides_the_document_and_the_parent_link(api: tuple[Any, Any]) -> None:
    a, _ = api
    assert _names(a, groups=["staff", "contractors"]) == {"a1", "a3"}
    body = {"text": "receipts Bergen", "groups": ["staff", "contractors"]}
    hits = a.post("/v1/query", json=body).json()["hits"]
    child = next(h for h in hits if NAME[h["doc_id"]] == "a3")
    # The container denies contractors: its id is shown, its address is not.
    assert child["parent"] == {"doc_id": DOCS["a2"].doc_id, "link": None}


def test_a_hit_carries_ids_link_highlight_format_date_and_parent(api: tuple[Any, Any]) -> None:
    a, _ = api
    body = {"text": "hotel nights Oslo", "groups": ["staff"], "k": 10}
    hits = a.post("/v1/query", json=body).json()["hits"]
    by = {NAME[h["doc_id"]]: h for h in hits}
    one = by["a1"]
    assert one["source_id"] == "wiki-a" and one["format"] == "text/html"
    assert one["link"] == "https://wiki.example.org/w/index.php?curid=7"
    assert one["text"] == DOCS["a1"].text
    assert one["highlight"] == (
        "<mark>Hotel</mark> <mark>nights</mark> in <mark>Oslo</mark> are capped at 210 EUR per "
        "<mark>night</mark>."
    )
    assert one["modified_at"].startswith("2024-01-10T00:00:00")
    assert one["parent"] is None and isinstance(one["score"], float) and one["chunk_id"]
    assert by["a3"]["parent"] == {"doc_id": DOCS["a2"].doc_id, "link": "file:///tenant-a/files-a/bergen.pdf"}


def test_filters_by_source_format_and_date(api: tuple[Any, Any]) -> None:
    a, _ = api
    staff = ["staff", "managers"]
    assert _names(a, groups=staff, filters={"source_ids": ["wiki-a"]}) == {"a1", "a4"}
    assert _names(a, groups=staff, filters={"source_ids": ["wiki-b"]}) == set()  # the other tenant's
    assert _names(a, groups=staff, filters={"formats": ["application/pdf"]}) == {"a2", "a3"}
    assert _names(a, groups=staff, filters={"modified_after": "2025-01-01T00:00:00Z"}) == {"a2", "a3"}
    assert _names(a, groups=staff, filters={"modified_before": "2025-01-01"}) == {"a1", "a4"}
    both = {"source_ids": ["files-a"], "formats": ["text/html"]}
    assert _names(a, groups=staff, filters=both) == set()


def test_k_bounds_the_hits(api: tuple[Any, Any]) -> None:
    a, _ = api
    r = a.post("/v1/query", json={"text": "hotel nights", "groups": ["staff", "managers"], "k": 1})
    assert r.status_code == 200 and len(r.json()["hits"]) == 1
    r = a.post("/v1/query", json={"text": "hotel nights", "groups": ["staff", "managers"], "k": 100})
    assert len(r.json()["hits"]) == 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"groups": ["staff"]}, "text"),
        ({"text": "  ", "groups": ["staff"]}, "text"),
        ({"text": "x"}, "body"),
        ({"text": "x", "user": ""}, "user"),
        ({"text": "x", "groups": ["staff"], "k": 0}, "k"),
        ({"text": "x", "groups": ["staff"], "k": 101}, "k"),
        ({"text": "x", "groups": ["staff"], "k": "many"}, "k"),
        ({"text": "x", "groups": "staff"}, "groups"),
        ({"text": "x", "groups": [""]}, "groups.0"),
        ({"text": "x", "groups": ["staff"], "user": "alice"}, "body"),
        ({"text": "x", "groups": ["staff"], "tenant_id": "tenant-b"}, "tenant_id"),
        ({"text": "x", "groups": ["staff"], "filters": {"formats": "pdf"}}, "filters.formats"),
        ({"text": "x", "groups": ["staff"], "filters": {"modified_after": "now"}}, "filters.modified_after"),
        (
            {
                "text": "x",
                "groups": ["staff"],
                "filters": {"modified_after": "2025", "modified_before": "2024"},
            },
            "filters",
        ),
    ],
)
def test_bad_bodies_get_422_naming_the_field(api: tuple[Any, Any], body: dict[str, Any], field: str) -> None:
    a, _ = api
    r = a.post("/v1/query", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "validation_error"
    assert err["message"].split(":")[0] == field, err
    if field == "body":
        assert "exactly one of user and groups" in err["message"]


# ------------------------------------------------------------ readers named as users

STAFF_ONLY = Identities(
    users=frozenset({"alice", "bob", "carol"}),
    groups=frozenset({"staff", "managers", "team", "cycle"}),
    user_groups=frozenset({("alice", "team"), ("bob", "managers"), ("carol", "cycle")}),
    group_groups=frozenset({("team", "staff"), ("cycle", "team"), ("staff", "cycle")}),
)

OTHER_BOB = Identities(
    users=frozenset({"bob"}), groups=frozenset({"staff"}), user_groups=frozenset({("bob", "staff")})
)


@pytest.fixture(scope="module")
def users_api(home: QueryHome) -> Iterator[tuple[Any, Any]]:
    """A server with the default (no caller groups), identities synced for tenant-a only."""
    app = create_app(home.settings.catalog_url, settings=home.settings)
    key_a = _key(app, "tenant-a")
    key_b = _key(app, "tenant-b")
    app.state.catalog.identities.replace_identities("tenant-a", "wiki-a", STAFF_ONLY)
    # Another source of tenant-a where a different person is also called bob, in staff.
    app.state.catalog.identities.replace_identities("tenant-a", "wiki-x", OTHER_BOB)
    # files-a's ACLs name wiki-a's groups: an explicit link, not a pooling of every source.
    app.state.catalog.sources.create_source(
        "tenant-a", source_id="files-a", type="object_store", if_exists="update"
    )
    app.state.catalog.syncs.configure_source(
        "files-a", tenant_id="tenant-a", options={"identities_from": "wiki-a"}
    )
    with served(app) as port:
        base = f"http://127.0.0.1:{port}"
        with (
            httpx.Client(base_url=base, headers={"X-API-Key": key_a}, timeout=60) as a,
            httpx.Client(base_url=base, headers={"X-API-Key": key_b}, timeout=60) as b,
        ):
            yield a, b
    app.state.catalog.identities.replace_identities("tenant-a", "wiki-a", Identities())
    app.state.catalog.identities.replace_identities("tenant-a", "wiki-x", Identities())
    app.state.catalog.syncs.configure_source("files-a", tenant_id="tenant-a", options={})
    app.state.catalog.close()


def _key(app: Any, tenant_id: str) -> str:
    """An API key of the tenant, creating the tenant when the module's other app has not."""
    if tenant_id not in {t.tenant_id for t in app.state.catalog.tenants.list_tenants()}:
        return str(app.state.keys.create_tenant(tenant_id)[1])
    return str(app.state.keys.create_api_key(tenant_id)[1])


def test_a_user_reads_through_synced_memberships_nested_and_cyclic(users_api: tuple[Any, Any]) -> None:
    a, _ = users_api
    assert _names(a, user="alice") == {"a1", "a2", "a3"}  # team -> staff
    assert _names(a, user="bob") == {"a4"}
    assert _names(a, user="carol") == {"a1", "a2", "a3"}  # cycle -> team -> staff -> cycle


def test_a_same_named_user_of_another_source_reads_only_that_sources_documents(
    users_api: tuple[Any, Any], home: QueryHome
) -> None:
    a, _ = users_api
    # wiki-x's bob is in staff there; wiki-a's staff documents (a1) and files-a's (a2, a3, whose ACLs
    # name wiki-a's groups) are not read through it: bob reads what wiki-a's bob (managers) may.
    assert _names(a, user="bob") == {"a4"}
    catalog = Catalog.open(home.settings.catalog_url)
    try:
        assert catalog.identities.groups_of_user_by_source("tenant-a", "bob") == {
            "wiki-a": {"managers"},
            "wiki-x": {"staff"},
        }
        assert catalog.identities.identity_links("tenant-a") == {"files-a": "wiki-a"}
    finally:
        catalog.close()


def test_unknown_user_and_another_tenants_user_read_nothing(users_api: tuple[Any, Any]) -> None:
    a, b = users_api
    assert _names(a, user="mallory") == set()
    assert _names(a, user="Alice") == set()
    assert _names(b, user="alice") == set()  # tenant-b has no synced alice: b1 (staff) stays hidden


def test_caller_groups_are_off_by_default(users_api: tuple[Any, Any]) -> None:
    a, _ = users_api
    r = a.post("/v1/query", json={"text": "hotel nights", "groups": ["staff"]})
    assert r.status_code == 422, r.text
    assert "--allow-caller-groups" in r.json()["error"]["message"]
    assert "RAGSYNC_ALLOW_CALLER_GROUPS" in r.json()["error"]["message"]


def test_no_key_gets_401_and_a_server_without_stores_503(home: QueryHome) -> None:
    app = create_app(home.settings.catalog_url)
    _, key = app.state.keys.create_tenant("tenant-c")
    with served(app) as port:
        url = f"http://127.0.0.1:{port}/v1/query"
        body = {"text": "hotel", "user": "alice"}
        assert httpx.post(url, json=body).status_code == 401
        r = httpx.post(url, json=body, headers={"X-API-Key": key})
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    app.state.catalog.close()


def test_highlight_escapes_and_marks_only() -> None:
    assert highlight("<b>Oslo</b> & co", "oslo") == "&lt;b&gt;<mark>Oslo</mark>&lt;/b&gt; &amp; co"
    assert highlight("a.*b", ".*") == "a.*b"  # query words only, no patterns
    long = "word " * 100 + "canteen opens " + "word " * 100
    out = highlight(long, "canteen", width=60)
    assert out.startswith("…") and out.endswith("…") and "<mark>canteen</mark>" in out


# ------------------------------------------------------------ property test

GROUPS = ("g0", "g1", "g2", "g3")
TOPICS = ("hotel nights", "canteen hours", "laptop loss")


def test_random_acls_and_denies_never_leak(tmp_path: Path) -> None:
    """Random documents over two tenants with random allowed and denied
    groups (seeded); every query (random groups, random filters) returns only
    the asking tenant's chunks that the groups may read (an allowed group,
    no denied one), and exactly those matching the filters among the top."""
    rng = random.Random(26)
    qh = QueryHome(tmp_path)
    docs: list[Doc] = []
    for i in range(40):
        tenant = rng.choice(("ta", "tb"))
        allow = tuple(rng.sample(GROUPS, rng.randint(1, 2)))
        deny = tuple(g for g in rng.sample(GROUPS, rng.randint(0, 1)) if g not in allow)
        text = f"{rng.choice(TOPICS)} note {i}: {rng.choice(TOPICS)}"
        docs.append(
            Doc(
                tenant,
                rng.choice(("s1", "s2")),
                f"d{i}",
                text,
                allow,
                deny,
                mime=rng.choice(("text/html", "application/pdf")),
                mtime=1_700_000_000.0 + i,
            )
        )
    vectors = [[rng.gauss(0, 1) for _ in range(384)] for _ in docs]  # any vectors: the ACLs are under test
    qh.write(docs, vectors)
    by_id = {d.doc_id: d for d in docs}
    for _ in range(60):
        tenant = rng.choice(("ta", "tb"))
        groups = rng.sample(GROUPS, rng.randint(0, 3))
        filters = QueryFilters(
            source_ids=tuple(rng.sample(("s1", "s2"), rng.randint(0, 1))),
            modified_after=rng.choice((None, 1_700_000_020.0)),
        )
        hits = hybrid_query(
            qh.settings, rng.choice(TOPICS), groups=groups, tenant_id=tenant, k=50, filters=filters
        )
        readable = {
            d.doc_id
            for d in docs
            if d.tenant == tenant and set(d.groups) & set(groups) and not set(d.deny) & set(groups)
        }
        expected = {d for d in readable if filters.matches(_row(by_id[d]))}
        got = {h.doc_id for h in hits}
        assert got <= readable, (tenant, groups)
        for h in hits:
            assert h.chunk_id == qh.chunk_ids[h.doc_id]
        # k=50 covers every document: the filtered answer is exact.
        assert got == expected, (tenant, groups, filters)


def _row(d: Doc) -> Any:
    """The catalog row fields the filters read."""
    from ragsync.catalog.documents import DocumentRow

    return DocumentRow(
        doc_id=d.doc_id,
        source_id=d.source,
        tenant_id=d.tenant,
        mime=d.mime,
        source_version=f"{d.mtime:.6f}",
        version_domain="timestamp",
    )


# ------------------------------------------------- a rare source: the filter pushed into the stores


@pytest.fixture(scope="module")
def rare_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[QueryHome, list[Doc]]:
    """150 documents of source ``big`` that both stores rank first for "hotel nights"
    (the query's own vector; the words repeated in a short text), and 3 of source
    ``rare`` that they rank last (the opposite vector; the words once in a long
    text), one of them an exact copy whose chunk a ``big`` document holds."""
    from ragsync.index.versions import live_spec
    from ragsync.query.search import embed_query

    home = QueryHome(tmp_path_factory.mktemp("rare-source"))
    query = embed_query(live_spec(home.settings), "hotel nights")
    far = [-x for x in query]
    filler = "unrelated words about budgets vendors quarters meetings and approvals " * 3
    big = [Doc("t", "big", f"b{i:03d}", "hotel nights hotel nights hotel", ("staff",)) for i in range(150)]
    rare = [Doc("t", "rare", f"r{i}", f"hotel nights {filler} number {i}", ("staff",)) for i in range(2)]
    holder = Doc("t", "big", "holder", f"hotel nights {filler} held", ("staff",))
    home.write(big + rare + [holder], [query] * len(big) + [far] * (len(rare) + 1))
    copy = Doc("t", "rare", "r-copy", holder.text, ("staff",))
    home.write_copy(copy, holder)
    return home, [*rare, copy]


def test_a_source_filter_is_pushed_into_the_stores_so_a_rare_source_fills_k(
    rare_home: tuple[QueryHome, list[Doc]], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, rare = rare_home
    monkeypatch.setattr(
        "ragsync.query.search.MAX_FILTER_DEPTH", 64
    )  # over-fetch stops well before the rare ones
    rare_only = QueryFilters(source_ids=("rare",))

    def read() -> list[str]:
        hits = hybrid_query(
            home.settings, "hotel nights", groups=["staff"], tenant_id="t", k=3, filters=rare_only
        )
        return sorted(h.doc_id for h in hits)

    assert read() == sorted(d.doc_id for d in rare)  # k hits, the copy shown as itself
    # Without the push-down (a source of more documents than MAX_PUSHED_DOCS), the post-filter
    # over-fetch reaches its cap among the big source's hits and returns fewer than k.
    monkeypatch.setattr("ragsync.query.search.MAX_PUSHED_DOCS", 2)
    assert read() == []
