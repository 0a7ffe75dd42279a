"""GPU use per pod as Prometheus series, from the snapshots GraphQL reads."""

from .exporter import GpuMetricsExporter, is_gpu_node

__all__ = ["GpuMetricsExporter", "is_gpu_node"]
