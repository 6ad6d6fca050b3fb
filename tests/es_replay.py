"""An in-process HTTP server that replays recorded Elasticsearch answers
(the JSON shapes and headers a 9.x server sends) in order, and records what
the client sent: the official client runs unchanged, down to its HTTP
transport."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEADERS = {
    "X-Elastic-Product": "Elasticsearch",
    "Content-Type": "application/vnd.elasticsearch+json;compatible-with=9",
}

REJECTED = {
    "type": "es_rejected_execution_exception",
    "reason": "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, "
    "replica_bytes=0, all_bytes=0, coordinating_operation_bytes=52428, "
    "max_coordinating_and_primary_bytes=107374182]",
}


def bulk_item(index: str, doc_id: str, status: int, action: str = "index") -> dict[str, Any]:
    """One item of a ``_bulk`` answer as Elasticsearch writes it."""
    if status == 429:
        return {action: {"_index": index, "_id": doc_id, "status": 429, "error": REJECTED}}
    return {
        action: {
            "_index": index,
            "_id": doc_id,
            "_version": 1,
            "result": "created",
            "forced_refresh": True,
            "_shards": {"total": 2, "successful": 1, "failed": 0},
            "_seq_no": 0,
            "_primary_term": 1,
            "status": status,
        }
    }


def bulk_answer(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"errors": any(next(iter(i.values()))["status"] >= 300 for i in items), "took": 7, "items": items}


TOO_MANY_REQUESTS = {"error": {"root_cause": [REJECTED], **REJECTED}, "status": 429}


@dataclass
class Exchange:
    """One expected request (method, path without query) and its recorded answer."""

    method: str
    path: str
    status: int = 200
    body: Any = None


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.body.decode().splitlines() if line.strip()]


@dataclass
class Replay:
    """The server: ``url``, the ``script`` still to answer, the ``requests`` seen."""

    script: list[Exchange]
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    url: str = ""
    _server: Any = None

    def __enter__(self) -> Replay:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                replay.requests.append(
                    Request(self.command, path, query, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if not replay.script:
                    replay.errors.append(f"unexpected {self.command} {path}")
                    self.send_response(500)
                    self.end_headers()
                    return
                want = replay.script.pop(0)
                if (want.method, want.path) != (self.command, path):
                    replay.errors.append(f"expected {want.method} {want.path}, got {self.command} {path}")
                data = b"" if want.body is None else json.dumps(want.body).encode()
                self.send_response(want.status)
                for k, v in HEADERS.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
