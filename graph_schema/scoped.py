"""The domain filter: which pods, nodes, GPUs and processes a scope may see.

The graph objects built from a snapshot (``views``) are shared by every
caller; a restricted caller gets copies with other tenants' processes
withheld. Their memory still counts in the GPU's totals, and the copy says
how much it hides, so a tenant learns that a GPU is shared but not by whom.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from .interfaces import Cluster
from .records import NodeRecord, PodRecord
from .scalars import Bytes
from .scope import Scope
from .types import Gpu, GpuProcess

__all__ = ["scoped_gpus", "visible_node_names", "visible_pods"]


def visible_pods(scope: Scope, records: Iterable[PodRecord]) -> list[PodRecord]:
    """The records among ``records`` whose namespace the scope sees."""
    if scope.all_pods:
        return list(records)
    namespaces = scope.pod_namespaces
    return [r for r in records if r.namespace in namespaces]


def visible_node_names(scope: Scope, cluster: Cluster) -> frozenset[str] | None:
    """The nodes the scope sees; None for every node.

    Without ``list nodes`` a caller sees the nodes that run one of its pods
    (its processes run in its pods, so on those nodes too).
    """
    if scope.all_nodes:
        return None
    if scope.all_pods:
        return frozenset(p.node_name for p in cluster.pods() if p.node_name)
    return frozenset(
        p.node_name
        for namespace in sorted(scope.pod_namespaces)
        for p in cluster.pods(namespace=namespace)
        if p.node_name
    )


def filter_nodes(visible: frozenset[str] | None, nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
    """The node records the visible-node set admits."""
    if visible is None:
        return list(nodes)
    return [n for n in nodes if n.name in visible]


def _visible(scope: Scope, process: GpuProcess) -> bool:
    pod = process.pod
    if pod is None:
        return scope.all_pods
    return scope.sees_namespace(pod.namespace)


def scope_gpu(scope: Scope, gpu: Gpu) -> Gpu | None:
    """A copy of ``gpu`` as ``scope`` sees it; None when the scope may not see the GPU."""
    shown = [p for p in gpu.processes if _visible(scope, p)]
    if not shown and not scope.all_nodes:
        return None
    hidden = [p for p in gpu.processes if not _visible(scope, p)]
    processes: list[GpuProcess] = []
    hidden_memory = Bytes(sum(int(p.used_memory_bytes or 0) for p in hidden))
    copy = replace(gpu, processes=processes, hidden_process_count=len(hidden))
    copy.hidden_memory_bytes = hidden_memory
    for p in shown:
        namespace = None if p.pod is None else p.pod.namespace
        cmdline = p.cmdline if scope.sees_cmdline(namespace) else None
        # The copy's processes point at the copy, so ``gpu { processes }`` stays scoped.
        processes.append(replace(p, gpu=copy, cmdline=cmdline))
    return copy


def scoped_gpus(scope: Scope, gpus: list[Gpu]) -> list[Gpu]:
    """The GPUs of one node as ``scope`` sees them (the shared objects when unrestricted)."""
    if scope.unrestricted:
        return gpus
    scoped = (scope_gpu(scope, g) for g in gpus)
    return [g for g in scoped if g is not None]
