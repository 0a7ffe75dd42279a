"""Agents with occupancy logs, in memory above a real SQLite store per node.

``HistoryAgents`` is ``MemorySnapshots`` that also answers the server's
``HistorySource``: each node's records sit in the agent's own ``HistoryStore``
(a real SQLite file), and a request goes through the agent's own codec
(``history_query_from_proto``, page tokens) the way GetHistory and GetUsage
serve it. A killed or broken agent fails its history calls as it fails its
snapshots; a node without a store answers "off", as an agent without
``--history-dir`` does.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from graph_schema.interfaces import AgentUnavailableError
from node_resolver.generated import agent_pb2
from node_resolver.history.records import (
    HistoryPage,
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)
from node_resolver.history.store import HistoryStore
from node_resolver.history_codec import after_token, history_query_from_proto
from node_resolver.history_codec import page_token as token_after
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
        """One page of the node's log, as the agent's GetHistory pages it."""
        self._reachable(node_name)
        request = agent_pb2.GetHistoryRequest(
            since=query.since,
            until=query.until,
            gpu_uuids=list(query.gpu_uuids),
            pod_uids=list(query.pod_uids),
            namespaces=list(query.namespaces),
            pod_names=list(query.pod_names),
            limit=query.limit,
            # As the client sends a query's own position when no token is given.
            page_token=page_token or ("" if query.after is None else after_token(query.after)),
        )
        store = self.stores.get(node_name)
        if store is None:
            return HistoryPage(node_name, [], [], "", "off")
        asked = history_query_from_proto(request)
        records = store.history(asked)
        following = token_after(records[-1]) if len(records) == asked.limit else ""
        cursors = [token_after(r) for r in records]
        return HistoryPage(node_name, records, cursors, following, "ok")

    async def usage(self, node_name: str, query: UsageQuery) -> tuple[list[UsageRow], str]:
        """The node's sums, as the agent's GetUsage groups them (its node key set here)."""
        self._reachable(node_name)
        store = self.stores.get(node_name)
        if store is None:
            return [], "off"
        rows = store.usage(query)
        if UsageGroup.NODE in query.group_by:
            for row in rows:
                row.node_name = node_name
        return rows, "ok"
