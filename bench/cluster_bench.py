"""Full-cluster GraphQL benchmarks over real agents, the real cache and the real schema.

Measures, side by side in one run (issue: "a query over a 1,000-node cluster
stays fast and cheap"):

1. the full-cluster query at each N: p50/p99, response size, agent calls, and
   the GraphQL overhead (server time minus the slowest agent call) against
   the orjson floor, plain strawberry and the same schema over preloaded data;
2. the single-worker traversal pod -> node -> gpus -> processes -> pod;
3. 100 concurrent HTTP clients polling the full-cluster query against a real
   ``gpugraph serve`` under uvicorn.

Run ``python bench/cluster_bench.py`` (full size) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import orjson  # noqa: E402
import strawberry  # noqa: E402
from fleet import build_fleet  # noqa: E402
from strawberry.schema.config import StrawberryConfig  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import CHANNEL_OPTIONS, AgentPool  # noqa: E402
from api.demo.cluster import StubApiServer, write_kubeconfig  # noqa: E402
from api.kube.cache import ClusterCache  # noqa: E402
from api.kube.watcher import ClusterWatcher  # noqa: E402
from api.lifecycle.gc_tuning import tune_gc_for_serving  # noqa: E402
from graph_schema.context import GraphContext  # noqa: E402
from graph_schema.interfaces import Received  # noqa: E402
from graph_schema.scalars import Bytes, BytesScalar  # noqa: E402
from graph_schema.schema import build_schema  # noqa: E402
from node_resolver.client import AgentClient  # noqa: E402
from node_resolver.models import NodeSnapshot  # noqa: E402
from tests.support.demo_process import free_port  # noqa: E402

FULL_QUERY = """{ nodes { name gpus { uuid memoryUsedBytes utilizationGpu
  processes { pid usedMemoryBytes pod { name namespace } } } } }"""
TRAVERSAL_QUERY = """query($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) { node { gpus { processes { pod { name } } } } } }"""


# ---------------------------------------------------------------- measurement


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f}"


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[list[float], Any]:
    """Run fn ``repeat`` times; the durations and the last result."""
    durations, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = await fn()
        durations.append(time.perf_counter() - start)
    return durations, result


def floor_seconds(data: Any, repeat: int = 20) -> float:
    """Median time orjson takes to serialize ``data``: the floor for producing the response."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        orjson.dumps(data)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


class CallLog:
    """Wraps the production agent client to time every call the pool makes."""

    def __init__(self) -> None:
        self.durations: list[float] = []

    def factory(self, target: str, token: str | None) -> Any:
        log = self

        class TimedClient:
            def __init__(self) -> None:
                self._client = AgentClient(target, token=token, options=CHANNEL_OPTIONS)

            async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
                start = time.perf_counter()
                try:
                    return await self._client.get_snapshot(timeout=timeout)
                finally:
                    log.durations.append(time.perf_counter() - start)

            def close(self) -> Awaitable[None]:
                return self._client.close()

        return TimedClient()


class Preloaded:
    """A SnapshotSource answering from snapshots already in memory (no transport)."""

    def __init__(self, snapshots: dict[str, NodeSnapshot]) -> None:
        self._snapshots = snapshots

    async def fetch(self, node_name: str) -> Received:
        return Received(self._snapshots[node_name])

    def agent_address(self, node_name: str) -> str | None:
        return None


# ------------------------------------------------- plain strawberry reference


@strawberry.type
class RefPod:
    name: str
    namespace: str


@strawberry.type
class RefProcess:
    pid: int
    used_memory_bytes: Bytes | None
    pod: RefPod | None


@strawberry.type
class RefGpu:
    uuid: str
    memory_used_bytes: Bytes | None
    utilization_gpu: int | None
    processes: list[RefProcess]


@strawberry.type
class RefNode:
    name: str
    gpus: list[RefGpu] | None


