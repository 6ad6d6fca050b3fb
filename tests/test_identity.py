"""Identities: nested-group expansion (pure) and the catalog's per-source memberships."""

from __future__ import annotations

import pytest

from ragsync.catalog import Catalog
from ragsync.query.identity import Identities, Reader, ReadGrant

# ------------------------------------------------------------------------ catalog

WIKI = Identities(
    users=frozenset({"Alice", "Bob", "Carol"}),
    groups=frozenset({"sysop", "staff", "all", "loop1", "loop2"}),
    user_groups=frozenset({("Alice", "sysop"), ("Bob", "staff"), ("Carol", "loop1")}),
    group_groups=frozenset({("sysop", "staff"), ("staff", "all"), ("loop1", "loop2"), ("loop2", "loop1")}),
)


def test_groups_of_user_expands_nesting_from_the_catalog(catalog: Catalog) -> None:
    catalog.identities.replace_identities("t1", "wiki", WIKI)
    assert catalog.identities.get_identities("t1", "wiki") == WIKI
    assert catalog.identities.groups_of_user("t1", "Alice") == {"sysop", "staff", "all"}
    assert catalog.identities.groups_of_user("t1", "Bob") == {"staff", "all"}
    assert catalog.identities.groups_of_user("t1", "Carol") == {"loop1", "loop2"}


def test_unknown_user_and_other_tenant_get_no_groups(catalog: Catalog) -> None:
    catalog.identities.replace_identities("t1", "wiki", WIKI)
    assert catalog.identities.groups_of_user("t1", "Mallory") == frozenset()
    assert catalog.identities.groups_of_user("t2", "Alice") == frozenset()
    assert catalog.identities.groups_of_user("t1", "alice") == frozenset()  # ids are exact


def test_replace_removes_memberships_gone_at_the_source(catalog: Catalog) -> None:
    catalog.identities.replace_identities("t1", "wiki", WIKI)
    catalog.identities.replace_identities("t2", "wiki", WIKI)
    smaller = Identities(
        users=WIKI.users,
        groups=WIKI.groups,
        user_groups=frozenset({("Bob", "staff")}),
        group_groups=frozenset({("staff", "all")}),
    )
    catalog.identities.replace_identities("t1", "wiki", smaller)
    assert catalog.identities.groups_of_user("t1", "Alice") == frozenset()
    assert catalog.identities.groups_of_user("t1", "Bob") == {"staff", "all"}
    assert catalog.identities.get_identities("t1", "wiki") == smaller
    assert catalog.identities.groups_of_user("t2", "Alice") == {
        "sysop",
        "staff",
        "all",
    }  # the other tenant's copy stays


def test_nesting_stays_within_the_source_that_holds_the_membership(catalog: Catalog) -> None:
    catalog.identities.replace_identities("t1", "wiki", Identities(user_groups=frozenset({("u", "eng")})))
    catalog.identities.replace_identities(
        "t1", "drive", Identities(group_groups=frozenset({("eng", "secret")}))
    )
    assert catalog.identities.groups_of_user("t1", "u") == {"eng"}
    assert catalog.identities.groups_of_user("t1", "u", source_id="drive") == frozenset()
    assert catalog.identities.groups_of_user("t1", "u", source_id="wiki") == {"eng"}


def test_groups_of_user_follows_nesting_to_any_depth(catalog: Catalog) -> None:
    """The red team's MEDIUM: nesting past 10 levels was not followed, so a
    deny entry on a group 11 levels up did not apply."""
    chain = frozenset((f"g{i}", f"g{i + 1}") for i in range(60))
    nested = Identities(user_groups=frozenset({("u", "g0")}), group_groups=chain | {("g60", "g0")})
    catalog.identities.replace_identities("t1", "wiki", nested)
    assert catalog.identities.groups_of_user("t1", "u") == {f"g{i}" for i in range(61)}


