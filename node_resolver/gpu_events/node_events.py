"""One node's GPU health events: the NVML thread, the kernel-log reader and the recorder,
started and stopped together, and the node's event status."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from ..models import NodeSnapshot
from ..pod_names import PodNames
from .counters import GpuEventCounters
from .kernel_log import KernelLogReader
from .nvml_events import WAIT_MS, GpuAddress, NvmlEventWatcher
from .recorder import GpuEventRecorder
from .records import GpuEvent

__all__ = ["OFF", "NodeGpuEvents"]

# Without NVML (a fake GPU source) there are no NVML events.
OFF = "off"
KERNEL_LINES = "gpugraph_kernel_log_lines"


class NodeGpuEvents:
    """Everything that records this node's GPU events; ``observe`` is a scan hook."""

    def __init__(
        self,
        *,
        node_name: str,
        pod_names: PodNames,
        nvml: Any | None,
        kernel_log: str | None = None,
        sink: Callable[[list[GpuEvent]], None] | None = None,
        boot_id: str = "",
        wait_ms: int = WAIT_MS,
        clock: Callable[[], float] = time.time,
        gpus_by_pci: Callable[[], dict[tuple[int, int, int], GpuAddress]] | None = None,
    ) -> None:
        """``gpus_by_pci``: where the kernel's PCI addresses point without NVML (a fake GPU
        source that knows its GPUs' bus IDs); with NVML, its own answer is used."""
        self._latest: NodeSnapshot | None = None
        self._gpus_by_pci = gpus_by_pci
        self.counters = GpuEventCounters(node_name)
        self.watcher: NvmlEventWatcher | None = None
        self.kernel: KernelLogReader | None = None
        self.recorder = GpuEventRecorder(
            node_name=node_name,
            latest=lambda: self._latest,
            pod_names=pod_names,
            counters=self.counters,
            sink=sink,
            boot_id=boot_id,
            kernel_on=lambda: self.kernel is not None and self.kernel.status == "ok",
            nvml_xid_on=lambda uuid: self.watcher is not None and self.watcher.xid_registered(uuid),
            gpus_by_pci=self._by_pci,
            clock=clock,
        )
        if nvml is not None:
            self.watcher = NvmlEventWatcher(
                nvml, self.recorder.submit, wait_ms=wait_ms, clock=clock
            )
        if kernel_log:
            self.kernel = KernelLogReader(kernel_log, self.recorder.kernel_xid)

    def _by_pci(self) -> dict[tuple[int, int, int], GpuAddress]:
        if self.watcher is not None:
            return self.watcher.by_pci
        return self._gpus_by_pci() if self._gpus_by_pci is not None else {}

    @property
    def status(self) -> str:
        """ "ok", "unsupported", "off", or what is wrong (the kernel log's trouble appended)."""
        status = self.watcher.status if self.watcher is not None else OFF
        kernel = self.kernel
        if kernel is not None and kernel.status != "ok":
            status = f"{status}; kernel log {kernel.path}: {kernel.status}"
        return status

    def observe(self, snapshot: NodeSnapshot) -> None:
        """Take one scan in (the sampler's scan hook): the latest processes, lost GPUs."""
        self._latest = snapshot
        self.recorder.observe(snapshot)

    def start(self) -> None:
        """Start the recorder, then the sources."""
        self.recorder.start()
        if self.watcher is not None:
            self.watcher.start()
        if self.kernel is not None:
            self.kernel.start()

    def stop(self) -> None:
        """Stop the sources, then record what they delivered."""
        if self.kernel is not None:
            self.kernel.stop()
        if self.watcher is not None:
            self.watcher.stop()
        self.recorder.stop()

    def render(self) -> bytes:
        """The event counters (and the kernel log's line counts) in the text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.counters)
        if self.kernel is not None:
            registry.register(_KernelLines(self.kernel))
        return generate_latest(registry)


class _KernelLines(Collector):
    def __init__(self, reader: KernelLogReader) -> None:
        self._reader = reader

    def collect(self) -> list[CounterMetricFamily]:
        counts = self._reader.counts
        family = CounterMetricFamily(
            KERNEL_LINES,
            "Kernel log lines the agent read: NVIDIA XID messages, other lines skipped, and "
            "XID messages it could not read",
            labels=("result",),
        )
        for result, value in (
            ("xid", counts.xid),
            ("skipped", counts.skipped),
            ("malformed", counts.malformed),
        ):
            family.add_metric([result], value)
        return [family]
