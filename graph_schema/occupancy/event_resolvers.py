"""The graph's fields that read GPU health events, declared once here.

The root ``gpuEvents``, the ``gpuEventStream`` subscription and the event
fields of Node, Gpu and Pod are built here; ``query``, ``subscriptions`` and
``types`` name them. As for history, every read asks the agents only for
events of the namespaces the caller may see, and what comes back goes
through the seam again: an event is shown to a caller who had a pod on the
GPU (or allocated to it) at that moment, or who may list pods cluster-wide,
with other tenants' processes withheld and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import AsyncIterator
from typing import Any

import strawberry
from strawberry.types import Info

from node_resolver.gpu_events.records import EventQuery

from ..errors import check_name, named_nodes, require_ready
from ..interfaces import AgentUnavailableError, ClusterView
from ..operation import Operation
from .event_fan_out import Follower, NodeEvent, event_page, event_source, node_events
from .events import GpuEventConnection, GpuEventEdge, GpuEventKind, GpuEventObject, event_object
from .fan_out import (
    DEFAULT_FIRST,
    HISTORY_LIST_LIMIT,
    MAX_FIRST,
    HistoryUnavailableError,
    agent_namespaces,
    partial,
)
from .resolvers import (
    UNANSWERED,
    GpuLike,
    NodeLike,
    PodLike,
    Window,
    connection_args,
    node_list,
    page_info,
    window,
)
from .types import operation_of

__all__ = [
    "EVENT_STREAM_DESCRIPTION",
    "batch_of",
    "event_stream",
    "gpu_event_connection",
    "gpu_events",
    "node_gpu_event_status",
    "node_gpu_events",
    "pod_gpu_events",
    "visible_events",
]


def visible_events(view: ClusterView, found: list[NodeEvent]) -> list[GpuEventObject]:
    """The events of ``found`` the caller may see, each with only the processes it may see."""
    shown: list[GpuEventObject] = []
    sees_unowned = view.sees_owner(None)
    for item in found:
        if not view.sees_shared(item.event.namespaces):
            continue
        processes, hidden = view.split_owned(
            item.event.processes, lambda p: p.pod_namespace or None
        )
        shown.append(event_object(item, processes, len(hidden), sees_unowned=sees_unowned))
    return shown


def _query(span: Window, namespaces: tuple[str, ...], **filters: Any) -> EventQuery:
    return EventQuery(since=span.since, until=span.until, namespaces=namespaces, **filters)


async def _read(info: Info, node_name: str, span: Window, **filters: Any) -> list[GpuEventObject]:
    """One node's events in ``span`` that the caller may see (only those are read)."""
    ctx = operation_of(info)
    namespaces = agent_namespaces(ctx.cluster.owner_namespaces())
    if namespaces is None:
        return []
    source = event_source(ctx.history)
    await ctx.pace()
    read = node_events(source, node_name, _query(span, namespaces, **filters))
    found = await node_list(
        info, node_name, read, what="GPU events", items="GPU events", root="gpuEvents"
    )
    shown = visible_events(ctx.cluster, found)
    ctx.charge(len(shown))
    return shown


async def _node_gpu_events(
    self: NodeLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuEventObject] | None:
    return await _read(info, self.name, window(since, until))


async def _gpu_events(
    self: GpuLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuEventObject] | None:
    return await _read(info, self.node_name, window(since, until), gpu_uuids=(self.uuid,))


async def _pod_gpu_events(
    self: PodLike, info: Info, since: datetime.datetime, until: datetime.datetime | None = None
) -> list[GpuEventObject] | None:
    if not self.node_name:
        return []
    return await _read(info, self.node_name, window(since, until), pod_uids=(str(self.uid),))


async def _node_gpu_event_status(self: NodeLike, info: Info) -> str | None:
    try:
        snapshot = await operation_of(info).snapshot(self.name)
    except Exception:
        return None
    return snapshot.gpu_event_status


