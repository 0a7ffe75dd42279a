"""This node's GPU series, labelled with the pod names the server sent (``PutPodNames``).

The agent sees only what a process's cgroup path says: a pod UID and a
container ID. The names come from ``PodNames``, which the server fills from
its watch cache with the pods bound to this node. A process whose pod UID the
table does not hold (not named yet, or a cgroup naming a pod of another node)
keeps its series, labelled with the UID alone and empty names: the UID is
what the node knows, and nothing more is claimed. A process with a container
ID but no pod UID is placed by that ID if a named pod lists it, and otherwise
counts as memory in no pod (``unknown_container``), as host processes and
unreadable PIDs do.

A named container on a GPU the kubelet's PodResources answer says it was not
given gets ``gpugraph_container_gpu_unallocated``, judged as the occupancy log
judges it (``allocation_verdicts.ContainerVerdicts``): only where that answer
decides, so never for a container known by its pod UID alone.

Each allocation the agent judged (``allocation_use``) adds to its
container's allocated and idle GPU-second counters and its idle gauge,
labelled by the kubelet's names, which need no pushed names.

The aggregation is ``containers``' and the series ``families``' (the
server's, names and labels alike). Rendering happens once per snapshot and
name table; each scrape adds only the snapshot's age.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..allocation_verdicts import ContainerVerdicts
from ..models import GpuSample, NodeSnapshot
from ..pod_names import PodName, PodNames
from .containers import ContainerKey, NodeAttribution, unattributed_reason
from .exposition import render_gauges
from .families import GpuSeries

__all__ = ["NODE_REASONS", "NodeSeries", "attribute_on_node"]

# The reasons an agent can tell by itself; whether a cgroup's pod is bound to
# another node only the server's cache knows (such a process keeps its UID).
NODE_REASONS = ("host_process", "unknown_container", "unresolved")


def _by_container(pod_names: PodNames) -> dict[str, PodName]:
    return {cid: pod for pod in pod_names.all() for cid in pod.containers}


def _attribute_gpu(
    gpu: GpuSample,
    pod_names: PodNames,
    by_container: dict[str, PodName],
    verdicts: ContainerVerdicts,
    result: NodeAttribution,
) -> None:
    # As on the server: memory in no pod is only known where every process was listed.
    lost = result.gpu(gpu.index, gpu.uuid, complete=gpu.process_list_complete())
    for process in gpu.processes:
        ref = process.container
        container_id = ref.container_id if ref is not None else ""
        pod_uid = ref.pod_uid if ref is not None else None
        if pod_uid:
            # The pod UID of the cgroup path wins over the container ID, as in the server's join.
            pod = pod_names.get(pod_uid)
        else:
            pod = by_container.get(container_id) if container_id else None
            if pod is None:
                reason = unattributed_reason(
                    in_container=ref is not None, named=process.name is not None
                )
                lost[reason] += process.used_memory_bytes or 0
                continue
            pod_uid = pod.uid
        key = ContainerKey(
            gpu.index,
            gpu.uuid,
            process.mig_device_uuid or "",
            pod.namespace if pod is not None else "",
            pod.name if pod is not None else "",
            pod.containers.get(container_id, "") if pod is not None else "",
            pod_uid,
        )
        if result.add(key, process) and key.container:
            result.judge(key, verdicts.verdict(key.namespace, key.pod, key.container, gpu.uuid))


def attribute_on_node(snapshot: NodeSnapshot, pod_names: PodNames) -> NodeAttribution:
    """Every process of ``snapshot`` by container, named from ``pod_names`` where it can be."""
    result = NodeAttribution(NODE_REASONS)
    by_container = _by_container(pod_names)
    verdicts = ContainerVerdicts(snapshot.allocations)
    for gpu in snapshot.sample.gpus:
        _attribute_gpu(gpu, pod_names, by_container, verdicts, result)
    result.add_allocations(snapshot.allocations)
    return result


class NodeSeries:
    """Renders this node's GPU series from the latest snapshot and the pod names known now."""

    def __init__(
        self,
        latest: Callable[[], NodeSnapshot | None],
        pod_names: PodNames,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._latest = latest
        self._pod_names = pod_names
        self._clock = clock
        self._lock = threading.Lock()
        # (snapshot, name table version) -> its rendered families.
        self._last: tuple[NodeSnapshot, int, bytes] | None = None

    def render(self) -> bytes | None:
        """The exposition text (CPU-bound: call it off the event loop); None before a scan."""
        snapshot = self._latest()
        if snapshot is None:
            return None
        version = self._pod_names.version
        with self._lock:
            last = self._last
            if last is None or last[0] is not snapshot or last[1] != version:
                last = self._last = (snapshot, version, self._render(snapshot))
        age = GpuSeries()
        age.snapshot_age.add_metric(
            [snapshot.node_name], max(0.0, self._clock() - snapshot.sampled_at)
        )
        return last[2] + render_gauges([age.snapshot_age])

    def _render(self, snapshot: NodeSnapshot) -> bytes:
        node = snapshot.node_name
        attributed = attribute_on_node(snapshot, self._pod_names)
        series = GpuSeries()
        series.add_attribution(node, attributed)
        sample = snapshot.sample
        series.add_gpus(node, sample.gpus, sample.driver_version or "", attributed.containers)
        return render_gauges(
            [*series.node_families(), series.unallocated, *series.allocation_families()]
        )
