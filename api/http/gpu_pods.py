"""``GET /gpu-pods``: the original design's GetGpuPods call, kept for its users.

Given a worker pod's name, it answers for the node that pod runs on, in the
original ``GetGpuPodsResponse`` shape::

    {"GpuPods":  {uuid: {"pidPods": [{"pid", "processName", "UsedGpuMemory", "pod",
                                      "allocation"}]}},
     "GpuInfos": {uuid: {"uuid", "gpuName", "usageGpu",
                         "allocations": [{"namespace", "pod", "container", "deviceId",
                                          "use", "idleSince", "idleSeconds"}]}}}

As in the original, ``GpuPods`` lists only processes that belong to a pod in
the cache (host processes and processes of vanished pods are left out; the
GraphQL API shows those), ``pod`` is the pod's name, and ``UsedGpuMemory`` is
in MiB, rounded down, as an integer. ``GpuInfos`` has every GPU of the node.
``allocation`` (added) is the allocation verdict GraphQL's
``GpuProcess.allocation`` gives: ALLOCATED, NOT_ALLOCATED or UNKNOWN.
``allocations`` (added, in ``GpuInfos``) lists the devices on the GPU the
kubelet gave the caller's visible pods, each with how its holder uses it, as
GraphQL's ``GpuAllocation`` says: ``use`` (ACTIVE, IDLE, UNUSED or UNKNOWN),
``idleSince`` (ISO time, or null) and ``idleSeconds``.
Values the GPU could not report are ``null`` rather than a misleading zero.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import Response

from graph_schema.allocation_join import owner, use_shown
from graph_schema.errors import NodeSampleError
from graph_schema.interfaces import AgentUnavailableError, ClusterView, SnapshotSource
from graph_schema.types import Gpu
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster

from .responses import json_response

__all__ = ["gpu_pods_endpoint", "gpu_pods_response"]

MIB = 1024 * 1024
# The query parameters /gpu-pods reads, each at most once.
_PARAMETERS = ("worker_id", "namespace")


def _error(status: int, message: str, **details: object) -> Response:
    return json_response(status, {"error": message, **details})


def _allocations(gpu: Gpu, view: ClusterView) -> list[dict[str, object]]:
    """The GPU's allocations the caller may see, each with its holder's use."""
    table = gpu.allocations_of_node
    held = [a for a in table.get().for_gpu(gpu.uuid) if a.is_gpu] if table is not None else []
    shown, _ = view.split_owned(held, owner)
    out: list[dict[str, object]] = []
    for a in shown:
        use, since, idle = use_shown(a)
        out.append(
            {
                "namespace": a.namespace,
                "pod": a.pod,
                "container": a.container,
                "deviceId": a.device_id,
                "use": use.value,
                "idleSince": None
                if since is None
                else datetime.datetime.fromtimestamp(since, datetime.UTC).isoformat(),
                "idleSeconds": idle,
            }
        )
    return out


def gpu_pods_response(gpus: Sequence[Gpu], view: ClusterView) -> dict[str, object]:
    """The original ``GetGpuPodsResponse`` JSON of a node's GPUs as the caller sees them.

    ``gpus`` come from ``ViewCache.visible_gpus``: joined, judged and filtered
    as GraphQL's are, so a caller without ``list nodes`` gets only the GPUs
    running or given to one of its pods; ``view`` (the same caller's) filters their
    allocations.
    """
    gpu_pods: dict[str, dict[str, list[dict[str, object]]]] = {}
    gpu_infos: dict[str, dict[str, object]] = {}
    for gpu in gpus:
        gpu_infos[gpu.uuid] = {
            "uuid": gpu.uuid,
            "gpuName": gpu.name,
            "usageGpu": gpu.utilization_gpu,
            "allocations": _allocations(gpu, view),
        }
        entries: list[dict[str, object]] = []
        for process in gpu.processes:
            pod = process.pod
            if pod is None:
                continue
            used = process.used_memory_bytes
            entries.append(
                {
                    "pid": process.pid,
                    "processName": process.name,
                    "UsedGpuMemory": None if used is None else used // MIB,
                    "pod": pod.name,
                    "allocation": process.allocation().value,
                }
            )
        if entries:
            gpu_pods[gpu.uuid] = {"pidPods": entries}
    return {"GpuPods": gpu_pods, "GpuInfos": gpu_infos}


def gpu_pods_endpoint(
    snapshots: SnapshotSource,
    view_of: Callable[[Request], VisibleCluster],
    views: ViewCache,
    *,
    timeout: float = 10.0,
) -> Callable[[Request], Awaitable[Response]]:
    """The ``/gpu-pods`` endpoint over a snapshot source and the graph objects built from it.

    ``view_of`` gives the request's caller's view of the cluster cache; a pod
    it may not see is answered like one that does not exist.
    """

    async def gpu_pods(request: Request) -> Response:
        cluster = view_of(request)
        for name in _PARAMETERS:
            given = len(request.query_params.getlist(name))
            if given > 1:
                # Not the last one silently: which pod was meant is the caller's to say.
                return _error(400, f"query parameter {name} given {given} times; give it once")
        worker_id = request.query_params.get("worker_id", "").strip()
        if not worker_id:
            return _error(400, "missing query parameter worker_id (the worker pod's name)")
        if not cluster.ready:
            # Not 404: the pod may well exist, the cache just has not seen it yet.
            return _error(
                503, "the server is still loading the cluster's pods and nodes; try again shortly"
            )
        namespace = request.query_params.get("namespace", "").strip() or None
        if namespace is not None:
            pod = cluster.pod(namespace, worker_id)
            if pod is None:
                return _error(404, f"pod {namespace}/{worker_id} not found")
        else:
            matches = cluster.pods_named(worker_id)
            if not matches:
                return _error(404, f"no pod named {worker_id!r} in any namespace")
            if len(matches) > 1:
                namespaces = sorted(p.namespace for p in matches)
                return _error(
                    400,
                    f"pod name {worker_id!r} exists in several namespaces "
                    f"({', '.join(namespaces)}); add &namespace=NS",
                    namespaces=namespaces,
                )
            pod = matches[0]
        if not pod.node_name:
            return _error(404, f"pod {pod.namespace}/{pod.name} is not scheduled to a node yet")
        try:
            received = await asyncio.wait_for(snapshots.fetch(pod.node_name), timeout)
        except AgentUnavailableError as exc:
            return _error(502, str(exc), node=pod.node_name)
        except TimeoutError:
            return _error(
                504,
                f"the agent on node {pod.node_name!r} did not answer in time",
                node=pod.node_name,
            )
        try:
            gpus = views.visible_gpus(cluster, pod.node_name, received.snapshot)
        except NodeSampleError as exc:
            # GraphQL's words for it: "GPU sampling failed on node 'N': <the agent's error>".
            return _error(502, str(exc), node=pod.node_name)
        return json_response(200, gpu_pods_response(gpus, cluster))

    return gpu_pods
