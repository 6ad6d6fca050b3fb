"""Identities: which groups a user reads as, from memberships synced from the sources.

Plain types only; the catalog stores the memberships and expands nested
groups (:mod:`ragsync.catalog.identities`), and the query resolves a user
through them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Identities:
    """What one source says about its users and groups (a connector's ``list_identities()``).

    Attributes:
        users: source-local user ids (a wiki user name, an e-mail, an accountId).
        groups: group ids, as the connector writes them into document ACLs.
        user_groups: (user id, group id) pairs: direct memberships.
        group_groups: (member group id, parent group id) pairs: nested groups.
    """

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    user_groups: frozenset[tuple[str, str]] = frozenset()
    group_groups: frozenset[tuple[str, str]] = frozenset()


MAX_REACHED_GROUPS = 10_000
"""The most groups one user's memberships may reach (nesting followed to any
depth, per source, pooled over the tenant's sources). A user reaching more
reads nothing: a group past the bound may be one a document denies, and for
a deny "fewer groups" is not fail-closed (``Catalog.groups_of_user_by_source``)."""


IDENTITIES_FROM = "identities_from"
"""Source option: the id of another source of the same tenant whose users and
groups this source's ACLs name (a folder whose sidecars name the wiki's groups)."""


@dataclass(frozen=True)
class ReadGrant:
    """ACL ids a reader's groups allow, and those that deny one of the groups."""

    allowed: frozenset[str] = frozenset()
    denied: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Reader:
    """What one query's reader may read, per source.

    Caller-supplied groups (an IdP's) hold in every source: ``everywhere``.
    A user named in the query is only known per source: identities are keyed
    by (source, user id), and the same name in two sources may be two
    people. So a document of source ``S`` is read only through the grant of
    the groups the user holds in ``S``'s identity source: ``S`` itself, or
    the source named by ``S``'s option ``identities_from`` (an explicit link
    the operator or tenant declares). A source with neither grants nothing.

    Attributes:
        everywhere: the grant of caller groups, for every source; None for a user.
        by_source: a user's grant per identity source.
        links: source id -> the source whose identities its ACLs name.
    """

    everywhere: ReadGrant | None = None
    by_source: Mapping[str, ReadGrant] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)

    def grant(self, source_id: str) -> ReadGrant:
        """The grant that applies to documents of ``source_id``."""
        if self.everywhere is not None:
            return self.everywhere
        return self.by_source.get(self.links.get(source_id, source_id), ReadGrant())

    def may_read(self, source_id: str, acl_id: str) -> bool:
        """True when a document of ``source_id`` with ACL ``acl_id`` is readable:
        allowed by the source's grant and not denied by it (deny wins)."""
        grant = self.grant(source_id)
        return acl_id in grant.allowed and acl_id not in grant.denied

    @property
    def any_allowed(self) -> frozenset[str]:
        """Every ACL id allowed in some source (what the stores pre-filter on)."""
        grants = [self.everywhere] if self.everywhere is not None else list(self.by_source.values())
        return frozenset().union(*(g.allowed for g in grants))

    @property
    def any_denied(self) -> frozenset[str]:
        """Every ACL id denied in some source: excluded before the per-source
        check (fail closed: an ACL denying a group the user holds in one
        source is not shown from another)."""
        grants = [self.everywhere] if self.everywhere is not None else list(self.by_source.values())
        return frozenset().union(*(g.denied for g in grants))
