"""Occupancy log benchmarks, measured side by side in one run.

1. The agent's cost per scan with history on against off, at 8 GPUs x 64 processes:
   the same sampler, source and resolver, scans interleaved, the writer thread
   flushing in the background as in production.
2. Disk growth over 24 simulated hours of churn: 8 GPUs, a new process every
   minute per GPU (1-second scans, 5-second flushes, on a simulated clock).
3. A one-day ``gpuUsage(groupBy: [NAMESPACE])`` across N nodes: real agents over
   gRPC (``occupancy_agent_host.py``), each with a real SQLite log holding a day, the real
   cache filled from the stub API server, the real schema and agent pool.
4. Over the same fleet, strawberry and the compiled plan side by side (runs
   interleaved): that ``gpuUsage``, a ``gpuHistory`` page of 500 records, and the
   map's GPU history strip (``GpuHistory``, one GPU's day).

Run ``python bench/occupancy_log_bench.py`` (full size) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import orjson  # noqa: E402
from cluster_bench import pct  # noqa: E402
from fleet import build_fleet  # noqa: E402
from strawberry.http import process_result  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import AgentPool  # noqa: E402
from api.demo.cluster import StubApiServer  # noqa: E402
from api.http.map_queries import HISTORY_QUERY  # noqa: E402
from api.kube.cache import ClusterCache  # noqa: E402
from api.kube.watcher import ClusterWatcher  # noqa: E402
from graph_schema.compiled.documents import CompiledDocuments  # noqa: E402
from graph_schema.context import GraphContext  # noqa: E402
from graph_schema.limits import SchemaLimits  # noqa: E402
from graph_schema.schema import GraphSchema, build_schema  # noqa: E402
from node_resolver.history.log import HistoryLog, HistorySettings  # noqa: E402
from node_resolver.history.tracker import OccupancyTracker  # noqa: E402
from node_resolver.models import (  # noqa: E402
    ContainerRef,
    GpuProcess,
    GpuSample,
    NodeSample,
    NodeSnapshot,
)
from node_resolver.pids import ResolvedProcess  # noqa: E402
from node_resolver.pod_names import PodNames  # noqa: E402
from node_resolver.sampler import Sampler  # noqa: E402
from tests.support.demo_process import free_port  # noqa: E402

GiB = 1 << 30
DAY = 86400.0


class Source:
    """``gpus`` x ``per_gpu`` processes: SM utilization moves every scan (NVML's samples
    do), memory every tenth scan (allocators grow in steps; most scans see the same)."""

    def __init__(self, gpus: int, per_gpu: int) -> None:
        self.gpus, self.per_gpu, self.tick = gpus, per_gpu, 0

    def sample(self) -> NodeSample:
        self.tick += 1
        return NodeSample(
            gpus=[
                GpuSample(
                    index=g,
                    uuid=f"GPU-{g}",
                    processes=[
                        GpuProcess(
                            pid=1000 + g * self.per_gpu + k,
                            used_memory_bytes=(k + 1 + self.tick // 10 % 3) * GiB,
                            sm_utilization=(k + self.tick) % 100,
                        )
                        for k in range(self.per_gpu)
                    ],
                )
                for g in range(self.gpus)
            ]
        )

    def close(self) -> None:
        pass


class Known:
    """Every PID alive, in a pod's container (what the cgroup resolver would find)."""

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        container = ContainerRef("c" * 64, "containerd", "pod-uid")
        return {pid: ResolvedProcess(pid, 42, "python", None, container) for pid in pids}

    def close(self) -> None:
        pass


def scan_cost(scans: int, workdir: Path) -> tuple[list[float], list[float]]:
    """Seconds per scan, history off and on, interleaved."""
    off = Sampler(Source(8, 64), Known(), node_name="n")
    settings = HistorySettings(workdir / "scan", retention_seconds=30 * DAY)
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
    history.start()
    on = Sampler(Source(8, 64), Known(), node_name="n", on_scan=history.observe)
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        pair = (("off", off), ("on", on))
        for i in range(scans):
            # Alternate which goes first, so neither always follows the other.
            for name, sampler in pair if i % 2 else pair[::-1]:
                start = time.perf_counter()
                sampler.scan()
                times[name].append(time.perf_counter() - start)
    finally:
        history.stop()
    return times["off"], times["on"]


