"""GraphQL over HTTP (httpx) and graphql-transport-ws (websockets), behind one Protocol.

Every request, and every WebSocket's handshake up to ``connection_ack``, runs
under one deadline for the whole exchange (``Endpoint.deadline``,
``--request-timeout``), and no answer or WebSocket message is read past
``Endpoint.max_answer_bytes`` (``--max-answer``): see ``exchange``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Protocol

import orjson

from .connection import Endpoint, bearer
from .errors import TopError, close_error, deadline_error, status_error, too_large_error
from .exchange import reason, request

SUBPROTOCOL = "graphql-transport-ws"
# The WebSocket's close code for a message over the size limit (RFC 6455).
CLOSE_TOO_BIG = 1009
# Leaving, the CLI waits this long for the server's half of the closing handshake:
# a server that never sends it must not hold the exit.
CLOSE_TIMEOUT = 1.0
# Frames a subscription buffers while a frame is drawn: each may be as large as
# the answer's limit, so few.
MAX_QUEUE = 2


class Transport(Protocol):
    """Sends GraphQL operations; tests inject their own."""

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        """The response body of one query."""
        ...

    def subscribe(self, query: str, variables: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Each result of a subscription, as a response body."""
        ...


class HttpTransport:
    """The real transport: POST /graphql, and a WebSocket for subscriptions.

    Through the API server's proxy, queries take the WebSocket too, the only
    way the gpugraph token reaches the server there.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        """The query's answer; TopError for anything but a GraphQL answer."""
        if self.endpoint.proxied:
            return asyncio.run(self._first(query, variables))
        return self._post(query, variables)

    async def _first(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        url = self.endpoint.url
        try:
            # The whole query: the handshake, and the answer after it.
            async with (
                asyncio.timeout(self.endpoint.deadline),
                contextlib.aclosing(self.subscribe(query, variables)) as results,
            ):
                async for body in results:
                    return body
        except TimeoutError:
            raise deadline_error(url, self.endpoint.deadline) from None
        raise TopError(f"{url} completed the query without an answer")

    def _post(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        endpoint = self.endpoint
        url = endpoint.url
        status, text = request(
            "POST",
            url,
            deadline=endpoint.deadline,
            max_bytes=endpoint.max_answer_bytes,
            verify=endpoint.ssl_context(),
            headers=endpoint.headers,
            body={"query": query, "variables": dict(variables)},
        )
        if status != 200:
            raise status_error(status, url, text.decode("utf-8", "replace"))
        try:
            # orjson: the answer of a 1,000-node cluster is 12 MB, which the json module
            # took 0.2-0.4 s to parse and orjson parses in a third of that.
            body: dict[str, Any] = orjson.loads(text)
        except ValueError:
            raise TopError(f"{url} did not answer with JSON: is it a gpugraph server?") from None
        return body

    async def subscribe(
        self, query: str, variables: Mapping[str, Any]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Follow a subscription over graphql-transport-ws until the server completes it."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
        from websockets.typing import Subprotocol

        url = "ws" + self.endpoint.url.removeprefix("http")
        handshake = asyncio.timeout(self.endpoint.deadline)
        try:
            async with (
                handshake,
                connect(
                    url,
                    subprotocols=[Subprotocol(SUBPROTOCOL)],
                    additional_headers=self.endpoint.headers,
                    ssl=self.endpoint.ssl_context() if url.startswith("wss://") else None,
                    open_timeout=None,
                    close_timeout=CLOSE_TIMEOUT,
                    max_size=self.endpoint.max_answer_bytes,
                    max_queue=MAX_QUEUE,
                ) as socket,
            ):
                payload = bearer(self.endpoint.token)
                await socket.send(json.dumps({"type": "connection_init", "payload": payload}))
                ack = json.loads(await socket.recv())
                if ack.get("type") != "connection_ack":
                    raise TopError(f"{url} refused the subscription: {ack}")
                # Acknowledged: the subscription runs as long as the user watches.
                handshake.reschedule(None)
                await socket.send(
                    json.dumps(
                        {
                            "id": "1",
                            "type": "subscribe",
                            "payload": {"query": query, "variables": dict(variables)},
                        }
                    )
                )
                async for raw in socket:
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "ping":
                        await socket.send(json.dumps({"type": "pong"}))
                    elif kind == "next":
                        yield message["payload"]
                    elif kind == "error":
                        errors = message.get("payload") or [{}]
                        yield {"data": None, "errors": errors}
                        return
                    elif kind == "complete":
                        return
            # The socket closed (1000 or 1001) without completing the operation.
            raise close_error(
                socket.close_code, socket.close_reason or "", url, hint=self.endpoint.token_hint
            )
        except InvalidStatus as exc:
            body = (exc.response.body or b"").decode("utf-8", "replace")
            raise status_error(
                exc.response.status_code, url, body, hint=self.endpoint.token_hint
            ) from None
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CLOSE_TOO_BIG:
                raise too_large_error(url, self.endpoint.max_answer_bytes) from None
            close = exc.rcvd
            code, said = (close.code, close.reason) if close else (None, "")
            raise close_error(code, said, url, hint=self.endpoint.token_hint) from None
        except TimeoutError:
            if handshake.expired():
                raise deadline_error(
                    url, self.endpoint.deadline, "no WebSocket handshake"
                ) from None
            raise TopError(f"cannot reach the gpugraph server at {url}: timed out") from None
        except (OSError, WebSocketException) as exc:
            raise TopError(f"cannot reach the gpugraph server at {url}: {reason(exc)}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Messages that are not JSON objects, or lack the fields the protocol names.
            raise TopError(
                f"{url} does not speak graphql-transport-ws ({type(exc).__name__}: {exc})"
            ) from None
