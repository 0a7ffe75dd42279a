"""The GraphQL documents the cluster map sends: only the fields it draws.

Declared here, once, and handed to the page in its configuration, so the
cost admission's test measures exactly what the browser sends.
"""

from __future__ import annotations

__all__ = ["GPU_FIELDS", "GPU_QUERY", "HISTORY_QUERY", "LIVE_SUBSCRIPTION", "SNAPSHOT_QUERY"]

# One GPU as a tile and its details draw it.
GPU_FIELDS = """\
fragment MapGpu on Gpu {
  uuid
  index
  name
  memoryTotalBytes
  memoryUsedBytes
  utilizationGpu
  temperatureC
  migEnabled
  error
  hiddenProcessCount
  hiddenMemoryBytes
  processes {
    pid
    usedMemoryBytes
    smUtilization
    allocation
    container { name }
    pod { namespace name gpuRequest }
  }
}
"""

# Every node with its agent's state and GPUs: the first picture, and again
# when the set of GPUs changes (a node joins, or its agent comes back); and who
# the caller is, for the header's "Signed in as".
SNAPSHOT_QUERY = (
    """\
query ClusterMap {
  viewer { username }
  nodes {
    name
    gpuCapacity
    agent { reachable error }
    gpus { ...MapGpu }
  }
}
"""
    + GPU_FIELDS
)

# Every tick, every GPU of every node whose agent answered; the nodes that did
# not are named in the tick's errors.
LIVE_SUBSCRIPTION = (
    """\
subscription ClusterMapLive($interval: Float) {
  gpuUpdates(intervalSeconds: $interval) { ...MapGpu }
}
"""
    + GPU_FIELDS
)

# What "Open in GraphiQL" opens for one GPU: the whole walk from it.
GPU_QUERY = """\
query Gpu($uuid: String!) {
  gpu(uuid: $uuid) {
    uuid
    index
    name
    node { name agent { reachable snapshotAgeSeconds } }
    utilizationGpu
    temperatureC
    memoryUsedBytes
    memoryTotalBytes
    migEnabled
    hiddenProcessCount
    hiddenMemoryBytes
    processes {
      pid
      name
      usedMemoryBytes
      smUtilization
      allocation
      container { name image }
      pod { namespace name gpuRequest node { name } }
    }
  }
}
"""

# A GPU's panel: who held it over the last 24 hours (the strip under its details).
HISTORY_QUERY = """\
query GpuHistory($uuid: String!, $since: DateTime!) {
  gpu(uuid: $uuid) {
    uuid
    hiddenHistoryCount(since: $since)
    history(since: $since) {
      pid
      processName
      podNamespace
      podName
      start
      end
    }
  }
}
"""
