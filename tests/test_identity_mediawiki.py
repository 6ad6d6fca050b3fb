"""Identities from a real MediaWiki (tests/mediawiki.py): users and groups
listed by the connector, stored per source, and a removal at the wiki
enforced at the next identity sync."""

from __future__ import annotations

import time
from pathlib import Path

from connectors.base import SourceSpec
from connectors.mediawiki import MediaWikiConnector
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync.catalog import Catalog
from tests.mediawiki import MediaWiki


def _connector(wiki: MediaWiki) -> MediaWikiConnector:
    spec = SourceSpec("wiki-test", "acme", "wiki", wiki.api_url, options={"acl_groups": ["staff"]})
    connector = open_connector(spec, limits=FetchLimits(max_bytes=1 << 20, timeout_s=60))
    assert isinstance(connector, MediaWikiConnector)
    return connector


def test_list_identities_reads_users_and_their_groups(mediawiki: MediaWiki) -> None:
    mediawiki.add_user("Alice", "staff")
    mediawiki.add_user("Bob", "staff", "finance")
    mediawiki.add_user("Carol")
    wiki = _connector(mediawiki)
    try:
        ids = wiki.list_identities()
    finally:
        wiki.close()
    assert {"Admin", "Alice", "Bob", "Carol"} <= ids.users
    mine = {(u, g) for u, g in ids.user_groups if u in ("Alice", "Bob", "Carol")}
    explicit = {(u, g) for u, g in mine if g not in ("user", "autoconfirmed")}
    assert explicit == {
        ("Alice", "staff"),
        ("Alice", "everyone"),
        ("Bob", "staff"),
        ("Bob", "finance"),
        ("Bob", "everyone"),
        ("Carol", "everyone"),
    }
    assert ("Admin", "sysop") in ids.user_groups
    assert not any(g == "*" for _, g in ids.user_groups)
    assert ids.group_groups == frozenset()


def test_a_membership_removed_at_the_wiki_is_gone_after_one_sync(
    mediawiki: MediaWiki, tmp_path: Path
) -> None:
    mediawiki.add_user("Alice", "staff")
    catalog = Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}")
    wiki = _connector(mediawiki)
    try:
        catalog.replace_identities("acme", "wiki-test", wiki.list_identities())
        assert "staff" in catalog.groups_of_user("acme", "Alice")
        assert catalog.groups_of_user("other", "Alice") == frozenset()

        removed = time.monotonic()
        mediawiki.remove_from_group("Alice", "staff")
        catalog.replace_identities("acme", "wiki-test", wiki.list_identities())
        enforced = time.monotonic() - removed
        assert "staff" not in catalog.groups_of_user("acme", "Alice")
        assert "everyone" in catalog.groups_of_user("acme", "Alice")
        print(
            f"\nmembership removal enforced {enforced:.2f}s after the removal at the wiki (one identity sync)"
        )
    finally:
        wiki.close()
        catalog.close()
