"""The graph's fields that read the agents' occupancy logs, declared once here.

The roots (``gpuHistory``, ``gpuUsage``) and the history fields of Node, Gpu
and Pod are strawberry fields built here, with their arguments and
descriptions; ``query.Query`` and the object types in ``types`` name them.
Every read asks only for records of the namespaces the caller may see (from
the visibility seam), and what it finds goes through the seam again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import math
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from node_resolver.history.records import HistoryQuery, UsageGroup, UsageQuery, UsageRow

from ..errors import BadUserInputError, GraphUserError, check_name, history_nodes, require_ready
from ..interfaces import AgentUnavailableError, HistorySource
from ..operation import Operation
from ..shared_futures import shielded
from .cursor import Position
from .fan_out import (
    DEFAULT_FIRST,
    HISTORY_LIST_LIMIT,
    MAX_FIRST,
    HistoryUnavailableError,
    MergedPage,
    Occupancy,
    agent_namespaces,
    connection_page,
    node_history,
    owner_of,
    partial,
    unseen_failure,
    usage_rows,
)
from .types import (
    GpuHistoryConnection,
    GpuHistoryEdge,
    GpuOccupancy,
    GpuUsageRow,
    PageInfo,
    UsageGroupBy,
    operation_of,
)

__all__ = [
    "UNANSWERED",
    "ConnectionArgs",
    "GpuLike",
    "NodeLike",
    "PodLike",
    "Window",
    "connection_args",
    "gpu_hidden_history_count",
    "gpu_history",
    "gpu_history_connection",
    "gpu_usage",
    "node_gpu_history",
    "node_list",
    "page_info",
    "page_size",
    "pod_gpu_history",
    "window",
]


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
        raise BadUserInputError("until must be after since")
    if not math.isfinite(start):
        raise BadUserInputError("since is out of range")
    return Window(start, end)


def page_size(first: int | None) -> int:
    """A connection's page size: ``first``, or the default; GraphUserError out of range."""
    count = DEFAULT_FIRST if first is None else first
    if not 1 <= count <= MAX_FIRST:
        raise BadUserInputError(f"first must be between 1 and {MAX_FIRST}")
    return count


def history_source(ctx: Operation[Any]) -> HistorySource:
    """The agents' logs, or a clear error on a server without them."""
    source = ctx.history
    if source is None:
        raise GraphUserError("this server cannot read the agents' history")
    return source


E = TypeVar("E")


