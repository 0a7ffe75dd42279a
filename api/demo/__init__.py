"""``gpugraph demo``: a simulated GPU cluster on loopback, served by the real server."""

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
