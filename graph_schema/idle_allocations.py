"""Query.idleGpuAllocations: the GPUs the kubelet gave containers that leave them idle.

The list an operator asks for: every allocation its node's agent now judges
IDLE or UNUSED, longest idle first. The agents judge (they see every scan);
the server reads the verdicts from each node's snapshot through the
allocation join (``allocation_join``), shows the caller's share through the
seam (``split_owned``), and names nodes whose agent did not answer in the
response's errors rather than leaving their allocations out silently.
"""

from __future__ import annotations

import asyncio
import math

from graphql import GraphQLError
from strawberry.types import Info

from .allocation_join import IDLE_USES, AllocationTable, owner
from .errors import BadUserInputError, check_name, named_nodes
from .types import GpuAllocation, ready_context

__all__ = ["idle_gpu_allocations", "idle_order"]


def idle_order(allocation: GpuAllocation) -> tuple[float, str, str, str, str, str]:
    """Longest idle first, then by node, pod and device, so the order is stable."""
    record = allocation.record
    idle = record.use.idle_seconds if record.use is not None else 0.0
    return (
        -idle,
        allocation.node_name,
        record.namespace,
        record.pod,
        record.container or "",
        record.device_id,
    )


async def idle_gpu_allocations(
    info: Info,
    min_idle_seconds: float | None = None,
    namespace: str | None = None,
    node_name: str | None = None,
) -> list[GpuAllocation]:
    """Every allocation now IDLE or UNUSED that the caller may see, longest idle first."""
    ctx = ready_context(info)
    if min_idle_seconds is not None and not (
        math.isfinite(min_idle_seconds) and min_idle_seconds >= 0
    ):
        raise BadUserInputError("minIdleSeconds must be a finite number of seconds, 0 or more")
    check_name("namespace", namespace)
    least = min_idle_seconds or 0.0
    cluster = ctx.cluster
    names = named_nodes(cluster, node_name)
    if namespace is not None:
        # Only nodes running pods of that namespace can hold its allocations.
        hosting = {p.node_name for p in cluster.pods(namespace=namespace) if p.node_name}
        names = [n for n in names if n in hosting]

    async def table(name: str) -> AllocationTable:
        # The snapshot first, so an agent that did not answer is an error, not no allocations.
        await ctx.snapshot(name)
        return await ctx.allocations(name)

    results = await asyncio.gather(*(table(n) for n in names), return_exceptions=True)
    found: list[GpuAllocation] = []
    for name, result in zip(names, results, strict=True):
        if isinstance(result, Exception):
            ctx.partial_errors.append(
                GraphQLError(str(result), path=info.path.as_list(), original_error=result)
            )
            continue
        if isinstance(result, BaseException):
            raise result
        idle = [
            a
            for a in result.listed()
            if a.is_gpu
            and a.use is not None
            and a.use.use in IDLE_USES
            and a.use.idle_seconds >= least
            and (namespace is None or a.namespace == namespace)
        ]
        shown, _ = cluster.split_owned(idle, owner)
        found.extend(GpuAllocation.of(a, name) for a in shown)
    found.sort(key=idle_order)
    ctx.charge(len(found))
    return found
