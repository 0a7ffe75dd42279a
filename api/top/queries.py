"""The GraphQL documents ``gpugraph top`` sends: public queries and the gpuUpdates subscription."""

from __future__ import annotations

# Every view is built from these fields, in one query or in each subscription tick.
# A process's pod runs on the GPU's node: asking its nodeName again for each of
# 32,000 processes (1,000 nodes) made the answer 8% larger for nothing.
GPU_FIELDS = """
fragment TopGpu on Gpu {
  uuid index name utilizationGpu memoryUsedBytes memoryTotalBytes temperatureC error
  migEnabled
  node { name }
  processes {
    pid name usedMemoryBytes smUtilization allocation
    pod { uid namespace name gpuRequest }
    container { name }
  }
  allocations { use pod { uid namespace name gpuRequest } }
}
"""

# One round trip: the GPUs, every node's agent status (a down agent is a node, not
# a blank) and, when the view needs them (top pods, -l), the pods the filters
# select with what they requested (on a large cluster that list is most of the
# answer) and those holding a GPU idle, which a tenant may not see the GPU of.
SNAPSHOT = (
    """
query Top($node: String, $namespace: String, $selector: String, $withPods: Boolean!) {
  gpus(nodeName: $node) { ...TopGpu }
  nodes { name agent { reachable error } }
  pods(nodeName: $node, namespace: $namespace, labelSelector: $selector)
    @include(if: $withPods) {
    uid namespace name nodeName gpuRequest
  }
  idle: idleGpuAllocations(namespace: $namespace) @include(if: $withPods) {
    nodeName pod { uid namespace name gpuRequest }
  }
}
"""
    + GPU_FIELDS
)

WATCH = (
    """
subscription TopWatch($node: String, $interval: Float) {
  gpuUpdates(nodeName: $node, intervalSeconds: $interval) { ...TopGpu }
}
"""
    + GPU_FIELDS
)