def observe_cost(scans: int) -> list[float]:
    """Seconds per scan of the tracker alone (what history adds to the sampling thread)."""
    sampler = Sampler(Source(8, 64), Known(), node_name="n")
    snapshots = [sampler.scan() for _ in range(50)]
    tracker = OccupancyTracker(boot_id="b", pod_names=PodNames())
    times = []
    for i in range(scans):
        snapshot = snapshots[i % len(snapshots)]
        snapshot.sampled_at = float(i)
        start = time.perf_counter()
        tracker.observe(snapshot)
        times.append(time.perf_counter() - start)
    return times


def disk_growth(hours: float, workdir: Path) -> tuple[int, int, float]:
    """(bytes on disk, records, seconds taken) after ``hours`` of churn on a simulated clock."""
    clock = [1_000_000.0]
    settings = HistorySettings(workdir / "disk", retention_seconds=30 * DAY, flush_interval=5.0)
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames(), clock=lambda: clock[0])
    history.start()
    container = ContainerRef("c" * 64, "containerd", "pod-uid")
    started = time.perf_counter()
    try:
        seconds = int(hours * 3600)
        for t in range(seconds):
            now = clock[0] = 1_000_000.0 + t
            minute = t // 60
            gpus = [
                GpuSample(index=g, uuid=f"GPU-{g}", processes=[GpuProcess(
                    pid=10_000 + minute * 8 + g, used_memory_bytes=(8 + t % 5) * GiB,
                    sm_utilization=70, name="python", container=container,
                    start_time=minute * 8 + g,
                )])
                for g in range(8)
            ]  # fmt: skip
            history.observe(NodeSnapshot("n", NodeSample(gpus=gpus), now))
            if t % 5 == 4:
                history.flush()
        history.flush()
        size = history.store.size_bytes()
        records = len(history.tracker.drain())  # the open ones
    finally:
        history.stop()
    elapsed = time.perf_counter() - started
    ended = int(hours * 60) * 8
    return size, ended + records, elapsed


# Part 4's documents: (name, query, variables); ``{since}`` and ``{uuid}`` filled in.
SIDE_BY_SIDE = [
    (
        "gpuUsage by namespace",
        "query($since: DateTime!) { gpuUsage(since: $since, groupBy: [NAMESPACE]) "
        "{ namespace gpuSeconds memoryGibSeconds } }",
    ),
    (
        "gpuHistory, first 500",
        "query($since: DateTime!) { gpuHistory(since: $since, first: 500) { edges { cursor "
        "node { pid processName podNamespace podName start end peakMemoryBytes gpuSeconds "
        "gpu { uuid } node { name } } } pageInfo { hasNextPage endCursor } } }",
    ),
    ("the map's GPU history strip", HISTORY_QUERY),
]


async def usage(
    nodes: int, pods: int, repeat: int, workdir: Path
) -> tuple[list[float], int, int, dict[str, dict[str, list[float] | bool]]]:
    """Seconds per one-day gpuUsage by namespace across ``nodes``; its rows and errors;
    part 4's seconds per document and path, and whether both paths gave the same bytes."""
    fleet = build_fleet(nodes, pods)
    first_gpu = fleet.sample(0).gpus[0].uuid
    stub = StubApiServer().start()
    stub.load(pods=fleet.pod_objects, nodes=fleet.node_objects)
    del fleet
    port = free_port()
    host = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "occupancy_agent_host.py"), "--nodes", str(nodes),
         "--pods", str(pods), "--port", str(port), "--workdir", str(workdir / "fleet")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert host.stdout is not None
    if host.stdout.readline().strip() != "ready":
        raise SystemExit("the history agent host did not start")
    cache = ClusterCache()
    watcher = ClusterWatcher(cache, stub.configuration())
    watcher.start()
    while not cache.ready:
        await asyncio.sleep(0.01)
    pool = AgentPool(NodeIpDiscovery(cache, port), ttl=0.0)
    schema = build_schema()
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - DAY))
    query = f'{{ gpuUsage(since: "{since}", groupBy: [NAMESPACE]) {{ namespace gpuSeconds memoryGibSeconds }} }}'  # noqa: E501
    durations: list[float] = []
    rows = errors = 0
    try:
        for _ in range(repeat + 1):  # the first connects every channel
            start = time.perf_counter()
            result = await schema.execute(
                query, context_value=GraphContext(cache, pool, schema.state)
            )
            durations.append(time.perf_counter() - start)
            rows = len((result.data or {}).get("gpuUsage") or [])
            errors = len(result.errors or [])
        side = await side_by_side(schema, cache, pool, since, first_gpu, repeat)
    finally:
        await pool.close()
        watcher.stop()
        host.terminate()
        host.wait(60)
        stub.stop()
    return durations[1:], rows, errors, side


