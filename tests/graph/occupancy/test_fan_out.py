"""Many nodes' logs read at once: paging across nodes in one order, the caller's namespaces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from graph_schema.errors import GraphUserError
from graph_schema.occupancy.cursor import Position
from graph_schema.occupancy.event_fan_out import event_page
from graph_schema.occupancy.fan_out import agent_namespaces, connection_page
from node_resolver.gpu_events.records import EventPage, EventQuery, GpuEvent, GpuEventKind
from node_resolver.history.records import MAX_FILTER_VALUES, HistoryQuery, OccupancyRecord
from node_resolver.history.store import HistoryStore
from tests.support.graph import snapshot
from tests.support.history_agents import HistoryAgents, at, occupancy, open_stores


@pytest.fixture
def tied(tmp_path: Path) -> Iterator[dict[str, HistoryStore]]:
    """Three nodes whose records start at the same moments, several per node."""
    logs: dict[str, Sequence[OccupancyRecord]] = {
        node: [
            occupancy(f"GPU-{node}", pid, start, start + 1)
            for pid, start in ((1, 1.0), (2, 1.0), (3, 1.0), (4, 2.0), (5, 2.0))
        ]
        for node in ("node-a", "node-b", "node-c")
    }
    stores = open_stores(tmp_path, logs)
    yield stores
    for store in stores.values():
        store.close()


@pytest.mark.parametrize("first", [1, 2, 4, 15, 16])
def test_paging_across_nodes_with_tied_starts_shows_each_record_once_in_order(
    tied: dict[str, HistoryStore], first: int
) -> None:
    agents = HistoryAgents(tied)
    nodes = sorted(tied)
    for node in nodes:
        agents.put(snapshot(node, []))
    query = HistoryQuery(since=at(0))

    async def walk() -> list[list[tuple[str, int]]]:
        pages: list[list[tuple[str, int]]] = []
        after = None
        while True:
            page = await connection_page(
                agents, nodes, query, first=first, after=after, named=lambda _: True
            )
            assert page.errors == []
            pages.append([(o.node_name, o.record.pid) for o in page.entries])
            if not page.has_next_page:
                assert page.end_cursor is None or page.entries
                return pages
            assert page.end_cursor == page.cursor_after(len(page.entries) - 1)
            after = Position.decode(page.end_cursor)

    pages = asyncio.run(walk())
    expected = [
        (node, pid) for start in (1.0, 2.0) for node in nodes
        for pid in ((1, 2, 3) if start == 1.0 else (4, 5))
    ]  # fmt: skip
    assert [record for page in pages for record in page] == expected
    # Whether another page follows is known: no empty page at the end.
    assert all(pages) and len(pages) == -(-len(expected) // first)


def test_the_agents_are_asked_for_the_callers_namespaces_or_not_at_all() -> None:
    assert agent_namespaces(None) == ()  # every record: no filter
    assert agent_namespaces(frozenset()) is None  # no record: nothing to ask
    assert agent_namespaces(frozenset({"ml", "research"})) == ("ml", "research")
    # More than an agent takes: refused, never read unfiltered and dropped here.
    many = frozenset(f"ns-{i}" for i in range(MAX_FILTER_VALUES + 1))
    with pytest.raises(GraphUserError, match="ask for one namespace"):
        agent_namespaces(many)


class CuttingEvents:
    """Two nodes' event logs; node-a's agent cuts every page at two events, as its page size
    limit does for fat events, with a page token for the rest."""

    def __init__(self) -> None:
        def logged(shift: float) -> list[GpuEvent]:
            return [
                GpuEvent(float(t) + shift, GpuEventKind.XID, "GPU-0", xid=79, id=t)
                for t in range(1, 11)
            ]

        self.logs = {"node-a": logged(0.0), "node-b": logged(0.5)}

    async def gpu_events(self, node: str, query: EventQuery, page_token: str = "") -> EventPage:
        after = query.after
        newer = [e for e in self.logs[node] if after is None or (e.time, e.id) > after]
        page = newer[: 2 if node == "node-a" else query.limit]
        token = "more" if len(page) < len(newer) else ""
        return EventPage(node, page, [""] * len(page), token, "ok")


@pytest.mark.parametrize("first", [1, 3, 5, 25])
async def test_a_node_whose_page_was_cut_short_loses_no_event_to_the_others(first: int) -> None:
    source = CuttingEvents()
    seen: list[tuple[str, int]] = []
    after: Position | None = None
    while True:
        page = await event_page(
            source,  # type: ignore[arg-type]
            ["node-a", "node-b"],
            EventQuery(),
            first=first,
            after=after,
            named=lambda node: True,
        )
        seen += [(entry.node_name, entry.event.id) for entry in page.entries]
        if not page.has_next_page:
            break
        assert page.end_cursor is not None
        after = Position.decode(page.end_cursor)
    every = [(node, t) for node in ("node-a", "node-b") for t in range(1, 11)]
    assert sorted(seen) == every, "each event once"
    times = [t + (0.0 if node == "node-a" else 0.5) for node, t in seen]
    assert times == sorted(times), "in order"
