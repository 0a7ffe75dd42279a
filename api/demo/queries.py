"""The demo's ready-to-paste example queries, filled in with the demo cluster's names."""

from __future__ import annotations

from .scenario import DemoCluster

__all__ = ["example_queries"]

SHARED_GPU = """\
# Which pods share GPU {uuid}?
query SharedGpu {{
  gpu(uuid: "{uuid}") {{
    index
    name
    node {{ name }}
    utilizationGpu
    memoryUsedBytes
    pods {{ namespace name gpuRequest }}
    processes {{ pid name usedMemoryBytes smUtilization pod {{ name }} }}
  }}
}}"""

NO_POD = """\
# What is using GPU memory on {node}? Processes with pod: null belong to no pod.
query NodeProcesses {{
  gpuProcesses(nodeName: "{node}") {{
    pid
    name
    usedMemoryBytes
    gpu {{ index uuid }}
    containerId
    pod {{ namespace name gpuRequest }}
  }}
}}"""

WORKER = """\
# Everything about worker pod {namespace}/{name}: its node, GPUs and processes.
query Worker {{
  pod(namespace: "{namespace}", name: "{name}") {{
    uid
    phase
    gpuRequest
    node {{ name internalIp driverVersion agent {{ reachable snapshotAgeSeconds }} }}
    containers {{ name image id }}
    gpus {{ index uuid utilizationGpu memoryUsedBytes temperatureC powerUsageWatts }}
    gpuProcesses {{ pid name usedMemoryBytes smUtilization gpu {{ index }} }}
  }}
}}"""


MISALLOCATED = """\
# Pod {namespace}/{name} runs on a GPU the kubelet did not give it (allocation NOT_ALLOCATED).
query Misallocated {{
  pod(namespace: "{namespace}", name: "{name}") {{
    gpuRequest
    gpuAllocations {{ resource deviceId mechanism }}
    gpuProcesses {{ pid gpu {{ index uuid }} allocation allocationRule }}
  }}
}}"""


def example_queries(cluster: DemoCluster) -> list[str]:
    """Example queries about the notable parts of ``cluster``."""
    namespace, name = cluster.worker
    stray_namespace, stray = cluster.misallocated
    return [
        SHARED_GPU.format(uuid=cluster.shared_gpu[1]),
        NO_POD.format(node=cluster.orphan[0]),
        WORKER.format(namespace=namespace, name=name),
        MISALLOCATED.format(namespace=stray_namespace, name=stray),
    ]
