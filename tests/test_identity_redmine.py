"""Who may read a Redmine issue: the rule (``connectors.redmine_access``) on
its own, then against a real Redmine (tests/redmine.py), where Redmine itself
is the oracle: each user's own API key lists exactly the issues whose ACL the
user's synced groups allow."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from connectors.api import AccessDeniedError
from connectors.reader import FetchLimits
from connectors.redmine import RedmineConnector
from connectors.redmine_access import ProjectAccess, Role, issue_groups, user_groups
from connectors.registry import open_connector
from ragsync.catalog import Catalog
from ragsync.source_types import SourceSpec
from tests.redmine import DEVELOPER, MANAGER, REPORTER, Redmine

ROLES = {
    1: Role(1, True, "default"),  # Non member
    3: Role(3, True, "all"),
    4: Role(4, True, "default"),
    5: Role(5, True, "own"),
    6: Role(6, False, "all"),  # no view_issues
}


def _reads(
    user: int,
    issue: dict[str, object],
    projects: list[ProjectAccess],
    *,
    groups: tuple[int, ...] = (),
    admin: bool = False,
) -> bool:
    held = user_groups(user, admin=admin, groups=groups, projects=projects, roles=ROLES, non_member_role=1)
    return bool(held & set(issue_groups(issue)))


def test_the_rule_private_own_default_all_non_member_and_admins() -> None:
    private = ProjectAccess(10, public=False, issues=True, members={7: (4,), 8: (5,), 9: (3,), 11: (6,)})
    public = ProjectAccess(20, public=True, issues=True, members={8: (6,)})
    hidden = ProjectAccess(30, public=True, issues=False)
    projects = [private, public, hidden]
    plain = {"project": {"id": 10}, "author": {"id": 1}, "is_private": False}
    secret = {"project": {"id": 10}, "author": {"id": 1}, "is_private": True}
    assigned = {**secret, "assigned_to": {"id": 40}}  # a group
    authored = {"project": {"id": 10}, "author": {"id": 8}, "is_private": True}
    assert [_reads(7, i, projects) for i in (plain, secret, assigned, authored)] == [
        True,
        False,
        False,
        False,
    ]
    assert _reads(7, assigned, projects, groups=(40,))  # assigned to their group
    assert [_reads(8, i, projects) for i in (plain, secret, authored)] == [False, False, True]  # own
    assert [_reads(9, i, projects) for i in (plain, secret, authored)] == [True, True, True]  # all
    assert not _reads(11, plain, projects)  # a role without view_issues
    assert not _reads(12, plain, projects)  # not a member of a private project
    assert _reads(12, {"project": {"id": 20}, "is_private": False}, projects)  # non-member of a public one
    assert not _reads(12, {"project": {"id": 20}, "is_private": True}, projects)
    assert not _reads(
        8, {"project": {"id": 20}, "is_private": False}, projects
    )  # a member: their role, not non-member's
    assert not _reads(12, {"project": {"id": 30}, "is_private": False}, projects)  # no issue tracking
    assert _reads(99, secret, projects, admin=True)
    assert issue_groups({"is_private": False}) == ()  # no project: fail closed
    unknown = user_groups(12, admin=False, groups=(), projects=projects, roles=ROLES, non_member_role=None)
    assert unknown == set()  # the Non member role unknown: nothing through it
    overridden = ProjectAccess(20, public=True, issues=True, non_member_roles=(5,))
    held = user_groups(12, admin=False, groups=(), projects=[overridden], roles=ROLES, non_member_role=1)
    assert held == {"project:20:own:12"}  # the Non member users group's own membership wins


def _connector(redmine: Redmine, monkeypatch: pytest.MonkeyPatch) -> RedmineConnector:
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.key)
    spec = SourceSpec("rm", "acme", "redmine", redmine.url, credentials_ref="env://RAGSYNC_TEST_REDMINE_KEY")
    connector = open_connector(spec, limits=FetchLimits(max_bytes=1 << 20, timeout_s=60))
    assert isinstance(connector, RedmineConnector)
    return connector


def test_synced_groups_grant_exactly_what_redmine_shows_each_user(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every (user, issue) pair: readable through the synced groups iff
    Redmine lists the issue to that user's own API key."""
    eng = redmine.project("oracle-eng")
    pub = redmine.project("oracle-pub", public=True)
    users = {name: redmine.user(f"oracle-{name}") for name in ("rep", "dev", "mgr", "own", "out", "gone")}
    team = redmine.group("oracle-team", [users["dev"]])
    redmine.member(eng, users["rep"], REPORTER)
    redmine.member(eng, team, DEVELOPER)
    redmine.member(eng, users["mgr"], MANAGER)
    redmine.member(eng, users["own"], REPORTER)
    redmine.member(pub, users["dev"], MANAGER)
    # Reporter's issue visibility made "own" and issues assignable to groups
    # (the REST API changes neither a role nor a setting).
    redmine.sql("UPDATE roles SET issues_visibility = 'own' WHERE id = ?", REPORTER)
    redmine.setting("issue_group_assignment", "1")
    keys = {name: redmine.api_key(uid) for name, uid in users.items()}
    issues = [
        redmine.issue(eng, "Open plan"),
        redmine.issue(eng, "Secret plan", is_private=True),
        redmine.issue(eng, "Team's secret", is_private=True, assigned_to_id=team),
        redmine.issue(pub, "Public notice"),
        redmine.issue(pub, "Public but private", is_private=True),
    ]
    mine = redmine.call(
        "POST",
        "issues.json",
        {"issue": {"project_id": eng, "subject": "Rep's own", "is_private": True}},
        key=keys["own"],
    )["issue"]["id"]
    issues.append(int(mine))
    redmine.lock(users["gone"])
    rm = _connector(redmine, monkeypatch)
    ids = rm.list_identities()
    assert "oracle-gone" not in ids.users  # locked: no groups
    acl = {i: set(issue_groups(redmine.call("GET", f"issues/{i}.json")["issue"])) for i in issues}
    for name in ("rep", "dev", "mgr", "own", "out"):
        groups = {g for u, g in ids.user_groups if u == f"oracle-{name}"}
        expected = {i for i in issues if groups & acl[i]}
        shown = redmine.call("GET", "issues.json?status_id=*&limit=100", key=keys[name])["issues"]
        assert expected == {int(i["id"]) for i in shown} & set(issues), name
    # Spot checks of what the oracle said.
    groups_of = lambda name: {g for u, g in ids.user_groups if u == f"oracle-{name}"}  # noqa: E731
    assert not groups_of("rep") & acl[issues[0]]  # "own" visibility: not even the open issue
    assert groups_of("own") & acl[mine] and groups_of("dev") & acl[issues[2]]
    assert groups_of("out") & acl[issues[3]] and not groups_of("out") & acl[issues[4]]
    assert ("admin", "admins") in ids.user_groups


