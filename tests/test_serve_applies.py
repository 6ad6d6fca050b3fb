"""``ragsync serve`` applies what its API accepts: a real server process on
loopback, a real folder source, events sent over HTTP, no separate
``ragsync stream``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ragsync.config import Settings, open_catalog
from tests.mediawiki import free_port
from tests.serving import wait_until_healthy

CLI = [sys.executable, "-m", "cli.main"]


def _statuses(home: str) -> dict[str, str]:
    catalog = open_catalog(Settings(home=home))
    try:
        return {d.source_object_id: d.status for d in catalog.documents.documents_for_source("docs")}
    finally:
        catalog.close()


def test_a_delete_sent_to_serve_is_applied_by_its_worker(tmp_path: Path) -> None:
    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "memo.md").write_text("# Memo\n\nThe parking garage closes for repairs in May.\n")
    (folder / "plan.md").write_text("# Plan\n\nThe launch window opens on the ninth of March.\n")
    home = str(tmp_path / "home")
    run = {"capture_output": True, "text": True, "check": True}
    key = json.loads(
        subprocess.run([*CLI, "tenants", "create", "acme", "--home", home, "--json"], **run).stdout
    )
    backfill = [*CLI, "backfill", str(folder), "--tenant", "acme", "--source-id", "docs", "--home", home]
    subprocess.run([*backfill, "--acl-groups", "staff", "--quiet"], **run)
    assert _statuses(home) == {"memo.md": "indexed", "plan.md": "indexed"}
    port = free_port()
    serve = subprocess.Popen(
        [*CLI, "serve", "--home", home, "--port", str(port), "--no-schedule"],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("wb"),
        start_new_session=True,
    )
    try:
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key['api_key']}"}
        )
        wait_until_healthy(api, tmp_path / "serve.log")
        now = time.time()
        event = {"source_id": "docs", "doc_id": "memo.md", "op": "delete", "source_version": int(now) + 60}
        answer = api.post("/internal/events", json={**event, "event_time": now})
        assert answer.status_code == 202 and answer.json()["accepted"] == 1, answer.text
        deadline = time.monotonic() + 300
        while _statuses(home)["memo.md"] != "deleted":
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1.0)
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
    assert _statuses(home) == {"memo.md": "deleted", "plan.md": "indexed"}
    catalog = open_catalog(Settings(home=home))
    try:
        assert catalog.queue_views.queue_stats()["depth"] == 0
    finally:
        catalog.close()
