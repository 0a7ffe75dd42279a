"""The Query root: entry points into the graph."""

from __future__ import annotations

import asyncio
import datetime
import time

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from node_resolver.history.records import HistoryQuery, UsageGroup, UsageQuery, UsageRow

from .cache_status import CacheStatus
from .errors import GraphUserError, NodeNotFoundError
from .history import (
    DEFAULT_FIRST,
    MAX_FIRST,
    Position,
    agent_namespaces,
    connection_page,
    owner_of,
    partial,
    usage_rows,
    window,
)
from .identity import Identity, identity_of
from .interfaces import HistorySource
from .operation import Operation
from .selectors import parse_label_selector
from .types import (
    Gpu,
    GpuHistoryConnection,
    GpuHistoryEdge,
    GpuOccupancy,
    GpuProcess,
    GpuUsageRow,
    Node,
    PageInfo,
    Pod,
    UsageGroupBy,
    context_of,
    ready_context,
)


def node_names(ctx: Operation[Gpu], node_name: str | None) -> list[str]:
    """Every visible cached node's name, or just ``node_name`` if it is (else none)."""
    if node_name is None:
        return [n.name for n in ctx.cluster.nodes()]
    if ctx.cluster.node(node_name) is None:
        return []
    return [node_name]


def named_nodes(ctx: Operation[Gpu], node_name: str | None) -> list[str]:
    """``node_names``, where a name the caller cannot see (or that no node has) is NOT_FOUND."""
    if node_name is not None and ctx.cluster.node(node_name) is None:
        raise NodeNotFoundError(node_name)
    return node_names(ctx, node_name)


def history_nodes(ctx: Operation[Gpu], node_name: str | None) -> list[str]:
    """The nodes whose logs a history query asks: those the caller may see."""
    return node_names(ctx, node_name)


def history_source(ctx: Operation[Gpu]) -> HistorySource:
    """The agents' logs, or a clear error on a server without them."""
    source = ctx.history
    if source is None:
        raise GraphUserError("this server cannot read the agents' history")
    return source


async def gpus_of_nodes(ctx: Operation[Gpu], info: Info, node_names: list[str]) -> list[Gpu]:
    """GPUs across several nodes; a failing node is left out and reported as an error."""
    results = await asyncio.gather(*(ctx.gpus(name) for name in node_names), return_exceptions=True)
    gpus: list[Gpu] = []
    for result in results:
        if isinstance(result, Exception):
            ctx.partial_errors.append(
                GraphQLError(
                    str(result),
                    path=info.path.as_list(),
                    original_error=result,
                )
            )
        elif isinstance(result, BaseException):
            raise result
        else:
            gpus.extend(result)
    return gpus


