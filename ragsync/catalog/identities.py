"""Identities synced from the sources: users, groups and memberships.

Tables: ``identity_users``, ``identity_groups``, ``identity_memberships``.
A source's identities are replaced whole, in one transaction, by each
identity sync: a membership removed at the source is gone after the next one.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import delete, insert, select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _now
from ragsync.query.identity import IDENTITIES_FROM, MAX_REACHED_GROUPS, Identities

log = logging.getLogger(__name__)

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
        Nesting is followed within the source that holds the membership, to
        any depth and through cycles, in one recursive query (each step by
        the member index: never a whole source's group graph). Complete, so
        a deny entry on a group reached through any number of levels applies.
        A user whose memberships reach more than
        :data:`ragsync.query.identity.MAX_REACHED_GROUPS` groups gets none (fail
        closed: the groups past the bound could be denied ones); the operator's
        log says so.

        Args:
            tenant_id: the reader's tenant.
            user_id: the source-local user id.
            source_id: only this source's memberships; None: every source of the tenant.

        Returns:
            source id -> the user's groups there; sources where the user holds
            none are absent; ``{}`` past the bound.
        """
        m = schema.identity_memberships
        direct = select(m.c.source_id, m.c.group_id).where(
            m.c.tenant_id == tenant_id, m.c.member_kind == "user", m.c.member_id == user_id
        )
        if source_id is not None:
            direct = direct.where(m.c.source_id == source_id)
        reach = direct.cte("reach", recursive=True)
        # UNION (not UNION ALL) keeps each (source, group) once: a cycle ends the walk.
        reach = reach.union(
            select(m.c.source_id, m.c.group_id).where(
                m.c.tenant_id == tenant_id,
                m.c.member_kind == "group",
                m.c.source_id == reach.c.source_id,
                m.c.member_id == reach.c.group_id,
            )
        )
        with self._read_engine.connect() as conn:
            rows = conn.execute(
                select(reach.c.source_id, reach.c.group_id).limit(MAX_REACHED_GROUPS + 1)
            ).all()
        if len(rows) > MAX_REACHED_GROUPS:
            log.warning(
                "user %r of tenant %r reaches more than %d groups: refused every document (fail closed)",
                user_id,
                tenant_id,
                MAX_REACHED_GROUPS,
            )
            return {}
        found: dict[str, set[str]] = {}
        for src, group in rows:
            found.setdefault(str(src), set()).add(str(group))
        return {src: frozenset(groups) for src, groups in found.items()}

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
