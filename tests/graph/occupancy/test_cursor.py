"""The cross-node history cursor: a short plain position, and nothing else read as one."""

from __future__ import annotations

import base64

import pytest

from graph_schema.errors import GraphUserError
from graph_schema.occupancy.cursor import MAX_CURSOR_LENGTH, Position
from tests.support.forged_cursors import old_style_cursor, zlib_bomb_cursor


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
