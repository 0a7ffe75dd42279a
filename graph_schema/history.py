"""Reading the agents' occupancy logs for the graph: ranges, fan-out, paging, merging.

Each node's agent keeps its own log and sums its own usage; the server asks
the nodes a query can touch, a bounded number at a time, and merges small
answers. A node whose agent cannot answer is left out and reported, as for
live data. The root connection pages across nodes with one opaque cursor that
holds, per node, where its agent's log resumes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import json
import math
import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from graphql import GraphQLError

from node_resolver.history.records import (
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)

from .errors import GraphUserError
from .interfaces import AgentUnavailableError, HistorySource

__all__ = [
    "DEFAULT_FIRST",
    "FAN_OUT",
    "HISTORY_LIST_LIMIT",
    "MAX_FIRST",
    "Occupancy",
    "Window",
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
    """One record of one node's log, and where that node's log resumes after it."""

    record: OccupancyRecord
    node_name: str
    cursor: str = ""


def owner_of(occupancy: Occupancy) -> str | None:
    """The namespace that owns a record, for the visibility seam; None: no (named) pod."""
    return occupancy.record.pod_namespace or None


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
        found += [
            Occupancy(record, node_name, cursor)
            for record, cursor in zip(page.records, page.cursors, strict=False)
        ]
        if len(found) > limit:
            return found[:limit], True
        if not page.next_page_token:
            return found, False
        token = page.next_page_token


def _limited(query: HistoryQuery, limit: int) -> HistoryQuery:
    return HistoryQuery(
        since=query.since,
        until=query.until,
        gpu_uuids=query.gpu_uuids,
        pod_uids=query.pod_uids,
        namespaces=query.namespaces,
        pod_names=query.pod_names,
        limit=limit,
    )


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


@dataclass(slots=True)
class _Cursor:
    # node -> page token after the last record returned from it
    tokens: dict[str, str] = field(default_factory=dict)
    # nodes with nothing left
    done: set[str] = field(default_factory=set)

    def encode(self) -> str:
        raw = json.dumps({"t": self.tokens, "d": sorted(self.done)}, separators=(",", ":"))
        return base64.urlsafe_b64encode(zlib.compress(raw.encode(), 9)).decode()

    @classmethod
    def decode(cls, text: str | None) -> _Cursor:
        if not text:
            return cls()
        try:
            raw = json.loads(
                zlib.decompress(base64.urlsafe_b64decode(text.encode()), bufsize=1 << 16)
            )
            tokens = {str(k): str(v) for k, v in dict(raw["t"]).items()}
            done = {str(n) for n in raw["d"]}
        except (ValueError, KeyError, TypeError, zlib.error, binascii.Error):
            raise GraphUserError("after is not a cursor this server gave out") from None
        return cls(tokens, done)


@dataclass(slots=True)
class ConnectionPage:
    """One page of the merged, oldest-first records of several nodes."""

    records: list[Occupancy]
    has_next_page: bool
    end_cursor: str | None
    errors: list[str]
    # The cursor this page started from, to give each edge its own.
    start: _Cursor = field(default_factory=_Cursor)

    def cursor_after(self, index: int) -> str:
        """The cursor that resumes right after record ``index`` of this page."""
        cursor = _Cursor(dict(self.start.tokens), set(self.start.done))
        for occupancy in self.records[: index + 1]:
            cursor.tokens[occupancy.node_name] = occupancy.cursor
        return cursor.encode()


async def connection_page(
    source: HistorySource,
    nodes: Sequence[str],
    query: HistoryQuery,
    *,
    first: int,
    after: str | None,
    named: Callable[[str], bool],
) -> ConnectionPage:
    """The next ``first`` records across ``nodes`` after the cursor ``after``.

    ``named`` says which nodes a failure may be reported by name.
    """
    cursor = _Cursor.decode(after)
    start = _Cursor(dict(cursor.tokens), set(cursor.done))
    asked = [n for n in nodes if n not in cursor.done]
    page_query = _limited(query, first)

    def fetch(node: str) -> Callable[[], Awaitable[Any]]:
        return lambda: source.history_page(node, page_query, cursor.tokens.get(node, ""))

    answers = await bounded([fetch(n) for n in asked])
    merged: list[Occupancy] = []
    more: dict[str, bool] = {}
    errors: list[str] = []
    unnamed = 0
    for node, answer in zip(asked, answers, strict=True):
        if isinstance(answer, AgentUnavailableError | HistoryUnavailableError):
            if named(node):
                errors.append(str(answer))
            else:
                unnamed += 1
            # Skipped for the rest of this walk (the error says so), or it never ends.
            more[node] = False
            continue
        if isinstance(answer, BaseException):
            raise answer
        if answer.status not in ("ok", ""):
            failure = HistoryUnavailableError(node, answer.status)
            if named(node):
                errors.append(str(failure))
            else:
                unnamed += 1
        merged += [
            Occupancy(r, node, c) for r, c in zip(answer.records, answer.cursors, strict=False)
        ]
        more[node] = bool(answer.next_page_token)
    if unnamed:
        errors.append(f"history unavailable from {unnamed} node(s) this caller cannot see")
    merged.sort(key=lambda o: (o.record.first_seen, o.node_name, o.cursor))
    taken = merged[:first]
    left = {o.node_name for o in merged[first:]}
    for occupancy in taken:
        cursor.tokens[occupancy.node_name] = occupancy.cursor
    for node in asked:
        if not more.get(node, True) and node not in left:
            cursor.done.add(node)
    has_next = any(n not in cursor.done for n in nodes)
    end = cursor.encode() if taken or has_next else None
    return ConnectionPage(taken, has_next, end, errors, start)


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
