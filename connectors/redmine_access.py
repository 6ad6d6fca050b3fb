"""Who may read a Redmine issue, as ACL groups and memberships (pure, no I/O).

Redmine 5.0's rule (``Issue.visible_condition``, ``Project.allowed_to_condition``):
a user reads an issue of project P when P is not archived, has the
``issue_tracking`` module, and one of the user's roles in P has
``view_issues``, judged by that role's *issues visibility*:

- ``all``: every issue of P, private ones included;
- ``default``: the non-private issues, and private ones the user wrote or
  that are assigned to the user or to one of the user's groups;
- ``own``: only issues the user wrote or that are assigned to the user or
  to one of the user's groups.

The user's roles in P: their membership's roles (direct, or inherited from a
group made member of P); a non-member of a *public* P gets the roles of the
builtin "Non member users" group's membership in P when it has one, else the
builtin *Non member* role. Administrators read every issue.

So a document's ACL depends only on the issue (project, private flag, author,
assignee) and everything else (memberships, roles, groups, a project made
public) is in the identities: a membership removed in Redmine stops access at
the next identity sync, without touching a document. Group ids:

- ``admins``: Redmine administrators;
- ``project:P:all``: holders of an ``all`` role with ``view_issues`` in P;
- ``project:P:public``: holders of a ``default`` role with ``view_issues`` in P;
- ``project:P:own:X``: holders of a ``default`` or ``own`` role with
  ``view_issues`` in P who are principal X (a user id) or members of group X.

Fail closed where the REST API cannot tell: the *Anonymous* role grants
nothing (readers of the index are Redmine users; anonymous access is not
followed), and per-tracker limits of ``view_issues`` (a role setting the REST
API does not show) are not known: such a role is taken to see every tracker,
which docs/redmine.md states as a limitation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragsync.query.identity import Identities

ADMINS = "admins"
VISIBILITIES = ("all", "default", "own")


def project_group(project_id: int, kind: str, principal: int | None = None) -> str:
    """The group id of holders of ``kind`` (``all``, ``public``, ``own``) access in a project."""
    base = f"project:{project_id}:{kind}"
    return base if principal is None else f"{base}:{principal}"


def _id(value: Any) -> int | None:
    """The ``id`` of a Redmine reference (``{"id": 3, "name": ...}``), None when absent or not a number."""
    if isinstance(value, Mapping):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def issue_groups(issue: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups that may read ``issue`` (one record of Redmine's issue API).

    Args:
        issue: the issue's JSON (``project``, ``is_private``, ``author``,
            ``assigned_to``).

    Returns:
        Sorted group ids; ``()`` when the issue names no project (fail closed:
        not indexed).
    """
    project = _id(issue.get("project"))
    if project is None:
        return ()
    groups = {ADMINS, project_group(project, "all")}
    if issue.get("is_private") is not True:
        groups.add(project_group(project, "public"))
    for who in (issue.get("author"), issue.get("assigned_to")):
        principal = _id(who)
        if principal is not None:
            groups.add(project_group(project, "own", principal))
    return tuple(sorted(groups))


@dataclass(frozen=True)
class Role:
    """A role as it bears on reading issues.

    Attributes:
        id: the role id.
        view_issues: whether it has the ``view_issues`` permission.
        visibility: its issues visibility (``all``, ``default``, ``own``);
            anything else grants nothing.
    """

    id: int
    view_issues: bool
    visibility: str

    @classmethod
    def from_api(cls, record: Mapping[str, Any]) -> Role:
        """A role from ``GET /roles/ID.json``'s ``role``."""
        permissions = record.get("permissions")
        return cls(
            id=int(record["id"]),
            view_issues=isinstance(permissions, list) and "view_issues" in permissions,
            visibility=str(record.get("issues_visibility", "")),
        )


@dataclass(frozen=True)
class ProjectAccess:
    """One project's membership, as it bears on reading its issues.

    Attributes:
        id: the project id.
        public: Redmine's ``is_public``.
        issues: the ``issue_tracking`` module is enabled (else no one reads its issues).
        members: user id -> role ids of their membership (group-inherited roles included).
        non_member_roles: roles of the builtin "Non member users" group's
            membership, None when it has none (the builtin Non member role applies).
    """

    id: int
    public: bool
    issues: bool
    members: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    non_member_roles: tuple[int, ...] | None = None


def _grants(project: int, role: Role, user: int, user_groups: Iterable[int]) -> set[str]:
    """What holding ``role`` in ``project`` gives ``user`` (a member of ``user_groups``)."""
    if not role.view_issues or role.visibility not in VISIBILITIES:
        return set()
    if role.visibility == "all":
        return {project_group(project, "all")}
    out = {project_group(project, "own", p) for p in (user, *user_groups)}
    if role.visibility == "default":
        out.add(project_group(project, "public"))
    return out


def user_groups(
    user: int,
    *,
    admin: bool,
    groups: Iterable[int],
    projects: Iterable[ProjectAccess],
    roles: Mapping[int, Role],
    non_member_role: int | None,
) -> set[str]:
    """Every group id (above) user ``user`` holds.

    Args:
        user: the user id.
        admin: a Redmine administrator.
        groups: ids of the Redmine groups the user is in.
        projects: every project whose issues can be read (active or closed).
        roles: every role by id; a role id missing here grants nothing.
        non_member_role: the builtin Non member role's id, None when unknown
            (non-members of public projects then get nothing: fail closed).

    Returns:
        The group ids.
    """
    mine = tuple(groups)
    out = {ADMINS} if admin else set()
    for project in projects:
        if not project.issues:
            continue
        if user in project.members:
            held: tuple[int, ...] = project.members[user]
        elif project.public:
            builtin = (non_member_role,) if non_member_role is not None else ()
            held = project.non_member_roles if project.non_member_roles is not None else builtin
        else:
            held = ()
        for role_id in held:
            role = roles.get(role_id)
            if role is not None:
                out |= _grants(project.id, role, user, mine)
    return out


def identities(
    users: Mapping[int, tuple[str, bool]],
    members_of: Mapping[int, Iterable[int]],
    projects: Iterable[ProjectAccess],
    roles: Mapping[int, Role],
    non_member_role: int | None,
) -> Identities:
    """The source's identities: each active user and the groups they hold.

    Args:
        users: user id -> (login, administrator) of every active user.
        members_of: Redmine group id -> ids of its users.
        projects: every project whose issues can be read.
        roles: every role by id.
        non_member_role: the builtin Non member role's id, or None.

    Returns:
        ``Identities`` keyed by login (what a query names), without nested
        groups (a Redmine group's grants are expanded into its users'
        groups here).
    """
    project_list = list(projects)
    in_groups: dict[int, set[int]] = {}
    for group, members in members_of.items():
        for member in members:
            in_groups.setdefault(member, set()).add(group)
    pairs: set[tuple[str, str]] = set()
    for user, (login, admin) in users.items():
        held = user_groups(
            user,
            admin=admin,
            groups=sorted(in_groups.get(user, ())),
            projects=project_list,
            roles=roles,
            non_member_role=non_member_role,
        )
        pairs.update((login, g) for g in held)
    return Identities(
        users=frozenset(login for login, _ in users.values()),
        groups=frozenset(g for _, g in pairs),
        user_groups=frozenset(pairs),
    )
