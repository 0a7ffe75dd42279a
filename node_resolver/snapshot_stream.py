"""One long-lived StreamSnapshots stream to an agent: a read is one message each way.

A unary GetSnapshot costs its caller more than a round trip on a stream that
is already open (gRPC's Python builds a call, a task, metadata and a deadline
for each call; bench/README.md, section 25), and the server reads every node
again and again: each fresh read, each kept-warm refresh. So a client keeps
one stream to its agent and writes a request on it per read.

Each read has its own deadline. A read that times out, is cancelled or fails
ends the stream, since its reply could still come and would answer the next
read. A stream that answered before and has broken since (the agent restarted,
the connection dropped) is replaced once within the same read. An agent that
does not have the method (an older version) is read with GetSnapshot from then
on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from .generated import agent_pb2

__all__ = ["SnapshotStream"]

_REQUEST = agent_pb2.GetSnapshotRequest()
# How a stream that served reads before may end when its agent or connection went
# away meanwhile; a fresh stream is worth one try then.
_BROKEN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})

OpenStream = Callable[[], Any]
UnaryRead = Callable[[float], Awaitable[agent_pb2.Snapshot]]


class SnapshotStream:
    """Reads snapshots over one stream that ``open_stream`` opens (and reopens)."""

    def __init__(self, open_stream: OpenStream, unary: UnaryRead) -> None:
        self._open = open_stream
        self._unary = unary
        self._call: Any = None
        # A read waits for the one before it: replies come in the order of requests.
        self._turn = asyncio.Lock()
        self._unsupported = False
        self._closed = False

    async def read(self, *, timeout: float) -> agent_pb2.Snapshot:
        """The agent's latest snapshot message; raises grpc.aio.AioRpcError on failure
        (DEADLINE_EXCEEDED after ``timeout`` seconds), as a unary call would, and
        asyncio.CancelledError when the client is closed under it, as gRPC cancels a
        call in flight when its channel closes."""
        if self._unsupported:
            return await self._unary(timeout)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            return await asyncio.wait_for(self._exchange(deadline), timeout)
        except TimeoutError:
            raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    def close(self) -> None:
        """End the stream for good: reads in flight or waiting their turn are cancelled."""
        self._closed = True
        self._end()

    def _end(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def _exchange(self, deadline: float) -> agent_pb2.Snapshot:
        async with self._turn:
            for _ in range(2):
                if self._closed:
                    raise asyncio.CancelledError("the agent client was closed")
                opened = self._call is None or self._call.done()
                if opened:
                    self._end()
                    self._call = self._open()
                try:
                    return await _round_trip(self._call, opened)
                except _UnsentError:
                    # The stream ended before the request went (refused, or its agent
                    # gone). gRPC then reports a status of its own (INTERNAL, "Failed
                    # execute_batch"), not the agent's: a unary call gets the agent's
                    # answer or its refusal.
                    self._end()
                    return await self._unary(_left(deadline))
                except aio.AioRpcError as exc:
                    self._end()
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        self._unsupported = True
                        return await self._unary(_left(deadline))
                    # Only a reused stream that broke gets a second try, on a new one.
                    if opened or exc.code() not in _BROKEN:
                        raise
                except BaseException:
                    self._end()
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")


class _UnsentError(Exception):
    """The request could not be written: the stream had ended."""


async def _round_trip(call: Any, opened: bool) -> agent_pb2.Snapshot:
    try:
        if opened:
            await _first_write(call)
        else:
            await call.write(_REQUEST)
    except (asyncio.InvalidStateError, aio.AioRpcError):
        raise _UnsentError from None
    reply = await call.read()
    if not isinstance(reply, agent_pb2.Snapshot):
        # grpc.aio.EOF: the agent ended the stream without an error.
        raise _error(grpc.StatusCode.UNAVAILABLE, "the agent ended the stream")
    return reply


async def _first_write(call: Any) -> None:
    """A new stream's first write, which waits for the connection.

    grpc.aio never wakes that wait when the call is cancelled first (its channel
    closed while connecting), so the write races the call's end.
    """
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def mark(_: object) -> None:
        if not ended.done():
            ended.set_result(None)

    call.add_done_callback(mark)
    write = asyncio.ensure_future(call.write(_REQUEST))
    try:
        await asyncio.wait((write, ended), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not write.done():
            write.cancel()
    if not write.cancelled() and write.done():
        write.result()
        return
    if call.cancelled():
        raise asyncio.CancelledError("the stream was cancelled while connecting")
    raise _UnsentError


def _left(deadline: float) -> float:
    return max(0.0, deadline - asyncio.get_running_loop().time())


def _error(code: grpc.StatusCode, details: str) -> aio.AioRpcError:
    return aio.AioRpcError(code, aio.Metadata(), aio.Metadata(), details, None)
