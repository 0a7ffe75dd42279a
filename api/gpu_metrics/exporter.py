"""Collecting one scrape: every GPU node's snapshot through the snapshot source, then rendering.

The snapshots come from the same source GraphQL reads (the agent pool), so a
scrape joins calls in flight and reuses snapshots within ``--snapshot-ttl``:
however often Prometheus scrapes, each agent sees at most one call per TTL.
Each snapshot's graph objects come from GraphQL's ``ViewCache`` too, through
the visibility seam, so a scrape joins and judges no process GraphQL has not
(or will not): the objects of a node are built on the event loop as its
answer lands (paced like GraphQL's own work, so many answers landing at once
do not hold the loop for all of their nodes), or found built. The fetches run
concurrently; the allocation join and the text rendering, which grow with the
cluster, run in a worker thread so a scrape of 1,000 nodes does not hold the
loop that serves GraphQL. Scrapes that find the
very snapshots the last one rendered (within the TTL: a Prometheus HA pair,
or a scrape racing another) get its text instead of rendering it again.
"""

from __future__ import annotations

import asyncio
import logging

from graph_schema.errors import NodeSampleError
from graph_schema.interfaces import AgentUnavailableError, Cluster, SnapshotSource
from graph_schema.pacing import Pacer
from graph_schema.records import NodeRecord
from graph_schema.scope import EVERYTHING
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster
from node_resolver.metrics.exposition import render_gauges

from .families import NodeResult, SnapshotCollector

__all__ = ["GpuMetricsExporter", "is_gpu_node"]

log = logging.getLogger(__name__)

# NVIDIA's GPU feature discovery sets this label; the agent DaemonSet selects it too.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


def is_gpu_node(node: NodeRecord) -> bool:
    """Whether the node should run an agent: it offers nvidia.com/gpu or is labelled as GPU node."""
    return bool(node.gpu_capacity) or node.labels.get(GPU_PRESENT_LABEL) == "true"


class GpuMetricsExporter:
    """Renders the GPU series of every GPU node for ``/metrics``."""

    def __init__(
        self,
        cluster: Cluster,
        snapshots: SnapshotSource,
        *,
        timeout: float,
        dcgm_names: bool = False,
        views: ViewCache | None = None,
        pacer: Pacer | None = None,
    ) -> None:
        self._cluster = cluster
        # GraphQL's, in a server (its allocation rules and its pacer with it); a test's own
        # otherwise.
        self._views = views if views is not None else ViewCache()
        self._pacer = pacer if pacer is not None else Pacer()
        self._snapshots = snapshots
        self._timeout = timeout
        self._dcgm_names = dcgm_names
        # One rendering at a time, so concurrent scrapes of the same snapshots share it.
        self._rendering = asyncio.Lock()
        self._last: tuple[list[NodeResult], bytes] | None = None

    async def _fetch(self, node: str, view: VisibleCluster) -> NodeResult:
        try:
            received = await asyncio.wait_for(self._snapshots.fetch(node), self._timeout)
        except (AgentUnavailableError, TimeoutError):
            return NodeResult(node, None)
        except Exception:
            # One node's failure costs its series, never the scrape.
            log.warning("GPU metrics: fetching node %s failed", node, exc_info=True)
            return NodeResult(node, None)
        snapshot = received.snapshot
        pacer = self._pacer
        if pacer.due():
            await pacer.pace()
        try:
            gpus = self._views.visible_gpus(view, node, snapshot)
        except NodeSampleError:
            gpus = []  # the agent answered and read no GPU: agent_up 1, no GPU series
        return NodeResult(node, snapshot, received.age_seconds, gpus)

    async def collect(self) -> list[NodeResult]:
        """Every GPU node's snapshot (or its absence) and its GPUs, fetched concurrently.

        Nothing before the cache's first full list: with pods still missing,
        every process would count as memory in no pod, and alerts would fire.
        """
        # /metrics is authorized as a whole ("get" on the /metrics URL, asked by
        # the auth middleware), never per namespace: a caller let in sees it all.
        view = VisibleCluster(self._cluster, EVERYTHING)
        if not view.ready:
            return []
        nodes = [n.name for n in view.nodes() if is_gpu_node(n)]
        return list(await asyncio.gather(*(self._fetch(n, view) for n in nodes)))

    def render_results(self, results: list[NodeResult]) -> bytes:
        """The text exposition of ``results`` (CPU-bound: call it off the event loop)."""
        # generate_latest's bytes, at a fraction of its cost (node_resolver/metrics/exposition.py).
        collector = SnapshotCollector(results, dcgm_names=self._dcgm_names, rules=self._views.rules)
        return render_gauges(collector.collect())

    async def render(self) -> bytes:
        """One scrape's GPU series in the Prometheus text format."""
        results = await self.collect()
        async with self._rendering:
            if self._last is not None and _same_snapshots(self._last[0], results):
                return self._last[1]
            body = await asyncio.to_thread(self.render_results, results)
            self._last = (results, body)
            return body


def _same_snapshots(before: list[NodeResult], now: list[NodeResult]) -> bool:
    """Whether ``now`` holds the very snapshot objects (and failures) of ``before``."""
    return len(before) == len(now) and all(
        a.node == b.node and a.snapshot is b.snapshot for a, b in zip(before, now, strict=True)
    )
