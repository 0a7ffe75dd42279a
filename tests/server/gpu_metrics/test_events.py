"""The server's GPU event counters: every event an agent logged since the last scrape."""

from __future__ import annotations

from dataclasses import replace

from api.gpu_metrics.events import EventCounts
from node_resolver.gpu_events.records import EventPage, EventQuery, GpuEvent, GpuEventKind
from tests.support.graph import MemoryCluster, node_record


class CuttingLog:
    """One node's event log, answering at most ``cut`` events a page, as an agent does
    when the events' size reaches its page limit."""

    def __init__(self, cut: int) -> None:
        self.cut = cut
        self.events: list[GpuEvent] = []

    def log(self, count: int) -> None:
        for _ in range(count):
            sequence = len(self.events) + 1
            self.events.append(
                replace(GpuEvent(1.0e9 + sequence, GpuEventKind.XID, "GPU-0", xid=79), id=sequence)
            )

    async def gpu_events(self, node: str, query: EventQuery, token: str = "") -> EventPage:
        after = query.after_sequence or 0
        newer = [e for e in self.events if e.id > after][: min(self.cut, query.limit)]
        last = self.events[-1].id if self.events else 0
        return EventPage(node, newer, [""] * len(newer), "", "ok", last, "log-1")


def counted(counts: EventCounts) -> float:
    (gpu_family, _) = counts.families()
    return sum(sample.value for sample in gpu_family.samples)


async def test_pages_an_agent_cut_short_are_read_on_to_the_logs_end() -> None:
    cluster = MemoryCluster()
    cluster.add_node(node_record("node-a"))
    log = CuttingLog(cut=3)
    counts = EventCounts(cluster, log)  # type: ignore[arg-type]
    await counts.update()  # where the log stands: nothing new yet
    log.log(10)
    await counts.update()
    # Not the first page's 3, the rest left for later scrapes: all 10, once each.
    assert counted(counts) == 10
    await counts.update()
    assert counted(counts) == 10
