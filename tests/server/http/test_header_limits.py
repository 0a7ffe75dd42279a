"""Request headers bounded in size and in time, through the real uvicorn server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from api.app import create_app
from api.http.header_limits import MAX_HEADER_BYTES, CapWarnings
from api.settings import Settings
from tests.support.clock import ManualClock
from tests.support.graph import MemoryCluster, MemorySnapshots
from tests.support.server import RunningServer, serve_app


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    # A short header timeout, so the test waits for the refusal itself, not long.
    settings = Settings(header_timeout=0.5)
    app = create_app(settings, MemoryCluster(), MemorySnapshots())
    async with serve_app(app, settings) as running:
        yield running


async def exchange(server: RunningServer, *chunks: bytes) -> bytes:
    """Send ``chunks`` on a fresh connection and read until the server closes it."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


async def test_headers_past_the_limit_get_431_and_the_connection_closes(
    server: RunningServer,
) -> None:
    start = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: "
    # The header never ends: without the limit the server would buffer all of it.
    answer = await exchange(server, start + b"a" * (MAX_HEADER_BYTES + 1))
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]


async def test_headers_that_do_not_finish_in_time_get_408(server: RunningServer) -> None:
    answer = await exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]


async def test_a_silent_connection_is_closed_after_the_header_timeout(
    server: RunningServer,
) -> None:
    answer = await exchange(server)
    assert answer.startswith(b"HTTP/1.1 408 ") or answer == b""


async def test_large_headers_within_the_limit_and_kept_alive_requests_pass(
    server: RunningServer,
) -> None:
    token = b"t" * (16 * 1024)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Token: " + token + b"\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    # Three requests on one connection: each gets its own header allowance.
    answer = await exchange(server, request, request, last)
    assert answer.count(b"HTTP/1.1 200 OK") == 3, answer[:200]


def test_the_caps_warnings_are_one_a_minute_the_next_counting_the_others() -> None:
    clock = ManualClock()
    cap = CapWarnings(window=60, clock=clock)

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.WARNING, "", 0, message, None, None)

    first = record("Exceeded concurrency limit.")
    assert cap.filter(first) and first.getMessage() == "Exceeded concurrency limit."
    assert [cap.filter(record("Exceeded concurrency limit.")) for _ in range(3)] == [False] * 3
    assert cap.filter(record("Started server process"))  # any other record passes
    clock.advance(60)
    later = record("Exceeded concurrency limit.")
    assert cap.filter(later)
    assert later.getMessage() == "Exceeded concurrency limit. (3 more since the last such warning)"