def plain_reference(cluster: ClusterCache, snapshots: dict[str, NodeSnapshot]) -> Any:
    """Plain strawberry over fully preloaded, pre-joined objects: the engine's own cost."""
    nodes = []
    for record in cluster.nodes():
        snap = snapshots[record.name]
        gpus = []
        for g in snap.sample.gpus:
            procs = []
            for p in g.processes:
                pod = (
                    cluster.pod_by_uid(p.container.pod_uid)
                    if p.container and p.container.pod_uid
                    else None
                )
                procs.append(
                    RefProcess(
                        pid=p.pid,
                        used_memory_bytes=Bytes(p.used_memory_bytes)
                        if p.used_memory_bytes
                        else None,
                        pod=RefPod(name=pod.name, namespace=pod.namespace) if pod else None,
                    )
                )
            gpus.append(
                RefGpu(
                    uuid=g.uuid,
                    memory_used_bytes=Bytes(g.memory_used_bytes) if g.memory_used_bytes else None,
                    utilization_gpu=g.utilization_gpu,
                    processes=procs,
                )
            )
        nodes.append(RefNode(name=record.name, gpus=gpus))

    @strawberry.type
    class Query:
        @strawberry.field
        def nodes(self) -> list[RefNode]:
            return nodes

    return strawberry.Schema(query=Query, config=StrawberryConfig(scalar_map={Bytes: BytesScalar}))


# ------------------------------------------------------------------ the fleet


@dataclass
class Cluster:
    stub: StubApiServer
    cache: ClusterCache
    watcher: ClusterWatcher
    agents: subprocess.Popen[str]
    port: int
    fill_seconds: float

    def stop(self) -> int:
        """Stop everything; the total calls the agents served."""
        self.watcher.stop()
        self.agents.send_signal(signal.SIGTERM)
        out, _ = self.agents.communicate(timeout=30)
        self.stub.stop()
        found = re.search(r"calls (\d+)", out)
        return int(found.group(1)) if found else -1


def start_cluster(nodes: int, pods: int, down: int = 0) -> Cluster:
    """Stub API server with the fleet, the real cache filled from it, agents in a subprocess.

    The last ``down`` nodes have no agent.
    """
    fleet = build_fleet(nodes, pods)
    stub = StubApiServer().start()
    stub.load(pods=fleet.pod_objects, nodes=fleet.node_objects)
    del fleet
    for _attempt in range(5):
        port = free_port()
        agents = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "agent_host.py"),
                "--nodes",
                str(nodes),
                "--pods",
                str(pods),
                "--port",
                str(port),
                "--down",
                str(down),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert agents.stdout is not None
        if agents.stdout.readline().strip() == "ready":
            break
        agents.wait()
    else:
        raise SystemExit("could not start the agent host")
    cache = ClusterCache()
    watcher = ClusterWatcher(cache, stub.configuration())
    start = time.perf_counter()
    watcher.start()
    while not cache.ready:
        time.sleep(0.01)
    return Cluster(stub, cache, watcher, agents, port, time.perf_counter() - start)


