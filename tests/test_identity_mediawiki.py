"""Identities from a real MediaWiki (tests/mediawiki.py): users and groups
listed by the connector, stored per source, and a removal at the wiki
enforced at the next identity sync."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from connectors.mediawiki import MediaWikiConnector
from connectors.reader import FetchLimits
from connectors.registry import open_connector
from ragsync.catalog import Catalog
from ragsync.config import Settings, open_catalog
from ragsync.query.search import hybrid_query
from ragsync.source_types import SourceSpec
from tests.mediawiki import MediaWiki
from tests.query_home import Doc, QueryHome


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
        catalog.identities.replace_identities("acme", "wiki-test", wiki.list_identities())
        assert "staff" in catalog.identities.groups_of_user("acme", "Alice")
        assert catalog.identities.groups_of_user("other", "Alice") == frozenset()

        removed = time.monotonic()
        mediawiki.remove_from_group("Alice", "staff")
        catalog.identities.replace_identities("acme", "wiki-test", wiki.list_identities())
        enforced = time.monotonic() - removed
        assert "staff" not in catalog.identities.groups_of_user("acme", "Alice")
        assert "everyone" in catalog.identities.groups_of_user("acme", "Alice")
        print(
            f"\nmembership removal enforced {enforced:.2f}s after the removal at the wiki (one identity sync)"
        )
    finally:
        wiki.close()
        catalog.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_sync_refreshes_identities_and_query_by_user_reads_through_them(
    mediawiki: MediaWiki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mediawiki.edit("Alpha", "== Animals ==\nAlpacas graze on the high plateau of the Andes every summer.")
    mediawiki.add_user("Alice", "staff")
    home = str(tmp_path / "home")
    assert main(["sources", "add", "wiki", "--tenant", "acme", "--type", "wiki", "--uri", mediawiki.api_url,
                 "--acl-groups", "staff", "--home", home]) == 0  # fmt: skip
    synced = _cli(capsys, "sync", "wiki", "--tenant", "acme", "--home", home, "--json", "--quiet")
    assert synced["identities"]["users"] >= 3  # Admin, Alice, MediaWiki default
    hits = _cli(
        capsys, "query", "alpacas andes", "--user", "Alice", "--tenant", "acme", "--home", home, "--json"
    )
    assert "Alpacas graze" in hits[0]["text"]  # public pages, read through everyone
    assert (
        _cli(
            capsys, "query", "alpacas andes", "--user", "Nobody", "--tenant", "acme", "--home", home, "--json"
        )
        == []
    )
    assert (
        _cli(
            capsys, "query", "alpacas andes", "--user", "Alice", "--tenant", "other", "--home", home, "--json"
        )
        == []
    )

    catalog = open_catalog(Settings(home=home))
    try:
        assert "staff" in catalog.identities.groups_of_user("acme", "Alice")
        mediawiki.remove_from_group("Alice", "staff")
        out = _cli(
            capsys, "identities", "sync", "--source", "wiki", "--tenant", "acme", "--home", home, "--json"
        )
        assert out["source_id"] == "wiki" and out["tenant_id"] == "acme"
        assert "staff" not in catalog.identities.groups_of_user("acme", "Alice")
        assert "everyone" in catalog.identities.groups_of_user("acme", "Alice")
    finally:
        catalog.close()


def test_a_wiki_member_reads_restricted_chunks_until_removed_at_the_wiki(
    mediawiki: MediaWiki, tmp_path: Path
) -> None:
    """Restricted chunks (ACL ``staff``) in the real stores; who is in staff comes from the real wiki."""
    home = QueryHome(tmp_path / "home")
    home.write(
        [Doc("acme", "wiki-test", "Secret", "Hotel nights for staff are capped at 150 EUR.", ("staff",))]
    )
    mediawiki.add_user("Alice", "staff")
    mediawiki.add_user("Bob")
    catalog = open_catalog(home.settings)
    wiki = _connector(mediawiki)
    try:
        catalog.identities.replace_identities("acme", "wiki-test", wiki.list_identities())

        def read(user: str, tenant: str = "acme") -> list[str]:
            return [
                r.text for r in hybrid_query(home.settings, "hotel nights", user=user, tenant_id=tenant, k=5)
            ]

        assert read("Alice") == ["Hotel nights for staff are capped at 150 EUR."]
        assert read("Bob") == []
        assert read("Nobody") == []
        assert read("Alice", tenant="other") == []

        removed = time.monotonic()
        mediawiki.remove_from_group("Alice", "staff")
        catalog.identities.replace_identities(
            "acme", "wiki-test", wiki.list_identities()
        )  # one identity sync
        assert read("Alice") == []
        print(
            f"\nrestricted chunks hidden from Alice {time.monotonic() - removed:.2f}s "
            "after the removal at the wiki"
        )
    finally:
        wiki.close()
        catalog.close()
