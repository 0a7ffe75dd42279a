"""Scrape cost of the GPU series on ``/metrics`` over real agents, the real cache and pool.

Measures, side by side in one run (issue: "scrape cost at 1,000 nodes: bounded,
and shown in a benchmark"):

1. one scrape of every node, all agents up and then with one agent dead:
   series, bytes (and gzipped, as Prometheus gets them), the fan-out to the
   agents, the join and rendering, and the
   longest the event loop was held while it ran, with the rendering in a
   worker thread (as ``/metrics`` does it) against rendering on the loop;
2. scrapes within one ``--snapshot-ttl``: agent calls per scrape, and what a
   scrape of snapshots already rendered costs.

Run ``python bench/metrics_bench.py`` (full size) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster_bench import CallLog, add_cluster_sizes, ms, pct, start_cluster  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import AgentPool  # noqa: E402
from api.gpu_metrics import GpuMetricsExporter  # noqa: E402
from api.http.exposition import GZIP_LEVEL  # noqa: E402
from api.lifecycle.gc_tuning import tune_gc_for_serving  # noqa: E402


class LoopStalls:
    """The longest time the event loop went without running a 1 ms ticker."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last - 0.001)
            last = now

    async def measure(self, fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
        """Run ``fn`` with the ticker going: (longest stall, result)."""
        self.longest = 0.0
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0.005)
        try:
            result = await fn()
            # Let the ticker see the end of a hold that lasted until fn returned.
            await asyncio.sleep(0.005)
        finally:
            self._task.cancel()
        return self.longest, result


def series_of(body: bytes) -> int:
    """How many samples an exposition holds."""
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def agents_down(body: bytes) -> int:
    """How many nodes an exposition reports with ``gpugraph_agent_up 0``."""
    return sum(
        1
        for line in body.splitlines()
        if line.startswith(b"gpugraph_agent_up{") and line.endswith(b" 0.0")
    )


async def scrape_cost(nodes: int, pods: int, down: int, repeat: int) -> dict[str, Any]:
    """Benchmark 1 at one cluster size."""
    cluster = start_cluster(nodes, pods, down)
    tune_gc_for_serving()
    calls = CallLog()
    # TTL 0: every scrape fans out to every agent, the most a scrape can cost.
    pool = AgentPool(
        NodeIpDiscovery(cluster.cache, cluster.port), ttl=0.0, client_factory=calls.factory
    )
    exporter = GpuMetricsExporter(cluster.cache, pool, timeout=10.0)
    stalls = LoopStalls()
    try:
        await exporter.render()  # connect every channel once; a dead agent starts backing off
        collect: list[float] = []
        render: list[float] = []
        fan_out_hold: list[float] = []
        render_hold: list[float] = []
        on_loop_hold: list[float] = []
        idle_hold: list[float] = []
        agent_calls: list[int] = []
        body = b""
        for _ in range(repeat):
            calls.durations.clear()

            async def fan_out() -> Any:
                start = time.perf_counter()
                results = await exporter.collect()
                collect.append(time.perf_counter() - start)
                return results

            held, results = await stalls.measure(fan_out)
            fan_out_hold.append(held)
            agent_calls.append(len(calls.durations))

            async def in_thread(r: Any = results) -> bytes:
                start = time.perf_counter()
                out = await asyncio.to_thread(exporter.render_results, r)
                render.append(time.perf_counter() - start)
                return out

            async def on_loop(r: Any = results) -> bytes:
                return exporter.render_results(r)

            held, body = await stalls.measure(in_thread)
            render_hold.append(held)
            held, _ = await stalls.measure(on_loop)
            on_loop_hold.append(held)
            # The baseline: the same loop doing nothing for as long (other load on the machine).
            held, _ = await stalls.measure(lambda: asyncio.sleep(render[-1]))
            idle_hold.append(held)
        total = [c + r for c, r in zip(collect, render, strict=True)]
        # What /metrics sends Prometheus, which asks for gzip.
        start = time.perf_counter()
        zipped = len(gzip.compress(body, GZIP_LEVEL))
        gzip_seconds = time.perf_counter() - start

        # Benchmark 2: ten scrapes within one TTL share the agent calls.
        shared_pool = AgentPool(
            NodeIpDiscovery(cluster.cache, cluster.port), ttl=60.0, client_factory=calls.factory
        )
        shared = GpuMetricsExporter(cluster.cache, shared_pool, timeout=10.0)
        calls.durations.clear()
        repeats = []
        try:
            await shared.render()
            for _ in range(9):
                start = time.perf_counter()
                await shared.render()
                repeats.append(time.perf_counter() - start)
        finally:
            await shared_pool.close()
        ttl_calls = len(calls.durations)
    finally:
        await pool.close()
        cluster.stop()
    return {
        "nodes": nodes,
        "down": down,
        "series": series_of(body),
        "bytes": len(body),
        "gzip_bytes": zipped,
        "gzip": gzip_seconds,
        "agents_down": agents_down(body),
        "collect": statistics.median(collect),
        "render": statistics.median(render),
        "p50": pct(total, 50),
        "p99": pct(total, 99),
        "fan_out_hold": max(fan_out_hold),
        "render_hold": max(render_hold),
        "on_loop_hold": max(on_loop_hold),
        "idle_hold": max(idle_hold),
        "repeat_scrape": statistics.median(repeats),
        "calls": statistics.median(agent_calls),
        "ttl_calls": ttl_calls,
    }


