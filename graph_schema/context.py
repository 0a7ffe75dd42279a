"""What an operation's resolvers share: the outside world, loaders, and server-wide state.

The interfaces it is built on (``Cluster``, ``SnapshotSource``) are defined in
``interfaces``; the one it offers resolvers, ``Operation``, in ``operation``.
The HTTP app makes a ``GraphContext`` per request (or
per WebSocket) with ``make_context``, and the schema forks it for every
operation, so each operation has its own loaders, errors and result budget;
loaders are created on first use, so a query that never touches an agent
costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .errors import NodeSampleError, ResultBudgetError
from .interfaces import Cluster, HistorySource, Received, SnapshotSource
from .loaders import Freshness, GpuLoader, SnapshotLoader
from .records import NodeRecord, PodRecord
from .scope import EVERYTHING, Scope, Viewer
from .scoped import filter_nodes, scoped_gpus, visible_node_names, visible_pods
from .state import SharedState
from .types import Gpu

__all__ = ["GraphContext", "make_context"]


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
        scope: Scope = EVERYTHING,
        viewer: Viewer | None = None,
    ) -> None:
        self.cluster = cluster
        # What the caller may see; ``viewer`` re-checks it for long-lived operations.
        self.scope = scope
        self.viewer = viewer
        # Worked out on first use: (the visible node names, None for all).
        self._visible_nodes: tuple[frozenset[str] | None] | None = None
        self._scoped: dict[str, tuple[list[Gpu], list[Gpu]]] = {}
        self.snapshots = snapshots
        # The pool reads the agents' occupancy logs too; other sources have no history.
        self.history: HistorySource | None = (
            snapshots if isinstance(snapshots, HistorySource) else None
        )
        self.state = state
        self.request = request
        self.response = response
        # A WebSocket's connection_init payload (strawberry sets it), where a
        # client may send its token.
        self.connection_params: object = None
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
            scope=self.scope,
            viewer=self.viewer,
        )

    async def refresh_scope(self) -> None:
        """Re-check the caller (a subscription tick); AccessEndedError once it no longer passes."""
        if self.viewer is not None:
            scope = await self.viewer.current_scope()
            if scope != self.scope:
                self.scope = scope
                self._visible_nodes = None
                self._scoped = {}

    def visible_node_names(self) -> frozenset[str] | None:
        """The nodes the caller sees (None: all), worked out once per operation."""
        if self._visible_nodes is None:
            self._visible_nodes = (visible_node_names(self.scope, self.cluster),)
        return self._visible_nodes[0]

    def sees_node(self, name: str) -> bool:
        """Whether the caller may see the node called ``name``."""
        visible = self.visible_node_names()
        return visible is None or name in visible

    def visible_nodes(self) -> list[NodeRecord]:
        """Every cached node the caller may see, sorted by name."""
        return filter_nodes(self.visible_node_names(), self.cluster.nodes())

    def visible_pods(self, records: Iterable[PodRecord]) -> Sequence[PodRecord]:
        """The pod records among ``records`` the caller may see."""
        if self.scope.all_pods:
            return records if isinstance(records, Sequence) else list(records)
        return visible_pods(self.scope, records)

    def scoped_gpus(self, node_name: str, gpus: list[Gpu]) -> list[Gpu]:
        """A node's shared Gpu objects as the caller sees them, copied once per operation."""
        if self.scope.unrestricted:
            return gpus
        cached = self._scoped.get(node_name)
        if cached is not None and cached[0] is gpus:
            return cached[1]
        scoped = scoped_gpus(self.scope, gpus)
        self._scoped[node_name] = (gpus, scoped)
        return scoped

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
        self._visible_nodes = None
        self._scoped = {}
        self.result_items = 0

    async def pace(self) -> None:
        """Let other requests run when this operation has held the loop long enough."""
        await self.state.pacer.pace()

    async def received(self, node_name: str) -> Received:
        """The node's snapshot as received, fetched at most once per operation per node."""
        await self.pace()
        return await self._snapshots().load(node_name)

    async def snapshot(self, node_name: str) -> NodeSnapshot:
        """The node's snapshot, fetched at most once per operation per node."""
        return (await self.received(node_name)).snapshot

    async def snapshots_of(self, node_names: list[str]) -> list[NodeSnapshot | BaseException]:
        """Several nodes' snapshots in one batch; failures come back as exceptions."""
        return [
            r.snapshot if isinstance(r, Received) else r
            for r in await self._snapshots().load_all(node_names)
        ]

    async def gpus(self, node_name: str) -> list[Gpu]:
        """The node's GPUs as graph objects, built once per snapshot."""
        snapshot = await self.snapshot(node_name)
        sample = snapshot.sample
        if sample.error and not sample.gpus:
            raise NodeSampleError(node_name, sample.error)
        return self.scoped_gpus(node_name, self.state.views.gpus(node_name, snapshot, self.cluster))

    async def gpu(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID on any node, or None."""
        await self.pace()
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
    scope: Scope = EVERYTHING,
    viewer: Viewer | None = None,
) -> GraphContext:
    """A context for one request or WebSocket over the schema's server-wide ``state``."""
    return GraphContext(
        cluster,
        snapshots,
        state,
        request=request,
        response=response,
        scope=scope,
        viewer=viewer,
    )
