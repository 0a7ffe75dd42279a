"""Releasing what the server holds for nodes that left the cluster.

Agent channels, cached snapshots, backoff state, built graph objects, GPU
location hints and per-node metric series would otherwise pile up as nodes
come and go (autoscaling replaces them all the time).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future

from graph_schema.interfaces import Cluster
from graph_schema.records import NodeRecord, PodRecord
from graph_schema.state import SharedState

from ..agents.pool import AgentPool
from ..metrics import Metrics

__all__ = ["DepartedNodes"]

log = logging.getLogger(__name__)


class DepartedNodes:
    """Prunes the pool, the graph's shared state and the metrics of nodes no longer cached.

    Subscribe ``on_change`` to the ClusterCache: it runs on the watch threads
    and hands the pruning to the event loop, where the pool and the state live.
    """

    def __init__(
        self,
        cluster: Cluster,
        pool: AgentPool,
        state: SharedState,
        metrics: Metrics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._cluster = cluster
        self._pool = pool
        self._state = state
        self._metrics = metrics
        self._loop = loop

    def on_change(self, kind: str, change: str, record: PodRecord | NodeRecord | None) -> None:
        """A cache listener: prune after a node is deleted or the nodes are relisted."""
        if kind == "node" and change in ("DELETED", "RELISTED"):
            future = asyncio.run_coroutine_threadsafe(self.prune(), self._loop)
            future.add_done_callback(_log_failure)

    async def prune(self) -> list[str]:
        """Forget every node something is held for but the cache no longer has; their names."""
        held = self._pool.node_names() | self._state.node_names()
        # Checked now, not when the change happened: a node deleted and
        # re-added in between is present again and keeps its channel.
        gone = sorted(name for name in held if self._cluster.node(name) is None)
        for name in gone:
            await self._pool.forget(name)
            self._state.forget_node(name)
            self._metrics.forget_node(name)
        if gone:
            log.info("released the state of %d departed node(s): %s", len(gone), ", ".join(gone))
        return gone


def _log_failure(future: Future[list[str]]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.error("pruning departed nodes failed", exc_info=exc)
