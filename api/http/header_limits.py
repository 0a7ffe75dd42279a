"""A request's headers must arrive whole, small and soon, or the connection is closed.

uvicorn's httptools protocol buffers a request's headers without bound and
waits for them forever: ten unfinished 8 MB headers held 100 MB and their
sockets open indefinitely. ``BoundedHeaders`` counts the bytes received while
a request's headers are incomplete and answers 431 past ``max_bytes``; a
request whose headers are not complete ``timeout`` seconds after its
connection opened (or after its first byte, on a kept-alive connection) is
answered 408. Either way the connection is closed and the app never sees it.

Past ``--max-connections`` (uvicorn's ``limit_concurrency``) a request is
answered 503, except kubelet's probes: a liveness probe refused at the cap
would have the server restarted in the very flood the cap is there to ride
out. uvicorn warns of each such 503; ``CapWarnings`` lets one a minute through,
with the count of the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "MAX_HEADER_BYTES",
    "PROBE_PATHS",
    "BoundedHeaders",
    "CapWarnings",
    "bounded_headers",
    "cap_warnings",
]

# Kubelet's probes: open to every caller, and answered past the connection cap.
PROBE_PATHS = ("/healthz", "/readyz")
_PROBES = tuple(path.encode() for path in PROBE_PATHS)

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
        """The headers arrived in time and in size; the body is the body limit's business.
        A probe is answered whatever the connection cap says."""
        self._in_headers = False
        self._header_bytes = 0
        self._stop_header_timer()
        limit = self.limit_concurrency
        if limit is None or self.url.partition(b"?")[0] not in _PROBES:
            super().on_headers_complete()
            return
        self.limit_concurrency = None
        try:
            super().on_headers_complete()
        finally:
            self.limit_concurrency = limit

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


# uvicorn's warning for each request it answers 503 at the connection cap.
_CAP_MESSAGE = "Exceeded concurrency limit."


class CapWarnings(logging.Filter):
    """uvicorn's warning of a 503 at the connection cap, once per ``window`` seconds, the
    first after a quiet spell saying how many were left out: a flood is not a log flood."""

    def __init__(self, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._last: float | None = None
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every other record; of the cap's warnings, one per window."""
        if record.msg != _CAP_MESSAGE:
            return True
        now = self._clock()
        if self._last is not None and now - self._last < self.window:
            self.suppressed += 1
            return False
        self._last = now
        if self.suppressed:
            record.msg = f"{_CAP_MESSAGE} ({self.suppressed} more since the last such warning)"
            self.suppressed = 0
        return True


def cap_warnings() -> CapWarnings:
    """The one CapWarnings on uvicorn's logger (installed on first call)."""
    logger = logging.getLogger("uvicorn.error")
    for existing in logger.filters:
        if isinstance(existing, CapWarnings):
            return existing
    installed = CapWarnings()
    logger.addFilter(installed)
    return installed
