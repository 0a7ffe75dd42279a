"""One agent's own ``/metrics``: scrape cost at 8 GPUs x 64 processes (target: 20 ms or less).

A real agent (its sampler over a fake NVML file, its gRPC server and its
``/metrics`` listener) runs in a thread of this process; the pods' names reach
it over real gRPC (``PutPodNames``), and the scrapes are real HTTP over
loopback, with the metrics token. Measured side by side in one run:

1. a scrape after the snapshot or the names changed (what Prometheus meets on
   every scrape, since the agent scans every second): attribution by the name
   table, rendering, HTTP;
2. a scrape of what the last one rendered (an HA pair scraping the same scan):
   only the snapshot's age is rendered again;
3. the rendering alone, in this thread, without HTTP, and the same families
   written by prometheus_client's ``generate_latest`` instead of
   ``render_gauges`` (the same bytes; what the agent would cost without it).

Run ``python bench/agent_metrics_bench.py`` (8 x 64) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from node_resolver.client import AgentClient  # noqa: E402
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml  # noqa: E402
from node_resolver.metrics.families import GpuSeries  # noqa: E402
from node_resolver.metrics.node_series import NodeSeries, attribute_on_node  # noqa: E402
from node_resolver.models import NodeSnapshot  # noqa: E402
from node_resolver.pod_names import PodName, PodNames  # noqa: E402
from tests.support.agents import (  # noqa: E402
    StaticResolver,
    gpu_json,
    nvml_json,
    resolved,
    start_agent_thread,
)

TARGET_MS = 20.0
TOKEN = "bench-token"
GiB = 1 << 30


def pod_uid(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-{i:012x}"


def container_id(i: int) -> str:
    return f"{i:064x}"


def fleet(gpus: int, processes: int) -> tuple[dict, StaticResolver, list[PodName]]:
    """An NVML file of ``gpus`` GPUs with ``processes`` each: pod i has one process on every
    GPU, so every process is its own container series (the most series a node can have)."""
    resolver = StaticResolver()
    pods = [
        PodName(pod_uid(i), f"team-{i % 7}", f"trainer-{i:03d}", {container_id(i): "worker"})
        for i in range(processes)
    ]
    gpu_list = []
    for g in range(gpus):
        procs = []
        for i in range(processes):
            pid = 10_000 + g * processes + i
            procs.append({"pid": pid, "usedMemoryBytes": GiB + i, "smUtilization": i % 100})
            resolver.processes[pid] = resolved(
                pid, "python3", container_id=container_id(i), pod_uid=pod_uid(i)
            )
        gpu_list.append(gpu_json(g, procs))
    return nvml_json(gpu_list), resolver, pods


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def with_generate_latest(snapshot: NodeSnapshot, names: PodNames) -> float:
    """Seconds to render ``snapshot``'s families through generate_latest."""
    start = time.perf_counter()
    attributed = attribute_on_node(snapshot, names)
    families = GpuSeries()
    families.add_containers(snapshot.node_name, attributed.containers)
    families.add_unattributed(snapshot.node_name, attributed.unattributed)
    sample = snapshot.sample
    families.add_gpus(
        snapshot.node_name, sample.gpus, sample.driver_version or "", attributed.containers
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families.node_families())))
    generate_latest(registry)
    return time.perf_counter() - start


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def timed_scrape(client: httpx.Client, url: str) -> tuple[float, int]:
    start = time.perf_counter()
    response = client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.status_code
    return elapsed, len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2 GPUs x 8 processes, for CI")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64, help="processes per GPU")
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    if args.small:
        args.gpus, args.processes, args.scrapes = 2, 8, 20
    content, resolver, pods = fleet(args.gpus, args.processes)
    print(
        f"# agent /metrics: {args.gpus} GPUs x {args.processes} processes, {args.scrapes} scrapes "
        f"each way; {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        nvml = Path(tmp) / "nvml.json"
        write_fake_nvml(nvml, content)
        # Scans an hour apart: the snapshot stays put, and each change below is the bench's own.
        with start_agent_thread(
            FakeGpuSource(nvml),
            resolver=resolver,
            token=TOKEN,
            interval=3600,
            metrics=True,
            metrics_token=TOKEN,
        ) as agent:
            metrics = agent.server.metrics
            assert metrics is not None and metrics.address is not None

            async def put(names: list[PodName]) -> int:
                async with AgentClient(agent.address, token=TOKEN) as client:
                    return await client.put_pod_names("node-a", names, timeout=10)

            assert asyncio.run(put(pods)) == len(pods)
            url = f"http://{metrics.address}/metrics"
            fresh: list[float] = []
            cached: list[float] = []
            with httpx.Client(timeout=10) as client:
                _, size = timed_scrape(client, url)
                for n in range(args.scrapes):
                    # A changed name invalidates the rendering, as a new scan does.
                    agent.server.pod_names.put([PodName("bench-uid", "bench", f"p{n}", {})])
                    fresh.append(timed_scrape(client, url)[0])
                    cached.append(timed_scrape(client, url)[0])
                body = client.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).text
            series = NodeSeries(agent.sampler.latest, agent.server.pod_names)
            render: list[float] = []
            reference: list[float] = []
            for n in range(args.scrapes):
                agent.server.pod_names.put([PodName("bench-uid", "bench", f"r{n}", {})])
                start = time.perf_counter()
                series.render()
                render.append(time.perf_counter() - start)
                latest = agent.sampler.latest()
                assert latest is not None
                reference.append(with_generate_latest(latest, agent.server.pod_names))
    samples = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    named = body.count('pod="trainer-')
    p50 = statistics.median(fresh)
    print(f"series: {samples} ({named} container series named), {size / 1024:.0f} KiB a scrape")
    print(f"scrape after a new scan or names, p50: {ms(p50)}  (p95 {ms(quantile(fresh, 0.95))})")
    print(f"scrape of the same scan, p50:          {ms(statistics.median(cached))}")
    alone, slow = statistics.median(render), statistics.median(reference)
    print(f"rendering alone, p50:                  {ms(alone)}")
    print(f"  the same through generate_latest:    {ms(slow)}  ({slow / alone:.1f}x)")
    verdict = "within" if p50 * 1000 <= TARGET_MS else "OVER"
    print(f"target {TARGET_MS:.0f} ms per scrape: {verdict} ({p50 * 1000 / TARGET_MS:.2f}x)")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    main()
