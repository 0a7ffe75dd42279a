"""Keep-warm by default against the fixed flags, side by side in one run (issue 35).

One cluster (the stub API server, real agents in ``bench/agent_host.py``), and
the real ``gpugraph serve`` started once per configuration against it:

- ``default``: no flags (adaptive keep-warm within a quarter of one core);
- ``fixed``: ``--snapshot-ttl 5 --snapshot-keep-warm 60``, the old advice;
- ``off``: ``--snapshot-keep-warm 0``, every poll reads every node afresh.

Every server gets ``--agent-timeout 10``: the agents run on the benchmark
machine's cores too.

One client polls the issue's full-cluster query every ``--interval`` seconds;
for each configuration the run prints the latency (p50, p90), the orjson
floor of the very answer and the ratio, the server's CPU over the polling
(whole process, from /proc, and per node for a poll that read every node
afresh), how long the server had held the snapshots each poll read (the
answer's ``snapshotAgeSeconds``, added to the query, less the agent's own
sample age, asked directly), a single-worker walk half way between polls,
and what the keep-warm series on the
server's /metrics say (nodes kept warm, refresh CPU, interval).

Last, a storm: 8 clients each asking for one node's GPUs, a different node
every time, round the whole cluster again and again, against default flags;
the line says what background refreshing cost meanwhile against its budget.

Run ``python bench/keep_warm_bench.py`` (1,000 nodes) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import orjson  # noqa: E402
from cluster_bench import (  # noqa: E402
    FULL_QUERY,
    TRAVERSAL_QUERY,
    Cluster,
    pct,
    serve_process,
    start_cluster,
)

from api.agents.pool import CHANNEL_OPTIONS  # noqa: E402
from api.demo.cluster import write_kubeconfig  # noqa: E402
from node_resolver.client import AgentClient  # noqa: E402

# The full-cluster query, with each node's snapshot age (1% more answer).
POLLED_QUERY = FULL_QUERY.replace("{ nodes { name", "{ nodes { name agent { snapshotAgeSeconds }")
CONFIGURATIONS: dict[str, tuple[str, ...]] = {
    "default": (),
    "fixed": ("--snapshot-ttl", "5", "--snapshot-keep-warm", "60"),
    "off": ("--snapshot-keep-warm", "0"),
}
_TICKS = os.sysconf("SC_CLK_TCK")
# The agents share the benchmark machine's cores with the server: a fan-out to all of
# them takes seconds there, which the default 2 s deadline would turn into failures.
AGENT_TIMEOUT = 10.0
COMMON_FLAGS = ("--no-graphiql", "--request-timeout", "60", "--agent-timeout", str(AGENT_TIMEOUT))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def series(text: str, name: str) -> float:
    """One sample of the server's Prometheus text, by its name (and labels, as written);
    NaN when absent."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


def floor_seconds(body: bytes, repeat: int = 10) -> float:
    """Median time orjson takes to encode the parsed answer: the floor of producing it."""
    data = orjson.loads(body)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        orjson.dumps(data)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


async def wait_ready(http: httpx.AsyncClient) -> float:
    """Seconds until /readyz answers 200."""
    start = time.perf_counter()
    for _ in range(1200):
        try:
            if (await http.get("/readyz")).status_code == 200:
                return time.perf_counter() - start
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("the server did not become ready")


async def agent_ages(cluster: Cluster) -> dict[str, float]:
    """When each agent took its sample, on this process's clock, asked directly: the
    agents scanned once, at start, so an answer's age past it is how long the server
    had held the snapshot."""
    clients = {
        n.name: AgentClient(f"{n.internal_ip}:{cluster.port}", options=CHANNEL_OPTIONS)
        for n in cluster.cache.nodes()
    }

    async def sampled(client: AgentClient) -> float:
        reply = await client.get_snapshot(timeout=60)
        # Its age was taken as the reply was built, a network hop before now.
        return time.perf_counter() - reply.age_seconds

    try:
        times = await asyncio.gather(*(sampled(c) for c in clients.values()))
        return dict(zip(clients, times, strict=True))
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()))


