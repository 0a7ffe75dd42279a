"""HTTP/1.1 on a loopback port: requests in, JSON or chunked responses out.

Nothing here knows about Kubernetes objects; an ``Application`` answers the
requests. Writes other than POSTs the application answers are refused.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import orjson

from .status import read_only, status
from .watch import Dropped

__all__ = ["Application", "Exchange", "HttpServer"]


class Application(Protocol):
    """Answers GET requests arriving at an ``HttpServer``."""

    def get(self, exchange: Exchange, path: str, params: dict[str, str]) -> None:
        """Answer one request through ``exchange``; ValueError becomes a 400 Status."""

    def post(self, exchange: Exchange, path: str, body: bytes) -> None:
        """Answer one POST (the review endpoints); anything else is refused there."""


class HttpServer(ThreadingHTTPServer):
    """A threading HTTP server handing each GET to ``application``."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], application: Application) -> None:
        super().__init__(address, Exchange)
        self.application = application

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-response are routine here (stop(), dropped watches).
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError | Dropped):
            return
        super().handle_error(request, client_address)


class Exchange(BaseHTTPRequestHandler):
    """One request and its response."""

    protocol_version = "HTTP/1.1"
    server: HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            self.server.application.get(self, parts.path, params)
        except Dropped:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except ValueError as exc:
            self.send_json(400, status(400, "BadRequest", str(exc)))

    def do_POST(self) -> None:
        # Read the body whatever happens, so the kept-alive connection stays in sync.
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self.server.application.post(self, urlsplit(self.path).path, body)
        except ValueError as exc:
            self.send_json(400, status(400, "BadRequest", str(exc)))

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_json(405, read_only())

    do_PATCH = do_DELETE = do_PUT

    def send_json(self, code: int, obj: Any) -> None:
        """Send ``obj`` as a JSON response."""
        self.send(code, orjson.dumps(obj))

    def send(self, code: int, body: bytes) -> None:
        """Send a JSON ``body`` already encoded."""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def begin_chunked(self) -> None:
        """Start a 200 response in chunked transfer encoding."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> None:
        """Send one chunk."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        """Send the last chunk."""
        self.wfile.write(b"0\r\n\r\n")
