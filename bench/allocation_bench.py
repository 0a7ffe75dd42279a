"""Allocation truth's costs: the kubelet's PodResources call per agent scan, and the join per query.

1. Agent: a node of 8 GPUs whose kubelet (the fake, real gRPC on a unix
   socket, in its own process as a kubelet is) lists ``--containers``
   containers, each given one GPU. Measured side by side: a scan (sample, PID
   resolution, allocation mapping) and its encoding, with and without the
   poller's last answer, and the ``List`` call itself (made in the poller's
   thread, once per interval: its CPU time in the agent's process is added to
   the per-scan cost, as the poller runs at the scan interval).
2. Server: the full-cluster query over snapshots already in memory, fresh
   snapshot objects every run (so every run builds its views and the join,
   as with ``--snapshot-ttl 0``), with every process's container allocated its
   GPU by the kubelet versus snapshots carrying no allocation data.

``python bench/allocation_bench.py`` (100 containers; 100 nodes, 30,000 pods);
``--small`` for CI (20 containers; 10 nodes, 3,000 pods).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api.kube.cache import ClusterCache  # noqa: E402
from api.kube.parse import node_record, pod_record  # noqa: E402
from bench.fleet import build_fleet, node_name  # noqa: E402
from graph_schema.context import GraphContext  # noqa: E402
from graph_schema.interfaces import Received  # noqa: E402
from graph_schema.schema import build_schema  # noqa: E402
from node_resolver.codec import _container_to_proto, snapshot_to_proto  # noqa: E402
from node_resolver.kubelet_devices import node_allocations  # noqa: E402
from node_resolver.models import (  # noqa: E402
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
    NodeSample,
    NodeSnapshot,
)
from node_resolver.pids import ResolvedProcess  # noqa: E402
from node_resolver.pod_resources import (  # noqa: E402
    PodResourcesClient,
    PodResourcesError,
    PodResourcesPoller,
)
from node_resolver.sampler import Sampler  # noqa: E402

FULL_QUERY = """
{ nodes { name gpus { uuid memoryUsedBytes utilizationGpu
  processes { pid usedMemoryBytes pod { name namespace } } } } }
"""
# The same, asking every process's verdict: the join runs for every node.
JUDGED_QUERY = FULL_QUERY.replace("usedMemoryBytes pod", "usedMemoryBytes allocation pod")


class FixedSource:
    """One node's fixed GPU sample, copied per scan as NVML would build it anew."""

    def __init__(self, sample: NodeSample) -> None:
        self._sample = sample

    def sample(self) -> NodeSample:
        return copy.deepcopy(self._sample)

    def close(self) -> None:
        pass


class EveryPid:
    """Resolves every PID, as if each were alive in its container."""

    def __init__(self, sample: NodeSample) -> None:
        self._refs = {p.pid: p.container for g in sample.gpus for p in g.processes}

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        return {pid: ResolvedProcess(pid, 1, "python3", None, self._refs.get(pid)) for pid in pids}

    def close(self) -> None:
        pass


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.3f} ms"


def agent_costs(containers: int, runs: int) -> dict[str, Any]:
    fleet = build_fleet(1, containers, with_objects=False)
    sample = fleet.sample(0)
    gpus = [g.uuid for g in sample.gpus]
    pods = {
        "pods": [
            {
                "namespace": "team",
                "name": f"worker-{i:04d}",
                "containers": [
                    {
                        "name": "main",
                        "devices": [
                            {"resourceName": "nvidia.com/gpu", "deviceIds": [gpus[i % len(gpus)]]}
                        ],
                    }
                ],
            }
            for i in range(containers)
        ]
    }
    socket_dir = Path(tempfile.mkdtemp(prefix="alloc-bench-", dir="/tmp"))
    socket = socket_dir / "kubelet.sock"
    (socket_dir / "pods.json").write_text(json.dumps(pods))
    # The kubelet in its own process (as on a node), so the agent's CPU time is its own.
    kubelet = subprocess.Popen(
        [sys.executable, "-m", "api.demo.cluster.kubelet", "--socket", str(socket),
         "--file", str(socket_dir / "pods.json")],
        cwd=ROOT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = PodResourcesClient(str(socket), timeout=10)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.list()
                break
            except PodResourcesError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        poller = PodResourcesPoller(client.list)
        list_times, list_cpu = [], []
        for _ in range(runs):
            wall, cpu = time.perf_counter(), time.process_time()
            poller.poll()
            list_times.append(time.perf_counter() - wall)
            list_cpu.append(time.process_time() - cpu)
        state = poller.state()
        assert state.answer is not None and len(state.answer.containers) == containers
        plain = Sampler(FixedSource(sample), EveryPid(sample), node_name="n")
        with_alloc = Sampler(
            FixedSource(sample), EveryPid(sample), node_name="n", pod_resources=poller
        )
        scan_plain, scan_alloc = [], []
        for _ in range(runs):  # interleaved, so drift hits both alike
            scan_plain += timed(plain.scan, 1)
            scan_alloc += timed(with_alloc.scan, 1)
        snap_plain, snap_alloc = plain.latest(), with_alloc.latest()
        assert snap_plain is not None and snap_alloc is not None
        assert snap_alloc.allocations is not None and snap_alloc.allocations.available
        encode_plain = timed(lambda: snapshot_to_proto(snap_plain, now=0.0), runs)
        encode_alloc = timed(lambda: snapshot_to_proto(snap_alloc, now=0.0), runs)
        # When the kubelet's answer changed: mapped and encoded anew (nothing cached).
        changed = state.answer.containers
        map_fresh = timed(lambda: node_allocations(changed, sample.gpus, age_seconds=0), runs)
        mapped = node_allocations(changed, sample.gpus, age_seconds=0)
        encode_fresh = timed(lambda: [_container_to_proto(c) for c in mapped.containers], runs)
        client.close()
    finally:
        kubelet.terminate()
        kubelet.wait(10)
        shutil.rmtree(socket_dir, ignore_errors=True)
    added = (
        statistics.median(scan_alloc)
        - statistics.median(scan_plain)
        + statistics.median(encode_alloc)
        - statistics.median(encode_plain)
        + statistics.median(list_cpu)
    )
    return {
        "containers": containers,
        "list": list_times,
        "list_cpu": list_cpu,
        "scan_plain": scan_plain,
        "scan_alloc": scan_alloc,
        "encode_plain": encode_plain,
        "encode_alloc": encode_alloc,
        "added": added,
        "changed": statistics.median(map_fresh) + statistics.median(encode_fresh),
    }


class Fresh:
    """Hands out a fresh copy of each node's snapshot per fetch (views are rebuilt)."""

    def __init__(self, snapshots: dict[str, NodeSnapshot]) -> None:
        self._snapshots = snapshots

    async def fetch(self, node: str) -> Received:
        return Received(copy.copy(self._snapshots[node]))

    def agent_address(self, node: str) -> str | None:
        return None


def allocated(snapshot: NodeSnapshot, fleet_pods: dict[str, tuple[str, str]]) -> NodeSnapshot:
    """The snapshot with the kubelet's answer: each process's container given its GPU."""
    given: dict[tuple[str, str], list[str]] = {}
    for gpu in snapshot.sample.gpus:
        for p in gpu.processes:
            assert p.container is not None and p.container.pod_uid is not None
            given.setdefault(fleet_pods[p.container.pod_uid], []).append(gpu.uuid)
    containers = tuple(
        ContainerAllocations(
            namespace,
            name,
            "main",
            tuple(
                DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, "nvidia.com/gpu", u, u)
                for u in sorted(set(uuids))
            ),
        )
        for (namespace, name), uuids in given.items()
    )
    return NodeSnapshot(
        node_name=snapshot.node_name,
        sample=snapshot.sample,
        sampled_at=snapshot.sampled_at,
        age_seconds=snapshot.age_seconds,
        allocations=NodeAllocations(available=True, containers=containers),
    )


