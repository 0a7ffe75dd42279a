"""Reading the agents' occupancy logs for the graph: ranges, fan-out, paging, merging.

Each node's agent keeps its own log and sums its own usage; the server asks
the nodes a query can touch, a bounded number at a time, and merges small
answers. A node whose agent cannot answer is left out and reported, as for
live data. The agents filter by the caller's namespaces, so another tenant's
records are never counted, paged over or positioned. The root connection pages
across nodes with one short cursor: the place in the merged order of the last
record the caller was shown, from which every node's log resumes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from graphql import GraphQLError

from node_resolver.history.records import (
    MAX_FILTER_VALUES,
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)

from .errors import BadUserInputError, GraphUserError
from .interfaces import AgentUnavailableError, HistorySource

__all__ = [
    "DEFAULT_FIRST",
    "FAN_OUT",
    "HISTORY_LIST_LIMIT",
    "MAX_CURSOR_LENGTH",
    "MAX_FIRST",
    "Occupancy",
    "Position",
    "Window",
    "agent_namespaces",
    "connection_page",
    "node_history",
    "owner_of",
    "usage_rows",
    "window",
]

# The most records a plain history list (Gpu.history, Node.gpuHistory, Pod.gpuHistory)
# returns; gpuHistory pages past it.
HISTORY_LIST_LIMIT = 1000
DEFAULT_FIRST = 100
MAX_FIRST = 1000
# Agents asked at once by a query that spans nodes.
FAN_OUT = 64
# Per agent call: the agent's own page limit.
_AGENT_PAGE = 500

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Window:
    """A time range in Unix seconds; ``until`` None is "up to now"."""

    since: float
    until: float | None


def _unix(value: datetime.datetime) -> float:
    # A time without a zone is UTC, as Kubernetes writes them.
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.timestamp()


def window(since: datetime.datetime, until: datetime.datetime | None) -> Window:
    """The range of ``since`` and ``until``; GraphUserError when it is empty."""
    start = _unix(since)
    end = None if until is None else _unix(until)
    if end is not None and end <= start:
        raise GraphUserError("until must be after since")
    if not math.isfinite(start):
        raise GraphUserError("since is out of range")
    return Window(start, end)


@dataclass(slots=True)
class Occupancy:
    """One record of one node's log."""

    record: OccupancyRecord
    node_name: str


def owner_of(occupancy: Occupancy) -> str | None:
    """The namespace that owns a record, for the visibility seam; None: no (named) pod."""
    return occupancy.record.pod_namespace or None


def agent_namespaces(namespaces: frozenset[str] | None) -> tuple[str, ...] | None:
    """The namespaces filter to send the agents for a caller who may see ``namespaces``' records.

    None in: every record (``()``, no filter); None out: no record at all, so
    nothing is asked. The caller's namespaces come from the visibility seam.
    """
    if namespaces is None:
        return ()
    if not namespaces:
        return None
    if len(namespaces) > MAX_FILTER_VALUES:
        # The agents refuse longer filters; reading more and dropping records here would
        # page over other tenants' records again.
        raise GraphUserError(
            f"history is read for at most {MAX_FILTER_VALUES} namespaces at a time, and this "
            f"caller may see {len(namespaces)}: ask for one namespace"
        )
    return tuple(sorted(namespaces))


async def bounded(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
    """Run ``calls`` at most FAN_OUT at a time; failures come back as exceptions."""
    limit = asyncio.Semaphore(FAN_OUT)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with limit:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls), return_exceptions=True))


async def node_history(
    source: HistorySource,
    node_name: str,
    query: HistoryQuery,
    *,
    limit: int = HISTORY_LIST_LIMIT,
) -> tuple[list[Occupancy], bool]:
    """Up to ``limit`` records of one node, oldest first, and whether more were left."""
    found: list[Occupancy] = []
    token = ""
    while True:
        ask = min(_AGENT_PAGE, limit - len(found) + 1)
        page = await source.history_page(node_name, _limited(query, ask), token)
        _check_status(node_name, page.status)
        found += [Occupancy(record, node_name) for record in page.records]
        if len(found) > limit:
            return found[:limit], True
        if not page.next_page_token:
            return found, False
        token = page.next_page_token


def _limited(
    query: HistoryQuery, limit: int, after: tuple[float, int] | None = None
) -> HistoryQuery:
    return dataclasses.replace(query, limit=limit, after=after)


class HistoryUnavailableError(GraphUserError):
    """A node's occupancy log is off or broken."""

    def __init__(self, node_name: str, status: str) -> None:
        if status == "off":
            super().__init__(
                f"history is off on node {node_name!r} (its agent has no --history-dir)"
            )
        else:
            super().__init__(f"history on node {node_name!r} is unusable: {status}")


def _check_status(node_name: str, status: str) -> None:
    if status not in ("ok", ""):
        raise HistoryUnavailableError(node_name, status)


# -- the root connection -------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Position:
    """A record's place in the merged order of several nodes' logs: start, node, row.

    A cursor is the position of the last record a caller was shown, written out
    in plain text: nothing to inflate and nothing nested, of bounded length,
    so any replica reads it. It carries no secret and needs none: the agents
    answer only records of the caller's namespaces, so a forged position can
    page only through what the caller may see anyway.
    """

    first_seen: float
    node_name: str
    row: int

    @classmethod
    def of(cls, occupancy: Occupancy) -> Position:
        """The position of a record in the merged order."""
        return cls(occupancy.record.first_seen, occupancy.node_name, occupancy.record.id)

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


