"""Forwarding a request to a Service's backend, as kube-apiserver's service proxy does.

Two behaviours of the real proxy are kept because clients depend on them:

- the caller's ``Authorization`` header does not reach the backend: the API
  server consumed it to authenticate the caller and removes it before
  proxying (``WithAuthentication`` in k8s.io/apiserver);
- a request asking to upgrade (a WebSocket) is passed through byte for byte
  once the backend answers, both ways, until either side closes (the
  upgrade-aware proxy handler).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading

from .status import status
from .transport import Exchange

__all__ = ["Backend", "ProxiedSockets", "forward_http", "forward_upgrade"]

Backend = tuple[str, int]
TIMEOUT = 30.0
# Never forwarded: the API server's own credential, and hop-by-hop headers.
_DROPPED = frozenset(
    {"authorization", "host", "connection", "keep-alive", "transfer-encoding", "content-length"}
)
_RETURNED = ("Content-Type", "WWW-Authenticate", "Retry-After")


def _unreachable(exchange: Exchange, backend: Backend, exc: OSError) -> None:
    host, port = backend
    reason = exc.strerror or str(exc)
    message = f"error trying to reach service: dial tcp {host}:{port}: connect: {reason.lower()}"
    exchange.send_json(503, status(503, "ServiceUnavailable", message))


def forward_http(exchange: Exchange, backend: Backend, path: str, body: bytes) -> None:
    """Send the request on to ``backend`` and its answer back, without the caller's credential."""
    host, port = backend
    headers = {k: v for k, v in exchange.headers.items() if k.lower() not in _DROPPED}
    connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        connection.request(exchange.command, path, body=body or None, headers=headers)
        response = connection.getresponse()
        payload = response.read()
    except OSError as exc:
        return _unreachable(exchange, backend, exc)
    finally:
        connection.close()
    exchange.send_response(response.status)
    for name in _RETURNED:
        value = response.getheader(name)
        if value is not None:
            exchange.send_header(name, value)
    exchange.send_header("Content-Length", str(len(payload)))
    exchange.end_headers()
    exchange.wfile.write(payload)


class ProxiedSockets:
    """The open upgraded connections, so a stopping server can end them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()

    def add(self, sock: socket.socket) -> None:
        """Track ``sock`` until ``discard``."""
        with self._lock:
            self._open.add(sock)

    def discard(self, sock: socket.socket) -> None:
        """Stop tracking ``sock``."""
        with self._lock:
            self._open.discard(sock)

    def close_all(self) -> None:
        """Shut every tracked socket down; their pumps then end."""
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes until ``source`` ends, then end ``sink``'s writing side."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def forward_upgrade(
    exchange: Exchange, backend: Backend, path: str, sockets: ProxiedSockets
) -> None:
    """Pass an upgrade request to ``backend``, then relay raw bytes both ways until both end."""
    host, port = backend
    try:
        upstream = socket.create_connection(backend, timeout=TIMEOUT)
    except OSError as exc:
        return _unreachable(exchange, backend, exc)
    upstream.settimeout(None)
    lines = [f"{exchange.command} {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [
        f"{k}: {v}"
        for k, v in exchange.headers.items()
        if k.lower() not in ("authorization", "host")
    ]
    client = exchange.connection
    sockets.add(upstream)
    sockets.add(client)
    try:
        upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        # The client sends nothing more until the backend's 101 reaches it, so
        # nothing is left in the handler's read buffer.
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
    finally:
        sockets.discard(upstream)
        sockets.discard(client)
        upstream.close()
        exchange.close_connection = True
