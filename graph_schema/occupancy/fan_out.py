"""Reading many nodes' occupancy logs at once: bounded, failures per node, answers merged.

Each node's agent keeps its own log and sums its own usage; the server asks
the nodes a query can touch, a bounded number at a time, and merges small
answers. A node whose agent cannot answer is left out and reported, as for
live data. The agents filter by the caller's namespaces, so another tenant's
records are never counted, paged over or positioned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from graphql import GraphQLError

from node_resolver.history.records import (
    MAX_FILTER_VALUES,
    HistoryPage,
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)

from ..errors import GraphUserError
from ..interfaces import AgentUnavailableError, HistorySource
from .cursor import Order, Position, merged_order

__all__ = [
    "AGENT_PAGE",
    "DEFAULT_FIRST",
    "FAN_OUT",
    "HISTORY_LIST_LIMIT",
    "MAX_FIRST",
    "ConnectionPage",
    "Failures",
    "HistoryUnavailableError",
    "MergedPage",
    "Occupancy",
    "agent_namespaces",
    "bounded",
    "connection_page",
    "merged_page",
    "node_history",
    "owner_of",
    "partial",
    "read_node",
    "unseen_failure",
    "unusable",
    "usage_rows",
]

# The most records a plain history list (Gpu.history, Node.gpuHistory, Pod.gpuHistory)
# returns; gpuHistory pages past it.
HISTORY_LIST_LIMIT = 1000
# gpuHistory's page: its default and largest ``first``.
DEFAULT_FIRST = 100
MAX_FIRST = 1000
# Agents asked at once by a query that spans nodes.
FAN_OUT = 64
# Per agent call: the agent's own page limit.
AGENT_PAGE = 500

T = TypeVar("T")


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


class HistoryUnavailableError(GraphUserError):
    """A node's occupancy log is off or broken."""

    def __init__(self, node_name: str, status: str) -> None:
        if status == "off":
            super().__init__(
                f"history is off on node {node_name!r} (its agent has no --history-dir)"
            )
        else:
            super().__init__(f"history on node {node_name!r} is unusable: {status}")


def unusable(node_name: str, status: str) -> HistoryUnavailableError | None:
    """The error of a node whose log answered ``status``; None when it is usable."""
    return None if status in ("ok", "") else HistoryUnavailableError(node_name, status)


class Failures:
    """Nodes that could not answer a fan-out: each named where the caller may see it,
    the rest counted, so the answer says what it lacks without naming hidden nodes."""

    def __init__(self, what: str, named: Callable[[str], bool]) -> None:
        self._what = what
        self._named = named
        self._messages: list[str] = []
        self._unnamed = 0

    def add(self, node_name: str, error: Exception) -> None:
        if self._named(node_name):
            self._messages.append(str(error))
        else:
            self._unnamed += 1

    def messages(self) -> list[str]:
        if not self._unnamed:
            return self._messages
        return [*self._messages, str(unseen_failure(self._what, self._unnamed))]


def unseen_failure(what: str, count: int = 1) -> GraphUserError:
    """That ``what`` is missing from ``count`` nodes the caller cannot see, and nothing more:
    neither their names, nor their agents' addresses, nor what went wrong there."""
    return GraphUserError(f"{what} unavailable from {count} node(s) this caller cannot see")


class AgentPage(Protocol):
    """What every paged answer of an agent's log says besides its entries."""

    @property
    def status(self) -> str: ...

    @property
    def next_page_token(self) -> str: ...


P = TypeVar("P", bound=AgentPage)
E = TypeVar("E")


async def read_node(
    node_name: str,
    read: Callable[[int, str], Awaitable[P]],
    entries: Callable[[P], list[E]],
    *,
    limit: int = HISTORY_LIST_LIMIT,
) -> tuple[list[E], bool]:
    """Up to ``limit`` entries of one node's log, oldest first, and whether more were left:
    ``read(limit, page_token)`` reads one page of it, ``entries`` takes a page's entries."""
    found: list[E] = []
    token = ""
    while True:
        page = await read(min(AGENT_PAGE, limit - len(found) + 1), token)
        broken = unusable(node_name, page.status)
        if broken is not None:
            raise broken
        found += entries(page)
        if len(found) > limit:
            return found[:limit], True
        if not page.next_page_token:
            return found, False
        token = page.next_page_token


async def node_history(
    source: HistorySource,
    node_name: str,
    query: HistoryQuery,
    *,
    limit: int = HISTORY_LIST_LIMIT,
) -> tuple[list[Occupancy], bool]:
    """Up to ``limit`` records of one node, oldest first, and whether more were left."""

    def read(ask: int, token: str) -> Awaitable[HistoryPage]:
        asked = dataclasses.replace(query, limit=ask, after=None)
        return source.history_page(node_name, asked, token)

    def entries(page: HistoryPage) -> list[Occupancy]:
        return [Occupancy(record, node_name) for record in page.records]

    return await read_node(node_name, read, entries, limit=limit)


