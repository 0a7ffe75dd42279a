"""PID -> pod: the join of an agent's process (pod UID, container ID) to a cached pod."""

from __future__ import annotations

from dataclasses import dataclass

from .interfaces import Cluster
from .records import PodRecord

__all__ = ["Joined", "NodeJoin", "join_pod", "join_process"]


@dataclass(frozen=True, slots=True)
class Joined:
    """A process's pod on its node, or why it has none there."""

    pod: PodRecord | None
    # The pod the process names, bound to another node than the one that reported
    # it: never its pod (anything able to create cgroups could name any pod).
    elsewhere: PodRecord | None = None


def join_process(
    cluster: Cluster, node_name: str, pod_uid: str | None, container_id: str | None
) -> Joined:
    """The cached pod a process on ``node_name`` belongs to, by its cgroup path.

    The pod UID of the path wins over the container ID, and the container ID
    alone places a process only when its path names no pod (see ``_named_pod``).
    The pod must be bound to ``node_name``, the node whose agent reported the
    process: a process on one node whose cgroup names a pod on another is
    that pod's on no node, so one node cannot frame a tenant on another.
    """
    pod = _named_pod(cluster, pod_uid, container_id)
    if pod is None or pod.node_name == node_name:
        return Joined(pod)
    return Joined(None, elsewhere=pod)


def join_pod(
    cluster: Cluster, node_name: str, pod_uid: str | None, container_id: str | None
) -> PodRecord | None:
    """The cached pod, bound to ``node_name``, that a process there belongs to (or None)."""
    return join_process(cluster, node_name, pod_uid, container_id).pod


class NodeJoin:
    """``join_pod`` for many processes of one node, from one listing of the pods bound to it.

    A process whose cgroup path names its pod UID (every process in a pod)
    joins by a dict lookup among that node's pods, with no lock taken on the
    cache per process. UIDs are unique in a cluster, so the pod bound to the
    node with that UID is exactly the one ``join_pod`` finds. The rare process
    with a container ID and no pod UID takes ``join_pod`` itself.
    """

    __slots__ = ("_by_uid", "cluster", "node_name")

    def __init__(self, cluster: Cluster, node_name: str) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self._by_uid = {pod.uid: pod for pod in cluster.pods(node_name=node_name)}

    def pod(self, pod_uid: str | None, container_id: str | None) -> PodRecord | None:
        """The cached pod, bound to this node, that a process there belongs to (or None)."""
        if pod_uid:
            return self._by_uid.get(pod_uid)
        if not container_id:
            return None
        return join_pod(self.cluster, self.node_name, None, container_id)

    def elsewhere(self, pod_uid: str | None, container_id: str | None) -> bool:
        """Whether a process that joins no pod here names a pod bound to another node."""
        return (
            join_process(self.cluster, self.node_name, pod_uid, container_id).elsewhere is not None
        )


def _named_pod(cluster: Cluster, pod_uid: str | None, container_id: str | None) -> PodRecord | None:
    """The cached pod a process's cgroup path names: by its pod UID, else its container ID.

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
