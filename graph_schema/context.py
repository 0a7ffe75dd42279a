"""What a request's resolvers share: the outside world, loaders, and server-wide state.

The interfaces (``Cluster``, ``SnapshotSource``) are defined in ``interfaces``
and re-exported here. A ``GraphContext`` is made per request (or per
WebSocket) by ``make_context``; its loaders are created on first use, so a
query that never touches an agent costs nothing.
"""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .interfaces import AgentUnavailableError, Cluster, SnapshotSource
from .loaders import GpuLoader, SnapshotLoader
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
    """Per-request state: the cluster cache, the agents, and this request's loaders."""

    def __init__(
        self,
        cluster: Cluster,
        snapshots: SnapshotSource,
        state: SharedState | None = None,
        *,
        request: Any = None,
        response: Any = None,
    ) -> None:
        self.cluster = cluster
        self.snapshots = snapshots
        self.request = request
        self.response = response
        # None until a resolver binds it to the schema's state (see ``bind``).
        self._state = state
        self._snapshot_loader: SnapshotLoader | None = None
        self._gpu_loader: GpuLoader | None = None
        # Errors for parts of an aggregate list that could not be fetched; the
        # schema's partial-results extension adds them to the response.
        self.partial_errors: list[GraphQLError] = []

    @property
    def state(self) -> SharedState:
        """The server-wide state this context is bound to."""
        if self._state is None:
            raise RuntimeError("GraphContext is not bound to a schema's state yet")
        return self._state

    def bind(self, schema: object) -> None:
        """Use the schema's server-wide state unless one was given explicitly."""
        if self._state is None:
            state = getattr(schema, "state", None)
            if not isinstance(state, SharedState):
                raise TypeError("the schema was not made by graph_schema.build_schema")
            self._state = state

    def _snapshots(self) -> SnapshotLoader:
        if self._snapshot_loader is None:
            self._snapshot_loader = SnapshotLoader(self.snapshots, self.state.gpu_nodes)
        return self._snapshot_loader

    def new_tick(self) -> None:
        """Forget loaded snapshots so the next read fetches again (one subscription tick)."""
        self._snapshot_loader = None
        self._gpu_loader = None

    async def snapshot(self, node_name: str) -> NodeSnapshot:
        """The node's snapshot, fetched at most once per request per node."""
        return await self._snapshots().load(node_name)

    async def snapshots_of(self, node_names: list[str]) -> list[NodeSnapshot | BaseException]:
        """Several nodes' snapshots in one batch; failures come back as exceptions."""
        loader = self._snapshots()
        return list(await loader.load_all(node_names))

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
    state: SharedState | None = None,
    *,
    request: Any = None,
    response: Any = None,
) -> GraphContext:
    """A fresh context (and so fresh loaders) for one request or WebSocket connection."""
    return GraphContext(cluster, snapshots, state, request=request, response=response)
