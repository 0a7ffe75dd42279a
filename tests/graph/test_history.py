"""The cross-node history cursor: a short plain position, and nothing else read as one."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from graph_schema.errors import GraphUserError
from graph_schema.history import (
    MAX_CURSOR_LENGTH,
    Position,
    agent_namespaces,
    connection_page,
)
from node_resolver.history.records import MAX_FILTER_VALUES, HistoryQuery, OccupancyRecord
from node_resolver.history.store import HistoryStore
from tests.support.graph import snapshot
from tests.support.history import (
    HistoryAgents,
    at,
    occupancy,
    old_style_cursor,
    open_stores,
    zlib_bomb_cursor,
)


def plain(text: str) -> str:
    """``text`` encoded as cursors are."""
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "position",
    [
        Position(1764870292.123456, "gpu-node-1", 1),
        Position(0.0, "n", 0),
        Position(1e-05, "node.example.com", (1 << 63) - 1),
        Position(1.5e16, "a" * 253, 42),
    ],
)
def test_a_cursor_gives_back_its_position_and_stays_short(position: Position) -> None:
    cursor = position.encode()
    assert Position.decode(cursor) == position
    assert len(cursor) <= MAX_CURSOR_LENGTH


def test_no_cursor_and_an_empty_one_start_from_the_beginning() -> None:
    assert Position.decode(None) is None
    assert Position.decode("") is None


FORGED = {
    # The old cursor's bomb: 999 KiB of text inflating to 740 MiB.
    "zlib bomb": zlib_bomb_cursor(),
    # Old-style cursors whose JSON nests past the interpreter's recursion limit.
    "nested lists": old_style_cursor(b"[" * 200_000),
    "nested objects": old_style_cursor(b'{"t":' * 100_000),
    # The old shape, plainly: not a position.
    "old shape": old_style_cursor(b'{"t":{"node-a":"MTAuMDox"},"d":[]}'),
    "nested, plainly": plain("[" * 300),
    "one character too long": "A" * (MAX_CURSOR_LENGTH + 1),
    "another version": plain("2:1764870292.5:3:node-a"),
    "infinite start": plain("1:1e999:3:node-a"),
    "row past SQLite's": plain(f"1:1.5:{1 << 63}:node-a"),
    "negative row": plain("1:1.5:-1:node-a"),
    "no node": plain("1:1.5:3:"),
    "a node name with a slash": plain("1:1.5:3:node/a"),
    "trailing text": plain("1:1.5:3:node-a:more"),
    "padding": Position(1.5, "node-a", 3).encode() + "==",
    "not base64": "not a cursor!",
    "not ASCII": plain("1:1.5:3:nöde"),
}


@pytest.mark.parametrize("cursor", FORGED.values(), ids=FORGED.keys())
def test_anything_else_is_a_user_error(cursor: str) -> None:
    with pytest.raises(GraphUserError, match="after is not a cursor this server gave out"):
        Position.decode(cursor)


def test_each_node_resumes_after_the_records_before_the_position() -> None:
    # Records that started at the same moment on other nodes sort by node name.
    position = Position(10.5, "node-b", 7)
    assert position.resume("node-b") == (10.5, 7)
    assert position.resume("node-a") == (10.5, (1 << 63) - 1)
    assert position.resume("node-c") == (10.5, -1)


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
            pages.append([(o.node_name, o.record.pid) for o in page.records])
            if not page.has_next_page:
                assert page.end_cursor is None or page.records
                return pages
            assert page.end_cursor == page.cursor_after(len(page.records) - 1)
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
