"""Where backfills and events meet, as a user hits it: real files, the CLI
(``ragsync backfill``, ``events push``, ``stream``, ``query``, ``status``)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cli.main import main

TENANT = "acme"
SOURCE = "docs"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    try:
        return code, json.loads(out)
    except ValueError:
        return code, out


class User:
    """One ragsync home and one source folder, driven through the CLI."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.folder = tmp_path / "share"
        self.folder.mkdir()
        self.home = str(tmp_path / "home")
        self.capsys = capsys
        self.events = tmp_path / "events.jsonl"

    def run(self, *argv: str) -> Any:
        code, out = _run(self.capsys, *argv, "--home", self.home)
        assert code == 0, out
        return out

    def add_source(self, *extra: str) -> Any:
        return self.run(
            "sources",
            "add",
            SOURCE,
            "--tenant",
            TENANT,
            "--type",
            "object_store",
            "--uri",
            str(self.folder),
            *extra,
        )

    def backfill(self, groups: str = "everyone") -> Any:
        return self.run(
            "backfill",
            str(self.folder),
            "--tenant",
            TENANT,
            "--source-id",
            SOURCE,
            "--acl-groups",
            groups,
            "--quiet",
        )

    def push(self, *events: dict[str, Any]) -> Any:
        self.events.write_text("".join(json.dumps({"source_id": SOURCE, **e}) + "\n" for e in events))
        return self.run("events", "push", str(self.events), "--tenant", TENANT)

    def stream(self) -> Any:
        return self.run("stream", "--until-idle", "--quiet")

    def query(self, text: str, groups: str) -> list[str]:
        hits = self.run("query", text, "--groups", groups, "--tenant", TENANT)
        return sorted({os.path.basename(h["uri"]) for h in hits})


def test_revision_delete_after_a_backfill_removes_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = User(tmp_path, capsys)
    plan = user.folder / "plan.md"
    plan.write_text("# Plan\n\nThe launch window opens on the ninth of March.\n")
    assert user.add_source("--version-domain", "revision")["version_domain"] == "revision"
    user.backfill()
    assert user.query("launch window March", "everyone") == ["plan.md"]
    # The source's revision 2 is not "older" than the file time the backfill
    # saw (about 1.7e9): the two domains are ordered by when each was observed.
    now = time.time()
    user.push({"doc_id": "plan.md", "op": "delete", "source_version": 2, "event_time": now + 1})
    assert user.stream()["events_stale"] == 0
    assert user.query("launch window March", "everyone") == []
    # A late upsert of revision 1 is stale: counted, logged with both
    # versions, and shown by `status`.
    user.push(
        {
            "doc_id": "plan.md",
            "op": "upsert",
            "source_version": 1,
            "event_time": now - 5,
            "content_uri": str(plan),
            "acl_groups": ["everyone"],
        }
    )
    assert user.stream()["events_stale"] == 1
    assert user.query("launch window March", "everyone") == []
    stale = user.run("status")["stale_events"]
    assert stale["count"] == 1
    assert stale["recent"][0]["doc_id"] == "plan.md"
    assert (
        "'1' (revision" in stale["recent"][0]["note"]
        and "tombstone '2' (revision" in stale["recent"][0]["note"]
    )


