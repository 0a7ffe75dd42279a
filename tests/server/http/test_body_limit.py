"""Request bodies bounded in time, through the real uvicorn server (their size: test_app)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from api.app import create_app
from api.settings import Settings
from tests.server.http.test_header_limits import exchange
from tests.support.graph import MemoryCluster, MemorySnapshots
from tests.support.server import RunningServer, serve_app

QUERY = orjson.dumps({"query": "{ nodes { name } }"})


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    # A short body timeout, so the test waits for the refusal itself, not long; the
    # header timeout far past it, so a refusal here can only be the body's.
    settings = Settings(body_timeout=0.5, header_timeout=60)
    app = create_app(settings, MemoryCluster(), MemorySnapshots())
    async with serve_app(app, settings) as running:
        yield running


def post(length: int) -> bytes:
    """A POST's headers declaring a ``length``-byte JSON body."""
    return (
        b"POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(length).encode() + b"\r\n\r\n"
    )


async def test_a_body_that_never_ends_gets_408_and_the_connection_closes(
    server: RunningServer,
) -> None:
    # Half of the body, and never the rest: without the limit the server held the
    # connection, and the half it had buffered, for as long as the client stayed.
    answer = await exchange(server, post(len(QUERY)) + QUERY[: len(QUERY) // 2])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert b"connection: close" in head.lower()
    error = orjson.loads(body)["errors"][0]
    assert error["extensions"]["code"] == "REQUEST_TIMEOUT"
    assert "not received within 0.5 s" in error["message"]


async def test_a_body_in_pieces_within_the_limit_is_answered(server: RunningServer) -> None:
    pieces = [QUERY[i : i + 5] for i in range(0, len(QUERY), 5)]
    last = post(len(QUERY)).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    answer = await exchange(server, last, *pieces)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert b'"data"' in answer


async def test_the_server_answers_others_while_a_body_is_late(server: RunningServer) -> None:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, late = await asyncio.open_connection(host, int(port))
    late.write(post(len(QUERY)))
    await late.drain()
    try:
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        assert (await exchange(server, request)).startswith(b"HTTP/1.1 200 ")
        # ...and the late one still gets its own answer, not the others' wait.
        answer = await asyncio.wait_for(reader.read(), 30)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    finally:
        late.close()