def _merged_order(occupancy: Occupancy) -> tuple[float, str, int]:
    # Each agent pages its log by (first seen, row); nodes interleave by name.
    return occupancy.record.first_seen, occupancy.node_name, occupancy.record.id


@dataclass(slots=True)
class ConnectionPage:
    """One page of the merged, oldest-first records of several nodes."""

    records: list[Occupancy]
    has_next_page: bool
    end_cursor: str | None
    errors: list[str]

    def cursor_after(self, index: int) -> str:
        """The cursor that resumes right after record ``index`` of this page."""
        return Position.of(self.records[index]).encode()


async def connection_page(
    source: HistorySource,
    nodes: Sequence[str],
    query: HistoryQuery,
    *,
    first: int,
    after: Position | None,
    named: Callable[[str], bool],
) -> ConnectionPage:
    """The next ``first`` records across ``nodes`` after the position ``after``.

    ``query`` carries the caller's namespaces (``agent_namespaces``), so the
    agents count and page over only records the caller may see. ``named``
    says which nodes a failure may be reported by name.
    """

    def fetch(node: str) -> Callable[[], Awaitable[Any]]:
        # One record past the page, so whether another page follows is known, not guessed.
        asked = _limited(query, first + 1, None if after is None else after.resume(node))
        return lambda: source.history_page(node, asked)

    answers = await bounded([fetch(n) for n in nodes])
    merged: list[Occupancy] = []
    more = False
    errors: list[str] = []
    unnamed = 0
    for node, answer in zip(nodes, answers, strict=True):
        # A node that cannot answer is reported on every page it fails; the walk goes on
        # without it (and picks it up where the walk is, should it come back).
        if isinstance(answer, AgentUnavailableError | HistoryUnavailableError):
            if named(node):
                errors.append(str(answer))
            else:
                unnamed += 1
            continue
        if isinstance(answer, BaseException):
            raise answer
        if answer.status not in ("ok", ""):
            failure = HistoryUnavailableError(node, answer.status)
            if named(node):
                errors.append(str(failure))
            else:
                unnamed += 1
        merged += [Occupancy(r, node) for r in answer.records]
        more = more or bool(answer.next_page_token)
    if unnamed:
        errors.append(f"history unavailable from {unnamed} node(s) this caller cannot see")
    merged.sort(key=_merged_order)
    taken = merged[:first]
    has_next = more or len(merged) > first
    end = Position.of(taken[-1]).encode() if taken else None
    return ConnectionPage(taken, has_next, end, errors)


# -- usage ---------------------------------------------------------------------------


async def usage_rows(
    source: HistorySource,
    nodes: Sequence[str],
    query: UsageQuery,
    *,
    named: Callable[[str], bool],
    visible: Callable[[list[UsageRow]], list[UsageRow]],
) -> tuple[list[UsageRow], list[str]]:
    """Usage summed on each node's agent, merged by the query's keys; and the failures.

    The agents always group by namespace too, so ``visible`` (the caller's view)
    can withhold other tenants' sums before they are merged by the asked keys.
    """
    by_namespace = UsageGroup.NAMESPACE in query.group_by or UsageGroup.POD in query.group_by
    asked = UsageQuery(
        since=query.since,
        until=query.until,
        group_by=query.group_by | {UsageGroup.NAMESPACE},
        namespaces=query.namespaces,
    )

    def fetch(node: str) -> Callable[[], Awaitable[tuple[list[UsageRow], str]]]:
        return lambda: source.usage(node, asked)

    answers = await bounded([fetch(n) for n in nodes])
    totals: dict[tuple[str | None, str | None, str | None, str | None], UsageRow] = {}
    errors: list[str] = []
    unnamed = 0
    by_node = UsageGroup.NODE in query.group_by
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, AgentUnavailableError):
            if named(node):
                errors.append(str(answer))
            else:
                unnamed += 1
            continue
        if isinstance(answer, BaseException):
            raise answer
        rows, status = answer
        if status not in ("ok", ""):
            if named(node):
                errors.append(str(HistoryUnavailableError(node, status)))
            else:
                unnamed += 1
            continue
        for row in visible(rows):
            node_key = node if by_node else None
            namespace = row.namespace if by_namespace else None
            key = (namespace, row.pod_name, node_key, row.gpu_uuid)
            total = totals.get(key)
            if total is None:
                totals[key] = UsageRow(
                    namespace, row.pod_name, row.gpu_uuid, row.gpu_seconds,
                    row.memory_gib_seconds, node_key,
                )  # fmt: skip
            else:
                total.gpu_seconds += row.gpu_seconds
                total.memory_gib_seconds += row.memory_gib_seconds
    if unnamed:
        errors.append(f"usage unavailable from {unnamed} node(s) this caller cannot see")
    ordered = sorted(
        totals.values(),
        key=lambda r: (
            -r.gpu_seconds,
            str(r.namespace),
            str(r.pod_name),
            str(r.node_name),
            str(r.gpu_uuid),
        ),
    )
    return ordered, errors


def partial(info_path: list[str | int], messages: Iterable[str]) -> list[GraphQLError]:
    """The failures of a fan-out as the response's partial errors."""
    return [GraphQLError(message, path=info_path) for message in messages]
