"""A tiny hostile GraphQL server for ``gpugraph top``'s tests and ``bench/hostile.py``.

An ASGI app under uvicorn on loopback whose HTTP and WebSocket handlers each
misbehave in one way: never answering, dripping a byte at a time, flooding,
never acknowledging a graphql-transport-ws socket, or answering with whatever
a test wants top to print.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

__all__ = [
    "SNAPSHOT_ANSWER",
    "Drip",
    "Flood",
    "Hostile",
    "answer",
    "drip",
    "huge_tick",
    "no_ack",
    "serving",
    "silent",
]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _disconnected(receive: Receive) -> None:
    """Until the client goes away."""
    while (await receive())["type"] not in ("http.disconnect", "websocket.disconnect"):
        pass


async def _while_connected(receive: Receive, work: Awaitable[None]) -> None:
    """``work`` until it ends or the client goes away (uvicorn's send then only drops bytes)."""
    gone = asyncio.ensure_future(_disconnected(receive))
    working = asyncio.ensure_future(work)
    await asyncio.wait({gone, working}, return_when=asyncio.FIRST_COMPLETED)
    for task in (gone, working):
        task.cancel()


async def _body(receive: Receive) -> None:
    """Read the request's body to its end."""
    while (await receive()).get("more_body"):
        pass


async def _start(send: Send, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )


def answer(body: Any) -> Handler:
    """An honest server: every POST is answered with ``body`` as JSON."""
    encoded = json.dumps(body).encode()

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await _body(receive)
        await _start(send, [(b"content-length", str(len(encoded)).encode())])
        await send({"type": "http.response.body", "body": encoded})

    return handler


async def silent(scope: Scope, receive: Receive, send: Send) -> None:
    """Takes the request and never answers."""
    await _body(receive)
    await _disconnected(receive)


@dataclass
class Drip:
    """Answers at once, then a blank (valid JSON whitespace) every ``interval`` seconds, and
    never ends: the client's reads each get a byte before any per-read timeout."""

    interval: float = 0.05

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _body(receive)
        await _start(send)

        async def dripping() -> None:
            while True:
                await send({"type": "http.response.body", "body": b" ", "more_body": True})
                await asyncio.sleep(self.interval)

        await _while_connected(receive, dripping())


drip = Drip()


@dataclass
class Flood:
    """An answer of ``total`` bytes of blanks (or a Content-Length saying so), counting what
    it handed to the connection before the client left."""

    total: int
    declared: bool = False
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _body(receive)
        headers = [(b"content-length", str(self.total).encode())] if self.declared else []
        await _start(send, headers)
        chunk = b" " * (1 << 16)

        async def flooding() -> None:
            while self.sent < self.total:
                # Held here while the client's buffers are full: it is not reading.
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self.sent += len(chunk)
                # Lets the loop see the client leave.
                await asyncio.sleep(0)

        try:
            await _while_connected(receive, flooding())
        finally:
            self.done.set()


async def no_ack(scope: Scope, receive: Receive, send: Send) -> None:
    """A graphql-transport-ws socket that takes connection_init and never acknowledges it."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept", "subprotocol": "graphql-transport-ws"})
    await receive()  # connection_init
    await _disconnected(receive)


def huge_tick(size: int) -> Handler:
    """A socket that acknowledges, then answers the subscription with a ``size``-byte message."""

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept", "subprotocol": "graphql-transport-ws"})
        await receive()
        await send({"type": "websocket.send", "text": json.dumps({"type": "connection_ack"})})
        await receive()  # subscribe
        payload = {"data": {"gpus": [], "nodes": []}, "padding": " " * size}
        message = {"id": "1", "type": "next", "payload": payload}
        try:
            await send({"type": "websocket.send", "text": json.dumps(message)})
        except Exception:  # the client refused it and left
            return
        await _disconnected(receive)

    return handler


@dataclass
class Hostile:
    """The ASGI app: ``http`` answers every request, ``websocket`` every socket."""

    http: Handler = silent
    websocket: Handler = no_ack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self.http if scope["type"] == "http" else self.websocket)(scope, receive, send)


@contextmanager
def serving(app: Hostile) -> Iterator[str]:
    """``app`` under uvicorn on loopback, in a thread; its base URL.

    The socket is bound and listening before uvicorn runs, so a client may
    connect at once: the kernel holds the connection until uvicorn accepts it.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="critical", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve([listener])), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()


# A valid answer to top's query: one node, no GPUs.
SNAPSHOT_ANSWER = {"data": {"gpus": [], "nodes": [{"name": "n", "agent": {"reachable": True}}]}}