def test_an_event_without_groups_takes_the_source_default_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The groups given to ``sources add --acl-groups`` are the source's
    default: an upsert without ``acl_groups`` is indexed for them (it was a
    ``no_permissions`` dead letter); an event naming groups keeps its own."""
    user = User(tmp_path, capsys)
    user.add_source("--acl-groups", "staff")
    (user.folder / "memo.md").write_text("# Memo\n\nThe parking garage closes for repairs in May.\n")
    (user.folder / "pay.md").write_text("# Pay\n\nSalaries are reviewed every October.\n")
    now = time.time()
    common = {"op": "upsert", "source_version": 1, "event_time": now}
    user.push(
        {"doc_id": "memo.md", "content_uri": str(user.folder / "memo.md"), **common},
        {"doc_id": "pay.md", "content_uri": str(user.folder / "pay.md"), "acl_groups": ["hr"], **common},
    )
    user.stream()
    # Every readable document comes back (hybrid search, k=10): exactly
    # what each group may read.
    assert user.query("parking garage repairs", "staff") == ["memo.md"]
    assert user.query("salaries reviewed October", "staff") == ["memo.md"]
    assert user.query("salaries reviewed October", "hr") == ["pay.md"]
    assert user.query("parking garage repairs", "everyone") == []
    assert user.run("status")["dead_letters"] == {}


def test_an_event_of_an_unregistered_source_is_a_dead_letter_until_the_source_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README promises that events of unknown sources become dead
    letters; ``events push`` refused them instead (exit 1). Queued, the
    stream dead-letters the event (``invalid_event``); once the source is
    registered, retrying the dead letter applies it."""
    user = User(tmp_path, capsys)
    user.add_source()
    (user.folder / "memo.md").write_text("# Memo\n\nThe parking garage closes for repairs in May.\n")
    event = {
        "source_id": "later",
        "doc_id": "memo.md",
        "op": "upsert",
        "source_version": 1,
        "event_time": time.time(),
        "content_uri": str(user.folder / "memo.md"),
        "acl_groups": ["staff"],
    }
    user.events.write_text(json.dumps(event) + "\n")
    pushed = user.run("events", "push", str(user.events), "--tenant", TENANT)
    assert (pushed["queued"], pushed["rejected"]) == (1, [])
    assert pushed["unknown_sources"] == [{"line": 1, "source_id": "later"}]
    user.stream()
    (letter,) = user.run("dead-letters", "list")
    assert letter["error_class"] == "invalid_event" and "unknown source 'later'" in letter["message"]
    assert user.run("status")["dead_letters"] == {"invalid_event": 1}
    # Registered now: the retried event is applied, the dead letter resolved.
    user.run(
        "sources", "add", "later", "--tenant", TENANT, "--type", "object_store", "--uri", str(user.folder)
    )
    user.run("dead-letters", "retry", letter["event_id"])
    user.stream()
    assert user.query("parking garage repairs", "staff") == ["memo.md"]
    assert user.run("dead-letters", "list") == []


def test_a_backfill_rerun_keeps_a_newer_acl_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user = User(tmp_path, capsys)
    (user.folder / "salaries.md").write_text(
        "# Salaries\n\nThe salary bands for engineers are under review.\n"
    )
    sidecar = user.folder / ".ragsync-acl.json"
    sidecar.write_text(json.dumps({"default": ["everyone"]}))
    os.utime(sidecar, (time.time() - 3600, time.time() - 3600))  # the sidecar was written an hour ago
    user.add_source()
    user.backfill()
    assert user.query("salary bands engineers", "everyone") == ["salaries.md"]
    # Ten minutes ago the source narrowed the document to hr.
    user.push(
        {
            "doc_id": "salaries.md",
            "op": "acl",
            "source_version": 5,
            "acl_groups": ["hr"],
            "event_time": time.time() - 600,
        }
    )
    user.stream()
    assert (user.query("salary bands engineers", "everyone"), user.query("salary bands engineers", "hr")) == (
        [],
        ["salaries.md"],
    )
    # A backfill re-run reads the older sidecar: the newer acl event stands.
    user.backfill()
    assert user.query("salary bands engineers", "everyone") == []
    assert user.query("salary bands engineers", "hr") == ["salaries.md"]
    # The sidecar changed after the event: it is the newest evidence and wins.
    sidecar.write_text(
        json.dumps({"default": ["everyone"], "rules": [{"glob": "salaries*", "groups": ["hr", "finance"]}]})
    )
    user.backfill()
    assert user.query("salary bands engineers", "finance") == ["salaries.md"]
    assert user.query("salary bands engineers", "everyone") == []


