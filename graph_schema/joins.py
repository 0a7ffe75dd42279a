"""PID -> pod: the join of an agent's process (pod UID, container ID) to a cached pod."""

from __future__ import annotations

from .interfaces import Cluster
from .records import PodRecord

__all__ = ["join_pod"]


def join_pod(cluster: Cluster, pod_uid: str | None, container_id: str | None) -> PodRecord | None:
    """The cached pod a process belongs to: by the pod UID of its cgroup path, else container ID.

    The pod UID in the path is kubelet's, and a process cannot leave its pod's
    cgroup; the container ID is only the innermost name on the path, which a
    process able to create cgroups can borrow from another pod. So the pod UID
    wins, and when the container ID belongs to a different pod the process is
    reported as its own (outer) pod, or as no pod if that one is not cached,
    never as the pod whose ID it borrowed. The container ID alone places a
    process only when its path names no pod.
    """
    by_container = cluster.pod_by_container_id(container_id) if container_id else None
    if not pod_uid:
        return by_container
    pod = cluster.pod_by_uid(pod_uid)
    if pod is not None or by_container is None or by_container.uid != pod_uid:
        return pod
    return by_container