@dataclass(slots=True)
class MergedPage(Generic[E]):
    """One page of the merged, oldest-first entries of several nodes' logs."""

    entries: list[E]
    has_next_page: bool
    end_cursor: str | None
    errors: list[str]
    order: Callable[[E], Order]

    def cursor_after(self, index: int) -> str:
        """The cursor that resumes right after entry ``index`` of this page."""
        return Position(*self.order(self.entries[index])).encode()


async def merged_page(
    nodes: Sequence[str],
    read: Callable[[str], Awaitable[P]],
    entries: Callable[[str, P], list[E]],
    order: Callable[[E], Order],
    *,
    first: int,
    what: str,
    named: Callable[[str], bool],
) -> MergedPage[E]:
    """The first ``first`` entries, in ``order``, of every node's page (``read(node)``, which
    asks for one entry past the page, so whether another page follows is known, not guessed).

    A node that cannot answer is reported by ``named`` (as ``what`` unavailable) on every
    page it fails; the walk goes on without it, and picks it up where the walk is, should
    it come back.
    """
    answers = await bounded([functools.partial(read, n) for n in nodes])
    merged: list[E] = []
    more = False
    # The last entry a node sent of a page it has more of: past it, that node's entries
    # are not known, so the merged page stops there (an agent cuts a page at its size
    # limit, shorter than asked; the next page resumes each node after the cursor).
    known_to: Order | None = None
    failures = Failures(what, named)
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, AgentUnavailableError | HistoryUnavailableError):
            failures.add(node, answer)
            continue
        if isinstance(answer, BaseException):
            raise answer
        broken = unusable(node, answer.status)
        if broken is not None:
            failures.add(node, broken)
        sent = entries(node, answer)
        merged += sent
        if answer.next_page_token:
            more = True
            if sent:
                last = max(order(e) for e in sent)
                known_to = last if known_to is None else min(known_to, last)
    merged.sort(key=order)
    if known_to is not None:
        merged = [e for e in merged if order(e) <= known_to]
    taken = merged[:first]
    has_next = more or len(merged) > first
    end = Position(*order(taken[-1])).encode() if taken else None
    return MergedPage(taken, has_next, end, failures.messages(), order)


ConnectionPage = MergedPage[Occupancy]


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

    def read(node: str) -> Awaitable[HistoryPage]:
        resume = None if after is None else after.resume(node)
        asked = dataclasses.replace(query, limit=first + 1, after=resume)
        return source.history_page(node, asked)

    def entries(node: str, page: HistoryPage) -> list[Occupancy]:
        return [Occupancy(record, node) for record in page.records]

    return await merged_page(nodes, read, entries, _order, first=first, what="history", named=named)


def _order(occupancy: Occupancy) -> Order:
    return merged_order(occupancy.record, occupancy.node_name)


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
    asked = dataclasses.replace(query, group_by=query.group_by | {UsageGroup.NAMESPACE})

    def fetch(node: str) -> Callable[[], Awaitable[tuple[list[UsageRow], str]]]:
        return lambda: source.usage(node, asked)

    answers = await bounded([fetch(n) for n in nodes])
    totals: dict[tuple[str | None, str | None, str | None, str | None], UsageRow] = {}
    failures = Failures("usage", named)
    by_node = UsageGroup.NODE in query.group_by
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, AgentUnavailableError):
            failures.add(node, answer)
            continue
        if isinstance(answer, BaseException):
            raise answer
        rows, status = answer
        broken = unusable(node, status)
        if broken is not None:
            failures.add(node, broken)
            continue
        for row in visible(rows):
            node_key = node if by_node else None
            namespace = row.namespace if by_namespace else None
            key = (namespace, row.pod_name, node_key, row.gpu_uuid)
            total = totals.get(key)
            if total is None:
                totals[key] = UsageRow(
                    namespace, row.pod_name, row.gpu_uuid, row.gpu_seconds,
                    row.memory_gib_seconds, node_key, row.allocated_gpu_seconds,
                    row.idle_allocated_gpu_seconds,
                )  # fmt: skip
            else:
                total.gpu_seconds += row.gpu_seconds
                total.memory_gib_seconds += row.memory_gib_seconds
                total.allocated_gpu_seconds += row.allocated_gpu_seconds
                total.idle_allocated_gpu_seconds += row.idle_allocated_gpu_seconds
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
    return ordered, failures.messages()


def partial(info_path: list[str | int], messages: Iterable[str]) -> list[GraphQLError]:
    """The failures of a fan-out as the response's partial errors."""
    return [GraphQLError(message, path=info_path) for message in messages]