def serve_process(
    kubeconfig: str,
    agent_port: int,
    *flags: str,
    tree: Path = ROOT,
    cpus: set[int] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``gpugraph serve`` in its own process, open (``--auth none``); it and its URL.

    ``tree``: the checkout whose code it runs (another one, to compare two versions);
    ``cpus``: the only CPUs it may run on (set before it starts, so its threads inherit it).
    """
    port = free_port()
    pin = None if cpus is None else functools.partial(os.sched_setaffinity, 0, cpus)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "api.cli",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--kubeconfig",
            kubeconfig,
            "--agent-port",
            str(agent_port),
            "--log-level",
            "warning",
            "--auth",
            "none",
            *flags,
        ],
        cwd=tree,
        # One C call between fork and exec, which is what ``preexec_fn`` is safe for.
        preexec_fn=pin,
    )
    return server, f"http://127.0.0.1:{port}"


# ------------------------------------------------------------- the benchmarks


async def full_cluster(nodes: int, pods: int, repeat: int, traversals: int) -> dict[str, Any]:
    """Benchmarks 1 and 2 at one cluster size."""
    cluster = start_cluster(nodes, pods)
    # As ``gpugraph serve`` does once its cache is ready.
    tune_gc_for_serving()
    calls = CallLog()
    # TTL 0: every query fans out to every agent, so the figures include the fan-out.
    pool = AgentPool(
        NodeIpDiscovery(cluster.cache, cluster.port), ttl=0.0, client_factory=calls.factory
    )
    schema = build_schema()
    try:

        async def query() -> Any:
            return await schema.execute(
                FULL_QUERY, context_value=GraphContext(cluster.cache, pool, schema.state)
            )

        await query()  # connect every channel once
        server, slowest, agent_calls, errors = [], [], [], 0
        for _ in range(repeat):
            calls.durations.clear()
            gc.collect()
            [duration], result = await timed(query, 1)
            server.append(duration)
            slowest.append(max(calls.durations, default=0.0))
            agent_calls.append(len(calls.durations))
            errors += len(result.errors or [])
        data = result.data
        body = orjson.dumps({"data": data})
        floor = floor_seconds(data)

        snapshots = {n.name: (await pool.fetch(n.name)).snapshot for n in cluster.cache.nodes()}
        preloaded_schema = build_schema()
        preloaded = Preloaded(snapshots)
        same_schema, same_result = await timed(
            lambda: preloaded_schema.execute(
                FULL_QUERY,
                context_value=GraphContext(cluster.cache, preloaded, preloaded_schema.state),
            ),
            repeat,
        )
        reference = plain_reference(cluster.cache, snapshots)
        plain, plain_result = await timed(lambda: reference.execute(FULL_QUERY), repeat)
        assert plain_result.data == same_result.data == data, "the reference answers differ"

        # Benchmark 2: one worker pod, walked to its node and back to its neighbours.
        worker = random.Random(7).choice([p for p in cluster.cache.pods() if p.node_name])
        variables = {"ns": worker.namespace, "name": worker.name}
        walk_calls: list[int] = []

        async def traversal() -> Any:
            calls.durations.clear()
            r = await schema.execute(
                TRAVERSAL_QUERY,
                variable_values=variables,
                context_value=GraphContext(cluster.cache, pool, schema.state),
            )
            walk_calls.append(len(calls.durations))
            assert r.errors is None, r.errors
            return r

        await traversal()
        walk, _ = await timed(traversal, traversals)
    finally:
        await pool.close()
        served = cluster.stop()
    overhead = [s - a for s, a in zip(server, slowest, strict=True)]
    return {
        "nodes": nodes,
        "pods": len(cluster.cache.pods()),
        "fill": cluster.fill_seconds,
        "p50": pct(server, 50),
        "p99": pct(server, 99),
        "bytes": len(body),
        "calls": statistics.median(agent_calls),
        "errors": errors,
        "served": served,
        "slowest": statistics.median(slowest),
        "overhead": statistics.median(overhead),
        "floor": floor,
        "plain": statistics.median(plain),
        "same": statistics.median(same_schema),
        "walk_p50": pct(walk, 50),
        "walk_p99": pct(walk, 99),
        "walk_calls": max(walk_calls),
    }


async def concurrency(
    nodes: int, pods: int, clients: int, seconds: float, ttl: float
) -> dict[str, Any]:
    """Benchmark 3: ``clients`` HTTP clients polling a real ``gpugraph serve`` for ``seconds``."""
    cluster = start_cluster(nodes, pods)
    tmp = tempfile.mkdtemp(prefix="gpugraph-bench-")
    kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
    server, base = serve_process(
        kubeconfig, cluster.port, "--snapshot-ttl", str(ttl), "--no-graphiql"
    )
    latencies: list[float] = []
    errors = 0
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for _ in range(600):
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            await http.post("/graphql", json={"query": FULL_QUERY})
            before = agent_calls(await http.get("/metrics"))
            deadline = time.perf_counter() + seconds

            async def client() -> None:
                nonlocal errors
                while time.perf_counter() < deadline:
                    start = time.perf_counter()
                    try:
                        r = await http.post("/graphql", json={"query": FULL_QUERY})
                        if r.status_code != 200 or r.json().get("errors"):
                            errors += 1
                    except httpx.HTTPError:
                        errors += 1
                    latencies.append(time.perf_counter() - start)

            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(clients)))
            elapsed = time.perf_counter() - started
            after = agent_calls(await http.get("/metrics"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "nodes": nodes,
        "clients": clients,
        "seconds": elapsed,
        "queries": len(latencies),
        "qps": len(latencies) / elapsed,
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "calls_per_s": (after - before) / elapsed,
        "expected": nodes / ttl,
        "errors": errors,
    }


def agent_calls(metrics: httpx.Response) -> float:
    """Total agent calls in the server's Prometheus text."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.text.splitlines()
        if line.startswith("gpugraph_agent_calls_total")
    )


