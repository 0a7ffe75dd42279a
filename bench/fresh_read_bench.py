"""What reading a node afresh costs the server, piece by piece and end to end (issue 35).

One cluster: the stub API server and real agents (``bench/agent_host.py``,
8 GPUs x 4 processes per node, every process in a pod).

Part 1, in this process, rounds interleaved, CPU per node (every thread of
the process, so gRPC's own threads count), medians:

- ``call``: a GetSnapshot call alone, every node at once, over channels with
  the pool's options (``CHANNEL_OPTIONS``): the reply left as bytes, and
  decoded; beside it ``stream``, a read on the client's long-lived stream
  (``AgentClient.get_snapshot``, as the pool reads), the reply decoded;
- ``records + objects``: the reply decoded into records at once
  (``snapshot_from_proto``), then the graph's objects built from them
  (``ViewCache.gpus``), as the server did before its client took
  ``snapshot_from_wire``;
- ``wire, rows``: the server's own decoding (``snapshot_from_wire``), every GPU's
  fields and its processes' rows read from the agent's message, no graph object built;
- ``wire + objects``: the same, the graph's objects built straight from the
  agent's message (``ViewCache.gpus``);
- ``fetch``: ``AgentPool.fetch`` of every node (TTL 0): the call, the decoding,
  the pool;
- ``query``: the full-cluster query through the schema and the plan over that
  pool, its answer encoded: all of a fresh read but HTTP.

Part 2, end to end: the real ``gpugraph serve`` with ``--snapshot-keep-warm 0``,
polled with the issue's full-cluster query further apart than the snapshot
TTL, so every poll reads every node afresh; the server's CPU per node per
poll, from /proc (all its threads): the mean, which counts the polls where
the cyclic garbage collector ran, and the median. ``--trees`` names the code each server
runs: ``.`` for this checkout as it is, or a git revision (its files from
``git archive``); several run side by side against the same agents, polls
alternating, so all meet the same load. To compare two commits alone, name
both (uncommitted changes in the checkout then count in neither).

Run ``python bench/fresh_read_bench.py`` (1,000 nodes) or ``--small`` (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import orjson  # noqa: E402
import uvloop  # noqa: E402
from cluster_bench import FULL_QUERY, Cluster, serve_process, start_cluster  # noqa: E402
from grpc import aio  # noqa: E402
from http_load import process_cpu_seconds  # noqa: E402
from keep_warm_bench import wait_ready  # noqa: E402
from scale_bench import alternate, paths  # noqa: E402
from strawberry.http import process_result  # noqa: E402

from api.agents.discovery import NodeIpDiscovery  # noqa: E402
from api.agents.pool import CHANNEL_OPTIONS, AgentPool  # noqa: E402
from api.demo.cluster import write_kubeconfig  # noqa: E402
from api.lifecycle.gc_tuning import tune_gc_for_serving  # noqa: E402
from graph_schema.views import ViewCache  # noqa: E402
from node_resolver.client import AgentClient  # noqa: E402
from node_resolver.codec import snapshot_from_proto, snapshot_from_wire  # noqa: E402
from node_resolver.generated import agent_pb2, agent_pb2_grpc  # noqa: E402

GET_SNAPSHOT = "/gpugraph.agent.v1.NodeAgent/GetSnapshot"
AGENT_TIMEOUT = 10.0
# A poll reads every node afresh when it comes later than the snapshot TTL (1 s).
POLL_GAP = 1.25

Step = Callable[[], Awaitable[Any]]


async def part1(cluster: Cluster, rounds: int) -> dict[str, list[float]]:
    """The pieces of a fresh read, in this process: CPU seconds per node, per round."""
    cache = cluster.cache
    names = [n.name for n in cache.nodes()]
    targets = {n.name: f"{n.internal_ip}:{cluster.port}" for n in cache.nodes()}
    channels = [aio.insecure_channel(t, options=list(CHANNEL_OPTIONS)) for t in targets.values()]
    clients = [AgentClient(t, options=CHANNEL_OPTIONS) for t in targets.values()]
    request = agent_pb2.GetSnapshotRequest()
    replies: list[bytes] = []
    raw_calls = [c.unary_unary(GET_SNAPSHOT, None, None) for c in channels]
    decoded_calls = [agent_pb2_grpc.NodeAgentStub(c).GetSnapshot for c in channels]

    async def call() -> None:
        wire = request.SerializeToString()
        replies[:] = await asyncio.gather(*(c(wire, timeout=AGENT_TIMEOUT) for c in raw_calls))

    async def call_decoded() -> None:
        await asyncio.gather(*(c(request, timeout=AGENT_TIMEOUT) for c in decoded_calls))

    async def stream() -> None:
        await asyncio.gather(*(c.get_snapshot(timeout=AGENT_TIMEOUT) for c in clients))

    records_views, wire_views = ViewCache(), ViewCache()

    async def records() -> None:
        for name, reply in zip(names, replies, strict=True):
            pb = agent_pb2.Snapshot.FromString(reply)
            records_views.gpus(name, snapshot_from_proto(pb), cache)

    async def wire_rows() -> None:
        for reply in replies:
            sample = snapshot_from_wire(agent_pb2.Snapshot.FromString(reply)).sample
            for _ in sample.gpu_rows():
                pass

    async def wire() -> None:
        for name, reply in zip(names, replies, strict=True):
            pb = agent_pb2.Snapshot.FromString(reply)
            wire_views.gpus(name, snapshot_from_wire(pb), cache)

    pool = AgentPool(
        NodeIpDiscovery(cache, cluster.port), ttl=0.0, timeout=AGENT_TIMEOUT, keep_warm=0.0
    )

    async def fetch() -> None:
        await asyncio.gather(*(pool.fetch(n) for n in names))

    _, planned, _ = paths(pool, cache)

    async def query() -> None:
        result = await planned()
        assert not result.errors, result.errors
        orjson.dumps(process_result(result))

    steps: dict[str, Step] = {
        "call": call,
        "call, decoded": call_decoded,
        "stream, decoded": stream,
        "records + objects": records,
        "wire, rows": wire_rows,
        "wire + objects": wire,
        "fetch": fetch,
        "query": query,
    }
    try:
        for step in steps.values():
            await step()  # connects every channel, builds the plan
        seconds = await alternate(steps, rounds, time.process_time)
    finally:
        await pool.close()
        await asyncio.gather(*(c.close(None) for c in channels), *(c.close() for c in clients))
    return {name: [s / len(names) for s in each] for name, each in seconds.items()}


def serve(tree: Path, kubeconfig: str, agent_port: int) -> tuple[subprocess.Popen[bytes], str]:
    """``gpugraph serve`` from ``tree``'s code, keep-warm off; the process and its URL."""
    return serve_process(
        kubeconfig,
        agent_port,
        "--no-graphiql",
        "--request-timeout",
        "60",
        "--agent-timeout",
        str(AGENT_TIMEOUT),
        "--snapshot-keep-warm",
        "0",
        # cluster_bench runs it with ``-m`` in the tree, so the tree's own packages come
        # first on the path, ahead of the installed (editable) checkout.
        tree=tree,
    )


