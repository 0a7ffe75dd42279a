"""Shape checks for graphql-transport-ws messages, before strawberry's handler reads them.

strawberry indexes into every message as if it were a well-formed object, so
``[]``, ``null``, ``12`` or a string payload raise inside its handler and
drop the socket with 1006 and a logged traceback. Checked first, they close
the socket with 4400 (the protocol's "bad request") and a one-line reason.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from graph_schema.internals import ASGIWebSocketAdapter

__all__ = ["BAD_REQUEST", "CheckedWebSocketAdapter", "message_problem"]

# graphql-transport-ws's close code for a malformed message.
BAD_REQUEST = 4400
_OPTIONAL_OBJECT = (dict, type(None))


def _payload_problem(payload: object) -> str | None:
    if not isinstance(payload, dict):
        return "subscribe payload must be an object"
    if not isinstance(payload.get("query"), str):
        return "subscribe payload.query must be a string"
    if not isinstance(payload.get("variables"), _OPTIONAL_OBJECT):
        return "subscribe payload.variables must be an object or null"
    if not isinstance(payload.get("extensions"), _OPTIONAL_OBJECT):
        return "subscribe payload.extensions must be an object or null"
    if not isinstance(payload.get("operationName"), str | None):
        return "subscribe payload.operationName must be a string or null"
    return None


def message_problem(message: object) -> str | None:
    """Why ``message`` is not a well-formed graphql-transport-ws message, or None."""
    if not isinstance(message, dict):
        return "message must be a JSON object"
    kind = message.get("type")
    if not isinstance(kind, str):
        return "message type must be a string"
    if kind in ("subscribe", "complete") and not isinstance(message.get("id"), str):
        return f"{kind} message id must be a string"
    if kind == "subscribe":
        return _payload_problem(message.get("payload"))
    return None


class CheckedWebSocketAdapter(ASGIWebSocketAdapter):
    """strawberry's WebSocket adapter, closing with 4400 on the first malformed message."""

    async def iter_json(
        self, *, ignore_parsing_errors: bool = False
    ) -> AsyncGenerator[object, None]:
        """The socket's messages while they are well-formed."""
        messages = super().iter_json(ignore_parsing_errors=ignore_parsing_errors)
        async with aclosing(messages):
            async for message in messages:
                problem = message_problem(message)
                if problem is not None:
                    await self.close(BAD_REQUEST, problem)
                    return
                yield message
