"""Identities synced from the sources: users, groups and memberships.

Tables: ``identity_users``, ``identity_groups``, ``identity_memberships``.
A source's identities are replaced whole, in one transaction, by each
identity sync: a membership removed at the source is gone after the next one.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert, select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now
from ragsync.query.identity import IDENTITIES_FROM, MAX_GROUP_DEPTH, Identities, expand_groups

_TABLES = (schema.identity_memberships, schema.identity_groups, schema.identity_users)


class IdentitiesRepository(Repository):
    """Users, groups and memberships per (tenant, source)."""

    def replace_identities(self, tenant_id: str, source_id: str, identities: Identities) -> None:
        """Make ``identities`` the whole of what the catalog knows of this source's identities.

        One transaction: a reader sees the old set or the new one, never a mix.

        Args:
            tenant_id: the source's tenant.
            source_id: the source.
            identities: what the source listed (complete; anything absent is removed).
        """
        now = _now()
        users: list[dict[str, Any]] = [
            {"tenant_id": tenant_id, "source_id": source_id, "user_id": u, "synced_at": now}
            for u in sorted(identities.users)
        ]
        groups: list[dict[str, Any]] = [
            {"tenant_id": tenant_id, "source_id": source_id, "group_id": g, "synced_at": now}
            for g in sorted(identities.groups)
        ]
        members: list[dict[str, Any]] = [
            {
                "tenant_id": tenant_id,
                "source_id": source_id,
                "member_kind": kind,
                "member_id": m,
                "group_id": g,
            }
            for kind, pairs in (("user", identities.user_groups), ("group", identities.group_groups))
            for m, g in sorted(pairs)
        ]
        with self._engine.begin() as conn:
            for table in _TABLES:
                conn.execute(
                    delete(table).where(table.c.tenant_id == tenant_id, table.c.source_id == source_id)
                )
            for table, rows in (
                (schema.identity_users, users),
                (schema.identity_groups, groups),
                (schema.identity_memberships, members),
            ):
                for batch in _batches(rows):
                    conn.execute(insert(table), list(batch))

    def get_identities(self, tenant_id: str, source_id: str) -> Identities:
        """What the last identity sync stored for this source (empty when none ran)."""
        t, m = schema.identity_users, schema.identity_memberships
        g = schema.identity_groups
        with self._read_engine.connect() as conn:
            users = conn.execute(
                select(t.c.user_id).where(t.c.tenant_id == tenant_id, t.c.source_id == source_id)
            )
            groups = conn.execute(
                select(g.c.group_id).where(g.c.tenant_id == tenant_id, g.c.source_id == source_id)
            )
            user_set = frozenset(str(u) for u in users.scalars())
            group_set = frozenset(str(x) for x in groups.scalars())
            rows = conn.execute(
                select(m.c.member_kind, m.c.member_id, m.c.group_id).where(
                    m.c.tenant_id == tenant_id, m.c.source_id == source_id
                )
            ).all()
        return Identities(
            users=user_set,
            groups=group_set,
            user_groups=frozenset((str(a), str(b)) for k, a, b in rows if k == "user"),
            group_groups=frozenset((str(a), str(b)) for k, a, b in rows if k == "group"),
        )

    def groups_of_user(self, tenant_id: str, user_id: str, *, source_id: str | None = None) -> frozenset[str]:
        """The groups ``user_id`` holds in ``tenant_id``'s sources (or in one), pooled.

        For display and operator checks; a query reads per source
        (:meth:`groups_of_user_by_source`, ``ragsync.query.identity.Reader``).

        Returns:
            The union of :meth:`groups_of_user_by_source`, empty for an unknown user.
        """
        found = self.groups_of_user_by_source(tenant_id, user_id, source_id=source_id)
        return frozenset().union(*found.values())

    def groups_of_user_by_source(
        self, tenant_id: str, user_id: str, *, source_id: str | None = None
    ) -> dict[str, frozenset[str]]:
        """The groups ``user_id`` reads as in each of ``tenant_id``'s sources, nested groups expanded.

        Identities are keyed by (source, user id): the same id in two sources
        gets each source's groups under that source, never pooled. Only this
        tenant's rows are read: another tenant's user of the same name gives
        nothing. A user no identity sync listed has no groups (fail closed).
        Nesting is followed within the source that holds the membership
        (``ragsync.query.identity.expand_groups``, cycle-safe and depth-limited).

        Args:
            tenant_id: the reader's tenant.
            user_id: the source-local user id.
            source_id: only this source's memberships; None: every source of the tenant.

        Returns:
            source id -> the user's groups there; sources where the user holds none are absent.
        """
        m = schema.identity_memberships
        where = [m.c.tenant_id == tenant_id]
        if source_id is not None:
            where.append(m.c.source_id == source_id)
        with self._read_engine.connect() as conn:
            direct = conn.execute(
                select(m.c.source_id, m.c.group_id).where(
                    *where, m.c.member_kind == "user", m.c.member_id == user_id
                )
            ).all()
            sources = sorted({str(s) for s, _ in direct})
            # Only the groups reachable from the user's, a level per query by
            # the member index (never a whole source's group graph).
            parents: dict[str, dict[str, list[str]]] = {src: {} for src in sources}
            frontier = {(str(s), str(g)) for s, g in direct}
            seen = set(frontier)
            for _ in range(MAX_GROUP_DEPTH):
                if not frontier:
                    break
                rows = conn.execute(
                    select(m.c.source_id, m.c.member_id, m.c.group_id).where(
                        m.c.tenant_id == tenant_id,
                        m.c.member_kind == "group",
                        m.c.member_id.in_(sorted({g for _, g in frontier})),
                        m.c.source_id.in_(sources),
                    )
                ).all()
                reached: set[tuple[str, str]] = set()
                for s, child, parent in rows:
                    if (str(s), str(child)) in frontier:
                        parents[str(s)].setdefault(str(child), []).append(str(parent))
                        reached.add((str(s), str(parent)))
                frontier = reached - seen
                seen |= frontier
        return {src: expand_groups((str(g) for s, g in direct if s == src), parents[src]) for src in sources}

    def identity_links(self, tenant_id: str) -> dict[str, str]:
        """Sources of ``tenant_id`` whose ACLs name another source's identities.

        Read from each source's option ``identities_from``
        (``ragsync.query.identity.IDENTITIES_FROM``); a link to a source the tenant
        does not have is kept (it grants nothing: that source has no
        memberships of this tenant).

        Returns:
            source id -> the linked source id.
        """
        t = schema.sources
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(t.c.source_id, t.c.options).where(t.c.tenant_id == tenant_id)).all()
        links: dict[str, str] = {}
        for source_id, options in rows:
            try:
                value = json.loads(options or "{}").get(IDENTITIES_FROM)
            except (ValueError, AttributeError):
                value = None  # unreadable options: no link (the source's own identities)
            if isinstance(value, str) and value:
                links[str(source_id)] = value
        return links