def test_a_user_past_the_bound_of_reached_groups_gets_none(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragsync.catalog.identities as repo

    monkeypatch.setattr(repo, "MAX_REACHED_GROUPS", 20)
    chain = frozenset((f"g{i}", f"g{i + 1}") for i in range(25))
    users = frozenset({("deep", "g0"), ("shallow", "g10")})
    catalog.identities.replace_identities("t1", "wiki", Identities(user_groups=users, group_groups=chain))
    assert catalog.identities.groups_of_user("t1", "shallow") == {f"g{i}" for i in range(10, 26)}  # 16 groups
    assert catalog.identities.groups_of_user_by_source("t1", "deep") == {}  # 26 > 20: fail closed


def test_same_user_id_in_two_sources_keeps_each_sources_groups(catalog: Catalog) -> None:
    catalog.identities.replace_identities(
        "t1", "wiki", Identities(user_groups=frozenset({("alice", "staff")}))
    )
    catalog.identities.replace_identities(
        "t1", "jira", Identities(user_groups=frozenset({("alice", "admins")}))
    )
    assert catalog.identities.groups_of_user_by_source("t1", "alice") == {
        "wiki": {"staff"},
        "jira": {"admins"},
    }
    assert catalog.identities.groups_of_user_by_source("t1", "alice", source_id="jira") == {
        "jira": {"admins"}
    }
    assert catalog.identities.groups_of_user_by_source("t1", "nobody") == {}


def test_identity_links_are_read_from_the_tenants_source_options(catalog: Catalog) -> None:
    catalog.sources.create_source("t1", source_id="files", type="object_store", if_exists="update")
    catalog.sources.create_source("t1", source_id="wiki", type="wiki", if_exists="update")
    catalog.sources.create_source("t2", source_id="files", type="object_store", if_exists="update")
    assert catalog.identities.identity_links("t1") == {}
    options = {"identities_from": "wiki", "acl_groups": ["x"]}
    catalog.syncs.configure_source("files", tenant_id="t1", options=options)
    catalog.syncs.configure_source("files", tenant_id="t2", options={"identities_from": "elsewhere"})
    assert catalog.identities.identity_links("t1") == {"files": "wiki"}
    assert catalog.identities.identity_links("t2") == {"files": "elsewhere"}


# ------------------------------------------------------------------------- Reader

STAFF = ReadGrant(frozenset({"acl-staff", "acl-staff-not-x"}), frozenset({"acl-staff-not-x"}))
ADMINS = ReadGrant(frozenset({"acl-admins"}))


def test_a_user_reads_each_source_only_through_that_sources_grant() -> None:
    reader = Reader(by_source={"wiki": STAFF, "jira": ADMINS}, links={"files": "wiki"})
    assert reader.may_read("wiki", "acl-staff")
    assert not reader.may_read("wiki", "acl-admins")  # admins is jira's, not the wiki's
    assert reader.may_read("jira", "acl-admins")
    assert not reader.may_read("jira", "acl-staff")
    assert reader.may_read("files", "acl-staff")  # linked to the wiki's identities
    assert not reader.may_read("files", "acl-admins")
    assert not reader.may_read("drive", "acl-staff")  # no identities, no link: nothing
    assert not reader.may_read("wiki", "acl-staff-not-x")  # deny wins
    assert reader.any_allowed == {"acl-staff", "acl-staff-not-x", "acl-admins"}
    assert reader.any_denied == {"acl-staff-not-x"}


def test_caller_groups_hold_in_every_source() -> None:
    reader = Reader(everywhere=STAFF, by_source={"jira": ADMINS})
    assert reader.may_read("anything", "acl-staff") and reader.may_read("jira", "acl-staff")
    assert not reader.may_read("jira", "acl-admins")  # by_source is ignored for caller groups
    assert not reader.may_read("anything", "acl-staff-not-x")
    assert Reader().any_allowed == frozenset() and not Reader().may_read("s", "acl-staff")
