"""What an operation's resolvers share: the outside world, loaders, and server-wide state.

The interfaces (``Cluster``, ``SnapshotSource``) are defined in ``interfaces``
and re-exported here. The HTTP app makes a ``GraphContext`` per request (or
per WebSocket) with ``make_context``, and the schema forks it for every
operation, so each operation has its own loaders, errors and result budget;
loaders are created on first use, so a query that never touches an agent
costs nothing.
"""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .errors import ResultBudgetError
from .interfaces import AgentUnavailableError, Cluster, SnapshotSource
from .loaders import Freshness, GpuLoader, SnapshotLoader
from .state import SharedState
from .types import Gpu, NodeSampleError

__all__ = [
    "AgentUnavailableError",
    "Cluster",
    "GraphContext",
    "SharedState",
    "SnapshotSource",
    "make_context",
]


class GraphContext:
    """Per-operation state: the cluster cache, the agents, and this operation's loaders."""

    def __init__(
        self,
        cluster: Cluster,
        snapshots: SnapshotSource,
        state: SharedState,
        *,
        request: Any = None,
        response: Any = None,
        freshness: Freshness | None = None,
    ) -> None:
        self.cluster = cluster
        self.snapshots = snapshots
        self.state = state
        self.request = request
        self.response = response
        self._snapshot_loader: SnapshotLoader | None = None
        self._gpu_loader: GpuLoader | None = None
        # Errors for parts of an aggregate list that could not be fetched; the
        # schema's partial-results extension adds them to the response.
        self.partial_errors: list[GraphQLError] = []
        self.result_items = 0
        # Shared with every context forked from this one.
        self.freshness = freshness if freshness is not None else Freshness()

    def fork(self) -> GraphContext:
        """A fresh context for one operation of the same request or WebSocket."""
        return GraphContext(
            self.cluster,
            self.snapshots,
            self.state,
            request=self.request,
            response=self.response,
            freshness=self.freshness,
        )

    def charge(self, items: int) -> None:
        """Count ``items`` more result objects; ResultBudgetError past the server's limit."""
        self.result_items += items
        if self.result_items > self.state.max_result_items:
            raise ResultBudgetError(self.state.max_result_items)

    def _snapshots(self) -> SnapshotLoader:
        if self._snapshot_loader is None:
            self._snapshot_loader = SnapshotLoader(
                self.snapshots, self.state.gpu_nodes, self.freshness
            )
        return self._snapshot_loader

    def new_tick(self) -> None:
        """Start a subscription tick: fresh loaders (so fresh snapshots) and a fresh budget."""
        self._snapshot_loader = None
        self._gpu_loader = None
        self.result_items = 0

    async def snapshot(self, node_name: str) -> NodeSnapshot:
        """The node's snapshot, fetched at most once per operation per node."""
        return await self._snapshots().load(node_name)

    async def snapshots_of(self, node_names: list[str]) -> list[NodeSnapshot | BaseException]:
        """Several nodes' snapshots in one batch; failures come back as exceptions."""
        return await self._snapshots().load_all(node_names)

    async def gpus(self, node_name: str) -> list[Gpu]:
        """The node's GPUs as graph objects, built once per snapshot."""
        snapshot = await self.snapshot(node_name)
        sample = snapshot.sample
        if sample.error and not sample.gpus:
            raise NodeSampleError(node_name, sample.error)
        return self.state.views.gpus(node_name, snapshot, self.cluster)

    async def gpu(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID on any node, or None."""
        if self._gpu_loader is None:
            self._gpu_loader = GpuLoader(self)
        return await self._gpu_loader.load(uuid)


def make_context(
    cluster: Cluster,
    snapshots: SnapshotSource,
    state: SharedState,
    *,
    request: Any = None,
    response: Any = None,
) -> GraphContext:
    """A context for one request or WebSocket over the schema's server-wide ``state``."""
    return GraphContext(cluster, snapshots, state, request=request, response=response)
