"""Trust boundary, second pass (issue #29): the operations findings of the red team.

- ``serve`` stopped by SIGTERM ends its worker's running sync child.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from ragsync.lifecycle import descendants
from tests.mediawiki import free_port
from tests.proc import CLI, ROOT, kill_group, live_members

TENANT = "acme"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_serve_stopped_by_sigterm_ends_its_running_sync_child(tmp_path: Path) -> None:
    # A wiki that accepts connections and never answers: the sync child hangs
    # in its first request (for a minute) until someone ends it.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    api_url = f"http://127.0.0.1:{silent.getsockname()[1]}/api.php"
    home = str(tmp_path / "home")
    made = subprocess.run(
        [*CLI, "tenants", "create", TENANT, "--home", home, "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    key = json.loads(made.stdout)["api_key"]
    port = free_port()
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [*CLI, "serve", "--home", home, "--port", str(port), "--no-schedule", "--allow-location", api_url],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        cwd=ROOT,
        start_new_session=True,
    )
    children: list[int] = []
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"})
        deadline = time.monotonic() + 60
        while True:
            try:
                if api.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        body = {"type": "wiki", "uri": api_url, "sync": "webhook", "source_id": "wiki"}
        assert api.post("/v1/sources", json=body).status_code == 201, log.read_text()
        run = api.post("/v1/sources/wiki/sync", json={"mode": "full"}).json()
        deadline = time.monotonic() + 60
        while not children:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
            children = [p for p in descendants(serve.pid) if " sync wiki " in _cmdline(p)]
        assert api.get(f"/v1/sources/wiki/sync/{run['sync_id']}").json()["state"] == "running"
        time.sleep(1.0)  # the child is past its start-up, inside the hanging request
        os.kill(serve.pid, signal.SIGTERM)  # serve only: it must end its child itself
        assert serve.wait(timeout=60) == 0, log.read_text()
        assert [p for p in children if _alive(p)] == []
        assert live_members(serve.pid, "sid") == []
    finally:
        if serve.poll() is None:
            serve.kill()
        for pid in children:
            if _alive(pid):
                kill_group(os.getpgid(pid))
        silent.close()
