"""Identities: which groups a user reads as, from memberships synced from the sources.

Pure functions only; the catalog stores the memberships
(:mod:`ragsync.catalog.identities`) and the query resolves a user through them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


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


MAX_GROUP_DEPTH = 10
"""Nesting levels followed from a user's direct groups; deeper parents are ignored."""


def expand_groups(
    direct: Iterable[str], parents: Mapping[str, Iterable[str]], *, max_depth: int = MAX_GROUP_DEPTH
) -> frozenset[str]:
    """The groups a member of ``direct`` belongs to, nested groups included.

    Breadth-first from ``direct`` along ``parents`` (group -> groups it is a
    member of). A cycle stops at the first group seen twice; nesting deeper
    than ``max_depth`` levels above a direct group is not followed (fail
    closed: fewer groups, never more).

    Args:
        direct: the user's own groups.
        parents: for each group, the groups that contain it.
        max_depth: levels of nesting followed (0: only ``direct``).

    Returns:
        ``direct`` and every group reached.

    Raises:
        ValueError: ``max_depth`` is negative.
    """
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    seen = set(direct)
    frontier = set(seen)
    for _ in range(max_depth):
        frontier = {p for g in frontier for p in parents.get(g, ()) if p not in seen}
        if not frontier:
            break
        seen |= frontier
    return frozenset(seen)
