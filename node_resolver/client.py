"""A thin async client for one node agent: one channel, one call.

Discovery, retries, backoff and connection reuse across nodes belong to the
caller (the server's agent pool); this class only speaks the wire protocol.
Snapshots are read on one long-lived stream (``snapshot_stream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpc import aio

from .auth import bearer_metadata
from .codec import snapshot_from_wire
from .generated import agent_pb2, agent_pb2_grpc
from .gpu_event_codec import event_page_from_proto, event_query_to_proto
from .gpu_events.records import EventPage, EventQuery
from .history.records import HistoryPage, HistoryQuery, UsageQuery, UsageRow
from .history_codec import (
    history_page_from_proto,
    history_request_to_proto,
    pod_names_requests,
    usage_from_proto,
    usage_query_to_proto,
)
from .models import NodeSnapshot
from .pod_names import PodName
from .snapshot_stream import SnapshotStream

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
        self._snapshots = SnapshotStream(self._open_snapshots, self._unary_snapshot)

    async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
        """The agent's latest snapshot (its GPU records decoded when first read); raises
        grpc.aio.AioRpcError on failure."""
        return snapshot_from_wire(await self._snapshots.read(timeout=timeout))

    def _open_snapshots(self) -> Any:
        return self._stub.StreamSnapshots(metadata=self._metadata)

    def _unary_snapshot(self, timeout: float) -> Any:
        return self._stub.GetSnapshot(_REQUEST, timeout=timeout, metadata=self._metadata)

    async def get_history(
        self, query: HistoryQuery, *, page_token: str = "", timeout: float
    ) -> HistoryPage:
        """One page of the agent's occupancy log."""
        request = history_request_to_proto(query, page_token)
        reply = await self._stub.GetHistory(request, timeout=timeout, metadata=self._metadata)
        return history_page_from_proto(reply)

    async def get_usage(self, query: UsageQuery, *, timeout: float) -> tuple[list[UsageRow], str]:
        """The agent's usage sums over the query's [since, until): (rows, log status)."""
        request = usage_query_to_proto(query)
        reply = await self._stub.GetUsage(request, timeout=timeout, metadata=self._metadata)
        return usage_from_proto(reply, query.group_by)

    async def get_gpu_events(
        self,
        query: EventQuery,
        *,
        page_token: str = "",
        wait_seconds: float = 0.0,
        timeout: float,
    ) -> EventPage:
        """One page of the agent's GPU events; following (``query.after_sequence``), the agent
        waits up to ``wait_seconds`` for one (``timeout`` must leave it that long)."""
        request = event_query_to_proto(query, page_token=page_token, wait_seconds=wait_seconds)
        reply = await self._stub.GetGpuEvents(request, timeout=timeout, metadata=self._metadata)
        return event_page_from_proto(reply)

    async def put_pod_names(self, node_name: str, pods: list[PodName], *, timeout: float) -> int:
        """Tell the agent the names of pods on its node, in small messages; how many were new."""
        stored = 0
        for request in pod_names_requests(node_name, pods):
            reply = await self._stub.PutPodNames(request, timeout=timeout, metadata=self._metadata)
            stored += reply.stored
        return stored

    async def close(self) -> None:
        """Close the channel, cancelling calls in flight."""
        self._snapshots.close()
        await self._channel.close(None)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
