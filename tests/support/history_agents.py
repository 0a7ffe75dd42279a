"""Agents with occupancy logs, in memory above a real SQLite store per node.

``HistoryAgents`` is ``MemorySnapshots`` that also answers the server's
``HistorySource``: each node's records sit in the agent's own ``HistoryStore``
(a real SQLite file), and requests and replies go through the codec both ways
(``node_resolver/history_codec.py``), as GetHistory and GetUsage carry them. A
killed or broken agent fails its history calls as it fails its snapshots; a
node without a store answers "off", as an agent without ``--history-dir`` does.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from graph_schema.interfaces import AgentUnavailableError
from node_resolver.generated import agent_pb2
from node_resolver.gpu_event_codec import (
    event_page_from_proto,
    event_query_from_proto,
    event_query_to_proto,
    event_to_proto,
)
from node_resolver.gpu_event_codec import page_token as token_after
from node_resolver.gpu_events.records import EventPage, EventQuery
from node_resolver.history.records import (
    HistoryPage,
    HistoryQuery,
    OccupancyRecord,
    UsageQuery,
    UsageRow,
)
from node_resolver.history.store import HistoryStore
from node_resolver.history_codec import (
    history_page_from_proto,
    history_page_to_proto,
    history_query_from_proto,
    history_request_to_proto,
    usage_from_proto,
    usage_query_from_proto,
    usage_query_to_proto,
    usage_reply_to_proto,
)
from tests.support.graph import MemorySnapshots

__all__ = [
    "HistoryAgents",
    "at",
    "occupancy",
    "open_stores",
]

# The records' days: 2026-12-01, all in the past, so no answer depends on "now".
DAY = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC).timestamp()


def at(hours: float) -> float:
    """``hours`` after midnight of the records' day, in seconds since the epoch."""
    return DAY + hours * 3600


def occupancy(
    gpu_uuid: str,
    pid: int,
    start: float,
    end: float,
    *,
    ended: bool = True,
    memory: int = 1 << 30,
    pod: tuple[str, str, str] | None = None,
    process_name: str = "python",
    container_id: str = "",
    mig_device_uuid: str = "",
    start_ticks: int | None = None,
) -> OccupancyRecord:
    """One process lifetime from ``start`` to ``end`` (hours of the records' day);
    ``pod`` is (namespace, name, uid) as the agent's log names it."""
    namespace, name, uid = pod or ("", "", "")
    record = OccupancyRecord(
        gpu_uuid=gpu_uuid,
        mig_device_uuid=mig_device_uuid,
        pid=pid,
        start_ticks=pid * 10 if start_ticks is None else start_ticks,
        boot_id="boot-1",
        first_seen=at(start),
        last_seen=at(end),
        ended=ended,
        peak_memory_bytes=memory,
        last_memory_bytes=memory,
        memory_byte_seconds=memory * (end - start) * 3600 / 2,
        memory_seconds=(end - start) * 3600,
        process_name=process_name,
        container_id=container_id,
        pod_uid=uid,
        pod_namespace=namespace,
        pod_name=name,
    )
    record.memory_since = record.last_seen
    record.sm_since = record.last_seen
    return record


def open_stores(
    directory: Path, logs: dict[str, Sequence[OccupancyRecord]]
) -> dict[str, HistoryStore]:
    """One store per node under ``directory``, holding that node's records."""
    stores = {}
    for node_name, records in logs.items():
        store = HistoryStore(directory / node_name, max_bytes=1 << 26)
        store.open()
        store.write(list(records), [], now=at(24))
        stores[node_name] = store
    return stores


class HistoryAgents(MemorySnapshots):
    """Snapshots and occupancy logs per node; a node without a store has history off."""

    def __init__(self, stores: dict[str, HistoryStore], delay: float = 0.0) -> None:
        super().__init__(delay=delay)
        self.stores = stores

    def _reachable(self, node_name: str) -> None:
        self.calls[node_name] += 1
        if node_name in self._broken:
            raise self._broken[node_name]
        if node_name in self._down:
            raise AgentUnavailableError(node_name, self._down[node_name])
        if node_name not in self._snapshots:
            raise AgentUnavailableError(node_name, "no agent")

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        """One page of the node's log, as the agent's GetHistory pages it, through the wire's
        messages both ways."""
        self._reachable(node_name)
        store = self.stores.get(node_name)
        if store is None:
            return history_page_from_proto(history_page_to_proto(node_name, "off"))
        asked = history_query_from_proto(history_request_to_proto(query, page_token))
        records = store.history(asked)
        reply = history_page_to_proto(node_name, "ok", records, limit=asked.limit)
        return history_page_from_proto(reply)

    async def gpu_events(
        self, node_name: str, query: EventQuery, page_token: str = ""
    ) -> EventPage:
        """One page of the node's GPU events, as the agent's GetGpuEvents answers it, through
        the wire's messages both ways."""
        self._reachable(node_name)
        store = self.stores.get(node_name)
        reply = agent_pb2.GpuEventPage(node_name=node_name, event_status="ok", status="off")
        if store is None:
            return event_page_from_proto(reply)
        asked, _ = event_query_from_proto(event_query_to_proto(query, page_token=page_token))
        events = store.gpu_events(asked)
        reply.log_id, last = store.events_position()
        reply.status = "ok"
        reply.last_sequence = max([last, *(e.id for e in events)])
        reply.events.extend(event_to_proto(e) for e in events)
        if asked.after_sequence is None and len(events) == asked.limit:
            reply.next_page_token = token_after(events[-1])
        return event_page_from_proto(reply)

    async def follow_gpu_events(
        self, node_name: str, query: EventQuery, *, wait_seconds: float
    ) -> EventPage:
        """The node's events after the query's sequence, at once (these logs never grow)."""
        return await self.gpu_events(node_name, query)

    async def usage(self, node_name: str, query: UsageQuery) -> tuple[list[UsageRow], str]:
        """The node's sums, as the agent's GetUsage groups them, through the wire's messages."""
        self._reachable(node_name)
        store = self.stores.get(node_name)
        if store is None:
            return usage_from_proto(usage_reply_to_proto(node_name, "off"), query.group_by)
        asked = usage_query_from_proto(usage_query_to_proto(query), now=query.until)
        reply = usage_reply_to_proto(node_name, "ok", store.usage(asked))
        return usage_from_proto(reply, query.group_by)