node_gpu_events: Any = strawberry.field(
    resolver=_node_gpu_events,
    description="Health events on this node's GPUs between since and until (default: now), "
    f"oldest first, as this caller may see them; at most {HISTORY_LIST_LIMIT} (gpuEvents "
    "pages past that)." + UNANSWERED,
)
gpu_events: Any = strawberry.field(
    resolver=_gpu_events,
    description="Health events on this GPU (or its MIG devices) between since and until "
    "(default: now), oldest first, each with who was on it; an event is shown when one of "
    "this caller's pods was on the GPU or allocated it then (or to callers who may list pods "
    f"cluster-wide). At most {HISTORY_LIST_LIMIT}." + UNANSWERED,
)
pod_gpu_events: Any = strawberry.field(
    resolver=_pod_gpu_events,
    description="Health events on GPUs while this pod's processes were on them, between "
    f"since and until (default: now), oldest first; at most {HISTORY_LIST_LIMIT}." + UNANSWERED,
)
node_gpu_event_status: Any = strawberry.field(
    resolver=_node_gpu_event_status,
    description='Whether the agent receives GPU health events: "ok", "unsupported" (no event '
    'support in the driver or GPUs), "off", or the error; null when the agent cannot answer.',
)


# -- the root and the subscription ---------------------------------------------------


async def _gpu_event_connection(
    self: object,
    info: Info,
    since: datetime.datetime,
    until: datetime.datetime | None = None,
    namespace: str | None = None,
    node_name: str | None = None,
    kind: GpuEventKind | None = None,
    first: int | None = None,
    after: str | None = None,
) -> GpuEventConnection:
    ctx = operation_of(info)
    args = connection_args(ctx, since, until, namespace, node_name, first, after)
    if args.namespaces is None:
        return GpuEventConnection(edges=[], page_info=page_info(after, None))
    source = event_source(ctx.history)
    kinds = () if kind is None else (kind.recorded(),)
    await ctx.pace()
    page = await event_page(
        source,
        args.nodes,
        _query(args.span, args.namespaces, kinds=kinds),
        first=args.first,
        after=args.after,
        named=ctx.cluster.sees_node,
    )
    ctx.partial_errors.extend(partial(info.path.as_list(), page.errors))
    edges: list[GpuEventEdge] = []
    for index, found in enumerate(page.entries):
        for shown in visible_events(ctx.cluster, [found]):
            edges.append(GpuEventEdge(node=shown, page=page, index=index))
    ctx.charge(len(edges))
    return GpuEventConnection(edges=edges, page_info=page_info(after, page))


gpu_event_connection: Any = strawberry.field(
    resolver=_gpu_event_connection,
    description="GPU health events (XID and ECC errors, lost GPUs) between since and until "
    "(default: now) across nodes, oldest first, as a Relay connection; each names the "
    "processes and pods on the GPU at that moment, kept after the pods are gone. Filter by "
    "a namespace that had a pod on the GPU, by node and by kind. "
    f"first: 1 to {MAX_FIRST} (default {DEFAULT_FIRST}). Without nodeName every node's log "
    "is read, those of nodes the caller no longer sees too, for the caller's events only. "
    "Nodes whose agent cannot answer are named in the response's errors (counted, unnamed, "
    "where the caller cannot see them) and skipped; a nodeName the caller cannot see (or no "
    "node has) is the error NOT_FOUND.",
)


# How often a stream of every node looks for nodes that joined since it began.
NEW_NODES_SECONDS = 10.0
# How long a stream keeps the follower of a node that left, for it to resume where it
# stopped if the node comes back. A stream open for weeks on an autoscaled cluster
# would otherwise keep one for every node that ever passed through.
GONE_NODE_SECONDS = 3600.0


