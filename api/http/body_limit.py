"""The HTTP-side limits on request bodies: a cap on their size, and on the time they take.

Query-shape limits (depth, aliases, tokens, result items) belong to the
schema, and the time limit to the schema's policies; these guard the
transport, before GraphQL sees anything. A body is buffered before the app
reads it, so without a time limit a client that never sends its body's end
holds a connection and up to ``max_bytes`` of memory for as long as it likes.
"""

from __future__ import annotations

import asyncio

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimits", "error_body"]


def error_body(message: str, **extensions: object) -> bytes:
    """A GraphQL-shaped JSON error document, so GraphQL clients show the message."""
    error: dict[str, object] = {"message": message}
    if extensions:
        error["extensions"] = extensions
    return orjson.dumps({"errors": [error]})


class BodyLimits:
    """Refuse HTTP request bodies over ``max_bytes`` with 413, reading no more than that,
    and bodies not whole ``timeout`` seconds after their headers with 408.

    A declared Content-Length over the cap is refused before the body is read.
    Otherwise the body is buffered up to the cap and replayed to the app; the
    first chunk that crosses the cap ends the request. Either refusal closes
    the connection (the unread rest of the body makes it unusable).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, 413)
            return
        try:
            async with asyncio.timeout(self.timeout):
                messages = await self._body(receive)
        except TimeoutError:
            await self._refuse(send, 408)
            return
        except _TooLargeError:
            await self._refuse(send, 413)
            return
        if messages is None:
            return
        replay = iter(messages)

        async def replaying_receive() -> Message:
            for message in replay:
                return message
            return await receive()

        await self.app(scope, replaying_receive, send)

    async def _body(self, receive: Receive) -> list[Message] | None:
        """The body's messages, up to the cap; None when the client went away."""
        messages: list[Message] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            total += len(message.get("body", b""))
            if total > self.max_bytes:
                raise _TooLargeError
            messages.append(message)
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, send: Send, status: int) -> None:
        if status == 413:
            body = error_body(
                f"request body too large: the limit is {self.max_bytes} bytes",
                code="PAYLOAD_TOO_LARGE",
                maxBodyBytes=self.max_bytes,
            )
        else:
            body = error_body(
                f"request body not received within {self.timeout:g} s of its headers",
                code="REQUEST_TIMEOUT",
                bodyTimeoutSeconds=self.timeout,
            )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # The unread rest of the body makes the connection unusable.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLargeError(Exception):
    """The body crossed the cap."""


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
