"""The GraphQL documents the cluster map sends: only the fields it draws.

Declared here, once, and handed to the page in its configuration, so the
cost admission's test measures exactly what the browser sends.
"""

from __future__ import annotations

__all__ = [
    "EVENTS_QUERY",
    "GPU_DETAILS_QUERY",
    "GPU_FIELDS",
    "GPU_QUERY",
    "HISTORY_QUERY",
    "IDLE_QUERY",
    "LIVE_SUBSCRIPTION",
    "SNAPSHOT_QUERY",
    "TILE_FIELDS",
]

# One GPU as its tile, the pods list and the filters draw it: the first
# picture asks for no more, so 8,000 GPUs cost the server and the page less.
TILE_FIELDS = """\
fragment MapTile on Gpu {
  uuid
  index
  memoryTotalBytes
  memoryUsedBytes
  utilizationGpu
  temperatureC
  migEnabled
  error
  hiddenProcessCount
  hiddenMemoryBytes
  processes {
    usedMemoryBytes
    allocation
    pod { namespace name gpuRequest }
  }
}
"""

# One GPU as its tile and its details draw it (the details add its name, and
# each process's PID, SM share and container): every tick carries it, and the
# details of a GPU opened before the first tick ask for it (GPU_DETAILS_QUERY).
# Spelled out rather than spreading MapTile: the cost estimate counts a list
# selected twice twice.
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

# Every node with its GPUs' tiles: the first picture, and again when the set of
# GPUs changes (a node joins, or its agent comes back); and who the caller is,
# for the header's "Signed in as". A node whose agent is down or failing has
# null GPUs and an error at their path saying why, as in the ticks: its
# ``agent`` is not asked as well, which would be a second field per node that
# waits for the agent (at 1,000 nodes, most of the query's cost).
SNAPSHOT_QUERY = (
    """\
query ClusterMap {
  viewer { username }
  nodes {
    name
    gpuCapacity
    gpus { ...MapTile }
  }
}
"""
    + TILE_FIELDS
)

# One GPU's details, for a GPU selected before the first tick brought them.
GPU_DETAILS_QUERY = (
    """\
query MapGpuDetails($uuid: String!) {
  gpu(uuid: $uuid) { ...MapGpu }
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

# Every GPU's health events of the last day, for the tiles' badges and the panels' lists.
EVENTS_QUERY = """\
query MapGpuEvents($since: DateTime!) {
  gpuEvents(since: $since, first: 1000) {
    edges {
      node {
        time
        kind
        xid
        description
        gpu { uuid }
        culprit { pid podNamespace podName }
        processes { pid podNamespace podName }
        hiddenProcessCount
      }
    }
  }
}
"""


# Every allocation left idle (IDLE or UNUSED), for the tiles' marker and the panel's
# "since when": a document of its own (the ticks do not carry allocations), asked with
# the first picture and once a minute.
IDLE_QUERY = """\
query MapIdle {
  idleGpuAllocations { gpuUuid use idleSince idleSeconds pod { namespace name } }
}
"""
