"""The control-plane app served over real HTTP in a thread, for API tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn


@contextmanager
def served(app: Any, timeout_s: float = 20) -> Iterator[int]:
    """Serve ``app`` with uvicorn on a free loopback port in a daemon thread;
    yields the port; on exit asks the server to stop and waits for it (the
    app's own resources are the caller's to close).

    Raises:
        RuntimeError: uvicorn did not start within ``timeout_s``.
    """
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)


def wait_until_healthy(api: Any, log: Path, timeout_s: float = 60) -> None:
    """Wait until a ``ragsync serve`` answers ``GET /healthz`` with 200
    through ``api`` (an ``httpx.Client``); fails the test with the end of the
    server's ``log`` when it does not within ``timeout_s``."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if api.get("/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
