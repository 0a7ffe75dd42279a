"""One agent's scans with and without its GPU event thread; prints figures as JSON.

Run by bench/gpu_events_bench.py in a subprocess whose dynamic loader finds the
fake libnvidia-ml.so.1, so that the real nvidia-ml-py loads it (its events
file is ``FAKE_NVML_EVENTS``). ``argv``: mode (``off``, ``idle`` or
``storm``), seconds to scan, the history directory. In every mode the sampler
scans 8 GPUs x 64 processes through the real pynvml every 50 ms; ``idle`` and
``storm`` also run the NVML event thread and the recorder, writing to a real
occupancy log; in ``storm`` another process appends 1,000 single-bit ECC events
a second to the events file while the scans run.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node_resolver.cli import scan_hooks
from node_resolver.gpu_events.node_events import NodeGpuEvents
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.nvml import NvmlGpuSource, load_pynvml
from node_resolver.pod_names import PodNames
from node_resolver.sampler import Sampler
from tests.support.agents import AllAliveResolver

INTERVAL = 0.05


def rss_mib() -> float:
    """This process's resident set now, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    """Scan for the given seconds in the given mode; print scan times, RSS and event counts."""
    mode, seconds, directory = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    names = PodNames()
    history = HistoryLog(
        HistorySettings(directory=directory, retention_seconds=86400.0),
        boot_id="bench",
        pod_names=names,
    )
    history.start()
    events = None
    if mode != "off":
        events = NodeGpuEvents(
            node_name="bench", pod_names=names, nvml=load_pynvml(), sink=history.add_events
        )
    source = NvmlGpuSource(utilization_window=2.0)
    sampler = Sampler(
        source,
        AllAliveResolver(),
        node_name="bench",
        interval=INTERVAL,
        on_scan=scan_hooks(history, events),
    )
    sampler.scan()  # warm-up: pynvml resolves its function pointers
    if events is not None:
        events.start()
        assert events.watcher is not None and events.watcher.waiting.wait(30)
    print("ready", file=sys.stderr, flush=True)
    sys.stdin.readline()  # the driver starts the storm, then says go
    rss_start = rss_mib()
    durations = []
    deadline = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        started = time.perf_counter()
        sampler.scan()
        durations.append(time.perf_counter() - started)
        next_at += INTERVAL
        time.sleep(max(0.0, next_at - time.monotonic()))
    rss_end = rss_mib()
    delivered = events.watcher.delivered if events and events.watcher else 0
    counts = events.recorder.counts if events else None
    if events is not None:
        events.stop()
    history.stop()
    durations.sort()
    print(
        json.dumps(
            {
                "mode": mode,
                "scans": len(durations),
                "p50_ms": statistics.median(durations) * 1000,
                "p99_ms": durations[int(len(durations) * 0.99)] * 1000,
                "rss_start_mib": rss_start,
                "rss_end_mib": rss_end,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "delivered": delivered,
                "records": counts.records if counts else 0,
                "dropped": counts.dropped if counts else 0,
                "cpu_seconds": time.process_time(),
            }
        )
    )


if __name__ == "__main__":
    main()
