"""GPU health events as the server's Prometheus counters, counted from the agents' logs.

Each scrape asks every GPU node's agent for the events logged since the last
sequence number this server saw there (no wait), and counts them in the same
two families the agents export (``node_resolver/gpu_events/counters.py``), so
one Prometheus scraping only the server still alerts on XIDs with the pods
they hit. A node first met counts the events logged since the server
started: those before are in the log and in GraphQL, not counted again as
new (alerts would fire again after every server restart otherwise). A log
replaced (a new log ID) is counted from its start. A node that cannot answer
keeps its counts and is asked again on the next scrape.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from graph_schema.interfaces import AgentUnavailableError, Cluster, EventSource
from graph_schema.occupancy.fan_out import bounded
from node_resolver.gpu_events.counters import GpuEventCounters
from node_resolver.gpu_events.records import EventPage, EventQuery
from node_resolver.metrics.exposition import render_gauges

from .exporter import is_gpu_node

__all__ = ["EventCounts"]

log = logging.getLogger(__name__)

# A sequence past any a log gives out: asking after it reads where the log stands.
_PAST_THE_END = (1 << 62) - 1
# Events read per agent call; a node with more since the last scrape is read on.
_PAGE = 500


@dataclass(slots=True)
class _Followed:
    """Where this server stands in one node's log, and that node's counts."""

    log_id: str
    after: int
    counters: GpuEventCounters


class EventCounts:
    """The counters of every GPU node's events, brought up to date at each scrape."""

    def __init__(
        self, cluster: Cluster, source: EventSource, *, started: float | None = None
    ) -> None:
        self._cluster = cluster
        self._source = source
        # Events before this moment were not new to this server (Unix seconds).
        self._started = time.time() if started is None else started
        self._nodes: dict[str, _Followed] = {}
        # One update at a time: two scrapes at once would count the same events twice.
        self._updating = asyncio.Lock()

    async def _update(self, node: str) -> None:
        followed = self._nodes.get(node)
        if followed is None:
            page = await self._read(node, _PAST_THE_END)
            if page.status not in ("ok", ""):
                return
            followed = _Followed(page.log_id, page.last_sequence, GpuEventCounters(node))
            await self._since_start(node, followed)
            self._nodes[node] = followed
            return
        while True:
            page = await self._read(node, followed.after)
            if page.status not in ("ok", ""):
                return
            if page.log_id != followed.log_id:
                # Another log (deleted and made again): its sequence numbers start over.
                followed.log_id, followed.after = page.log_id, 0
                continue
            for event in page.events:
                followed.counters.add(event)
                followed.after = max(followed.after, event.id)
            # A page the agent cut short by its size limit says how far its log goes on.
            if not page.events or (
                len(page.events) < _PAGE and followed.after >= page.last_sequence
            ):
                return

    async def _since_start(self, node: str, followed: _Followed) -> None:
        """Count the node's events from the server's start up to where its log stood."""
        token = ""
        while True:
            query = EventQuery(since=self._started, limit=_PAGE)
            page = await self._source.gpu_events(node, query, token)
            for event in page.events:
                if event.id <= followed.after:
                    followed.counters.add(event)
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def _read(self, node: str, after: int) -> EventPage:
        query = EventQuery(after_sequence=after, limit=_PAGE)
        return await self._source.gpu_events(node, query)

    async def update(self) -> None:
        """Count the events every GPU node logged since the last scrape."""
        if not self._cluster.ready:
            return
        nodes = [n.name for n in self._cluster.nodes() if is_gpu_node(n)]
        async with self._updating:
            answers = await bounded([functools.partial(self._update, node) for node in nodes])
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, AgentUnavailableError):
                continue
            if isinstance(answer, Exception):
                log.warning("GPU event counts: node %s failed: %s", node, answer)
        # Nodes gone from the cluster take their series with them.
        for gone in set(self._nodes) - set(nodes):
            del self._nodes[gone]

    def families(self) -> list[Metric]:
        """Both families, every node's samples in one of each."""
        merged: dict[str, Metric] = {}
        for followed in self._nodes.values():
            for family in followed.counters.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = CounterMetricFamily(
                        family.name, family.documentation
                    )
                into.samples.extend(family.samples)
        if not merged:
            # The families exist from the start, so a query for them finds them empty.
            merged = {f.name: f for f in GpuEventCounters("").collect()}
        return list(merged.values())

    async def render(self) -> bytes:
        """The counters in the Prometheus text format, up to date."""
        await self.update()
        return render_gauges(_sorted(self.families()))


def _sorted(families: Iterable[Metric]) -> list[Metric]:
    return sorted(families, key=lambda family: family.name)
