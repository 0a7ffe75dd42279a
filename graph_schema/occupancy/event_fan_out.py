"""Reading many nodes' GPU health events at once: bounded, failures per node, merged by time.

Events live in the agents' occupancy logs beside the occupancy records, and
are read the same way: the nodes a query can touch, a bounded number at a
time, with the caller's namespaces sent along so the agents never page over
another tenant's events; a node that cannot answer is reported, not fatal.
A subscription follows each node's log by sequence number instead (a long
poll on the agent), starting again from 0 when the log is replaced, and
resuming after the last event it saw when the node answers again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from node_resolver.gpu_events.records import EventPage, EventQuery, GpuEvent

from ..errors import GraphUserError
from ..interfaces import EventSource, HistorySource
from .cursor import Order, Position
from .fan_out import (
    AGENT_PAGE,
    HISTORY_LIST_LIMIT,
    MergedPage,
    merged_page,
    read_node,
    unusable,
)

__all__ = [
    "FOLLOW_WAIT_SECONDS",
    "EventPageOfNodes",
    "Follower",
    "NodeEvent",
    "event_page",
    "event_source",
    "node_events",
]

# How long one follower's call waits on the agent for the next event (the agent's cap is 30 s).
FOLLOW_WAIT_SECONDS = 25.0
# A sequence past any the log gives out: asking after it reads where the log stands.
_PAST_THE_END = (1 << 62) - 1
# A follower's call answered empty sooner than this did not wait: the next waits this long.
_EARLY = 1.0


def event_source(source: HistorySource | None) -> EventSource:
    """The agents' event logs, or a clear error on a server that cannot read them."""
    if source is None or not isinstance(source, EventSource):
        raise GraphUserError("this server cannot read the agents' GPU events")
    return source


@dataclass(slots=True)
class NodeEvent:
    """One event of one node's log."""

    event: GpuEvent
    node_name: str

    def order(self) -> Order:
        """Its key in the merged order: time, node, sequence."""
        return self.event.time, self.node_name, self.event.id


async def node_events(
    source: EventSource, node_name: str, query: EventQuery, *, limit: int = HISTORY_LIST_LIMIT
) -> tuple[list[NodeEvent], bool]:
    """Up to ``limit`` events of one node, oldest first, and whether more were left."""

    def read(ask: int, token: str) -> Awaitable[EventPage]:
        return source.gpu_events(node_name, dataclasses.replace(query, limit=ask), token)

    def entries(page: EventPage) -> list[NodeEvent]:
        return [NodeEvent(event, node_name) for event in page.events]

    return await read_node(node_name, read, entries, limit=limit)


EventPageOfNodes = MergedPage[NodeEvent]


async def event_page(
    source: EventSource,
    nodes: Sequence[str],
    query: EventQuery,
    *,
    first: int,
    after: Position | None,
    named: Callable[[str], bool],
) -> EventPageOfNodes:
    """The next ``first`` events across ``nodes`` after the position ``after``.

    ``query`` carries the caller's namespaces, so the agents page over only
    events the caller may see; ``named`` says which nodes a failure may name.
    """

    def read(node: str) -> Awaitable[EventPage]:
        resume = None if after is None else after.resume(node)
        return source.gpu_events(node, dataclasses.replace(query, limit=first + 1, after=resume))

    def entries(node: str, page: EventPage) -> list[NodeEvent]:
        return [NodeEvent(event, node) for event in page.events]

    return await merged_page(
        nodes, read, entries, NodeEvent.order, first=first, what="GPU events", named=named
    )


class Follower:
    """One node's log followed from where it stood when first asked: each batch of events
    as it lands (a long poll on the agent).

    Its place (the log and the last sequence seen) outlives a failure: following again
    after the node comes back resumes right after the last event seen, so an agent's
    restart loses none; a log replaced meanwhile (a new ``log_id``) is read from its start.

    A follower given ``since`` (a node that joined while a stream was open) reads its log
    from the start instead, for the events from ``since`` on.
    """

    # How long to wait, once the node has failed, before following again: doubled after
    # each failure in a row, up to the most, so a node that never answers (no agent, its
    # log off) costs a call every few minutes, and reset once the node answers.
    retry_seconds = 5.0
    most_retry_seconds = 300.0

    def __init__(
        self,
        source: EventSource,
        node_name: str,
        query: EventQuery,
        *,
        since: float | None = None,
    ) -> None:
        self.source = source
        self.node_name = node_name
        self.query = query
        # Whether the follower knows where to read from (where the log stands, or its start).
        self.started = False
        self._log_id = ""
        self._after = 0
        self._failures = 0
        if since is not None:
            self.read_from(since)

    def read_from(self, since: float) -> None:
        """Read the log from its start, for the events from ``since`` on (a node that joined
        later, or could not say where its log stood when the stream began)."""
        self.query = dataclasses.replace(self.query, since=since)
        self.started = True

    def retry_delay(self) -> float:
        """How long to wait before following again, after a failure."""
        self._failures += 1
        return min(self.retry_seconds * 2 ** (self._failures - 1), self.most_retry_seconds)

    async def batches(self) -> AsyncIterator[list[NodeEvent]]:
        """Each batch from here on; AgentUnavailableError or HistoryUnavailableError when
        the node cannot answer (iterate again to resume)."""
        if not self.started:
            where = dataclasses.replace(self.query, after_sequence=_PAST_THE_END, limit=1)
            page = await self._read(self.source.gpu_events(self.node_name, where))
            self._log_id, self._after = page.log_id, page.last_sequence
            self.started = True
        while True:
            asked = dataclasses.replace(self.query, after_sequence=self._after, limit=AGENT_PAGE)
            started = time.monotonic()
            page = await self._read(
                self.source.follow_gpu_events(
                    self.node_name, asked, wait_seconds=FOLLOW_WAIT_SECONDS
                )
            )
            if self._log_id and page.log_id and page.log_id != self._log_id:
                # Another log (deleted and made again): its sequence numbers start over.
                self._log_id, self._after = page.log_id, 0
                continue
            self._log_id = page.log_id or self._log_id
            if page.events:
                self._after = max(self._after, *(e.id for e in page.events))
                # An agent older than this server's ignores ``since`` while following.
                since = self.query.since
                landed = [NodeEvent(e, self.node_name) for e in page.events if e.time >= since]
                if landed:
                    yield landed
            elif time.monotonic() - started < _EARLY:
                # Answered at once with nothing: the agent had no room for another waiter
                # (or is older than long polls); ask again later rather than at once.
                await asyncio.sleep(_EARLY)

    async def _read(self, call: Awaitable[EventPage]) -> EventPage:
        page = await call
        broken = unusable(self.node_name, page.status)
        if broken is not None:
            raise broken
        self._failures = 0
        return page