async def measure(
    cluster: Cluster,
    kubeconfig: str,
    name: str,
    flags: tuple[str, ...],
    polls: int,
    interval: float,
) -> dict[str, Any]:
    """One configuration: a server of its own, polled by one client."""
    sampled_at = await agent_ages(cluster)
    server, base = serve_process(kubeconfig, cluster.port, *COMMON_FLAGS, *flags)
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            await wait_ready(http)
            # Two polls to connect every channel and let the server see repeated reads.
            for _ in range(2):
                await http.post("/graphql", json={"query": POLLED_QUERY})
                await asyncio.sleep(interval)
            metrics_before = (await http.get("/metrics")).text
            cpu_before = cpu_seconds(server.pid)
            started = time.perf_counter()
            latencies: list[float] = []
            per_poll_cpu: list[float] = []
            held: list[float] = []
            walks: list[float] = []
            pick = random.Random(7)
            pods = [p for p in cluster.cache.pods() if p.node_name]
            errors = 0
            body = b""
            next_poll = time.perf_counter()
            for _ in range(polls):
                await asyncio.sleep(max(0.0, next_poll - time.perf_counter()))
                next_poll += interval
                cpu = cpu_seconds(server.pid)
                start = time.perf_counter()
                r = await http.post("/graphql", json={"query": POLLED_QUERY})
                latencies.append(time.perf_counter() - start)
                per_poll_cpu.append(cpu_seconds(server.pid) - cpu)
                body = r.content
                if r.status_code == 200:
                    for node in orjson.loads(body)["data"]["nodes"]:
                        age = node["agent"]["snapshotAgeSeconds"]
                        if age is not None and node["name"] in sampled_at:
                            # The answer's age less the agent's own when the poll was sent:
                            # how long the server had held it (less, where the answer was
                            # one an identical query within the TTL had shared).
                            held.append(age - (start - sampled_at[node["name"]]))
                if r.status_code != 200 or b'"errors"' in body:
                    errors += 1
                # Half way to the next poll, a single-worker walk from a pod to its node.
                await asyncio.sleep(max(0.0, next_poll - interval / 2 - time.perf_counter()))
                pod = pick.choice(pods)
                variables = {"ns": pod.namespace, "name": pod.name}
                start = time.perf_counter()
                w = await http.post(
                    "/graphql", json={"query": TRAVERSAL_QUERY, "variables": variables}
                )
                walks.append(time.perf_counter() - start)
                if w.status_code != 200 or b'"errors"' in w.content:
                    errors += 1
            await asyncio.sleep(max(0.0, next_poll - time.perf_counter()))
            elapsed = time.perf_counter() - started
            cpu_total = cpu_seconds(server.pid) - cpu_before
            metrics_after = (await http.get("/metrics")).text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    refresh = series(metrics_after, "gpugraph_keep_warm_refresh_seconds_total") - series(
        metrics_before, "gpugraph_keep_warm_refresh_seconds_total"
    )
    floor = floor_seconds(body)
    nodes = cluster.cache.node_count
    return {
        "name": name,
        "flags": " ".join(flags) or "(none)",
        "polls": polls,
        "errors": errors,
        "p50": pct(latencies, 50),
        "p90": pct(latencies, 90),
        "walk_p50": pct(walks, 50),
        "bytes": len(body),
        "floor": floor,
        "ratio": pct(latencies, 50) / floor,
        "server_cores": cpu_total / elapsed,
        "poll_cpu_per_node": statistics.median(per_poll_cpu) / nodes,
        "refresh_cores": refresh / elapsed,
        "kept": series(metrics_after, "gpugraph_keep_warm_nodes"),
        "interval": series(metrics_after, "gpugraph_keep_warm_interval_seconds"),
        "held_p50": pct(held, 50) if held else float("nan"),
        "held_max": max(held, default=float("nan")),
    }


NARROW_QUERY = "query($node: String!) { gpus(nodeName: $node) { uuid processes { pid } } }"


async def storm(cluster: Cluster, kubeconfig: str, clients: int, seconds: float) -> dict[str, Any]:
    """Default flags, and ``clients`` clients asking for one node's GPUs each time, a
    different node every time, round the whole cluster again and again for ``seconds``."""
    server, base = serve_process(kubeconfig, cluster.port, *COMMON_FLAGS)
    names = sorted(n.name for n in cluster.cache.nodes())
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            await wait_ready(http)
            before = (await http.get("/metrics")).text
            cpu_before = cpu_seconds(server.pid)
            started = time.perf_counter()
            deadline = started + seconds
            asked = 0
            kept_peak = 0.0

            async def client(offset: int) -> None:
                nonlocal asked
                i = offset
                while time.perf_counter() < deadline:
                    variables = {"node": names[i % len(names)]}
                    await http.post(
                        "/graphql", json={"query": NARROW_QUERY, "variables": variables}
                    )
                    asked += 1
                    i += clients

            async def watch() -> None:
                nonlocal kept_peak
                while time.perf_counter() < deadline:
                    await asyncio.sleep(1.0)
                    text = (await http.get("/metrics")).text
                    kept_peak = max(kept_peak, series(text, "gpugraph_keep_warm_nodes"))

            await asyncio.gather(watch(), *(client(k) for k in range(clients)))
            elapsed = time.perf_counter() - started
            cpu_total = cpu_seconds(server.pid) - cpu_before
            after = (await http.get("/metrics")).text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    refresh = series(after, "gpugraph_keep_warm_refresh_seconds_total") - series(
        before, "gpugraph_keep_warm_refresh_seconds_total"
    )
    return {
        "queries": asked,
        "qps": asked / elapsed,
        "rounds": asked / len(names),
        "server_cores": cpu_total / elapsed,
        "refresh_cores": refresh / elapsed,
        "kept_peak": kept_peak,
        "kept_end": series(after, "gpugraph_keep_warm_nodes"),
        "interval": series(after, "gpugraph_keep_warm_interval_seconds"),
        "budget": series(after, "gpugraph_keep_warm_budget_cores"),
    }


