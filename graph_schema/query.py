"""The Query root: entry points into the graph."""

from __future__ import annotations

import asyncio

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from .cache_status import CacheStatus
from .errors import check_name, named_nodes
from .identity import Identity, identity_of
from .idle_allocations import idle_gpu_allocations
from .occupancy import event_resolvers as event_fields
from .occupancy import resolvers as occupancy
from .operation import Operation
from .selectors import parse_label_selector
from .types import Gpu, GpuAllocation, GpuProcess, Node, Pod, context_of, ready_context


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
        check_name("namespace", namespace)
        selector = parse_label_selector(label_selector) if label_selector else None
        records = ctx.cluster.pods(namespace=namespace, node_name=node_name)
        if not records and node_name is not None:
            # No node of that name, as gpus says, rather than a node that runs nothing.
            named_nodes(ctx.cluster, node_name)
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
        gpus = await gpus_of_nodes(ctx, info, named_nodes(ctx.cluster, node_name))
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
        check_name("namespace", namespace)
        cluster = ctx.cluster
        names = named_nodes(ctx.cluster, node_name)
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
        description="Every GPU allocation (a GPU, MIG device, replica or DRA device the kubelet "
        "gave a container) that its node's agent now judges IDLE or UNUSED, longest idle "
        "first; only those idle at least minIdleSeconds, of pods in namespace, on node "
        "nodeName, when given (one the caller cannot see, or no node has, is NOT_FOUND). "
        "Nodes whose agent cannot answer are named in the response's errors."
    )
    async def idle_gpu_allocations(
        self,
        info: Info,
        min_idle_seconds: float | None = None,
        namespace: str | None = None,
        node_name: str | None = None,
    ) -> list[GpuAllocation]:
        return await idle_gpu_allocations(info, min_idle_seconds, namespace, node_name)

    gpu_history = occupancy.gpu_history_connection
    gpu_usage = occupancy.gpu_usage
    gpu_events = event_fields.gpu_event_connection
