"""GPU health events as Prometheus counters, declared once for the agents' and the server's
``/metrics``: per GPU, and per pod that was on the GPU when the event happened.

A record that stands for several events (a rate-limited storm) counts as
many. Label sets are bounded: past ``MAX_SERIES`` pod series the oldest are
forgotten (a counter that disappears is a reset to Prometheus, which its
``rate`` and ``increase`` handle), so pods that come and go for months do
not grow the agent's memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from .records import GpuEvent

__all__ = [
    "GPU_EVENTS",
    "GPU_EVENT_LABELS",
    "MAX_SERIES",
    "POD_EVENT_LABELS",
    "POD_GPU_EVENTS",
    "GpuEventCounters",
    "event_labels",
]

# The families' names without prometheus_client's "_total", which it appends to counters.
GPU_EVENTS = "gpugraph_gpu_events"
POD_GPU_EVENTS = "gpugraph_pod_gpu_events"
GPU_EVENT_LABELS = ("node", "gpu_uuid", "kind", "xid")
POD_EVENT_LABELS = ("namespace", "pod", "kind", "xid")
GPU_EVENTS_HELP = "GPU health events (XID, ECC, lost GPUs) on a GPU; xid is empty for other kinds"
POD_GPU_EVENTS_HELP = (
    "GPU health events on a GPU (or MIG device) while this pod's processes were on it"
)
MAX_SERIES = 10_000


def event_labels(event: GpuEvent) -> tuple[str, str]:
    """The (kind, xid) label values of an event."""
    return event.kind.value, "" if event.xid is None else str(event.xid)


class GpuEventCounters(Collector):
    """The two counter families, filled one event record at a time; thread-safe."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._lock = threading.Lock()
        self._gpus: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._pods: OrderedDict[tuple[str, ...], float] = OrderedDict()

    def add(self, event: GpuEvent) -> None:
        """Count ``event`` (``event.count`` events) on its GPU and for each named pod on it."""
        kind, xid = event_labels(event)
        pods = {(p.pod_namespace, p.pod_name) for p in event.processes if p.pod_name}
        with self._lock:
            _bump(self._gpus, (self.node_name, event.gpu_uuid, kind, xid), event.count)
            for namespace, pod in sorted(pods):
                _bump(self._pods, (namespace, pod, kind, xid), event.count)

    def collect(self) -> Iterable[Metric]:
        """The families as prometheus_client collects them."""
        with self._lock:
            gpus, pods = list(self._gpus.items()), list(self._pods.items())
        gpu_family = CounterMetricFamily(GPU_EVENTS, GPU_EVENTS_HELP, labels=GPU_EVENT_LABELS)
        for labels, value in gpus:
            gpu_family.add_metric(list(labels), value)
        pod_family = CounterMetricFamily(
            POD_GPU_EVENTS, POD_GPU_EVENTS_HELP, labels=POD_EVENT_LABELS
        )
        for labels, value in pods:
            pod_family.add_metric(list(labels), value)
        return [gpu_family, pod_family]


def _bump(series: OrderedDict[tuple[str, ...], float], key: tuple[str, ...], by: int) -> None:
    series[key] = series.get(key, 0.0) + by
    series.move_to_end(key)
    while len(series) > MAX_SERIES:
        series.popitem(last=False)
