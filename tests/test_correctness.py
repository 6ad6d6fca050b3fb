"""Where backfills and events meet, as a user hits it: real files, the CLI
(``ragsync backfill``, ``events push``, ``stream``, ``query``, ``status``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from beam_pipelines.cli import main

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
