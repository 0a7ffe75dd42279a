"""``gpugraph demo``: a simulated GPU cluster on loopback, served by the real server.

``api.demo.cluster`` is the simulated cluster itself (stub API server, pod and
node manifests, fake ``/proc``); the rest of this package stages a scenario on
it and runs the real server and agents against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .queries import example_queries
    from .runner import DemoConfig, DemoError, add_demo_arguments, run_demo, run_demo_async
    from .scenario import DemoCluster, DemoNode, DemoProcess, build_cluster, gpu_uuid

__all__ = [
    "DemoCluster",
    "DemoConfig",
    "DemoError",
    "DemoNode",
    "DemoProcess",
    "add_demo_arguments",
    "build_cluster",
    "example_queries",
    "gpu_uuid",
    "run_demo",
    "run_demo_async",
]

# Loaded on first use, so that importing the simulated cluster
# (``api.demo.cluster``) does not import the server the runner drives.
_EXPORTS = {
    "example_queries": ".queries",
    "DemoConfig": ".runner",
    "DemoError": ".runner",
    "add_demo_arguments": ".runner",
    "run_demo": ".runner",
    "run_demo_async": ".runner",
    "DemoCluster": ".scenario",
    "DemoNode": ".scenario",
    "DemoProcess": ".scenario",
    "build_cluster": ".scenario",
    "gpu_uuid": ".scenario",
}


__getattr__ = lazy_exports(globals(), _EXPORTS)
