"""The cross-node cursor: the place in several nodes' merged logs a page resumes from.

A cursor is the position of the last record a caller was shown, written out
in plain text: nothing to inflate and nothing nested, of bounded length, so
any replica reads it. It carries no secret and needs none: the agents answer
only records of the caller's namespaces, so a forged position can page only
through what the caller may see anyway.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass

from node_resolver.history.records import OccupancyRecord

from ..errors import BadUserInputError

__all__ = ["MAX_CURSOR_LENGTH", "Order", "Position", "merged_order"]

# The cursor's whole text: it is read only when it has exactly this shape, checked on a
# string of bounded length, so a forged one costs no more than a real one to turn down.
MAX_CURSOR_LENGTH = 512
_CURSOR_CHARACTERS = re.compile(r"[A-Za-z0-9_-]+")
_CURSOR_TEXT = re.compile(
    r"1:(?P<first_seen>[0-9]{1,17}(?:\.[0-9]{1,17})?(?:e[+-]?[0-9]{1,3})?)"
    r":(?P<row>[0-9]{1,19}):(?P<node>[A-Za-z0-9][A-Za-z0-9._-]{0,252})"
)
# Beyond any row SQLite gives out (its rowids are signed 64-bit).
_LAST_ROW = (1 << 63) - 1
_NOT_A_CURSOR = "after is not a cursor this server gave out"

# An entry's key in the merged order of several nodes' logs: its time, its node, its row.
Order = tuple[float, str, int]


def merged_order(record: OccupancyRecord, node_name: str) -> Order:
    """A record's key in the merged order: each agent pages its log by (first seen,
    row), and nodes interleave by name."""
    return record.first_seen, node_name, record.id


@dataclass(frozen=True, slots=True)
class Position:
    """A record's place in the merged order of several nodes' logs: start, node, row."""

    first_seen: float
    node_name: str
    row: int

    def resume(self, node_name: str) -> tuple[float, int]:
        """Where ``node_name``'s log resumes after this position: (first seen, row)."""
        if node_name == self.node_name:
            return self.first_seen, self.row
        # Another node's records that started at the same moment sort by node name.
        return self.first_seen, _LAST_ROW if node_name < self.node_name else -1

    def encode(self) -> str:
        """The cursor of this position."""
        text = f"1:{self.first_seen!r}:{self.row}:{self.node_name}"
        return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()

    @classmethod
    def decode(cls, cursor: str | None) -> Position | None:
        """The position a cursor holds (None: from the start); BadUserInputError if none."""
        if not cursor:
            return None
        if len(cursor) > MAX_CURSOR_LENGTH or not _CURSOR_CHARACTERS.fullmatch(cursor):
            raise BadUserInputError(_NOT_A_CURSOR)
        try:
            text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, ValueError):
            raise BadUserInputError(_NOT_A_CURSOR) from None
        shape = _CURSOR_TEXT.fullmatch(text)
        if shape is None:
            raise BadUserInputError(_NOT_A_CURSOR)
        first_seen, row = float(shape["first_seen"]), int(shape["row"])
        if not math.isfinite(first_seen) or row > _LAST_ROW:
            raise BadUserInputError(_NOT_A_CURSOR)
        return cls(first_seen, shape["node"], row)