async def _merged(
    ctx: Operation[Any], nodes: list[str], query: EventQuery, *, named: bool
) -> AsyncIterator[list[NodeEvent]]:
    """The batches of every node's follower, as they land.

    A node that cannot answer is followed again after ``Follower.retry_delay``, from
    where its follower was, while the others go on. Only a node the caller ``named``,
    failing before its follower could start, ends the stream with its error: a stream of
    one node that never yields would look like a node whose GPUs never fail.

    Unless one was named, the nodes the caller sees are listed again every
    ``NEW_NODES_SECONDS``: one that joined is followed from the moment the stream began
    (its log read from the start), one that left is no longer asked, and one that comes
    back resumes where its follower stopped, so no event is shown twice. One gone longer
    than ``GONE_NODE_SECONDS`` is forgotten; a newcomer's events older than that are left
    out, so one that comes back shows none twice either. A node down when the stream
    began is read, once it answers, from the stream's start too.
    """
    source = event_source(ctx.history)
    began = time.time()
    landed: asyncio.Queue[list[NodeEvent] | Exception] = asyncio.Queue()

    async def one(follower: Follower) -> None:
        while True:
            try:
                async for batch in follower.batches():
                    await landed.put(batch)
            except (AgentUnavailableError, HistoryUnavailableError) as exc:
                if named and not follower.started:
                    await landed.put(exc)
                    return
                if not follower.started:
                    # Down when the stream began: what it logs from then on is new to it.
                    follower.read_from(began)
            await asyncio.sleep(follower.retry_delay())

    followers: dict[str, Follower] = {}
    tasks: dict[str, asyncio.Future[None]] = {}
    # Node -> when a listing first found it gone.
    gone_at: dict[str, float] = {}

    def follow(nodes: list[str], since: float | None) -> None:
        for node in nodes:
            follower = followers.get(node)
            if follower is None:
                follower = followers[node] = Follower(source, node, query, since=since)
            tasks[node] = asyncio.ensure_future(one(follower))

    async def newcomers() -> None:
        while True:
            await asyncio.sleep(NEW_NODES_SECONDS)
            now = time.time()
            listed = set(ctx.cluster.node_names_now())
            for gone in tasks.keys() - listed:
                tasks.pop(gone).cancel()
                gone_at[gone] = now
            for node, left in list(gone_at.items()):
                if node in listed or now - left > GONE_NODE_SECONDS:
                    del gone_at[node]
                    if node not in listed:
                        del followers[node]
            # A newcomer's events from the stream's start, but not from longer ago than a
            # forgotten node's: one that comes back shows what it logged while forgotten.
            follow(sorted(listed - tasks.keys()), since=max(began, now - GONE_NODE_SECONDS))

    follow(nodes, since=None)
    watching = None if named else asyncio.ensure_future(newcomers())
    try:
        while True:
            batch = await landed.get()
            if isinstance(batch, Exception):
                raise batch
            yield batch
    finally:
        every = [*tasks.values(), *([watching] if watching is not None else [])]
        for task in every:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*every, return_exceptions=True)


async def event_stream(
    ctx: Operation[Any], node_name: str | None, namespace: str | None
) -> AsyncIterator[list[NodeEvent]]:
    """gpuEventStream's batches: each node's new events as they land, only those of the
    caller's namespaces read (``batch_of`` shows each as the caller may see it then)."""
    require_ready(ctx.cluster)
    nodes = named_nodes(ctx.cluster, node_name)
    check_name("namespace", namespace)
    namespaces = agent_namespaces(ctx.cluster.owner_namespaces(namespace))
    if namespaces is None:
        # Nothing the caller may see: a stream that never yields, as gpuEvents answers empty.
        await asyncio.Event().wait()
        return
    query = EventQuery(namespaces=namespaces)
    async for batch in _merged(ctx, nodes, query, named=node_name is not None):
        yield batch


def batch_of(ctx: Operation[Any], batch: list[NodeEvent]) -> list[GpuEventObject]:
    """A batch of landed events as the caller may see them now."""
    shown = visible_events(ctx.cluster, batch)
    ctx.charge(len(shown))
    return shown


EVENT_STREAM_DESCRIPTION = (
    "Each new GPU health event as it lands, on one node or every node the caller may see, as "
    "gpuEvents shows it; optionally only events on GPUs that a pod of namespace was on (or "
    "allocated). A node whose agent cannot be followed is followed again 5 s later (longer "
    "while it keeps failing, up to 5 minutes), resuming after the last event seen, so an "
    "agent's restart loses no event. Without nodeName, a node that joins while the stream is "
    f"open is followed within {NEW_NODES_SECONDS:g} s, with its events from the stream's start "
    f"(at most {GONE_NODE_SECONDS / 3600:g} h back). "
    "The nodeName asked for that cannot be followed when the stream starts ends it with that "
    "error, and one the caller cannot see (or no node has) with NOT_FOUND."
)
