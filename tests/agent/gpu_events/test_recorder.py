"""The recorder: merging an NVML XID with its kernel message, attribution, rate limiting."""

from __future__ import annotations

import threading
import time

from node_resolver.gpu_events.counters import GpuEventCounters
from node_resolver.gpu_events.nvml_events import RawEvent
from node_resolver.gpu_events.recorder import BURST, GpuEventRecorder
from node_resolver.gpu_events.records import GpuEvent, GpuEventKind
from node_resolver.models import ContainerRef, GpuProcess, GpuSample, NodeSample, NodeSnapshot
from node_resolver.pod_names import PodName, PodNames

GPU = "GPU-0"


def snapshot() -> NodeSnapshot:
    gpu = GpuSample(
        index=0,
        uuid=GPU,
        processes=[
            GpuProcess(pid=10, name="python3", container=ContainerRef("c1", "containerd", "u1"))
        ],
    )
    return NodeSnapshot(node_name="n", sample=NodeSample(gpus=[gpu]), sampled_at=1.0)


class Sink:
    """Collects records; ``wait`` blocks until ``done(records)`` holds."""

    def __init__(self) -> None:
        self.records: list[GpuEvent] = []
        self.changed = threading.Condition()

    def __call__(self, records: list[GpuEvent]) -> None:
        with self.changed:
            self.records.extend(records)
            self.changed.notify_all()

    def wait(self, done: object) -> list[GpuEvent]:
        with self.changed:
            assert self.changed.wait_for(lambda: done(self.records), 30)  # type: ignore[operator]
            return list(self.records)


def recorder(sink: Sink, *, kernel_on: bool = False, merge: float = 2.0) -> GpuEventRecorder:
    names = PodNames()
    names.put([PodName("u1", "ml", "trainer", {"c1": "main"})])
    latest = snapshot()
    made = GpuEventRecorder(
        node_name="n",
        latest=lambda: latest,
        pod_names=names,
        counters=GpuEventCounters("n"),
        sink=sink,
        kernel_on=lambda: kernel_on,
        nvml_xid_on=lambda uuid: uuid == GPU,
        merge_seconds=merge,
    )
    made.start()
    return made


def raw(kind: GpuEventKind, source: str = "nvml", **fields: object) -> RawEvent:
    return RawEvent(kind, GPU, time.time(), time.monotonic(), source, **fields)  # type: ignore[arg-type]


def test_an_xid_whose_kernel_message_comes_late_is_logged_alone_after_the_window() -> None:
    sink = Sink()
    events = recorder(sink, kernel_on=True, merge=0.05)
    try:
        events.submit(raw(GpuEventKind.XID, xid=13))
        (alone,) = sink.wait(lambda r: len(r) == 1)
        assert (alone.source, alone.culprit_pid) == ("nvml", None)
        events.submit(raw(GpuEventKind.XID, "kernel", xid=13, culprit_pid=10))
        second = sink.wait(lambda r: len(r) == 2)[1]
        assert (second.source, second.culprit_pid) == ("kernel", 10)
        assert [(p.pid, p.pod_name, p.container_name) for p in second.processes] == [
            (10, "trainer", "main")
        ]
    finally:
        events.stop()


def test_a_storm_becomes_a_burst_and_counted_records() -> None:
    sink = Sink()
    events = recorder(sink)
    for _ in range(1000):
        events.submit(raw(GpuEventKind.ECC_SINGLE_BIT))
    events.stop()  # records what is held back
    assert sum(r.count for r in sink.records) == 1000
    assert BURST <= len(sink.records) <= BURST + 5
    counted = dict(
        (tuple(s.labels.values()), s.value)
        for family in events.counters.collect()
        for s in family.samples
        if s.name == "gpugraph_pod_gpu_events_total"
    )
    assert counted == {("ml", "trainer", "ECC_SINGLE_BIT", ""): 1000.0}
