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
# select with what they requested: on a large cluster that list is most of the answer.
SNAPSHOT = (
    """
query Top($node: String, $namespace: String, $selector: String, $withPods: Boolean!) {
  gpus(nodeName: $node) { ...TopGpu }
  nodes { name agent { reachable error } }
  pods(nodeName: $node, namespace: $namespace, labelSelector: $selector)
    @include(if: $withPods) {
    uid namespace name nodeName gpuRequest
  }
}
"""
    + GPU_FIELDS
)

# The pods holding a GPU idle, for top pods and namespaces: a tenant does not see a GPU
# its pods run nothing on, so the GPUs' own allocations miss its idle ones. A query of
# its own: in Top's, its worst-case size (every allocation of every GPU) would have
# the server refuse the whole view on a large cluster.
IDLE = """
query TopIdle($node: String, $namespace: String) {
  idleGpuAllocations(nodeName: $node, namespace: $namespace) {
    nodeName pod { uid namespace name gpuRequest }
  }
}
"""

WATCH = (
    """
subscription TopWatch($node: String, $interval: Float) {
  gpuUpdates(nodeName: $node, intervalSeconds: $interval) { ...TopGpu }
}
"""
    + GPU_FIELDS
)
