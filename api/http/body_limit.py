"""The HTTP-side limit: a cap on request bodies.

Query-shape limits (depth, aliases, tokens, result items) belong to the
schema, and the time limit to the schema's policies; this one guards the
transport, before GraphQL sees anything.
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodySizeLimit", "error_body"]


def error_body(message: str, **extensions: object) -> bytes:
    """A GraphQL-shaped JSON error document, so GraphQL clients show the message."""
    error: dict[str, object] = {"message": message}
    if extensions:
        error["extensions"] = extensions
    return orjson.dumps({"errors": [error]})


class BodySizeLimit:
    """Refuse HTTP request bodies over ``max_bytes`` with 413, reading no more than that.

    A declared Content-Length over the cap is refused before the body is read.
    Otherwise the body is buffered up to the cap and replayed to the app; the
    first chunk that crosses the cap ends the request.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        messages: list[Message] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            total += len(message.get("body", b""))
            if total > self.max_bytes:
                await self._refuse(send)
                return
            messages.append(message)
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replaying_receive() -> Message:
            for message in replay:
                return message
            return await receive()

        await self.app(scope, replaying_receive, send)

    async def _refuse(self, send: Send) -> None:
        body = error_body(
            f"request body too large: the limit is {self.max_bytes} bytes",
            code="PAYLOAD_TOO_LARGE",
            maxBodyBytes=self.max_bytes,
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # The unread rest of the body makes the connection unusable.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