@strawberry.type(
    description="Entry points into the graph. Until the server has loaded the cluster's "
    "pods and nodes, every field but cacheStatus and viewer fails with the error code NOT_READY."
)
class Query:
    @strawberry.field(
        description="How current the server's cache of pods and nodes is (also before it "
        "has loaded). Reveals no cluster objects, so every caller may read it."
    )
    def cache_status(self, info: Info) -> CacheStatus:
        return CacheStatus.of(context_of(info).cluster)

    @strawberry.field(
        description="Who is asking: the caller as the server authenticated it (also before "
        "the cache has loaded). Reveals only the caller's own name, so every caller may read it."
    )
    def viewer(self, info: Info) -> Identity:
        return Identity(username=identity_of(context_of(info).viewer))

    @strawberry.field(description="A node by name; null when not in the cluster.")
    def node(self, info: Info, name: str) -> Node | None:
        record = ready_context(info).cluster.node(name)
        return None if record is None else Node.from_record(record)

    @strawberry.field(description="Every node, sorted by name.")
    def nodes(self, info: Info) -> list[Node]:
        ctx = ready_context(info)
        records = ctx.cluster.nodes()
        ctx.charge(len(records))
        return [Node.from_record(r) for r in records]

    @strawberry.field(description="A pod by namespace and name; null when not in the cluster.")
    def pod(self, info: Info, namespace: str, name: str) -> Pod | None:
        record = ready_context(info).cluster.pod(namespace, name)
        return None if record is None else Pod.from_record(record)

    @strawberry.field(
        description="Pods, optionally filtered by namespace, node and a Kubernetes label "
        'selector such as "app=x,tier!=db,env in (a,b),!canary".'
    )
    def pods(
        self,
        info: Info,
        namespace: str | None = None,
        node_name: str | None = None,
        label_selector: str | None = None,
    ) -> list[Pod]:
        ctx = ready_context(info)
        selector = parse_label_selector(label_selector) if label_selector else None
        records = ctx.cluster.pods(namespace=namespace, node_name=node_name)
        if selector is not None:
            records = [r for r in records if selector.matches(r.labels)]
        ctx.charge(len(records))
        return [Pod.from_record(r) for r in records]

    @strawberry.field(description="A GPU by UUID, on any node; null when no node has it.")
    async def gpu(self, info: Info, uuid: str) -> Gpu | None:
        return await ready_context(info).gpu(uuid)

    @strawberry.field(
        description="GPUs of one node, or of every node. Nodes whose agent cannot answer "
        "are left out and named in the response's errors; a nodeName the caller cannot see "
        "(or no node has) is the error NOT_FOUND."
    )
    async def gpus(self, info: Info, node_name: str | None = None) -> list[Gpu]:
        ctx = ready_context(info)
        gpus = await gpus_of_nodes(ctx, info, named_nodes(ctx, node_name))
        ctx.charge(len(gpus))
        return gpus

    @strawberry.field(
        description="Processes on GPUs, optionally only those of pods in a namespace and on "
        "one node. Nodes whose agent cannot answer are named in the response's errors; a "
        "nodeName the caller cannot see (or no node has) is the error NOT_FOUND."
    )
    async def gpu_processes(
        self, info: Info, namespace: str | None = None, node_name: str | None = None
    ) -> list[GpuProcess]:
        ctx = ready_context(info)
        cluster = ctx.cluster
        names = named_nodes(ctx, node_name)
        if namespace is not None:
            # Only nodes running pods of that namespace can have its processes.
            names = sorted(
                {p.node_name for p in cluster.pods(namespace=namespace) if p.node_name} & set(names)
            )
        gpus = await gpus_of_nodes(ctx, info, names)
        processes = [p for g in gpus for p in g.processes]
        if namespace is not None:
            processes = [p for p in processes if p.pod is not None and p.pod.namespace == namespace]
        ctx.charge(len(processes))
        return processes

    @strawberry.field(
        description="Who held which GPU between since and until (default: now), across nodes, "
        "oldest first, as a Relay connection: one record per process lifetime, kept after the "
        "pod is gone. Filter by the pod's namespace and name (as recorded) and by node. "
        f"first: 1 to {MAX_FIRST} (default {DEFAULT_FIRST}). Nodes whose agent cannot answer "
        "are named in the response's errors and skipped."
    )
    async def gpu_history(
        self,
        info: Info,
        since: datetime.datetime,
        until: datetime.datetime | None = None,
        namespace: str | None = None,
        node_name: str | None = None,
        pod_name: str | None = None,
        first: int | None = None,
        after: str | None = None,
    ) -> GpuHistoryConnection:
        ctx = ready_context(info)
        count = DEFAULT_FIRST if first is None else first
        if not 1 <= count <= MAX_FIRST:
            raise GraphUserError(f"first must be between 1 and {MAX_FIRST}")
        span = window(since, until)
        start = Position.decode(after)
        # The agents read only what the caller may see: a pod name of another tenant's
        # answers as one that does not exist, with no record counted or positioned.
        namespaces = agent_namespaces(ctx.cluster.owner_namespaces(namespace))
        if namespaces is None:
            # Nothing the caller may see (as for a namespace that does not exist).
            nothing = PageInfo(
                has_next_page=False, has_previous_page=False, start_cursor=None, end_cursor=None
            )
            return GpuHistoryConnection(edges=[], page_info=nothing)
        source = history_source(ctx)
        query = HistoryQuery(
            since=span.since,
            until=span.until,
            namespaces=namespaces,
            pod_names=(pod_name,) if pod_name is not None else (),
        )
        await ctx.pace()
        page = await connection_page(
            source, history_nodes(ctx, node_name), query, first=count, after=start,
            named=ctx.cluster.sees_node,
        )  # fmt: skip
        ctx.partial_errors.extend(partial(info.path.as_list(), page.errors))
        shown, _ = ctx.cluster.split_owned(page.records, owner_of)
        visible = {id(o) for o in shown}
        edges = [
            GpuHistoryEdge(node=GpuOccupancy.of(o.record, o.node_name), page=page, index=i)
            for i, o in enumerate(page.records)
            if id(o) in visible
        ]
        ctx.charge(len(edges))
        return GpuHistoryConnection(
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next_page,
                has_previous_page=after is not None,
                start_cursor=after,
                end_cursor=page.end_cursor,
            ),
        )

    @strawberry.field(
        description="GPU-seconds and GiB-seconds of GPU memory between since and until "
        "(default: now), summed by the agents and grouped by groupBy (none: one total row), "
        "for chargeback. Largest first."
    )
    async def gpu_usage(
        self,
        info: Info,
        since: datetime.datetime,
        until: datetime.datetime | None = None,
        group_by: list[UsageGroupBy] | None = None,
    ) -> list[GpuUsageRow]:
        ctx = ready_context(info)
        span = window(since, until)
        end = span.until if span.until is not None else time.time()
        if end <= span.since:
            return []
        view = ctx.cluster
        # Summed by the agents over the caller's records only, as gpuHistory reads them.
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
            source, history_nodes(ctx, None), query, named=view.sees_node, visible=visible
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
            )
            for row in rows
        ]