def test_an_acl_event_older_than_the_sidecar_does_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (found by tests/test_interleavings_property.py): on a fresh
    index, an acl event from before the sidecar's last edit was applied (the
    first backfill did not record the sidecar's time), while the same event
    after a second backfill was not."""
    user = User(tmp_path, capsys)
    (user.folder / "budget.md").write_text("# Budget\n\nThe marketing budget doubles next spring.\n")
    (user.folder / ".ragsync-acl.json").write_text(json.dumps({"default": ["finance"]}))
    user.add_source()
    user.backfill()
    # Ten minutes before the sidecar was written, the source gave it to everyone.
    user.push(
        {
            "doc_id": "budget.md",
            "op": "acl",
            "source_version": 4,
            "acl_groups": ["everyone"],
            "event_time": time.time() - 600,
        }
    )
    assert user.stream()["events_stale"] == 1
    assert user.query("marketing budget spring", "everyone") == []
    assert user.query("marketing budget spring", "finance") == ["budget.md"]


def test_without_a_timed_source_the_narrower_groups_win(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = User(tmp_path, capsys)
    (user.folder / "memo.md").write_text("# Memo\n\nThe offsite moves to the lakeside hotel in June.\n")
    user.add_source()
    user.backfill("everyone,staff")
    user.push(
        {
            "doc_id": "memo.md",
            "op": "acl",
            "source_version": 3,
            "acl_groups": ["staff"],
            "event_time": time.time() - 60,
        }
    )
    user.stream()
    # --acl-groups is configuration with no time at the source: the acl
    # event, timed, stands against it (here the narrower set).
    user.backfill("everyone,staff")
    assert user.query("offsite lakeside hotel", "everyone") == []
    assert user.query("offsite lakeside hotel", "staff") == ["memo.md"]


def test_an_acl_event_on_a_folder_source_stands_against_the_next_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (issue 43): an ``acl`` event (numeric version) on a folder
    source without a sidecar, then a sync, gave a ``no_permissions`` "could
    not be read" dead letter and a ``stale`` document: the sync met the
    event's groups with the source's default groups, which carry no time,
    and took the groups both allow (none). Permission evidence is ordered by
    the time it was true: the source's default groups say nothing about when,
    so the event about the document stands."""
    user = User(tmp_path, capsys)
    (user.folder / "desk.md").write_text("# Help desk\n\nThe help desk answers tickets within four hours.\n")
    user.add_source()
    user.backfill()  # --acl-groups everyone
    question = "help desk tickets four hours"
    user.push(
        {
            "doc_id": "desk.md",
            "op": "acl",
            "source_version": 2,
            "acl_groups": ["it"],
            "event_time": time.time(),
        }
    )
    user.stream()
    assert (user.query(question, "everyone"), user.query(question, "it")) == ([], ["desk.md"])
    synced = user.run("sync", SOURCE, "--quiet")
    assert synced["totals"]["dead_lettered"] == 0
    status = user.run("status")
    assert (status["documents"], status["dead_letters"]) == ({"indexed": 1}, {})
    assert (user.query(question, "everyone"), user.query(question, "it")) == ([], ["desk.md"])
    # Evidence that leaves no group: a sidecar written the very second of a
    # later acl event, naming another group. The two do not order, and the
    # groups both allow are none: nobody may read the document, which is not
    # "its permissions could not be read" (a dead letter, a stale document
    # and the old groups kept).
    moment = float(int(time.time()))
    user.push(
        {"doc_id": "desk.md", "op": "acl", "source_version": 4, "acl_groups": ["it"], "event_time": moment}
    )
    user.stream()
    sidecar = user.folder / ".ragsync-acl.json"
    sidecar.write_text(json.dumps({"default": ["hr"]}))
    os.utime(sidecar, (moment, moment))
    assert user.run("sync", SOURCE, "--quiet")["totals"]["dead_lettered"] == 0
    status = user.run("status")
    assert (status["documents"], status["dead_letters"]) == ({"indexed": 1}, {})
    assert [user.query(question, g) for g in ("everyone", "it", "hr")] == [[], [], []]


