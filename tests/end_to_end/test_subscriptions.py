"""Live subscriptions through a real graphql-transport-ws client against real uvicorn.

The client speaks the protocol itself over ``websockets`` (connection_init /
connection_ack, subscribe, next, complete, ping/pong), as a dashboard would.
Values come from real agents reading fake NVML files, so changing a file
must show up in the stream.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.federation.cluster import (
    GPU_A0,
    GPU_A1,
    GPU_B0,
    NODE_A,
    NODE_B,
    PODS,
    LiveCluster,
    live_cluster,
)
from tests.support.polling import eventually_async

PROTOCOL = "graphql-transport-ws"
TIMEOUT = 15.0


class ProtocolError(AssertionError):
    """The server broke the graphql-transport-ws protocol, or sent an unexpected message."""


class TransportWsClient:
    """A minimal graphql-transport-ws client over one WebSocket."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self._ids = itertools.count(1)

    async def _receive(self) -> dict[str, Any]:
        while True:
            raw = await asyncio.wait_for(self.socket.recv(), TIMEOUT)
            message: dict[str, Any] = json.loads(raw)
            if message.get("type") == "ping":
                await self._send({"type": "pong"})
                continue
            if message.get("type") == "pong":
                continue
            return message

    async def _send(self, message: dict[str, Any]) -> None:
        await self.socket.send(json.dumps(message))

    async def init(self) -> None:
        """connection_init, then wait for connection_ack."""
        await self._send({"type": "connection_init", "payload": {}})
        ack = await self._receive()
        if ack.get("type") != "connection_ack":
            raise ProtocolError(f"expected connection_ack, got {ack}")

    async def subscribe(self, query: str, variables: dict[str, Any] | None = None) -> str:
        """Start an operation; returns its id."""
        op_id = str(next(self._ids))
        payload: dict[str, Any] = {"query": query}
        if variables:
            payload["variables"] = variables
        await self._send({"id": op_id, "type": "subscribe", "payload": payload})
        return op_id

    async def next(self, op_id: str) -> dict[str, Any]:
        """The next ``next`` payload for ``op_id``; ProtocolError on error/complete."""
        while True:
            message = await self._receive()
            if message.get("id") != op_id:
                continue  # another operation's late message
            if message["type"] == "next":
                payload: dict[str, Any] = message["payload"]
                return payload
            raise ProtocolError(f"operation {op_id} ended: {message}")

    async def error(self, op_id: str) -> list[dict[str, Any]]:
        """Wait for an ``error`` message for ``op_id`` and return its errors."""
        message = await self._receive()
        if message.get("id") != op_id or message.get("type") != "error":
            raise ProtocolError(f"expected an error for {op_id}, got {message}")
        errors: list[dict[str, Any]] = message["payload"]
        return errors

    async def complete(self, op_id: str) -> None:
        """Tell the server this client is done with ``op_id``."""
        await self._send({"id": op_id, "type": "complete"})


@asynccontextmanager
async def transport_ws(url: str) -> AsyncIterator[TransportWsClient]:
    """An initialised graphql-transport-ws connection to ``url``."""
    async with connect(url, subprotocols=[PROTOCOL], open_timeout=TIMEOUT) as socket:  # type: ignore[list-item]
        assert socket.subprotocol == PROTOCOL
        client = TransportWsClient(socket)
        await client.init()
        yield client


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    # These tests count the agents' calls per tick; keep-warm's refreshes of nodes that
    # earlier tests read would add calls nobody here asked for (keep-warm has its own tests).
    with live_cluster(
        tmp_path_factory.mktemp("cluster"), utilization=37, snapshot_keep_warm=0
    ) as running:
        yield running


GPU_UPDATES = """
subscription Gpus($node: String, $interval: Float) {
  gpuUpdates(nodeName: $node, intervalSeconds: $interval) {
    uuid
    utilizationGpu
    processes { pid pod { namespace name } }
  }
}
"""

POD_USAGE = """
subscription Pod($ns: String!, $name: String!) {
  podGpuUsage(namespace: $ns, name: $name, intervalSeconds: 0.5) {
    name
    node { name }
    gpus { uuid }
    gpuProcesses { pid usedMemoryBytes }
  }
}
"""


async def test_values_follow_the_fake_nvml_file(cluster: LiveCluster) -> None:
    async with transport_ws(cluster.ws_url) as client:
        op = await client.subscribe(GPU_UPDATES, {"node": NODE_B, "interval": 0.5})
        first = await client.next(op)
        assert "errors" not in first
        (gpu,) = first["data"]["gpuUpdates"]
        assert gpu["uuid"] == GPU_B0 and gpu["utilizationGpu"] == 37
        # Nested fields resolve as in queries: the process's pod, and a host process without one.
        pods = {p["pid"]: p["pod"] for p in gpu["processes"]}
        infer = next(spec for spec in PODS if spec.node == NODE_B)
        assert pods[infer.pid] == {"namespace": infer.namespace, "name": infer.name}
        assert None in pods.values()

        cluster.set_utilization(NODE_B, 91)
        seen = [37]
        deadline = time.monotonic() + TIMEOUT
        while seen[-1] != 91:
            assert time.monotonic() < deadline, f"utilization never reached 91: {seen}"
            (gpu,) = (await client.next(op))["data"]["gpuUpdates"]
            seen.append(gpu["utilizationGpu"])
        # Only the old and the new value ever appear: no made-up intermediate states.
        assert set(seen) == {37, 91}

        cluster.set_utilization(NODE_B, 12)
        while seen[-1] != 12:
            assert time.monotonic() < deadline + TIMEOUT, f"utilization never reached 12: {seen}"
            (gpu,) = (await client.next(op))["data"]["gpuUpdates"]
            seen.append(gpu["utilizationGpu"])
        await client.complete(op)
    cluster.set_utilization(NODE_B, 37)


