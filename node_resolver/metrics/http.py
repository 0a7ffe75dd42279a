"""The agent's ``/metrics`` over plain HTTP: ``GET /metrics`` and ``GET /healthz``, nothing else.

The agent shares the host's PID namespace, so this listener stays small and
bounded (docs/hardening.md):

- at most ``MAX_CONNECTIONS`` open at once; one more is closed unread;
- a request's line and headers at most ``MAX_HEAD_BYTES`` (h11 parses them;
  past that: 431), and the whole exchange within ``REQUEST_TIMEOUT_SECONDS``
  of the connection opening, or it is closed;
- one request per connection, the body of any request unread;
- with a token, ``/metrics`` needs ``Authorization: Bearer <token>``, checked
  before anything is rendered (401 otherwise). ``/healthz`` carries nothing
  and needs none.

Rendering runs in a worker thread, so a scrape never holds the event loop
that serves gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import socket
from collections.abc import Callable

import h11
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..address import join_host_port, split_host_port

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "METRICS_PATH",
    "REQUEST_TIMEOUT_SECONDS",
    "MetricsHttpServer",
    "bearer_matches",
]

log = logging.getLogger(__name__)

METRICS_PATH = b"/metrics"
HEALTH_PATH = b"/healthz"
# Prometheus scrapes with one connection per target; a few more leave room for
# an HA pair, a probe and a person with curl.
MAX_CONNECTIONS = 16
# A scrape's request is a few hundred bytes; a bearer token fits many times over.
MAX_HEAD_BYTES = 16 * 1024
# Prometheus's default scrape timeout, so a slow client costs a slot no longer
# than its scrape would last.
REQUEST_TIMEOUT_SECONDS = 10.0
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}


def _response(status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """A whole HTTP/1.1 response that closes the connection."""
    head = [
        b"HTTP/1.1 %d %s" % (status, _REASONS[status]),
        b"Content-Length: %d" % len(body),
        b"Connection: close",
        b"Cache-Control: no-store",
    ]
    if not any(name == b"Content-Type" for name, _ in headers):
        head.append(b"Content-Type: text/plain; charset=utf-8")
    head.extend(name + b": " + value for name, value in headers)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def bearer_matches(values: list[bytes], token: str) -> bool:
    """Whether exactly one Authorization header carries ``Bearer <token>`` (scheme in any case)."""
    if len(values) != 1:
        return False
    scheme, _, credentials = values[0].partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    # Constant-time, so the comparison does not leak how much of a guess matched.
    return hmac.compare_digest(credentials.strip(b" "), token.encode())


def _bind(host: str, port: int) -> socket.socket:
    # "::" serves IPv4 too where the kernel can, as the agent's gRPC port does; on a node
    # whose kernel has no IPv6 at all (ipv6.disable=1) it serves IPv4 alone, as gRPC's does.
    if host == "::":
        if socket.has_dualstack_ipv6():
            return socket.create_server((host, port), family=socket.AF_INET6, dualstack_ipv6=True)
        try:
            return socket.create_server((host, port), family=socket.AF_INET6)
        except OSError as exc:
            if exc.errno not in _NO_IPV6:
                raise
            return socket.create_server(("0.0.0.0", port), family=socket.AF_INET)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


# How binding an IPv6 socket fails on a kernel without IPv6.
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL})


class MetricsHttpServer:
    """Serves ``render()``'s bytes at ``/metrics`` on one TCP port, bounded as the module says.

    ``render`` returns None while there is nothing to serve (no scan yet): 503.
    """

    def __init__(
        self,
        render: Callable[[], bytes | None],
        *,
        token: Callable[[], str] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._render = render
        self._token = token
        self._max_connections = max_connections
        self._timeout = timeout
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()
        self.address: str | None = None
        # Scrapes answered with series; tests and benchmarks read it.
        self.scrapes = 0

    async def start(self, listen: str) -> str:
        """Bind ``listen`` (HOST:PORT, port 0 picks one) and serve; returns the bound address."""
        host, port = split_host_port(listen)
        try:
            sock = _bind(host, port)
        except OSError as exc:
            raise OSError(f"cannot listen on {listen} for /metrics: {exc}") from exc
        self._server = await asyncio.start_server(self._connection, sock=sock)
        if host == "::" and sock.family == socket.AF_INET:
            host = "0.0.0.0"  # no IPv6 on this node (see _bind)
        self.address = join_host_port(host, sock.getsockname()[1])
        return self.address

    async def stop(self) -> None:
        """Stop listening and drop the connections still open."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._open):
            task.cancel()
        for task in list(self._open):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._open) >= self._max_connections:
            writer.transport.abort()
            return
        self._open.add(task)
        try:
            async with asyncio.timeout(self._timeout):
                writer.write(await self._exchange(reader))
                await writer.drain()
        except (TimeoutError, ConnectionError):
            writer.transport.abort()
        finally:
            self._open.discard(task)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader) -> bytes:
        """The response to the connection's one request."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        received = 0
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(4096)
                    received += len(data)
                    # h11 bounds only what it buffers unparsed; the head as a whole is bounded here.
                    if received > MAX_HEAD_BYTES:
                        return _response(431, b"request head too large\n")
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    return await self._answer(event)
                raise ConnectionError("closed before a request")
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint if exc.error_status_hint in _REASONS else 400
            return _response(status, b"bad request\n")

    async def _answer(self, request: h11.Request) -> bytes:
        path = request.target.partition(b"?")[0]
        if path not in (METRICS_PATH, HEALTH_PATH):
            return _response(404, b"not found: this agent serves /metrics and /healthz\n")
        if request.method != b"GET":
            return _response(405, b"method not allowed\n", ((b"Allow", b"GET"),))
        if path == HEALTH_PATH:
            return _response(200, b"ok\n")
        if self._token is not None:
            given = [value for name, value in request.headers if name == b"authorization"]
            if not bearer_matches(given, self._token()):
                return _response(
                    401, b"missing or invalid bearer token\n", ((b"WWW-Authenticate", b"Bearer"),)
                )
        try:
            body = await asyncio.to_thread(self._render)
        except Exception:
            log.exception("rendering /metrics failed")
            return _response(500, b"rendering the metrics failed; see the agent's log\n")
        if body is None:
            return _response(503, b"no GPU sample taken yet\n")
        self.scrapes += 1
        return _response(200, body, ((b"Content-Type", CONTENT_TYPE_LATEST.encode()),))
