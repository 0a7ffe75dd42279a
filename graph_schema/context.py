"""What an operation's resolvers share: the outside world, loaders, and server-wide state.

The interfaces it is built on (``Cluster``, ``SnapshotSource``) are defined in
``interfaces``; the one it offers resolvers, ``Operation``, in ``operation``.
The HTTP app makes a ``GraphContext`` per request (or per WebSocket), and
the schema forks it for every
operation, so each operation has its own loaders, errors and result budget;
loaders are created on first use, so a query that never touches an agent
costs nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Hashable, Sequence
from typing import Any, cast

from graphql import GraphQLError

from node_resolver.models import NodeSnapshot

from .allocation_join import AllocationRules, AllocationTable
from .errors import NodeNotFoundError, NodeSampleError, ResultBudgetError
from .interfaces import (
    AgentUnavailableError,
    CallerBudgets,
    Cluster,
    HistorySource,
    Received,
    SnapshotSource,
)
from .internals import OperationType
from .loaders import Freshness, GpuLoader, SnapshotLoader
from .scope import EVERYTHING, Scope, Viewer
from .state import SharedState
from .types import Gpu
from .views import gpus_by_pod
from .visibility import VisibleCluster

__all__ = ["GraphContext"]

# ``history`` not given: worked out from the snapshot source.
_UNSET = object()


@functools.cache
def _reads_history(source_class: type) -> bool:
    """Whether a snapshot source's class reads history too (a runtime Protocol check
    costs tens of microseconds: once per class, not per request)."""
    return issubclass(source_class, HistorySource)


@functools.cache
def _budgets_callers(source_class: type) -> bool:
    """Whether a history source's class counts each caller's reads (checked once per class)."""
    return issubclass(source_class, CallerBudgets)


class GraphContext:
    """Per-operation state: the caller's view of the cluster, the agents, and the loaders.

    ``cluster`` is the caller's ``VisibleCluster``: everything a resolver
    reads through it is filtered already. ``raw_cluster`` is the unfiltered
    cache, for joins only.
    """

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
        history: HistorySource | object | None = _UNSET,
        shielded: bool = True,
        operation_types: frozenset[OperationType] | None = None,
    ) -> None:
        self.raw_cluster = cluster
        # What the caller may see; ``viewer`` re-checks it for long-lived operations.
        self.cluster = VisibleCluster(cluster, scope)
        self.viewer = viewer
        self.snapshots = snapshots
        # The pool reads the agents' occupancy logs too; other sources have no history.
        if history is _UNSET:
            history = snapshots if _reads_history(type(snapshots)) else None
        self._history = cast("HistorySource | None", history)
        # ``_history`` as the caller reads it, and for whom (the caller may change: ``admit``).
        self._caller_history: tuple[Hashable, HistorySource] | None = None
        self.state = state
        self.request = request
        self.response = response
        # The operation types the request's transport may carry (an HTTP method's);
        # None: any (a WebSocket).
        self.operation_types = operation_types
        # A WebSocket's connection_init payload (strawberry sets it), where a
        # client may send its token.
        self.connection_params: object = None
        self._snapshot_loader: SnapshotLoader | None = None
        self._gpu_loader: GpuLoader | None = None
        # graphql-core cancels a failed object's other fields, so each field awaits the
        # loaders' shared futures through a shield; the compiled plan cancels none, and
        # runs in a context without them (``shared_futures.shielded``).
        self.shielded = shielded
        # History records read once per operation (or subscription tick) where two
        # fields ask the same (history and hiddenHistoryCount): what they read -> the read.
        self.history_reads: dict[Hashable, asyncio.Future[Any]] = {}
        # A restricted caller's GPUs by pod, per node (unrestricted ones share the views').
        self._by_pod: dict[str, tuple[list[Gpu], dict[str, list[Gpu]]]] = {}
        # Every node's GPUs the operation read, by the list's identity: a process refers
        # to its GPU weakly (``GpuProcess.gpu_ref``), and a newer snapshot may replace the
        # cache's objects while the operation still hands out their processes.
        self._held: dict[int, list[Gpu]] = {}
        # Errors for parts of an aggregate list that could not be fetched; the
        # schema's partial-results extension adds them to the response.
        self.partial_errors: list[GraphQLError] = []
        self.result_items = 0
        # Shared with every context forked from this one.
        self.freshness = freshness if freshness is not None else Freshness()

    @property
    def caller(self) -> Hashable:
        """Who per-caller budgets count: the authenticated username; without
        authentication, the scope (every unauthenticated caller shares it)."""
        return self.viewer.username if self.viewer is not None else self.scope

    @property
    def history(self) -> HistorySource | None:
        """The agents' logs, each read counted against this caller's budget where the
        source keeps budgets; None where the server cannot read them."""
        source = self._history
        if source is None or not _budgets_callers(type(source)):
            return source
        caller = self.caller
        bound = self._caller_history
        if bound is None or bound[0] != caller:
            bound = self._caller_history = (caller, cast(CallerBudgets, source).for_caller(caller))
        return bound[1]

    @property
    def scope(self) -> Scope:
        """What the caller may see (a key: equal scopes may share answers)."""
        return self.cluster.scope

    def admit(self, scope: Scope, viewer: Viewer | None) -> None:
        """See as a caller authenticated after the context was made (a WebSocket's init)."""
        self.cluster = VisibleCluster(self.raw_cluster, scope)
        self.viewer = viewer

    def fork(self, *, shielded: bool = True) -> GraphContext:
        """A fresh context for one operation of the same request or WebSocket;
        ``shielded`` False for an executor that never cancels one field under another."""
        return GraphContext(
            self.raw_cluster,
            self.snapshots,
            self.state,
            request=self.request,
            response=self.response,
            freshness=self.freshness,
            scope=self.scope,
            viewer=self.viewer,
            history=self._history,
            shielded=shielded,
            operation_types=self.operation_types,
        )

    async def refresh_scope(self) -> None:
        """Re-check the caller (a subscription tick); AccessEndedError once it no longer passes."""
        if self.viewer is not None:
            scope = await self.viewer.current_scope()
            if scope != self.scope:
                self.cluster = VisibleCluster(self.raw_cluster, scope)
                self._gpu_loader = None

    def charge(self, items: int) -> None:
        """Count ``items`` more result objects; ResultBudgetError past the server's limit."""
        self.result_items += items
        if self.result_items > self.state.max_result_items:
            raise ResultBudgetError(self.state.max_result_items)

    def _snapshots(self) -> SnapshotLoader:
        if self._snapshot_loader is None:
            self._snapshot_loader = SnapshotLoader(
                self.snapshots, self.state.gpu_nodes, self.freshness, shielded=self.shielded
            )
        return self._snapshot_loader

    def new_tick(self) -> None:
        """Start a subscription tick: fresh loaders (so fresh snapshots) and a fresh budget."""
        self._snapshot_loader = None
        self._gpu_loader = None
        self.history_reads.clear()
        # The last tick's answer went out before this one starts.
        self._held.clear()
        # The cache moves between ticks: the visible nodes are worked out afresh.
        self.cluster = VisibleCluster(self.raw_cluster, self.scope)
        self.result_items = 0

    def finish(self) -> None:
        """End the operation: let go of its loaders and their answers.

        A loader's futures hold the nodes' failures, whose tracebacks hold the
        frames of the fields that awaited them, which hold this context: a cycle
        through every node that failed, even where a field caught the failure.
        """
        self._snapshot_loader = None
        self._gpu_loader = None
        self._by_pod.clear()
        self._held.clear()
        self.history_reads.clear()

    async def pace(self) -> None:
        """Let other requests run when this operation has held the loop long enough."""
        await self.state.pacer.pace()

    async def received(self, node_name: str) -> Received:
        """The node's snapshot as received, fetched at most once per operation per node;
        NodeNotFoundError for a node the caller may not see."""
        if not self.cluster.sees_node(node_name):
            # A record of the caller's own names the node it ran on, which the caller may no
            # longer see: that node answers as one that does not exist, its agent unasked.
            raise NodeNotFoundError(node_name)
        pacer = self.state.pacer
        if pacer.due():
            await pacer.pace()
        return await self._snapshots().load(node_name)

    async def snapshot(self, node_name: str) -> NodeSnapshot:
        """The node's snapshot, fetched at most once per operation per node."""
        return (await self.received(node_name)).snapshot

    async def snapshots_of(self, node_names: list[str]) -> list[NodeSnapshot | BaseException]:
        """Several nodes' snapshots in one batch; failures come back as exceptions (a node the
        caller may not see as NodeNotFoundError, its agent unasked)."""
        view = self.cluster
        seen = [n for n in node_names if view.sees_node(n)]
        loaded = dict(zip(seen, await self._snapshots().load_all(seen), strict=True))
        results: list[NodeSnapshot | BaseException] = []
        for name in node_names:
            r = loaded.get(name)
            if r is None:
                results.append(NodeNotFoundError(name))
            else:
                results.append(r.snapshot if isinstance(r, Received) else r)
        return results

    def node_gpus(self, node_name: str, snapshot: NodeSnapshot) -> list[Gpu]:
        """A node's GPUs as the caller sees them; NodeSampleError when the node read none.
        Held until the operation (or the subscription's tick) ends."""
        gpus = self.state.views.visible_gpus(self.cluster, node_name, snapshot)
        self._held[id(gpus)] = gpus
        return gpus

    async def gpus(self, node_name: str) -> list[Gpu]:
        """The node's GPUs as the caller sees them, built once per snapshot."""
        return self.node_gpus(node_name, await self.snapshot(node_name))

    async def pod_gpus(self, node_name: str, pod_uid: str) -> list[Gpu]:
        """The node's GPUs running a process of this pod, as the caller sees them."""
        # One coroutine fewer than ``gpus``: a pod list awaits this once per pod.
        gpus = self.node_gpus(node_name, (await self.received(node_name)).snapshot)
        by_pod = self.state.views.gpus_by_pod(node_name, gpus)
        if by_pod is None:
            cached = self._by_pod.get(node_name)
            if cached is None or cached[0] is not gpus:
                cached = (gpus, gpus_by_pod(gpus))
                self._by_pod[node_name] = cached
            by_pod = cached[1]
        return by_pod.get(pod_uid, [])

    async def gpus_of(self, node_names: Sequence[str]) -> list[list[Gpu] | Exception]:
        """Several nodes' GPUs in one batch; a failing node comes back as its exception."""
        results: list[list[Gpu] | Exception] = []
        for name, snapshot in zip(
            node_names, await self.snapshots_of(list(node_names)), strict=True
        ):
            if isinstance(snapshot, Exception):
                results.append(snapshot)
            elif isinstance(snapshot, BaseException):
                raise snapshot
            else:
                try:
                    results.append(self.node_gpus(name, snapshot))
                except NodeSampleError as exc:
                    results.append(exc)
        return results

    @property
    def allocation_rules(self) -> AllocationRules:
        """The claims and GPU resource names the allocation join reads."""
        return self.state.views.rules

    async def allocations(self, node_name: str) -> AllocationTable:
        """The node's allocation table, built with its GPUs; without its agent, from the API."""
        try:
            snapshot: NodeSnapshot | None = await self.snapshot(node_name)
        except AgentUnavailableError:
            snapshot = None
        return self.state.views.allocations(node_name, snapshot, self.raw_cluster)

    async def gpu(self, uuid: str) -> Gpu | None:
        """The GPU with this UUID on any node the caller may see, or None."""
        await self.pace()
        if self._gpu_loader is None:
            self._gpu_loader = GpuLoader(
                self.cluster, self.state.gpu_nodes, self.gpus_of, shielded=self.shielded
            )
        return await self._gpu_loader.load(uuid)
