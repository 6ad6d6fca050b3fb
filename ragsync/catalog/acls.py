"""ACLs: the allowed and denied groups behind each ACL id (table ``acls``),
and the ACL ids a reader's groups reach. A chunk carries ACL ids, never
people; queries turn a reader's groups into ACL ids here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from ragsync.catalog import schema
from ragsync.catalog.base import Repository, _batches, _json_list, _now, _tuple_from_json


class AclsRepository(Repository):
    """ACL rows and the lookups from a reader's groups to ACL ids."""

    def upsert_acl(
        self, acl_id: str, tenant_id: str, groups: Sequence[str], deny: Sequence[str] = ()
    ) -> None:
        """Create or replace an ACL row and its group lookup rows.

        Args:
            acl_id: ACL id (stable for a set of allowed and denied groups).
            tenant_id: owner tenant.
            groups: groups allowed to read; stored sorted and de-duplicated.
            deny: groups explicitly denied (their members never read through
                this ACL, whatever else they belong to).
        """
        unique = sorted(set(groups))
        denied = sorted(set(deny))
        with self._engine.begin() as conn:
            self._upsert(
                conn,
                schema.acls,
                [
                    {
                        "acl_id": acl_id,
                        "tenant_id": tenant_id,
                        "allow_groups": _json_list(unique),
                        "deny_groups": _json_list(denied),
                        "updated_at": _now(),
                    }
                ],
                ["acl_id"],
                ["tenant_id", "allow_groups", "deny_groups", "updated_at"],
            )
            for table, names in ((schema.acl_groups, unique), (schema.acl_denies, denied)):
                conn.execute(table.delete().where(table.c.acl_id == acl_id))
                if names:
                    conn.execute(
                        table.insert(),
                        [{"tenant_id": tenant_id, "group_name": g, "acl_id": acl_id} for g in names],
                    )

    def get_acl_groups(self, acl_id: str) -> tuple[str, ...] | None:
        """The groups of an ACL, sorted, or None when the ACL does not exist."""
        with self._read_engine.connect() as conn:
            text = conn.execute(
                select(schema.acls.c.allow_groups).where(schema.acls.c.acl_id == acl_id)
            ).scalar_one_or_none()
        return None if text is None else _tuple_from_json(text)

    def get_acl_deny(self, acl_id: str) -> tuple[str, ...]:
        """The groups an ACL denies, sorted (``()`` for none or an unknown ACL)."""
        with self._read_engine.connect() as conn:
            text = conn.execute(
                select(schema.acls.c.deny_groups).where(schema.acls.c.acl_id == acl_id)
            ).scalar_one_or_none()
        return _tuple_from_json(text) if text else ()

    def acl_ids_denying(self, tenant_id: str, groups: Sequence[str]) -> list[str]:
        """ACL ids of a tenant that deny at least one of the groups (sorted)."""
        return self._acl_lookup(schema.acl_denies, tenant_id, groups)

    def _acl_lookup(self, t: Any, tenant_id: str, groups: Sequence[str]) -> list[str]:
        unique = sorted(set(groups))
        if not unique:
            return []
        found: set[str] = set()
        with self._read_engine.connect() as conn:
            for batch in _batches(unique):
                query = select(t.c.acl_id).where(t.c.tenant_id == tenant_id, t.c.group_name.in_(batch))
                found.update(conn.execute(query).scalars())
        return sorted(found)

    def acl_ids_for_groups(self, tenant_id: str, groups: Sequence[str]) -> list[str]:
        """ACL ids of a tenant that allow at least one of the groups.

        Args:
            tenant_id: tenant; ACLs of other tenants are never returned.
            groups: the reader's groups.

        Returns:
            Sorted, unique ACL ids; ``[]`` when ``groups`` is empty. An ACL
            that also denies one of the groups is left out (a deny entry wins
            over every allow).
        """
        allowed = self._acl_lookup(schema.acl_groups, tenant_id, groups)
        denied = set(self.acl_ids_denying(tenant_id, groups))
        return [a for a in allowed if a not in denied]