async def node_list(
    info: Info,
    node_name: str,
    read: Awaitable[tuple[list[E], bool]],
    *,
    what: str,
    items: str,
    root: str,
) -> list[E]:
    """One node's list of ``items`` (``read``: up to HISTORY_LIST_LIMIT of them, and whether
    more were left), the cut said in the response's errors, pointing at ``root`` to page.

    A node the caller no longer sees, reached from an entry of its own, fails saying only
    that the list is missing: not its agent's address, nor its state.
    """
    ctx = operation_of(info)
    try:
        found, truncated = await read
    except (AgentUnavailableError, HistoryUnavailableError):
        if ctx.cluster.sees_node(node_name):
            raise
        raise unseen_failure(what) from None
    if truncated:
        ctx.partial_errors.append(
            GraphQLError(
                f"more than {HISTORY_LIST_LIMIT} {items} on node {node_name!r}; the oldest are "
                f"shown: narrow since and until, or page with {root}",
                path=info.path.as_list(),
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class ConnectionArgs:
    """A connection root's arguments, checked: the page's size, range, start, the nodes to
    ask and the namespaces to send them (None: the caller may see nothing, ask nobody)."""

    first: int
    span: Window
    after: Position | None
    nodes: list[str]
    namespaces: tuple[str, ...] | None


def connection_args(
    ctx: Operation[Any],
    since: datetime.datetime,
    until: datetime.datetime | None,
    namespace: str | None,
    node_name: str | None,
    first: int | None,
    after: str | None,
) -> ConnectionArgs:
    """The checked arguments of gpuHistory and gpuEvents; GraphUserError for bad ones."""
    require_ready(ctx.cluster)
    count = page_size(first)
    span = window(since, until)
    start = Position.decode(after)
    # A node the caller may not see answers as one that does not exist, as for gpus; without
    # nodeName, every node whose log may hold the caller's entries, seen or not.
    nodes = history_nodes(ctx.cluster, node_name)
    # The agents read only what the caller may see: a filter naming another tenant's pods
    # answers as one naming none, with nothing counted or positioned.
    check_name("namespace", namespace)
    namespaces = agent_namespaces(ctx.cluster.owner_namespaces(namespace))
    return ConnectionArgs(count, span, start, nodes, namespaces)


def page_info(after: str | None, page: MergedPage[Any] | None) -> PageInfo:
    """Relay's PageInfo of ``page``, asked for after ``after``; None: the empty page of a
    caller who may see nothing."""
    if page is None:
        return PageInfo(
            has_next_page=False, has_previous_page=False, start_cursor=None, end_cursor=None
        )
    return PageInfo(
        has_next_page=page.has_next_page,
        has_previous_page=after is not None,
        start_cursor=after,
        end_cursor=page.end_cursor,
    )


# -- the history fields of Node, Gpu and Pod -------------------------------------------

# Each of those fields is nullable, as Node.gpus is: one node that cannot answer nulls its
# own field, not the list of nodes or pods around it.
UNANSWERED = " Null where the node's agent or its log cannot answer (the errors say why)."


class NodeLike(Protocol):
    """A Node, as its history and event fields read it."""

    name: str


class GpuLike(Protocol):
    """A Gpu, as its history and event fields read it."""

    uuid: str
    node_name: str


class PodLike(Protocol):
    """A Pod, as its history and event fields read it."""

    @property
    def uid(self) -> str: ...

    @property
    def node_name(self) -> str | None: ...


def _query(span: Window, **filters: Any) -> HistoryQuery:
    return HistoryQuery(since=span.since, until=span.until, **filters)


async def _gpu_records(
    info: Info, gpu: GpuLike, span: Window, *, everyone: bool
) -> tuple[list[Occupancy], int]:
    ctx = operation_of(info)
    # A GPU's records, read once for history and hiddenHistoryCount where both read
    # the same (a caller who sees every record).
    reads = ctx.history_reads
    query = _query(span, gpu_uuids=(gpu.uuid,))
    # history reads only the caller's records; hiddenHistoryCount counts the others.
    namespaces = () if everyone else agent_namespaces(ctx.cluster.owner_namespaces())
    if namespaces is None:
        return [], 0
    asked = dataclasses.replace(query, namespaces=namespaces)
    key = (gpu.node_name, asked)
    task = reads.get(key)
    if task is None:
        task = reads[key] = asyncio.ensure_future(_read(info, gpu.node_name, asked))
    shown, hidden = await shielded(task)
    return shown, hidden


async def _callers_records(
    info: Info, node_name: str, query: HistoryQuery
) -> tuple[list[Occupancy], int]:
    """One node's records for ``query`` that the caller may see (only those are read)."""
    namespaces = agent_namespaces(operation_of(info).cluster.owner_namespaces())
    if namespaces is None:
        return [], 0
    return await _read(info, node_name, dataclasses.replace(query, namespaces=namespaces))


async def _read(info: Info, node_name: str, query: HistoryQuery) -> tuple[list[Occupancy], int]:
    """One node's records for ``query`` as the caller may see them, and how many it may not."""
    ctx = operation_of(info)
    source = history_source(ctx)
    await ctx.pace()
    read = node_history(source, node_name, query)
    found = await node_list(
        info, node_name, read, what="history", items="records", root="gpuHistory"
    )
    shown, hidden = ctx.cluster.split_owned(found, owner_of)
    return shown, len(hidden)


def _occupancies(info: Info, shown: list[Occupancy]) -> list[GpuOccupancy]:
    operation_of(info).charge(len(shown))
    return [GpuOccupancy.of(o.record, o.node_name) for o in shown]


async def _node_gpu_history(
    self: NodeLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuOccupancy] | None:
    shown, _ = await _callers_records(info, self.name, _query(window(since, until)))
    return _occupancies(info, shown)


async def _gpu_history(
    self: GpuLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuOccupancy] | None:
    shown, _ = await _gpu_records(info, self, window(since, until), everyone=False)
    return _occupancies(info, shown)


async def _gpu_hidden_history_count(
    self: GpuLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> int | None:
    _, hidden = await _gpu_records(info, self, window(since, until), everyone=True)
    return hidden


async def _pod_gpu_history(
    self: PodLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuOccupancy] | None:
    if not self.node_name:
        return []
    query = _query(window(since, until), pod_uids=(str(self.uid),))
    shown, _ = await _callers_records(info, self.node_name, query)
    return _occupancies(info, shown)


node_gpu_history: Any = strawberry.field(
    resolver=_node_gpu_history,
    description="Who held this node's GPUs between since and until (default: now), oldest "
    f"first; at most {HISTORY_LIST_LIMIT} records (gpuHistory pages past that)." + UNANSWERED,
)
gpu_history: Any = strawberry.field(
    resolver=_gpu_history,
    description="Who held this GPU between since and until (default: now), oldest first: "
    "one record per process lifetime, kept after the pod is gone. Other tenants' records "
    f"are withheld (see hiddenHistoryCount); at most {HISTORY_LIST_LIMIT} records." + UNANSWERED,
)
gpu_hidden_history_count: Any = strawberry.field(
    resolver=_gpu_hidden_history_count,
    description="Records of this GPU between since and until withheld from this caller "
    "(other tenants' processes, or processes in no pod)." + UNANSWERED,
)
pod_gpu_history: Any = strawberry.field(
    resolver=_pod_gpu_history,
    description="Its processes' lifetimes on its node's GPUs between since and until "
    f"(default: now), oldest first; at most {HISTORY_LIST_LIMIT} records." + UNANSWERED,
)


# -- the roots -----------------------------------------------------------------------


async def _gpu_history_connection(
    self: object,
    info: Info,
    since: datetime.datetime,
    until: datetime.datetime | None = None,
    namespace: str | None = None,
    node_name: str | None = None,
    pod_name: str | None = None,
    first: int | None = None,
    after: str | None = None,
) -> GpuHistoryConnection:
    ctx = operation_of(info)
    args = connection_args(ctx, since, until, namespace, node_name, first, after)
    check_name("podName", pod_name)
    if args.namespaces is None:
        return GpuHistoryConnection(edges=[], page_info=page_info(after, None))
    source = history_source(ctx)
    query = HistoryQuery(
        since=args.span.since,
        until=args.span.until,
        namespaces=args.namespaces,
        pod_names=(pod_name,) if pod_name is not None else (),
    )
    await ctx.pace()
    page = await connection_page(
        source, args.nodes, query, first=args.first, after=args.after, named=ctx.cluster.sees_node
    )
    ctx.partial_errors.extend(partial(info.path.as_list(), page.errors))
    shown, _ = ctx.cluster.split_owned(page.entries, owner_of)
    visible = {id(o) for o in shown}
    edges = [
        GpuHistoryEdge(node=GpuOccupancy.of(o.record, o.node_name), page=page, index=i)
        for i, o in enumerate(page.entries)
        if id(o) in visible
    ]
    ctx.charge(len(edges))
    return GpuHistoryConnection(edges=edges, page_info=page_info(after, page))


async def _gpu_usage(
    self: object,
    info: Info,
    since: datetime.datetime,
    until: datetime.datetime | None = None,
    group_by: list[UsageGroupBy] | None = None,
) -> list[GpuUsageRow]:
    ctx = operation_of(info)
    require_ready(ctx.cluster)
    span = window(since, until)
    end = span.until if span.until is not None else time.time()
    if end <= span.since:
        return []
    view = ctx.cluster
    # Summed by the agents over the caller's records only, as gpuHistory reads them, on every
    # node that may hold them: a team's finished pods count where it runs nothing now.
    namespaces = agent_namespaces(view.owner_namespaces())
    if namespaces is None:
        return []
    source = history_source(ctx)
    query = UsageQuery(
        since=span.since,
        until=end,
        group_by=frozenset(UsageGroup(g.value) for g in group_by or ()),
        namespaces=namespaces,
    )
    await ctx.pace()

    def visible(found: list[UsageRow]) -> list[UsageRow]:
        # Each agent's sums by namespace, as the caller's view admits them.
        shown, _ = view.split_owned(found, lambda row: row.namespace or None)
        return shown

    rows, errors = await usage_rows(
        source, history_nodes(view, None), query, named=view.sees_node, visible=visible
    )
    ctx.partial_errors.extend(partial(info.path.as_list(), errors))
    ctx.charge(len(rows))
    return [
        GpuUsageRow(
            namespace=row.namespace or None,
            pod_name=row.pod_name or None,
            node_name=row.node_name,
            gpu_uuid=row.gpu_uuid or None,
            gpu_seconds=row.gpu_seconds,
            memory_gib_seconds=row.memory_gib_seconds,
            allocated_gpu_seconds=row.allocated_gpu_seconds,
            idle_allocated_gpu_seconds=row.idle_allocated_gpu_seconds,
        )
        for row in rows
    ]


gpu_history_connection: Any = strawberry.field(
    resolver=_gpu_history_connection,
    description="Who held which GPU between since and until (default: now), across nodes, "
    "oldest first, as a Relay connection: one record per process lifetime, kept after the "
    "pod is gone. Filter by the pod's namespace and name (as recorded) and by node. "
    f"first: 1 to {MAX_FIRST} (default {DEFAULT_FIRST}). Without nodeName every node's log "
    "is read, those of nodes the caller no longer sees too, for the caller's records only. "
    "Nodes whose agent cannot answer are named in the response's errors (counted, unnamed, "
    "where the caller cannot see them) and skipped; a nodeName the caller cannot see (or no "
    "node has) is the error NOT_FOUND.",
)
gpu_usage: Any = strawberry.field(
    resolver=_gpu_usage,
    description="GPU-seconds and GiB-seconds of GPU memory between since and until "
    "(default: now), summed by the agents and grouped by groupBy (none: one total row), "
    "for chargeback. Largest first. Every node's log is summed, for the caller's records "
    "only, so pods count wherever they ran; nodes whose agent cannot answer are named in the "
    "response's errors (counted, unnamed, where the caller cannot see them).",
)