def test_a_key_that_is_not_an_administrators_cannot_list_identities(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch
) -> None:
    frank = redmine.user("frank")
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.api_key(frank))
    spec = SourceSpec("rm", "acme", "redmine", redmine.url, credentials_ref="env://RAGSYNC_TEST_REDMINE_KEY")
    rm = open_connector(spec, limits=FetchLimits(max_bytes=1 << 20, timeout_s=60))
    with pytest.raises(AccessDeniedError, match="403"):
        rm.list_identities()  # fails whole: the catalog keeps the identities it had


def test_a_membership_removed_in_redmine_is_gone_after_one_identity_sync(
    redmine: Redmine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = redmine.project("removal")
    erin = redmine.user("erin")
    membership = redmine.member(project, erin, DEVELOPER)
    catalog = Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}")
    rm = _connector(redmine, monkeypatch)
    try:
        catalog.identities.replace_identities("acme", "rm", rm.list_identities())
        assert f"project:{project}:public" in catalog.identities.groups_of_user("acme", "erin")
        removed = time.monotonic()
        redmine.remove_member(membership)
        catalog.identities.replace_identities("acme", "rm", rm.list_identities())  # one identity sync
        enforced = time.monotonic() - removed
        assert not any(
            g.startswith(f"project:{project}:") for g in catalog.identities.groups_of_user("acme", "erin")
        )
        print(
            f"\nmembership removal enforced {enforced:.2f}s after the removal in Redmine (one identity sync)"
        )
    finally:
        rm.close()
        catalog.close()