def test_deny_entries_win_over_every_allow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user = User(tmp_path, capsys)
    (user.folder / "roadmap.md").write_text("# Roadmap\n\nThe quantum billing engine ships in the autumn.\n")
    (user.folder / "faq.md").write_text("# FAQ\n\nThe billing portal resets passwords on request.\n")
    (user.folder / ".ragsync-acl.json").write_text(
        json.dumps(
            {
                "default": ["everyone"],
                "rules": [{"glob": "roadmap*", "groups": ["eng", "contractors"], "deny": ["interns"]}],
            }
        )
    )
    user.add_source()
    user.backfill()
    question = "quantum billing engine autumn"
    assert user.query(question, "eng") == ["roadmap.md"]
    # An intern in eng is denied: the deny entry wins over eng's allow.
    assert "roadmap.md" not in user.query(question, "eng,interns")
    assert "roadmap.md" not in user.query(question, "interns,everyone")
    assert user.query("billing portal passwords", "interns,everyone") == ["faq.md"]
    # An acl event can carry denials too: contractors lose it, eng keeps it.
    user.push(
        {
            "doc_id": "roadmap.md",
            "op": "acl",
            "source_version": 9,
            "acl_groups": ["eng", "contractors"],
            "deny_groups": ["contractors"],
            "event_time": time.time(),
        }
    )
    user.stream()
    assert user.query(question, "contractors") == []
    assert user.query(question, "eng,contractors") == []
    assert user.query(question, "eng,interns") == ["roadmap.md"]  # the new ACL no longer denies interns


