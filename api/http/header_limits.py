"""A request's headers must arrive whole, small and soon, or the connection is closed.

uvicorn's httptools protocol buffers a request's headers without bound and
waits for them forever: ten unfinished 8 MB headers held 100 MB and their
sockets open indefinitely. ``BoundedHeaders`` counts the bytes received while
a request's headers are incomplete and answers 431 past ``max_bytes``; a
request whose headers are not complete ``timeout`` seconds after its
connection opened (or after its first byte, on a kept-alive connection) is
answered 408. Either way the connection is closed and the app never sees it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["MAX_HEADER_BYTES", "BoundedHeaders", "bounded_headers"]

# Room for a 16 KiB token (the longest the server reviews) and the usual headers.
MAX_HEADER_BYTES = 64 * 1024

_REFUSALS = {
    408: b"HTTP/1.1 408 Request Timeout\r\n",
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
}


class BoundedHeaders(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bound on header size and header read time."""

    max_bytes: int = MAX_HEADER_BYTES
    # Set by ``bounded_headers`` from ``--header-timeout``.
    timeout: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        # True while a request's headers are still arriving (or none has started).
        self._in_headers = True
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock on the first request's headers."""
        super().connection_made(transport)
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the header clock with the connection."""
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count header bytes before the parser buffers them; past the allowance, refuse."""
        if not self._in_headers:
            super().data_received(data)
            return
        room = self.max_bytes - self._header_bytes
        if len(data) <= room:
            self._header_bytes += len(data)
            super().data_received(data)
            return
        # More than the headers may take: feed what they may, and go on only if
        # they ended within it (the rest is then a body, or the next request).
        self._header_bytes += room
        super().data_received(data[:room])
        if self._in_headers:
            self._refuse(431)
        elif not self.transport.is_closing() and self.transport.get_protocol() is self:
            self.data_received(data[room:])

    def on_message_begin(self) -> None:
        """A new request on this connection: its headers get the full allowance again."""
        super().on_message_begin()
        self._in_headers = True
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        """The headers arrived in time and in size; the body is the body limit's business."""
        self._in_headers = False
        self._header_bytes = 0
        self._stop_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """Between requests, bytes count toward the next request's headers."""
        super().on_message_complete()
        self._in_headers = True
        self._header_bytes = 0

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.timeout, self._refuse, 408)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _refuse(self, status: int) -> None:
        self._stop_header_timer()
        self._in_headers = False
        if self.transport.is_closing():
            return
        self.transport.write(_REFUSALS[status] + b"content-length: 0\r\nconnection: close\r\n\r\n")
        self.transport.close()


def bounded_headers(timeout: float, max_bytes: int = MAX_HEADER_BYTES) -> type[BoundedHeaders]:
    """The protocol class for uvicorn's ``http`` setting, with these bounds."""
    return type("BoundedHeaders", (BoundedHeaders,), {"max_bytes": max_bytes, "timeout": timeout})
