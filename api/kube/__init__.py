"""The Kubernetes side of the server: a watched, indexed cache of pods and nodes.

``ClusterCache`` holds slim records and answers the graph's lookups;
``ClusterWatcher`` fills it with paginated lists and keeps it current with
watches; ``load_kube_config`` finds the API server. The fake API server used
by tests, the demo and the benchmarks lives in ``api.demo.cluster.apiserver``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
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

# Loaded on first use: ``gpugraph top`` reads a kubeconfig (``config``) without
# paying for the cache, the reflector and the graph they import.
_EXPORTS = {
    **dict.fromkeys(("CacheStats", "ChangeListener", "ClusterCache", "WatchStats"), ".cache"),
    **dict.fromkeys(("KubeConfigError", "default_kubeconfig_path", "load_kube_config"), ".config"),
    **dict.fromkeys(("ParseError", "node_record", "pod_record", "strip_runtime_prefix"), ".parse"),
    **dict.fromkeys(("Reflector", "WatchError", "node_kind", "pod_kind"), ".reflector"),
    "ClusterWatcher": ".watcher",
}

__getattr__ = lazy_exports(globals(), _EXPORTS)
