"""End to end against a real Redmine (tests/redmine.py): ``ragsync sync`` of a
``redmine`` source with the real model, Milvus Lite, tantivy and SQLite.

Each change made in Redmine (create, edit, comment, attach, make private,
move between projects, delete) reaches the indexes after one incremental
sync, with exact counts, and queries by user read what Redmine lets each
user read; a membership removed in Redmine stops access after one identity
sync; a full listing cut short deletes nothing and pauses the source.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from connectors import redmine as redmine_module
from ragsync.config import Settings, open_catalog
from ragsync.query.search import hybrid_query
from tests.redmine import DEVELOPER, MANAGER, REPORTER, Fault, FaultProxy, Redmine

pytestmark = pytest.mark.slow
TENANT = "acme"

PRINTER = "The printer on the third floor jams on every duplex page."
PRINTER_FIXED = "The printer on the third floor was replaced by a new laser model."
BADGES = "Visitor badges are handed out at the north entrance desk."
BADGES_NOTE = "Lost badges must be reported to security within one hour."
SALARY = "Salary bands for the coming year are attached for the managers."
PARKING = "The parking garage closes for resurfacing during the first week of May."
REPORT = "Incident report: the toner cartridge overheated and smoked."
HANDBOOK = "The employee handbook now describes the remote work allowance."


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return json.loads(captured.out.strip().splitlines()[-1])


def _read(settings: Settings, user: str, text: str) -> list[str]:
    """Texts of the hits ``user`` may read for ``text``."""
    return [r.text for r in hybrid_query(settings, text, user=user, tenant_id=TENANT, k=10)]


def _reads(settings: Settings, user: str, phrase: str) -> bool:
    return any(phrase in t for t in _read(settings, user, phrase))


def _live(settings: Settings) -> tuple[int, int]:
    """(documents indexed, chunk rows) in the catalog."""
    catalog = open_catalog(settings)
    try:
        indexed = catalog.documents.document_counts_by_status().get("indexed", 0)
        return indexed, sum(catalog.chunks.chunk_counts_by_doc(TENANT).values())
    finally:
        catalog.close()


def test_every_change_reaches_the_indexes_after_one_incremental_sync(
    redmine: Redmine, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = redmine.project("ops")
    hr = redmine.project("hr")
    alice, bob, carol, dave = (redmine.user(u) for u in ("alice", "bob", "carol", "dave"))
    devs = redmine.group("devs", [bob])
    alice_in_ops = redmine.member(ops, alice, REPORTER)  # default visibility: no private issues of others
    redmine.member(ops, devs, DEVELOPER)
    redmine.member(ops, carol, MANAGER)  # all: private issues too
    redmine.member(hr, dave, REPORTER)
    printer = redmine.issue(ops, "Printer jams", PRINTER)
    badges = redmine.issue(ops, "Visitor badges", BADGES)
    redmine.issue(ops, "Handbook", HANDBOOK)

    home = str(tmp_path / "home")
    settings = Settings(home=home)
    monkeypatch.setenv("RAGSYNC_TEST_REDMINE_KEY", redmine.key)
    proxy_faults: list[str] = []

    def plan(path: str) -> Fault | None:
        return (404, {}) if proxy_faults and proxy_faults[0] in path else None

    proxy = FaultProxy(redmine.url, plan)
    try:
        _cli(
            capsys, "sources", "add", "tickets", "--tenant", TENANT, "--type", "redmine", "--uri", proxy.url,
            "--credentials", "env://RAGSYNC_TEST_REDMINE_KEY", "--option", 'projects=["ops", "hr"]',
            "--home", home, "--json",
        )  # fmt: skip

        def sync() -> dict[str, Any]:
            time.sleep(3.2)  # the feed reads whole seconds at least lag_s (2 s) old
            return _cli(capsys, "sync", "tickets", "--tenant", TENANT, "--home", home, "--json", "--quiet")

        first = sync()
        assert first["mode"] == "full" and first["totals"]["documents_indexed"] == 3
        assert first["identities"]["users"] == 5  # admin, alice, bob, carol, dave
        assert _reads(settings, "alice", PRINTER) and _reads(settings, "bob", PRINTER)
        assert not _reads(settings, "dave", PRINTER)  # not a member of ops
        assert _read(settings, "nobody", PRINTER) == []

        def step(expect_read: int, expect_indexed: int, expect_deleted: int = 0) -> None:
            totals = sync()["totals"]
            assert (totals["changes_read"], totals["documents_indexed"], totals["documents_deleted"]) == (
                expect_read,
                expect_indexed,
                expect_deleted,
            ), totals
            assert totals["dead_lettered"] == 0

        parking = redmine.issue(ops, "Parking", PARKING)  # create
        step(1, 1)
        assert _reads(settings, "alice", PARKING) and _live(settings)[0] == 4

        redmine.update(printer, description=PRINTER_FIXED)  # edit
        step(1, 1)
        assert _reads(settings, "alice", PRINTER_FIXED) and not _reads(settings, "alice", PRINTER)

        redmine.update(badges, notes=BADGES_NOTE)  # comment
        step(1, 1)
        assert _reads(settings, "bob", BADGES_NOTE)

        attachment = redmine.attach(
            printer, "incident.txt", f"{REPORT}\n".encode()
        )  # attach: issue and child
        step(1, 2)
        hits = hybrid_query(settings, REPORT, user="alice", tenant_id=TENANT, k=10)
        (hit,) = [r for r in hits if REPORT in r.text]
        assert hit.parent_doc_id is not None  # a child document, linked to its page in Redmine
        assert (hit.uri, hit.parent_uri) == (
            f"{proxy.url}/attachments/{attachment}",
            f"{proxy.url}/issues/{printer}",
        )
        assert _live(settings)[0] == 5

        redmine.update(badges, is_private=True)  # make private
        step(1, 1)
        assert not _reads(settings, "alice", BADGES)  # default visibility, neither author nor assignee
        assert _reads(settings, "carol", BADGES) and not _reads(settings, "bob", BADGES_NOTE)  # bob: default

        redmine.update(parking, project_id=hr)  # move between projects
        step(1, 1)
        assert not _reads(settings, "alice", PARKING) and _reads(settings, "dave", PARKING)

        redmine.delete_issue(printer)  # delete: the issue (counted once), its attachment with it
        step(1, 0, 1)
        assert not _reads(settings, "carol", PRINTER_FIXED) and not _reads(settings, "carol", REPORT)
        assert _live(settings)[0] == 3  # badges, parking, handbook

        # A membership removed in Redmine: one identity sync, and alice reads nothing of ops.
        assert _reads(settings, "alice", HANDBOOK)
        redmine.remove_member(alice_in_ops)
        synced = _cli(
            capsys, "identities", "sync", "--source", "tickets", "--tenant", TENANT, "--home", home, "--json"
        )
        assert synced["users"] == 5
        assert all(_read(settings, "alice", t) == [] for t in (HANDBOOK, BADGES, BADGES_NOTE))
        assert _reads(settings, "bob", HANDBOOK)  # bob's group membership is untouched

        # A full listing cut short (the second page of ops is gone) deletes nothing and pauses the source.
        monkeypatch.setattr(redmine_module, "_PAGE", 1)
        proxy_faults.append(f"issue_id=%3E%3D{badges + 1}")
        code = main(["sync", "tickets", "--tenant", TENANT, "--full", "--home", home, "--json", "--quiet"])
        capsys.readouterr()
        assert code == 1
        assert _live(settings)[0] == 3 and _reads(settings, "bob", HANDBOOK)
        status = _cli(capsys, "status", "--home", home, "--json")
        (source,) = status["sources"]
        assert source["paused"]
    finally:
        proxy.close()