async def join_costs(nodes: int, pods: int, runs: int) -> dict[str, Any]:
    fleet = build_fleet(nodes, pods)
    cache = ClusterCache()
    records = [pod_record(p) for p in fleet.pod_objects]
    cache.replace_pods(records)
    cache.replace_nodes([node_record(n) for n in fleet.node_objects])
    by_uid = {r.uid: (r.namespace, r.name) for r in records}
    plain = {
        node_name(i): NodeSnapshot(node_name(i), fleet.sample(i), sampled_at=time.time())
        for i in range(nodes)
    }
    with_alloc = {name: allocated(s, by_uid) for name, s in plain.items()}
    kinds = {
        "plain": (plain, FULL_QUERY),
        "alloc": (with_alloc, FULL_QUERY),
        "plain_judged": (plain, JUDGED_QUERY),
        "alloc_judged": (with_alloc, JUDGED_QUERY),
    }
    schemas = {kind: build_schema() for kind in kinds}
    results: dict[str, list[float]] = {kind: [] for kind in kinds}

    async def once(kind: str) -> None:
        snapshots, query = kinds[kind]
        schema = schemas[kind]
        start = time.perf_counter()
        result = await schema.execute(
            query, context_value=GraphContext(cache, Fresh(snapshots), schema.state)
        )
        results[kind].append(time.perf_counter() - start)
        assert not result.errors, result.errors

    for kind in kinds:  # warm-up
        await once(kind)
    results = {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind in kinds:
            await once(kind)
    return {"nodes": nodes, "pods": pods, **results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI size")
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--query-runs", type=int, default=20)
    args = parser.parse_args()
    if args.small:
        args.containers, args.nodes, args.pods, args.runs, args.query_runs = 20, 10, 3000, 30, 5
    agent = agent_costs(args.containers, args.runs)
    print(f"1. PodResources per agent scan, {agent['containers']} containers, 8 GPUs (p50)")
    print(
        "| List call, wall (poller thread) | its CPU in the agent | scan without | scan with "
        "| encode without | encode with | added per scan | map + encode after a change |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {ms(agent['list'])} | {ms(agent['list_cpu'])} | {ms(agent['scan_plain'])} "
        f"| {ms(agent['scan_alloc'])} "
        f"| {ms(agent['encode_plain'])} | {ms(agent['encode_alloc'])} "
        f"| **{agent['added'] * 1000:.3f} ms** (target <= 2 ms) "
        f"| {agent['changed'] * 1000:.3f} ms |"
    )
    join = asyncio.run(join_costs(args.nodes, args.pods, args.query_runs))
    med = {kind: statistics.median(v) for kind, v in join.items() if isinstance(v, list)}
    print()
    print(f"2. Full-cluster query, {join['nodes']} nodes, {join['pods']:,} pods, fresh snapshots")
    print("| query | no allocation data (p50) | kubelet allocations (p50) | ratio |")
    print("|---|---|---|---|")
    for label, key in (
        ("full-cluster", ""),
        ("full-cluster + every process's allocation", "_judged"),
    ):
        plain, alloc = med[f"plain{key}"], med[f"alloc{key}"]
        print(f"| {label} | {plain * 1000:.1f} ms | {alloc * 1000:.1f} ms "
              f"| **{alloc / plain:.3f}x** (target <= 1.10x) |")  # fmt: skip


if __name__ == "__main__":
    main()
