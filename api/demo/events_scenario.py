"""The demo's GPU health events: an XID blamed on one pod's process, and a GPU lost.

Every agent records GPU events as deployed agents do (``NodeGpuEvents``, into
its occupancy log), reading a kernel log file of its own in /dev/kmsg's
record format. Once the server is up and has told the agents the pods' names:

- the first node's driver writes NVIDIA's XID 13 message for its shared GPU,
  blaming the second inference replica's process: the event names both
  replicas on the GPU and the culprit;
- the third node's last GPU falls off the bus (NVML answers GPU_IS_LOST):
  the event names the pod that was on it. It is back once its agent has
  recorded the loss, before the demo says it is ready, so the demo's other
  examples still find every GPU.

The demo's GPUs come from the fake NVML file, which has no NVML event API: the
XID arrives through the kernel log alone, each GPU's PCI address as the fake
would number it (``bus_id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_resolver.gpu_events.kernel_log import pci_key
from node_resolver.gpu_events.node_events import NodeGpuEvents
from node_resolver.gpu_events.nvml_events import GpuAddress
from node_resolver.history.log import HistoryLog
from node_resolver.pod_names import PodNames

from .scenario import DemoCluster, DemoNode

__all__ = [
    "EVENTS_QUERY",
    "KERNEL_LOG",
    "LOST",
    "blamed_process",
    "bus_id",
    "kernel_xid_line",
    "lost_gpu",
    "mark_lost",
    "node_events",
]

# Each agent's kernel log, in its node's directory.
KERNEL_LOG = "kmsg"
# NVML's answer for a GPU that fell off the bus.
LOST = "GPU_IS_LOST"
# (node index, GPU index) of the GPU that is lost.
LOST_GPU = (2, -1)

EVENTS_QUERY = """\
# What went wrong on which GPU since {since}, and whose job did it hit?
query GpuEvents {{
  gpuEvents(since: "{since}") {{
    edges {{
      node {{
        time
        kind
        xid
        description
        gpu {{ uuid }}
        node {{ name }}
        culprit {{ pid processName podNamespace podName }}
        processes {{ pid podNamespace podName allocation }}
        hiddenProcessCount
      }}
    }}
  }}
}}"""


def bus_id(index: int) -> str:
    """The PCI bus ID of a demo node's GPU ``index``, as NVML writes them."""
    return f"00000000:{0x3B + index:02X}:00.0"


def _kernel_pci(index: int) -> str:
    # The kernel's form of the same address: "0000:3b:00".
    return f"0000:{0x3B + index:02x}:00"


def node_events(
    node: DemoNode, workdir: Path, pod_names: PodNames, history: HistoryLog, boot_id: str
) -> NodeGpuEvents:
    """The node's event recorder, reading the node's kernel log (made empty here)."""
    kernel_log = workdir / KERNEL_LOG
    kernel_log.write_text("")
    by_pci: dict[tuple[int, int, int], GpuAddress] = {}
    for gpu in node.gpus:
        key = pci_key(bus_id(gpu.index))
        assert key is not None
        by_pci[key] = GpuAddress(gpu.uuid, bus_id(gpu.index))
    return NodeGpuEvents(
        node_name=node.name,
        pod_names=pod_names,
        nvml=None,
        kernel_log=str(kernel_log),
        sink=history.add_events,
        boot_id=boot_id,
        gpus_by_pci=lambda: by_pci,
    )


def blamed_process(cluster: DemoCluster) -> tuple[DemoNode, int, int, str]:
    """(node, GPU index, PID, process name) of the process the XID is blamed on: the last
    process on the shared GPU (the second inference replica)."""
    node_name, uuid = cluster.shared_gpu
    node = next(n for n in cluster.nodes if n.name == node_name)
    gpu = next(g for g in node.gpus if g.uuid == uuid)
    process = [p for p in node.processes if p.gpu_index == gpu.index and p.pod_uid][-1]
    return node, gpu.index, process.pid, process.comm


def kernel_xid_line(gpu_index: int, pid: int, name: str, sequence: int) -> str:
    """NVIDIA's XID 13 message as /dev/kmsg hands it out: PRI,SEQ,USEC,FLAGS;MESSAGE."""
    message = (
        f"NVRM: Xid (PCI:{_kernel_pci(gpu_index)}): 13, pid={pid}, name={name}, "
        "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 1): Out Of Range Address"
    )
    return f"3,{sequence},{sequence * 1000},-;{message}\n"


def lost_gpu(cluster: DemoCluster) -> tuple[str, str] | None:
    """(node, GPU UUID) of the GPU that is lost; None in a cluster too small for it."""
    node_index, gpu_index = LOST_GPU
    if len(cluster.nodes) <= node_index or not cluster.nodes[node_index].agent_up:
        return None
    node = cluster.nodes[node_index]
    return node.name, node.gpus[gpu_index].uuid


def mark_lost(document: dict[str, Any], uuid: str) -> None:
    """Make GPU ``uuid`` of a fake NVML document answer GPU_IS_LOST."""
    for gpu in document["gpus"]:
        if gpu["uuid"] == uuid:
            gpu["error"] = LOST
