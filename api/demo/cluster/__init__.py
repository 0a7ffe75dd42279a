"""The demo's embedded cluster, also used by the tests and the benchmarks.

What the product fakes, and nothing else: the Kubernetes API server
(``apiserver``), the pod and node manifests it serves (``manifests``,
``synthetic``) and the ``/proc`` trees the agents read (``fake_proc``). The
serving path never imports this package.
"""

from .apiserver import StubApiServer, kubeconfig_for, write_kubeconfig
from .fake_proc import HOST_CGROUP, kubelet_cgroup, remove_process, stat_line, write_process
from .manifests import container_id_for, make_node, make_pod, pod_uid_for
from .synthetic import demo_cluster, demo_nodes, demo_pods

__all__ = [
    "HOST_CGROUP",
    "StubApiServer",
    "container_id_for",
    "demo_cluster",
    "demo_nodes",
    "demo_pods",
    "kubeconfig_for",
    "kubelet_cgroup",
    "make_node",
    "make_pod",
    "pod_uid_for",
    "remove_process",
    "stat_line",
    "write_kubeconfig",
    "write_process",
]