def tree_at(revision: str, into: Path) -> Path:
    """The files of git revision ``revision`` of this checkout, written under ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


async def part2(
    cluster: Cluster, kubeconfig: str, trees: dict[str, Path], polls: int
) -> dict[str, dict[str, Any]]:
    """Each tree's server, polled in turn; CPU per node per poll, and the answers' size."""
    nodes = cluster.cache.node_count
    servers = {name: serve(tree, kubeconfig, cluster.port) for name, tree in trees.items()}
    out: dict[str, dict[str, Any]] = {
        name: {"cpu": [], "latency": [], "bytes": 0, "errors": 0} for name in trees
    }
    try:
        clients = {
            name: httpx.AsyncClient(base_url=url, timeout=60) for name, (_, url) in servers.items()
        }
        try:
            for http in clients.values():
                await wait_ready(http)
            # Two polls each to connect every channel, build the plan, and let the
            # pod names the servers push to the agents on start go out.
            for _ in range(2):
                for http in clients.values():
                    await http.post("/graphql", json={"query": FULL_QUERY})
                    await asyncio.sleep(POLL_GAP)
            for _ in range(polls):
                for name, http in clients.items():
                    pid = servers[name][0].pid
                    before = process_cpu_seconds(pid)
                    start = time.perf_counter()
                    r = await http.post("/graphql", json={"query": FULL_QUERY})
                    out[name]["latency"].append(time.perf_counter() - start)
                    out[name]["cpu"].append((process_cpu_seconds(pid) - before) / nodes)
                    out[name]["bytes"] = len(r.content)
                    if r.status_code != 200 or b'"errors"' in r.content:
                        out[name]["errors"] += 1
                    await asyncio.sleep(POLL_GAP)
        finally:
            for http in clients.values():
                await http.aclose()
    finally:
        for server, _ in servers.values():
            server.send_signal(signal.SIGTERM)
        for server, _ in servers.values():
            server.wait(timeout=30)
    return out


def micro(seconds: float) -> str:
    """Seconds as whole microseconds."""
    return f"{seconds * 1e6:,.0f} µs"


def report(
    nodes: int, pods: int, one: dict[str, list[float]], two: dict[str, dict[str, Any]]
) -> None:
    """Both parts' tables."""
    print(
        f"\n# fresh-read benchmark — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}\n"
        f"{nodes} nodes x 8 GPUs x 4 processes, {pods} pods\n"
    )
    if one:
        print("| part 1: in process, per node | median | min | max |")
        print("|---|---|---|---|")
    for name, values in one.items():
        print(
            f"| {name} | {micro(statistics.median(values))} | {micro(min(values))} "
            f"| {micro(max(values))} |"
        )
    if two:
        print(
            "\n| part 2: `gpugraph serve`, every node read afresh | server CPU per node per "
            "poll (mean) | median | min | max | poll p50 | answer | polls | errors |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    for name, r in two.items():
        cpu = r["cpu"]
        print(
            f"| {name} | **{statistics.mean(cpu) * 1000:.3f} ms** "
            f"| {statistics.median(cpu) * 1000:.3f} ms | {min(cpu) * 1000:.3f} ms "
            f"| {max(cpu) * 1000:.3f} ms | {statistics.median(r['latency']) * 1000:,.0f} ms "
            f"| {r['bytes'] / 1e3:,.0f} kB | {len(cpu)} | {r['errors']} |"
        )
    if len(two) > 1:
        (first, r0), *rest = two.items()
        for name, r in rest:
            mean = statistics.mean(r["cpu"]) / statistics.mean(r0["cpu"])
            median = statistics.median(r["cpu"]) / statistics.median(r0["cpu"])
            print(f"\n{name} ÷ {first}: mean {mean:.2f}, median {median:.2f}")


async def run(nodes: int, pods: int, rounds: int, polls: int, revisions: list[str]) -> None:
    """Both parts against one cluster."""
    cluster = start_cluster(nodes, pods)
    tmp = Path(tempfile.mkdtemp(prefix="gpugraph-fresh-read-"))
    try:
        # As ``gpugraph serve`` does once its cache is ready.
        tune_gc_for_serving()
        one = await part1(cluster, rounds) if rounds else {}
        two: dict[str, dict[str, Any]] = {}
        if polls:
            kubeconfig = write_kubeconfig(str(tmp / "kubeconfig"), cluster.stub.url)
            trees = {
                name: ROOT if name == "." else tree_at(name, tmp / f"tree-{i}")
                for i, name in enumerate(revisions)
            }
            two = await part2(cluster, kubeconfig, trees, polls)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report(nodes, len(cluster.cache.pods()), one, two)


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=10, help="part 1's rounds (0: none)")
    parser.add_argument(
        "--polls", type=int, default=15, help="part 2's polls of each server (0: none)"
    )
    parser.add_argument(
        "--trees",
        default=".",
        help="part 2's servers, comma-separated: '.' (this checkout) or git revisions",
    )
    parser.add_argument(
        "--small", action="store_true", help="CI size: 10 nodes, 3 rounds and polls"
    )
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.rounds, args.polls = 10, 300, 3, 3
    trees = [t for t in args.trees.split(",") if t]
    uvloop.run(run(args.nodes, args.pods, args.rounds, args.polls, trees))


if __name__ == "__main__":
    main()
