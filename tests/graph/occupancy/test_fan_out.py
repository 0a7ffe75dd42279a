"""Many nodes' logs read at once: paging across nodes in one order, the caller's namespaces."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from graph_schema.errors import GraphUserError
from graph_schema.occupancy.cursor import Position
from graph_schema.occupancy.fan_out import agent_namespaces, connection_page
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