# ------------------------------------------------------------------- printing


def report(full: list[dict[str, Any]], conc: dict[str, Any] | None, pods: int) -> None:
    print(
        f"\n# gpugraph cluster benchmark — {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}\n"
    )
    print("## 1. Full-cluster query (8 GPUs x 4 processes per node), fan-out to real agents\n")
    print(
        "| nodes | pods | p50 ms | p99 ms | response | agent calls | slowest call ms | "
        "overhead ms | orjson floor ms | overhead/floor | plain strawberry ms | "
        "overhead/plain | same schema preloaded ms | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in full:
        print(
            f"| {r['nodes']} | {r['pods']} | {ms(r['p50'])} | {ms(r['p99'])} | "
            f"{r['bytes'] / 1e6:.2f} MB | {r['calls']:.0f} | {ms(r['slowest'])} | "
            f"{ms(r['overhead'])} | {r['floor'] * 1000:.2f} | {r['overhead'] / r['floor']:.0f}x | "
            f"{ms(r['plain'])} | {r['overhead'] / r['plain']:.2f}x | {ms(r['same'])} | "
            f"{r['errors']} |"
        )
    print("\n## 2. Single-worker traversal pod -> node -> gpus -> processes -> pod\n")
    print("| nodes | p50 ms | p99 ms | agent calls per query |")
    print("|---|---|---|---|")
    for r in full:
        print(f"| {r['nodes']} | {ms(r['walk_p50'])} | {ms(r['walk_p99'])} | {r['walk_calls']} |")
    if conc:
        print(
            f"\n## 3. {conc['clients']} concurrent HTTP clients, full-cluster query, "
            f"{conc['nodes']} nodes, real uvicorn\n"
        )
        print(
            "| seconds | queries | queries/s | p50 ms | p99 ms | agent calls/s | "
            "N / snapshot-ttl | errors |"
        )
        print("|---|---|---|---|---|---|---|---|")
        c = conc
        print(
            f"| {c['seconds']:.1f} | {c['queries']} | {c['qps']:.1f} | {ms(c['p50'])} | "
            f"{ms(c['p99'])} | {c['calls_per_s']:.1f} | {c['expected']:.1f} | {c['errors']} |"
        )
    print(
        f"\nKubernetes cache fill ({pods:,}-pod lists, in-process watcher): "
        + ", ".join(f"N={r['nodes']}: {r['fill']:.2f} s" for r in full)
    )


def add_cluster_sizes(parser: argparse.ArgumentParser) -> None:
    """``--nodes`` (comma-separated sizes) and ``--pods``, as the cluster benchmarks take them."""
    parser.add_argument("--nodes", default="100,1000", help="comma-separated cluster sizes")
    parser.add_argument("--pods", type=int, default=30_000)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_cluster_sizes(parser)
    parser.add_argument("--repeat", type=int, default=30, help="full-cluster queries per size")
    parser.add_argument("--traversals", type=int, default=100)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency-nodes", type=int, default=100)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--skip-concurrency", action="store_true")
    parser.add_argument("--small", action="store_true", help="CI size: 10 nodes, a few seconds")
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.repeat, args.traversals = "10", 300, 3, 10
        args.clients, args.seconds, args.concurrency_nodes = 10, 3.0, 10
    sizes = [int(n) for n in args.nodes.split(",")]
    full = [asyncio.run(full_cluster(n, args.pods, args.repeat, args.traversals)) for n in sizes]
    conc = None
    if not args.skip_concurrency:
        conc = asyncio.run(
            concurrency(args.concurrency_nodes, args.pods, args.clients, args.seconds, args.ttl)
        )
    report(full, conc, args.pods)
    bad = [r for r in full if r["errors"] or r["walk_calls"] != 1] + (
        [conc] if conc and conc["errors"] else []
    )
    if bad:
        raise SystemExit(f"benchmark saw errors: {bad}")


if __name__ == "__main__":
    main()
