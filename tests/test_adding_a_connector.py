"""docs/connectors.md "Adding a connector", followed literally: a fake ticket system
(``tests/fake_connector.py``: an in-memory HTTP API read through the real
``ApiClient`` / ``LocatedHttpClient`` and an ``httpx.MockTransport``),
registered with ``register_source_type`` when its module is imported and
loaded by the ``plugins`` setting. Then ``POST /v1/sources`` and ``ragsync
sources add --type`` accept the type, ``ragsync sync`` indexes its tickets
for ``ragsync query``, a page of changes (an edit and a delete) is applied,
and a ticket whose permissions cannot be read is not indexed (fail closed).
Nothing in the product names the type.

Real Milvus Lite (vectors), tantivy, SQLite catalog and the packaged model.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cli.main import main, plugins_named
from connectors.registry import connector_class
from control_plane.app import create_app
from ragsync.config import Settings, open_catalog
from ragsync.source_types import SourceSpec, default_uri, register_source_type, source_type, source_types
from tests.fake_connector import BASE_URL, SYSTEM, FakeTicketConnector
from tests.proc import ROOT, cli

PLUGIN = "tests.fake_connector"
TENANT = "acme"
BUILT_IN = ("object_store", "wiki", "drive", "tickets", "redmine")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """``ragsync ARGV --json`` in this process: (exit code, the JSON it printed)."""
    code = main([*argv, "--json"])
    out = capsys.readouterr().out.strip()
    return code, json.loads(out.splitlines()[-1]) if out else None


def _hits(capsys: pytest.CaptureFixture[str], home: str, text: str, groups: str) -> list[dict[str, Any]]:
    code, hits = _cli(
        capsys, "query", text, "--groups", groups, "--tenant", TENANT, "-k", "10", "--home", home
    )
    assert code == 0
    return list(hits)


# ---------------------------------------------------------------- step 2: the registration


def test_the_type_is_registered_once_and_a_different_target_is_refused() -> None:
    assert source_types() == (*BUILT_IN, "fake")
    spec = SourceSpec(source_id="tix", tenant_id=TENANT, type="fake", uri=BASE_URL)
    assert connector_class(spec) is FakeTicketConnector
    assert default_uri("fake") == ""
    registered = source_type("fake")
    assert registered is not None and registered.target == "tests.fake_connector:FakeTicketConnector"
    register_source_type("fake", "tests.fake_connector:FakeTicketConnector")  # imported twice: a no-op
    with pytest.raises(ValueError, match="'fake' is already registered as 'tests.fake_connector:Fake"):
        register_source_type("fake", "tests.other:Connector")
    with pytest.raises(ValueError, match="already registered"):
        register_source_type("drive", "connectors.drive:DriveConnector")  # without its default location
    for bad in ("Fake", "fa-ke", "1fake", "", "x" * 41):
        with pytest.raises(ValueError, match="lowercase identifier"):
            register_source_type(bad, "tests.fake_connector:FakeTicketConnector")
    for bad in ("tests.fake_connector", "tests.fake_connector:", ":Class", "a b:C"):
        with pytest.raises(ValueError, match="must be 'package.module:Class'"):
            register_source_type("fake2", bad)
    assert source_types() == (*BUILT_IN, "fake")


def test_the_plugins_setting_is_read_from_the_flag_the_pipeline_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGSYNC_PLUGINS", "from.env")
    assert plugins_named(["sync", "s", "--plugins", "a.b,c"]) == "a.b,c"
    assert plugins_named(["sync", "s", "--", "--plugins=d", "--runner=DirectRunner"]) == "d"
    assert plugins_named(["sync", "s", "--plugins=a", "--", "--plugins=d"]) == "a"
    assert plugins_named(["sync", "s"]) == "from.env"
    assert plugins_named(["sync", "s", "--plugins"]) == "from.env"  # the command's parser refuses it


def test_a_fresh_process_loads_the_plugin_from_the_setting(tmp_path: Path) -> None:
    """The CLI imports the plug-ins before it builds its parser, and a
    pipeline worker when it unpickles its settings."""
    env = {k: v for k, v in os.environ.items() if k != "RAGSYNC_PLUGINS"}
    add = cli("sources", "add", "t1", "--tenant", TENANT, "--type", "fake", "--uri", BASE_URL)
    add += ["--home", str(tmp_path / "home"), "--json"]
    refused = subprocess.run(add, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "invalid choice: 'fake'" in refused.stderr
    env["RAGSYNC_PLUGINS"] = PLUGIN
    added = subprocess.run(add, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout) == {
        "source_id": "t1",
        "tenant_id": TENANT,
        "type": "fake",
        "uri": BASE_URL,
    }
    env.pop("RAGSYNC_PLUGINS")
    worker = [
        sys.executable,
        "-c",
        "import pickle, sys; pickle.load(sys.stdin.buffer); from ragsync.source_types import source_types; "
        "print(source_types()[-1], 'tests.fake_connector' in sys.modules)",
    ]
    settings = pickle.dumps(Settings(home=str(tmp_path / "home"), plugins=PLUGIN))
    loaded = subprocess.run(worker, env=env, cwd=ROOT, input=settings, capture_output=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.decode().split() == ["fake", "True"]
    unknown = subprocess.run(
        cli("status", "--home", str(tmp_path / "home"), "--plugins", "no_such_plugin_module"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert unknown.returncode == 2
    assert "configuration error: plugin 'no_such_plugin_module' cannot be imported" in unknown.stderr


# ---------------------------------------------------------------- the API takes the type


def test_post_v1_sources_accepts_the_registered_type_and_still_refuses_unknown_ones(tmp_path: Path) -> None:
    app = create_app(str(tmp_path / "catalog.db"), allowed_locations=(BASE_URL,))
    _, key = app.state.keys.create_tenant(TENANT)
    body = {"type": "fake", "uri": BASE_URL, "sync": "poll", "source_id": "tix"}
    with TestClient(app) as client:
        headers = {"X-API-Key": key}
        created = client.post("/v1/sources", json=body, headers=headers)
        assert created.status_code == 201, created.text
        assert (created.json()["type"], created.json()["uri"]) == ("fake", BASE_URL)
        unknown = client.post(
            "/v1/sources", json={**body, "type": "nope", "source_id": "t2"}, headers=headers
        )
        assert unknown.status_code == 422
        assert "must be one of object_store, wiki, drive, tickets, redmine, fake" in unknown.text
        schema = client.get("/openapi.json").json()["components"]["schemas"]["SourceIn"]
        assert schema["properties"]["type"]["enum"] == [*BUILT_IN, "fake"]


# ---------------------------------------------------------------- a sync, a query, a change page

PRINTER = "The printer on floor three jams whenever duplex printing is selected."
PRINTER_FIXED = "The printer on floor three got a new duplex unit and prints again."
VPN = "The VPN connection drops every night at two o'clock for maintenance."
SALARY = "Payroll restricted the salary spreadsheet to the support team."
REORG = "The reorganisation plan names every team that will be merged."


def test_sync_indexes_the_tickets_applies_an_edit_and_a_delete_and_fails_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSYNC_PLUGINS", PLUGIN)
    home = str(tmp_path / "home")
    SYSTEM.tickets.clear()
    SYSTEM.log.clear()
    SYSTEM.requests.clear()
    SYSTEM.put("1", "Printer jam", PRINTER, ("everyone",))
    SYSTEM.put("2", "VPN drops", VPN, ("everyone",))
    SYSTEM.put("3", "Salary sheet", SALARY, ("support",))
    SYSTEM.put("4", "Reorganisation", REORG, None)  # its permissions cannot be read

    add = ["sources", "add", "tix", "--tenant", TENANT, "--type", "fake", "--uri", BASE_URL, "--home", home]
    code, added = _cli(capsys, *add)
    assert code == 0 and added["type"] == "fake"

    code, first = _cli(capsys, "sync", "tix", "--tenant", TENANT, "--home", home)
    assert code == 0, first
    assert (first["mode"], first["listing"]["documents_listed"]) == ("full", 4)
    assert (first["listing"]["documents_indexed"], first["listing"]["dead_lettered"]) == (3, 1)
    # Every byte came through the connector's client from the ticket system.
    assert {"GET /api/tickets?start=0", "GET /api/tickets?start=2", "GET /api/tickets/1"} <= set(
        SYSTEM.requests
    )

    everyone = _hits(capsys, home, "printer duplex floor three", "everyone")
    assert [h["uri"] for h in everyone] == [f"{BASE_URL}/tickets/1", f"{BASE_URL}/tickets/2"]
    assert PRINTER in everyone[0]["text"]
    support = _hits(capsys, home, "salary spreadsheet", "support")
    assert [h["uri"] for h in support] == [f"{BASE_URL}/tickets/3"]
    # The ticket whose ACL could not be read is in no one's results: a dead letter.
    assert not [h for h in _hits(capsys, home, "reorganisation plan", "everyone,support") if "/4" in h["uri"]]
    catalog = open_catalog(Settings(home=home))
    try:
        letters = [
            (d.uri, d.error_class)
            for d in catalog.dead_letters.list_dead_letters(tenant_id=TENANT, source_id="tix")
        ]
    finally:
        catalog.close()
    assert letters == [(f"{BASE_URL}/tickets/4", "no_permissions")]

    SYSTEM.put("1", "Printer jam", PRINTER_FIXED, ("everyone",))
    SYSTEM.delete("2")
    code, second = _cli(capsys, "sync", "tix", "--tenant", TENANT, "--home", home)
    assert code == 0, second
    assert second["mode"] == "incremental"
    feed = second["feed"]
    assert (feed["pages"], feed["events_read"], feed["upserts"], feed["deletes"]) == (1, 2, 1, 1)
    assert (second["applied"]["documents_indexed"], second["applied"]["documents_deleted"]) == (1, 1)
    everyone = _hits(capsys, home, "printer duplex floor three", "everyone")
    assert [h["uri"] for h in everyone] == [f"{BASE_URL}/tickets/1"]
    assert PRINTER_FIXED in everyone[0]["text"] and PRINTER not in everyone[0]["text"]
    assert [h["uri"] for h in _hits(capsys, home, "VPN night", "everyone")] == [f"{BASE_URL}/tickets/1"]
