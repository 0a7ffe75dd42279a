"""GPU use per pod as Prometheus series, from the snapshots GraphQL reads."""

from .exporter import GpuMetricsExporter

__all__ = ["GpuMetricsExporter"]
