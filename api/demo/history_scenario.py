"""The demo's occupancy logs: history on for every agent, with a past worth asking about.

The first node's log is backfilled before its agent starts, so the demo has
history from its first second:

- ``research/lr-sweep-7`` ran on GPU 1 from three hours ago until an hour
  ago and is gone (the API server no longer has it);
- the leftover host process (the scenario's orphan) has sat on GPU 1 for five
  hours: its backfilled record is open, and the agent continues it;

and one pod, ``research/eval-canary``, is deleted while its process keeps
running on the second node's GPU 0, once the server has told the agent its name.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from node_resolver.allocation_use import AllocationJudge
from node_resolver.history.log import HistoryLog, HistorySettings, read_boot_id
from node_resolver.history.records import OccupancyRecord
from node_resolver.history.store import HistoryStore
from node_resolver.pod_names import PodName, PodNames

from .cluster.manifests import make_pod
from .scenario import GIB, RESEARCH_NAMESPACE, DemoCluster, DemoProcess

__all__ = [
    "DELETED_NODE",
    "DELETED_POD",
    "FINISHED_POD",
    "HISTORY_QUERY",
    "RETENTION_SECONDS",
    "backfill",
    "history_log",
    "with_deleted_pod",
]

FINISHED_POD = (RESEARCH_NAMESPACE, "lr-sweep-7")
DELETED_POD = (RESEARCH_NAMESPACE, "eval-canary")
DELETED_PID = 6100
# Which node runs it: the second (the last one's agent is down in the scenario).
DELETED_NODE = 1
FINISHED_PID = 7300
RETENTION_SECONDS = 30 * 86400.0
FLUSH_SECONDS = 1.0
NOTEBOOK_IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"

HISTORY_QUERY = """\
# Who held GPU {uuid} since {since}, and how much? (pod is null once it is gone)
query GpuHistory {{
  gpu(uuid: "{uuid}") {{
    history(since: "{since}") {{
      pid
      processName
      podNamespace
      podName
      pod {{ name }}
      start
      end
      peakMemoryBytes
      meanMemoryBytes
      gpuSeconds
    }}
  }}
}}"""


def with_deleted_pod(cluster: DemoCluster) -> DemoCluster:
    """``cluster`` plus the pod that will be deleted while running, and its process."""
    namespace, name = DELETED_POD
    node = cluster.nodes[DELETED_NODE]
    pod = make_pod(
        name,
        namespace,
        node.name,
        containers=("eval",),
        images=(NOTEBOOK_IMAGE,),
        gpu_limit=1,
        labels={"app": "eval", "owner": "alice"},
        managed_fields=False,
    )
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    process = DemoProcess(
        pid=DELETED_PID,
        comm="python3",
        cmdline=("python3", "eval.py", "--checkpoint", "/ckpt/step-9000"),
        gpu_index=0,
        memory_bytes=9 * GIB,
        sm_utilization=20,
        pod_uid=pod["metadata"]["uid"],
        container_id=container_id,
    )
    nodes = tuple(
        dataclasses.replace(n, processes=(*n.processes, process)) if n is node else n
        for n in cluster.nodes
    )
    return dataclasses.replace(cluster, nodes=nodes, pods=(*cluster.pods, pod))


def deleted_pod_uid(cluster: DemoCluster) -> str:
    """The UID of the pod deleted while running."""
    namespace, name = DELETED_POD
    pod: dict[str, Any] = next(
        p for p in cluster.pods
        if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name)
    )  # fmt: skip
    uid: str = pod["metadata"]["uid"]
    return uid


def history_log(
    workdir: Path,
    proc_root: Path,
    *,
    pod_names: PodNames | None = None,
    allocations: AllocationJudge | None = None,
) -> HistoryLog:
    """An agent's occupancy log in ``workdir/history`` (keeping ``allocations``' records)."""
    settings = HistorySettings(
        workdir / "history", retention_seconds=RETENTION_SECONDS, flush_interval=FLUSH_SECONDS
    )
    return HistoryLog(
        settings,
        boot_id=read_boot_id(str(proc_root)),
        pod_names=pod_names if pod_names is not None else PodNames(),
        allocations=allocations,
    )


def backfill(log: HistoryLog, cluster: DemoCluster, *, now: float | None = None) -> None:
    """Write the first node's past into ``log``'s store (before its agent starts)."""
    now = time.time() if now is None else now
    node = cluster.nodes[0]
    gpu = node.gpus[1].uuid
    namespace, name = FINISHED_POD
    make = make_pod(name, namespace, node.name, containers=("train",), managed_fields=False)
    uid = make["metadata"]["uid"]
    container_id = make["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    finished = OccupancyRecord(
        gpu_uuid=gpu, mig_device_uuid="", pid=FINISHED_PID, start_ticks=3_100_000,
        boot_id=log.tracker.boot_id, first_seen=now - 3 * 3600, last_seen=now - 3600,
        process_name="python", container_id=container_id, pod_uid=uid,
        pod_namespace=namespace, pod_name=name, container_name="train", ended=True,
        peak_memory_bytes=61 * GIB, last_memory_bytes=58 * GIB,
        memory_byte_seconds=2 * 3600 * 54.0 * GIB, memory_seconds=2 * 3600,
        last_sm_utilization=80, sm_percent_seconds=2 * 3600 * 76.0, sm_seconds=2 * 3600,
    )  # fmt: skip
    orphan_pid = cluster.orphan[1]
    orphan = next(p for p in node.processes if p.pid == orphan_pid)
    leftover = OccupancyRecord(
        gpu_uuid=gpu, mig_device_uuid="", pid=orphan_pid, start_ticks=orphan.start_time,
        boot_id=log.tracker.boot_id, first_seen=now - 5 * 3600, last_seen=now - 1,
        process_name=orphan.comm, peak_memory_bytes=orphan.memory_bytes,
        last_memory_bytes=orphan.memory_bytes,
        memory_byte_seconds=(5 * 3600 - 1) * float(orphan.memory_bytes),
        memory_seconds=5 * 3600 - 1, last_sm_utilization=0,
    )  # fmt: skip
    store = HistoryStore(log.settings.directory, max_bytes=log.settings.max_bytes)
    store.open()
    try:
        names = PodName(uid, namespace, name, {container_id: "train"})
        store.write([finished, leftover], [names], now)
    finally:
        store.close()
