"""The client's snapshot stream: one stream for many reads, and what ends or replaces it.

Against a scripted NodeAgent on loopback gRPC (it numbers its streams and
replies, and can hold a reply back), and against the real agent where the
agent's side is what is pinned down: the token checked again on each read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio

from node_resolver.agent import agent_running
from node_resolver.auth import TokenFile
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.generated import agent_pb2
from node_resolver.sampler import Sampler
from tests.support.agents import AllAliveResolver, gpu_json, nvml_json, start_agent_thread
from tests.support.polling import eventually_async

SERVICE = "gpugraph.agent.v1.NodeAgent"


class ScriptedAgent:
    """A NodeAgent that answers with numbered replies: ``stream-S-reply-R`` or ``unary-N``."""

    def __init__(self, *, streams: bool = True) -> None:
        self.streams = 0
        self.unary = 0
        # While set to an unset event, stream replies wait for it.
        self.hold: asyncio.Event | None = None
        self._with_streams = streams
        self._server: aio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Serve on 127.0.0.1:``port``; the port bound."""
        methods: dict[str, grpc.RpcMethodHandler] = {
            "GetSnapshot": grpc.unary_unary_rpc_method_handler(
                self._get,
                request_deserializer=agent_pb2.GetSnapshotRequest.FromString,
                response_serializer=agent_pb2.Snapshot.SerializeToString,
            )
        }
        if self._with_streams:
            methods["StreamSnapshots"] = grpc.stream_stream_rpc_method_handler(
                self._stream,
                request_deserializer=agent_pb2.GetSnapshotRequest.FromString,
                response_serializer=agent_pb2.Snapshot.SerializeToString,
            )
        self._server = aio.server()
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, methods),)
        )
        bound = self._server.add_insecure_port(f"127.0.0.1:{port}")
        await self._server.start()
        return bound

    async def stop(self) -> None:
        """Stop at once, ending every stream."""
        assert self._server is not None
        await self._server.stop(None)

    async def _get(self, request: Any, context: Any) -> agent_pb2.Snapshot:
        self.unary += 1
        return agent_pb2.Snapshot(node_name=f"unary-{self.unary}")

    async def _stream(self, requests: Any, context: Any) -> AsyncIterator[agent_pb2.Snapshot]:
        self.streams += 1
        stream, replies = self.streams, 0
        async for _ in requests:
            if self.hold is not None:
                await self.hold.wait()
            replies += 1
            yield agent_pb2.Snapshot(node_name=f"stream-{stream}-reply-{replies}")


async def test_reads_share_one_stream_and_come_back_in_order() -> None:
    agent = ScriptedAgent()
    port = await agent.start()
    async with AgentClient(f"127.0.0.1:{port}") as client:
        names = [(await client.get_snapshot(timeout=30)).node_name for _ in range(20)]
        concurrent = await asyncio.gather(*(client.get_snapshot(timeout=30) for _ in range(10)))
    await agent.stop()
    assert names == [f"stream-1-reply-{n}" for n in range(1, 21)]
    assert sorted(int(s.node_name.rsplit("-", 1)[1]) for s in concurrent) == list(range(21, 31))
    assert agent.streams == 1 and agent.unary == 0


async def test_a_reply_past_the_deadline_never_answers_the_next_read() -> None:
    agent = ScriptedAgent()
    port = await agent.start()
    async with AgentClient(f"127.0.0.1:{port}") as client:
        assert (await client.get_snapshot(timeout=30)).node_name == "stream-1-reply-1"
        agent.hold = asyncio.Event()
        # The reply is held until after the deadline has passed.
        with pytest.raises(aio.AioRpcError) as caught:
            await client.get_snapshot(timeout=0.05)
        agent.hold.set()
        agent.hold = None
        late = await client.get_snapshot(timeout=30)
    await agent.stop()
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Not the held reply (stream 1's second): the stream it was on was ended.
    assert late.node_name == "stream-2-reply-1"


async def test_a_cancelled_read_ends_its_stream() -> None:
    agent = ScriptedAgent()
    port = await agent.start()
    async with AgentClient(f"127.0.0.1:{port}") as client:
        agent.hold = asyncio.Event()
        read = asyncio.create_task(client.get_snapshot(timeout=30))
        await eventually_async(lambda: agent.streams == 1)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        agent.hold.set()
        agent.hold = None
        assert (await client.get_snapshot(timeout=30)).node_name == "stream-2-reply-1"
    await agent.stop()


async def test_an_agent_restarted_on_its_address_is_read_without_a_failure() -> None:
    first = ScriptedAgent()
    port = await first.start()
    async with AgentClient(f"127.0.0.1:{port}") as client:
        assert (await client.get_snapshot(timeout=30)).node_name == "stream-1-reply-1"
        await first.stop()
        second = ScriptedAgent()
        assert await second.start(port) == port
        try:
            # On a new stream; or, when the new stream raced the old connection's end,
            # by one unary call.
            after = await client.get_snapshot(timeout=30)
            assert after.node_name in ("stream-1-reply-1", "unary-1")
            # Either way the reads after it are on a stream again.
            later = await client.get_snapshot(timeout=30)
            assert later.node_name.startswith("stream-")
        finally:
            await second.stop()


async def test_an_agent_without_the_stream_is_read_with_unary_calls() -> None:
    older = ScriptedAgent(streams=False)
    port = await older.start()
    async with AgentClient(f"127.0.0.1:{port}") as client:
        names = [(await client.get_snapshot(timeout=30)).node_name for _ in range(3)]
    await older.stop()
    assert names == ["unary-1", "unary-2", "unary-3"]


async def test_a_retired_token_ends_an_open_stream(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    token_path = tmp_path / "token"
    token_path.write_text("first")
    token = TokenFile(token_path, check_seconds=0.0)
    with start_agent_thread(FakeGpuSource(nvml), token=token.current, interval=3600) as agent:
        async with AgentClient(agent.address, token="first") as client:
            assert (await client.get_snapshot(timeout=30)).sample.gpus
            # Replace the file (a new inode, as a Secret volume does).
            token_path.with_name("token.new").write_text("second")
            token_path.with_name("token.new").replace(token_path)
            with pytest.raises(aio.AioRpcError) as caught:
                await client.get_snapshot(timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert agent.server.calls_served == 1


async def test_a_stopping_agent_ends_its_snapshot_streams_without_waiting_its_grace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    sampler = Sampler(FakeGpuSource(nvml), AllAliveResolver(), node_name="n", interval=3600)
    async with AsyncExitStack() as stack:

        async def serve_and_stop() -> AgentClient:
            # An hour's grace: a stop that waited for the open stream would not end.
            async with agent_running(sampler, "127.0.0.1:0", grace=3600, join_timeout=10) as agent:
                assert agent.address is not None
                client = await stack.enter_async_context(AgentClient(agent.address))
                assert (await client.get_snapshot(timeout=30)).sample.gpus
            return client

        client = await asyncio.wait_for(serve_and_stop(), 120)
        with pytest.raises(aio.AioRpcError) as gone:
            await client.get_snapshot(timeout=30)
    assert gone.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an ended stream"