async def side_by_side(
    schema: GraphSchema,
    cache: ClusterCache,
    pool: AgentPool,
    since: str,
    uuid: str,
    repeat: int,
) -> dict[str, dict[str, list[float] | bool]]:
    """Part 4: each document through strawberry and the plan, interleaved."""
    compiled = CompiledDocuments()
    with_plan = build_schema(state=schema.state, gauge=schema.gauge, compiled=compiled)
    found: dict[str, dict[str, list[float] | bool]] = {}
    for name, query in SIDE_BY_SIDE:
        variables = {"since": since, "uuid": uuid}
        if "$uuid" not in query:
            variables.pop("uuid")
        times: dict[str, list[float]] = {"strawberry": [], "compiled": []}
        answers: dict[str, bytes] = {}
        for _ in range(repeat):
            start = time.perf_counter()
            reference = await schema.execute(
                query,
                variable_values=variables,
                context_value=GraphContext(cache, pool, schema.state),
            )
            times["strawberry"].append(time.perf_counter() - start)
            answers["strawberry"] = orjson.dumps(process_result(reference))
            answered = compiled.counts["compiled"]
            start = time.perf_counter()
            planned = await with_plan.execute(
                query,
                variable_values=variables,
                context_value=GraphContext(cache, pool, schema.state),
            )
            times["compiled"].append(time.perf_counter() - start)
            if compiled.counts["compiled"] == answered:
                raise SystemExit(f"the plan declined {name}")
            answers["compiled"] = orjson.dumps(process_result(planned))
        found[name] = {**times, "same": answers["strawberry"] == answers["compiled"]}
    return found


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="CI size")
    args = parser.parse_args()
    scans = 300 if args.small else 3000
    hours = 2.0 if args.small else 24.0
    nodes, pods = (50, 500) if args.small else (1000, 10000)
    workdir = Path(tempfile.mkdtemp(prefix="history-bench-"))
    try:
        off, on = scan_cost(scans, workdir)
        print(f"1. scan cost, 8 GPUs x 64 processes, {scans} scans each, interleaved")
        for name, times in (("off", off), ("on", on)):
            print(
                f"   history {name:3}: p50 {ms(statistics.median(times))}  p99 {ms(pct(times, 99))}"
            )
        delta = statistics.median(on) - statistics.median(off)
        print(f"   added per scan (p50 on - p50 off): {ms(delta)}  (target <= 0.5 ms)")
        alone = observe_cost(scans)
        print(f"   the tracker alone: p50 {ms(statistics.median(alone))}  p99 {ms(pct(alone, 99))}")
        size, records, took = disk_growth(hours, workdir)
        print(f"2. disk growth, {hours:g} simulated hours, 8 GPUs, a new process per GPU a minute")
        print(f"   {records} records, {size / 1e6:.2f} MB on disk (WAL included), "
              f"{size / max(records, 1):.0f} B/record, {took:.1f} s to simulate"
              + ("  (target <= 20 MB for 24 h)" if hours == 24 else ""))  # fmt: skip
        durations, rows, errors, side = asyncio.run(usage(nodes, pods, 5, workdir))
        timeout = 10.0
        print(f"3. one-day gpuUsage(groupBy: [NAMESPACE]) across {nodes} nodes over gRPC")
        print(f"   p50 {statistics.median(durations):.2f} s  max {max(durations):.2f} s  "
              f"({rows} rows, {errors} errors; request timeout {timeout:g} s, "
              f"max result items {SchemaLimits().max_result_items})")  # fmt: skip
        print(f"4. strawberry and the compiled plan over the same {nodes} nodes, interleaved, p50")
        for name, found in side.items():
            slow, fast = found["strawberry"], found["compiled"]
            assert isinstance(slow, list) and isinstance(fast, list)
            a, b = statistics.median(slow), statistics.median(fast)
            print(f"   {name:30} strawberry {ms(a)}  compiled {ms(b)}  ({a / b:.2f}x; "
                  f"same bytes: {'yes' if found['same'] else 'NO'})")  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
