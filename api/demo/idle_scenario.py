"""The demo's idle allocations: GPUs given to pods that leave them idle, idle since before the demo.

An allocation is IDLE or UNUSED only after a whole idle window (``--idle-after``,
10 minutes) of its holder running nothing. So that the demo shows both from its
first scan, with the agents' own window, the two allocation nodes' logs are
written before their agents start, as an agent that had run for hours would
have left them; each agent continues the open allocation and its idle clock
from its log, as it does after a restart:

- ``research/notebook-bob`` was given the MIG node's whole GPU 1 two hours ago
  and has run nothing on it (``UNUSED``);
- ``inference/embed-3``, a time-sliced replica on GPU 1 of the time-sliced node,
  loaded its model 45 minutes ago and has served nothing since: its process
  holds memory at 0% SM (``IDLE``).

``IDLE_QUERY`` is the query the demo prints: every idle allocation, longest first.
"""

from __future__ import annotations

import time
import uuid

from node_resolver.history.log import HistoryLog
from node_resolver.history.records import AllocationRecord
from node_resolver.history.store import HistoryStore

from .scenario import IDLE_POD, MIG_NODE, SHARED_NODE, UNUSED_POD, DemoCluster, gpu_uuid

__all__ = ["IDLE_QUERY", "backfill_idle"]

IDLE_QUERY = """\
# Which pods hold GPUs they do not use, and since when? (longest idle first)
query IdleGpus {
  idleGpuAllocations {
    nodeName
    pod { namespace name }
    containerName
    resource
    deviceId
    use
    idleSince
    idleSeconds
  }
}"""

# (node, pod, container, resource, device ID, weight, seconds idle, whether its process is there)
_IDLE = {
    MIG_NODE: (UNUSED_POD, "notebook", "nvidia.com/gpu", gpu_uuid(MIG_NODE, 1), 1.0, 2 * 3600.0,
               False),
    SHARED_NODE: (IDLE_POD, "embed", "nvidia.com/gpu.shared", gpu_uuid(SHARED_NODE, 1) + "::1",
                  0.5, 45 * 60.0, True),
}  # fmt: skip


def backfill_idle(log: HistoryLog, node_name: str, cluster: DemoCluster) -> None:
    """Write the idle allocation of ``node_name`` (if it has one) into ``log``'s store, open,
    as the node's agent would have left it (before the agent starts)."""
    found = _IDLE.get(node_name)
    if found is None or not cluster.idle[0]:
        return
    (namespace, pod), container, resource, device_id, weight, idle, present = found
    now = time.time()
    start = now - idle
    record = AllocationRecord(
        key=uuid.uuid4().hex,
        node_name=node_name,
        namespace=namespace,
        pod_name=pod,
        container_name=container,
        resource=resource,
        device_id=device_id,
        boot_id=log.tracker.boot_id,
        first_seen=start,
        last_seen=now - 1,
        gpu_uuid=device_id.partition("::")[0],
        weight=weight,
        quiet_seconds=idle,
        absent_seconds=0.0 if present else idle,
        use="IDLE" if present else "UNUSED",
        idle_start=start,
        idle_end=now - 1,
    )
    store = HistoryStore(log.settings.directory, max_bytes=log.settings.max_bytes)
    store.open()
    try:
        store.write([], [], now, allocations=[record])
    finally:
        store.close()