async def test_pod_usage_streams_the_pods_processes(cluster: LiveCluster) -> None:
    trainer = PODS[0]
    async with transport_ws(cluster.ws_url) as client:
        op = await client.subscribe(POD_USAGE, {"ns": trainer.namespace, "name": trainer.name})
        for _ in range(2):
            pod = (await client.next(op))["data"]["podGpuUsage"]
            assert pod == {
                "name": trainer.name,
                "node": {"name": NODE_A},
                "gpus": [{"uuid": GPU_A0}],
                "gpuProcesses": [{"pid": trainer.pid, "usedMemoryBytes": trainer.used_bytes}],
            }
        gone = await client.subscribe(POD_USAGE, {"ns": "ml", "name": "no-such-pod"})
        assert (await client.next(gone))["data"] == {"podGpuUsage": None}


async def test_unsubscribe_and_disconnect_free_the_subscription(cluster: LiveCluster) -> None:
    # Earlier tests' sockets are closed; the server lets go of them shortly after.
    await eventually_async(
        lambda: cluster.active_subscriptions == 0, what="earlier sockets released", timeout=TIMEOUT
    )
    async with transport_ws(cluster.ws_url) as client:
        op = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": 0.5})
        await client.next(op)
        assert cluster.active_subscriptions == 1
        await client.complete(op)
        await eventually_async(
            lambda: cluster.active_subscriptions == 0, what="complete released it", timeout=TIMEOUT
        )

        # The connection stays usable after a clean unsubscribe.
        again = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": 0.5})
        assert (await client.next(again))["data"]["gpuUpdates"][0]["uuid"] == GPU_A0
        assert cluster.active_subscriptions == 1
    # Leaving without `complete` (the socket just closes) frees it as well.
    await eventually_async(
        lambda: cluster.active_subscriptions == 0, what="disconnect released it", timeout=TIMEOUT
    )


async def test_fifty_subscribers_share_one_agent_call_per_tick(cluster: LiveCluster) -> None:
    subscribers, ticks, interval = 50, 4, 1.0
    ready = asyncio.Event()
    started = 0
    received: list[int] = []

    async def subscriber() -> None:
        nonlocal started
        async with transport_ws(cluster.ws_url) as client:
            op = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": interval})
            await client.next(op)
            started += 1
            if started == subscribers:
                ready.set()
            await asyncio.wait_for(ready.wait(), TIMEOUT)
            for _ in range(ticks):
                payload = await client.next(op)
                assert [g["uuid"] for g in payload["data"]["gpuUpdates"]] == [GPU_A0, GPU_A1]
            received.append(ticks)
            await client.complete(op)

    tasks = [asyncio.create_task(subscriber()) for _ in range(subscribers)]
    await asyncio.wait_for(ready.wait(), 60)
    calls_before = cluster.agent_calls(NODE_A)
    other_before = cluster.agent_calls(NODE_B)
    began = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    elapsed = time.monotonic() - began
    calls = cluster.agent_calls(NODE_A) - calls_before

    assert received == [ticks] * subscribers
    assert cluster.agent_calls(NODE_B) == other_before  # nobody asked for the other node
    # 50 subscribers x 4 ticks would be 200 calls unshared; sharing within the
    # snapshot TTL (1 s, the tick length here) makes it about one per tick.
    ticks_elapsed = elapsed / interval
    assert 1 <= calls <= ticks_elapsed + 2, (calls, round(elapsed, 2))
    await eventually_async(
        lambda: cluster.active_subscriptions == 0, what="all 50 released", timeout=TIMEOUT
    )


async def test_subscriptions_above_the_cap_get_a_clear_error(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with live_cluster(tmp_path_factory.mktemp("capped"), max_subscriptions=2) as capped:
        async with transport_ws(capped.ws_url) as client:
            first = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": 0.5})
            second = await client.subscribe(GPU_UPDATES, {"node": NODE_B, "interval": 0.5})
            await client.next(first)
            await client.next(second)
            assert capped.active_subscriptions == 2
            refused = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": 0.5})
            errors = await _first_error(client, refused)
            assert "too many concurrent subscriptions" in errors[0]["message"]
            assert "2" in errors[0]["message"]
            # The two admitted ones keep streaming.
            await client.next(first)
            await client.complete(first)
            await eventually_async(
                lambda: capped.active_subscriptions == 1, what="a slot freed", timeout=TIMEOUT
            )
            admitted = await client.subscribe(GPU_UPDATES, {"node": NODE_A, "interval": 0.5})
            assert (await client.next(admitted))["data"]["gpuUpdates"][0]["uuid"] == GPU_A0


async def _first_error(client: TransportWsClient, op_id: str) -> list[dict[str, Any]]:
    # A refused subscription may arrive as an `error` message or as a `next`
    # carrying errors (then `complete`), depending on where the cap is checked.
    while True:
        message = await client._receive()
        if message.get("id") != op_id:
            continue
        if message["type"] == "error":
            errors: list[dict[str, Any]] = message["payload"]
            return errors
        if message["type"] == "next" and message["payload"].get("errors"):
            found: list[dict[str, Any]] = message["payload"]["errors"]
            return found
        raise ProtocolError(f"expected the cap's error for {op_id}, got {message}")
