"""The Kubernetes side of the server: a watched, indexed cache of pods and nodes.

``ClusterCache`` holds slim records and answers the graph's lookups;
``ClusterWatcher`` fills it with paginated lists and keeps it current with
watches; ``load_kube_config`` finds the API server. The fake API server used
by tests, the demo and the benchmarks lives in ``api.demo.cluster.apiserver``.
"""

from .cache import CacheStats, ChangeListener, ClusterCache, WatchStats
from .config import KubeConfigError, default_kubeconfig_path, load_kube_config
from .parse import ParseError, node_record, pod_record, strip_runtime_prefix
from .reflector import Reflector, WatchError, node_kind, pod_kind
from .watcher import ClusterWatcher

__all__ = [
    "CacheStats",
    "ChangeListener",
    "ClusterCache",
    "ClusterWatcher",
    "KubeConfigError",
    "ParseError",
    "Reflector",
    "WatchError",
    "WatchStats",
    "default_kubeconfig_path",
    "load_kube_config",
    "node_kind",
    "node_record",
    "pod_kind",
    "pod_record",
    "strip_runtime_prefix",
]