def report(rows: list[dict[str, Any]], pods: int) -> None:
    """Print the benchmark's tables as Markdown."""
    print(
        f"\n# gpugraph metrics benchmark — {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, {pods:,} pods\n"
    )
    print("## 1. One scrape of every node's GPU series (8 GPUs x 4 processes per node), TTL 0\n")
    print(
        "| nodes | dead agents | agent_up 0 | series | bytes | agent calls | fan-out p50 ms | "
        "join+render p50 ms | scrape p50 ms | scrape p99 ms | gzipped | gzip ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['nodes']} | {r['down']} | {r['agents_down']} | {r['series']:,} | "
            f"{r['bytes'] / 1e6:.2f} MB | {r['calls']:.0f} | {ms(r['collect'])} | "
            f"{ms(r['render'])} | {ms(r['p50'])} | {ms(r['p99'])} | "
            f"{r['gzip_bytes'] / 1e6:.2f} MB | {ms(r['gzip'])} |"
        )
    print("\n### Longest time the event loop was held (a 1 ms ticker's worst lateness)\n")
    print(
        "| nodes | dead agents | idle loop, same time ms | during the fan-out ms | "
        "join+render in a thread ms | join+render on the loop ms | on loop / in thread |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['nodes']} | {r['down']} | {ms(r['idle_hold'])} | {ms(r['fan_out_hold'])} | "
            f"{ms(r['render_hold'])} | {ms(r['on_loop_hold'])} | "
            f"{r['on_loop_hold'] / max(r['render_hold'], 1e-9):.0f}x |"
        )
    print("\n## 2. Ten scrapes within one snapshot TTL\n")
    print(
        "| nodes | dead agents | agent calls in 10 scrapes | per node | "
        "scrapes 2-10 p50 ms (rendering shared) |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['nodes']} | {r['down']} | {r['ttl_calls']} | "
            f"{r['ttl_calls'] / r['nodes']:.2f} | {ms(r['repeat_scrape'])} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_cluster_sizes(parser)
    parser.add_argument("--repeat", type=int, default=10, help="scrapes per size")
    parser.add_argument("--small", action="store_true", help="CI size: 10 nodes, 3 scrapes")
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.repeat = "10", 300, 3
    rows = []
    for n in (int(n) for n in args.nodes.split(",")):
        for down in (0, 1):
            rows.append(asyncio.run(scrape_cost(n, args.pods, down, args.repeat)))
    report(rows, args.pods)
    bad = [r for r in rows if r["agents_down"] != r["down"] or r["series"] == 0]
    if bad:
        raise SystemExit(f"benchmark saw wrong results: {bad}")


if __name__ == "__main__":
    main()