def report_storm(nodes: int, seconds: float, r: dict[str, Any]) -> None:
    """The storm's line."""
    print(
        f"\nA storm of distinct narrow queries (default flags), {seconds:g} s: "
        f"{r['queries']} queries, {r['qps']:.0f}/s, each node read {r['rounds']:.1f} times; "
        f"server CPU {r['server_cores']:.2f} cores, refresh CPU {r['refresh_cores']:.3f} "
        f"cores (budget {r['budget']:g}); nodes kept warm: at most {r['kept_peak']:.0f} of "
        f"{nodes}, {r['kept_end']:.0f} at the end; interval {r['interval']:.2f} s"
    )


def report(nodes: int, pods: int, interval: float, rows: list[dict[str, Any]]) -> None:
    """The side-by-side table."""
    print(
        f"\n# keep-warm benchmark — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}\n"
        f"{nodes} nodes x 8 GPUs x 4 processes, {pods} pods; the full-cluster query polled "
        f"every {interval:g} s by one client\n"
    )
    header = (
        "| configuration | flags | p50 | p90 | answer | orjson floor | p50 / floor "
        "| server CPU (cores) | CPU per node per poll | refresh CPU (cores, /metrics) "
        "| kept warm | interval | held p50 / max | walk p50 | errors |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(
            f"| {r['name']} | `{r['flags']}` | {r['p50'] * 1000:.0f} ms | {r['p90'] * 1000:.0f} ms "
            f"| {r['bytes'] / 1e6:.1f} MB | {r['floor'] * 1000:.1f} ms | {r['ratio']:.0f}x "
            f"| {r['server_cores']:.2f} | {r['poll_cpu_per_node'] * 1000:.2f} ms "
            f"| {r['refresh_cores']:.3f} | {r['kept']:.0f} | {r['interval']:.2f} s "
            f"| {r['held_p50']:.2f} / {r['held_max']:.2f} s | {r['walk_p50'] * 1000:.1f} ms "
            f"| {r['errors']} |"
        )


async def run(
    nodes: int, pods: int, polls: int, interval: float, names: list[str], storm_seconds: float
) -> None:
    """Every configuration against one cluster, one after the other, then the storm."""
    cluster = start_cluster(nodes, pods)
    tmp = tempfile.mkdtemp(prefix="gpugraph-bench-")
    stormed = None
    try:
        kubeconfig = write_kubeconfig(os.path.join(tmp, "kubeconfig"), cluster.stub.url)
        rows = []
        for name in names:
            rows.append(
                await measure(cluster, kubeconfig, name, CONFIGURATIONS[name], polls, interval)
            )
            # As it comes, so that a later failure leaves the figures so far.
            print(rows[-1], flush=True)
        if storm_seconds > 0:
            stormed = await storm(cluster, kubeconfig, 8, storm_seconds)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(nodes, len(cluster.cache.pods()), interval, rows)
    if stormed is not None:
        report_storm(nodes, storm_seconds, stormed)


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    parser.add_argument(
        "--configurations", default=",".join(CONFIGURATIONS), help="which, comma-separated"
    )
    parser.add_argument(
        "--storm-seconds", type=float, default=60.0, help="the narrow-query storm (0: none)"
    )
    parser.add_argument(
        "--small", action="store_true", help="CI size: 10 nodes, 4 polls, a 5 s storm"
    )
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.polls, args.storm_seconds = 10, 300, 4, 5.0
    names = [n for n in args.configurations.split(",") if n]
    asyncio.run(run(args.nodes, args.pods, args.polls, args.interval, names, args.storm_seconds))


if __name__ == "__main__":
    main()