def test_a_fixed_or_deleted_file_leaves_no_open_dead_letter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (issue 43): dead letters stayed open after their file was
    fixed or deleted, so ``status`` showed ``corrupt 1`` beside the document
    indexed. A later good version (a backfill's or an event's), an exact
    copy or a delete of the document resolves them."""
    from ragsync.ops.samples import two_column_pdf_bytes

    user = User(tmp_path, capsys)
    (user.folder / "keep.md").write_text("# Canteen\n\nThe canteen opens at eight on weekdays.\n")
    (user.folder / "report.pdf").write_bytes(b"%PDF-1.4 cut short")
    (user.folder / "copy.pdf").write_bytes(b"%PDF-1.4 cut shorter")
    (user.folder / "empty.txt").write_bytes(b"")
    user.add_source()
    user.backfill()
    status = user.run("status")
    assert status["dead_letters"] == {"corrupt": 2, "empty": 1}
    # Fixed (report.pdf parses, copy.pdf is now an exact copy of it) and deleted.
    (user.folder / "report.pdf").write_bytes(two_column_pdf_bytes())
    (user.folder / "copy.pdf").write_bytes(two_column_pdf_bytes())
    (user.folder / "empty.txt").unlink()
    user.backfill()
    status = user.run("status")
    assert status["dead_letters"] == {} and user.run("dead-letters", "list") == []
    assert {k: v for k, v in status["documents"].items() if k != "deleted"} == {"indexed": 2, "duplicate": 1}
    # An event whose bytes do not parse leaves the live version (stale) and a
    # dead letter; the next good version resolves it.
    bad = tmp_path / "share" / "drafts"
    bad.mkdir()
    (bad / "keep-v5.pdf").write_bytes(b"%PDF-1.4 broken draft")
    now = time.time()
    upsert = {"doc_id": "keep.md", "op": "upsert", "acl_groups": ["everyone"]}
    user.push({**upsert, "source_version": 5, "event_time": now, "content_uri": str(bad / "keep-v5.pdf")})
    user.stream()
    status = user.run("status")
    assert (status["dead_letters"], status["documents"]["stale"]) == ({"corrupt": 1}, 1)
    user.push(
        {**upsert, "source_version": 6, "event_time": now + 1, "content_uri": str(user.folder / "keep.md")}
    )
    user.stream()
    status = user.run("status")
    assert status["dead_letters"] == {} and "stale" not in status["documents"]
    assert "keep.md" in user.query("canteen opens eight", "everyone")  # k=10: every readable document


def test_a_parse_failure_from_the_stream_is_redriven_by_its_event_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = User(tmp_path, capsys)
    report = user.folder / "report.pdf"
    report.write_bytes(b"%PDF-1.4 truncated")
    user.add_source()
    user.push(
        {
            "doc_id": "report.pdf",
            "op": "upsert",
            "source_version": 1,
            "event_id": "ev-report-1",
            "acl_groups": ["everyone"],
            "content_uri": str(report),
            "event_time": time.time(),
        }
    )
    assert user.stream()["dead_lettered"] == 1
    letters = user.run("dead-letters", "list")
    assert [(d["event_id"], d["stage"], d["error_class"]) for d in letters] == [
        ("ev-report-1", "parse", "corrupt")
    ]
    # The sender fixes the file; the operator re-drives by the same identity the API uses.
    report.write_text("# Report\n\nQuarterly revenue grew by eleven percent.\n")
    out = user.run("dead-letters", "retry", "ev-report-1")
    assert (out["resolved"], out["requeued_events"], out["not_redriven"]) == (1, 1, [])
    user.stream()
    assert user.query("quarterly revenue eleven percent", "everyone") == ["report.pdf"]
    assert user.run("dead-letters", "list") == []
    # Nothing is left under that id.
    code, _ = _run(capsys, "dead-letters", "retry", "ev-report-1", "--home", user.home)
    assert code == 2


def test_every_dead_letter_shape_has_one_identity_and_is_redriven(tmp_path: Path) -> None:
    """The catalog, the CLI and the API name a dead letter by its event id (its
    row id when no event is behind it) and re-drive it through one function."""
    from connectors.events import event_or_none, parse_event
    from connectors.sources import register_source
    from ragsync.config import Settings, open_catalog
    from ragsync.model import DeadLetter, FetchedDocument, QueuedEvent, SourceFile
    from transforms.events import crash_loop_dead_letter

    settings = Settings(home=str(tmp_path / "home"))
    folder = tmp_path / "share"
    folder.mkdir()
    register_source(settings, SOURCE, TENANT, "object_store", str(folder))
    cat = open_catalog(settings)
    try:

        def event(eid: str, op: str = "upsert") -> Any:
            data = {
                "source_id": SOURCE,
                "doc_id": f"{eid}.md",
                "op": op,
                "source_version": 1,
                "event_id": eid,
            }
            data.update(event_time=time.time(), acl_groups=["everyone"])
            if op == "upsert":
                data["content_uri"] = str(folder / f"{eid}.md")
            return parse_event(data)

        def source_file(ev: Any) -> SourceFile:
            return SourceFile(TENANT, SOURCE, ev.doc_id, ev.content_uri, 10, ev.acl_groups, "1", ev.event_id)

        def letter(stage: str, error: str, payload: str) -> int:
            return cat.dead_letters.add_dead_letter(
                DeadLetter(stage, "", "", error, "failed", payload=payload, tenant_id=TENANT)
            )

        queued, remote, crashed, unknown = (
            event("ev-parse"),
            event("ev-pubsub"),
            event("ev-crash"),
            event("ev-res"),
        )
        cat.queue.enqueue_events([dataclasses.replace(e, tenant_id=TENANT) for e in (queued, crashed)])
        cat.queue.ack_events([(TENANT, "ev-parse")])  # finished with a dead letter
        cat.queue.ack_events([(TENANT, "ev-crash")], state="dead")
        fetched = FetchedDocument("d1", source_file(queued), "h", "raw", 10, "acl", "d1")
        letter("parse", "corrupt", fetched.to_json())
        letter("fetch", "transient", source_file(remote).to_json())  # read from Pub/Sub: not in the queue
        row = {**cat.queue.tenant_event(TENANT, "ev-crash"), "deliveries": 5}
        cat.dead_letters.add_dead_letter(crash_loop_dead_letter(row, 5))
        letter("resolve", "invalid_event", QueuedEvent(unknown, TENANT, "d4").to_json())
        garbage = letter("resolve", "invalid_event", "{not an event")
        backfill_file = letter(
            "fetch", "too_large", SourceFile(TENANT, SOURCE, "big.bin", "/x", 10).to_json()
        )

        keys = [r.key for r in cat.dead_letters.list_dead_letters()]
        assert keys == ["ev-parse", "ev-pubsub", "ev-crash", "ev-res", str(garbage), str(backfill_file)]
        outcomes = {
            k: [(r.kind, r.state) for r in cat.dead_letters.redrive_dead_letter(k, parse=event_or_none)]
            for k in keys
        }
        assert outcomes == {
            "ev-parse": [("event", "requeued")],
            "ev-pubsub": [("event", "requeued")],
            "ev-crash": [("event", "requeued")],
            "ev-res": [("event", "requeued")],
            str(garbage): [],  # a message that is not an event: nothing to run again, left open
            str(backfill_file): [("file", "requested")],
        }
        assert {e["event_id"]: e["state"] for e in cat.queue.pending_events()} == {
            "ev-parse": "pending",
            "ev-pubsub": "pending",
            "ev-crash": "pending",
            "ev-res": "pending",
        }
        assert [r.key for r in cat.dead_letters.list_dead_letters()] == [str(garbage)]
        # Another tenant cannot re-drive them; a second re-drive finds nothing.
        assert cat.dead_letters.redrive_dead_letter("ev-parse", parse=event_or_none, tenant_id="other") == []
        assert cat.dead_letters.redrive_dead_letter("ev-parse", parse=event_or_none) == []
    finally:
        cat.close()


def test_tied_scores_rank_the_same_whatever_the_store_order(tmp_path: Path) -> None:
    """Identical inputs, identical rankings: chunks with equal scores are
    ordered by chunk id, whatever order a store returns them in."""
    from ragsync.config import Settings
    from ragsync.index.backends import open_keyword_index
    from ragsync.index.base import Hit
    from ragsync.query.search import ranked_ids, reciprocal_rank_fusion
    from tests.store_contract import make_chunk

    same = "Travel expenses are reimbursed within thirty days."
    chunks = [dataclasses.replace(make_chunk(i, doc=f"d{i}"), text=same) for i in range(6)]
    rankings = []
    for name, order in (("a", chunks), ("b", list(reversed(chunks)))):
        kw = open_keyword_index(Settings(home=str(tmp_path / name)), create=True)
        try:
            kw.upsert(order)
            hits = kw.search("t1", "travel expenses reimbursed", ["acl-a"], 10)
        finally:
            kw.close()
        assert len(hits) == 6 and len({h.score for h in hits}) == 1  # all tied
        rankings.append(ranked_ids(hits))
    assert rankings[0] == rankings[1] == sorted(c.chunk_id for c in chunks)
    # Fusion: a vector ranking that ties too, handed over in two orders.
    vec = [Hit(chunk_id=c.chunk_id, doc_id=c.doc_id, score=0.5) for c in chunks]
    fused = [
        reciprocal_rank_fusion([ranked_ids(v), r]) for v, r in ((vec, rankings[0]), (vec[::-1], rankings[1]))
    ]
    assert fused[0] == fused[1]
    assert [cid for cid, _ in fused[0]] == sorted(c.chunk_id for c in chunks)
    # Equal fused scores from different ranks are ordered by chunk id too.
    x, y = sorted(c.chunk_id for c in chunks[:2])
    assert reciprocal_rank_fusion([[y, x], [x, y]]) == reciprocal_rank_fusion([[x, y], [y, x]])
    assert [cid for cid, _ in reciprocal_rank_fusion([[y, x], [x, y]])] == [x, y]


def test_the_lease_heartbeat_lets_a_retried_event_go(tmp_path: Path) -> None:
    """A failed event handed back for a retry is not kept leased by the
    heartbeat (it was, forever, and the retry never ran)."""
    from connectors.events import parse_event
    from connectors.sources import register_source
    from ragsync.config import Settings, open_catalog

    settings = Settings(home=str(tmp_path / "home"))
    register_source(settings, SOURCE, TENANT, "wiki")
    cat = open_catalog(settings)
    try:
        ev = parse_event(
            {"source_id": SOURCE, "doc_id": "p", "op": "delete", "source_version": 1, "event_time": 1.0}
        )
        cat.queue.enqueue_events([dataclasses.replace(ev, tenant_id=TENANT)], now=100.0)
        key = (TENANT, ev.event_id)
        assert cat.queue.extend_leases([key], 300.0, now=200.0, claimed={key: (0, "priority")}) == {key}
        cat.queue.retry_event_later(key, 5.0)  # the work failed: try again after 5 s
        retry_at = cat.queue.tenant_event(*key)["available_at"]  # type: ignore[index]
        assert cat.queue.extend_leases([key], 300.0, claimed={key: (0, "priority")}) == set()
        assert cat.queue.tenant_event(*key)["available_at"] == retry_at  # type: ignore[index]
        assert cat.queue.extend_leases([key], 300.0, claimed={key: (1, "priority")}) == {
            key
        }  # the retry gets its own lease
    finally:
        cat.close()
