"""A thin async client for one node agent: one channel, one call.

Discovery, retries, backoff and connection reuse across nodes belong to the
caller (the server's agent pool); this class only speaks the wire protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpc import aio

from .auth import bearer_metadata
from .codec import snapshot_from_proto
from .generated import agent_pb2, agent_pb2_grpc
from .models import NodeSnapshot

_REQUEST = agent_pb2.GetSnapshotRequest()


class AgentClient:
    """Calls the NodeAgent service at ``target`` (HOST:PORT) over one insecure channel.

    Failures surface as ``grpc.aio.AioRpcError`` (e.g. UNAVAILABLE,
    DEADLINE_EXCEEDED, UNAUTHENTICATED); the caller decides what they mean.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.target = target
        self._metadata = bearer_metadata(token) if token else None
        self._channel = aio.insecure_channel(target, options=list(options))
        self._stub = agent_pb2_grpc.NodeAgentStub(self._channel)

    async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
        """The agent's latest snapshot; raises grpc.aio.AioRpcError on failure."""
        reply = await self._stub.GetSnapshot(_REQUEST, timeout=timeout, metadata=self._metadata)
        return snapshot_from_proto(reply)

    async def close(self) -> None:
        """Close the channel, cancelling calls in flight."""
        await self._channel.close(None)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
