"""ASGI middleware of the control plane: the request body size limit."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from control_plane.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodySizeLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413 before the app sees them.

    A ``Content-Length`` above the limit is refused without reading; otherwise
    the body is buffered (at most ``max_bytes``) and replayed to the app, so a
    chunked body that grows past the limit is refused too. ``on_too_large``
    (optional) is told of each refused request's scope first (webhooks keep
    a dead letter).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        on_too_large: Callable[[Scope], Awaitable[None]] | None = None,
    ) -> None:
        """Wrap ``app``; ``max_bytes`` must be positive."""
        if max_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        self.app = app
        self.max_bytes = max_bytes
        self.on_too_large = on_too_large

    async def _too_large(self, scope: Scope, send: Send) -> None:
        if self.on_too_large is not None:
            await self.on_too_large(scope)
        body = json.dumps(
            error_body("payload_too_large", f"request body is larger than {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._too_large(scope, send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
