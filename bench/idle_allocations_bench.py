"""``idleGpuAllocations`` at fleet size: the list of idle allocations over every node's snapshot.

A fleet of ``--nodes`` nodes of 8 GPUs (the shared fleet of ``bench/fleet.py``),
each process's container given its GPU by the kubelet, the agent's verdict on
every allocation: one in four ``IDLE``, one in four ``UNUSED``. Snapshots in memory, as
the agent pool holds them. Measured per query (p50, p95):

- ``idleGpuAllocations`` with fresh snapshot objects every run (every node's
  graph objects and allocation join built again, as with ``--snapshot-ttl 0``)
  and with the same snapshots (the join kept per snapshot, as between two
  refreshes);
- beside it, the same fan-out asking only each GPU's UUID (``gpus { uuid }``),
  and every GPU's allocations with their use (``gpus { allocations { use } }``).

``python bench/idle_allocations_bench.py`` (1,000 nodes, 32,000 pods);
``--small`` for CI (50 nodes, 1,600 pods).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api.kube.cache import ClusterCache  # noqa: E402
from api.kube.parse import node_record, pod_record  # noqa: E402
from bench.allocation_bench import allocated  # noqa: E402
from bench.fleet import build_fleet, node_name  # noqa: E402
from graph_schema.context import GraphContext  # noqa: E402
from graph_schema.interfaces import Received  # noqa: E402
from graph_schema.schema import build_schema  # noqa: E402
from node_resolver.models import AllocationUse, AllocationUseState, NodeSnapshot  # noqa: E402

QUERIES = {
    "idle": "{ idleGpuAllocations { nodeName gpuUuid deviceId use idleSince idleSeconds "
    "pod { namespace name } } }",
    "gpus": "{ gpus { uuid } }",
    "uses": "{ gpus { uuid allocations { deviceId use idleSeconds } } }",
}
NOW = 1_800_000_000.0


class Snapshots:
    """Each node's snapshot, as a fresh copy per fetch or the same object every time."""

    def __init__(self, snapshots: dict[str, NodeSnapshot], *, fresh: bool) -> None:
        self._snapshots = snapshots
        self._fresh = fresh

    async def fetch(self, node: str) -> Received:
        snapshot = self._snapshots[node]
        return Received(copy.copy(snapshot) if self._fresh else snapshot)

    def agent_address(self, node: str) -> str | None:
        return None


def judged(snapshot: NodeSnapshot) -> NodeSnapshot:
    """The snapshot with the agent's verdicts: a quarter IDLE, a quarter UNUSED."""
    allocations = snapshot.allocations
    assert allocations is not None
    uses = {}
    n = 0
    for c in allocations.containers:
        for d in c.devices:
            kind = (AllocationUse.ACTIVE, AllocationUse.ACTIVE, AllocationUse.IDLE,
                    AllocationUse.UNUSED)[n % 4]  # fmt: skip
            idle = kind in (AllocationUse.IDLE, AllocationUse.UNUSED)
            seconds = 600.0 + 37.0 * n if idle else 0.0
            uses[(c.namespace, c.pod, c.container, d.resource, d.device_id)] = AllocationUseState(
                kind, idle_since=NOW - seconds if idle else None, idle_seconds=seconds
            )
            n += 1
    return dataclasses.replace(snapshot, allocations=dataclasses.replace(allocations, uses=uses))


async def costs(nodes: int, pods: int, runs: int) -> dict[str, Any]:
    fleet = build_fleet(nodes, pods)
    cache = ClusterCache()
    records = [pod_record(p) for p in fleet.pod_objects]
    cache.replace_pods(records)
    cache.replace_nodes([node_record(n) for n in fleet.node_objects])
    by_uid = {r.uid: (r.namespace, r.name) for r in records}
    snapshots = {
        node_name(i): judged(
            allocated(NodeSnapshot(node_name(i), fleet.sample(i), sampled_at=NOW), by_uid)
        )
        for i in range(nodes)
    }
    kinds = {
        "idle_fresh": ("idle", True),
        "idle_kept": ("idle", False),
        "gpus_fresh": ("gpus", True),
        "uses_fresh": ("uses", True),
    }
    schemas = {kind: build_schema() for kind in kinds}
    sources = {kind: Snapshots(snapshots, fresh=fresh) for kind, (_, fresh) in kinds.items()}
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    listed: dict[str, int] = {}

    async def once(kind: str) -> None:
        schema = schemas[kind]
        query = QUERIES[kinds[kind][0]]
        start = time.perf_counter()
        result = await schema.execute(
            query, context_value=GraphContext(cache, sources[kind], schema.state)
        )
        results[kind].append(time.perf_counter() - start)
        assert not result.errors, result.errors
        assert result.data is not None
        listed[kind] = len(next(iter(result.data.values())))

    for kind in kinds:  # warm-up
        await once(kind)
    results = {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind in kinds:
            await once(kind)
    return {"nodes": nodes, "pods": pods, "listed": listed, **results}


def _ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI size")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=32_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.runs = 50, 1600, 3
    found = asyncio.run(costs(args.nodes, args.pods, args.runs))
    print(
        f"idleGpuAllocations at {found['nodes']} nodes x 8 GPUs, {found['pods']} pods "
        f"({found['listed']['idle_fresh']} idle allocations listed; p50, p95 of {args.runs})"
    )
    print("| query | p50 | p95 |")
    print("|---|---|---|")
    names = {
        "idle_fresh": "idleGpuAllocations, fresh snapshots",
        "idle_kept": "idleGpuAllocations, the same snapshots",
        "gpus_fresh": "gpus { uuid }, fresh snapshots",
        "uses_fresh": "gpus { allocations { use } }, fresh snapshots",
    }
    for kind, name in names.items():
        values = found[kind]
        print(f"| {name} | {_ms(values, 0.5)} | {_ms(values, 0.95)} |")
    assert statistics.median(found["idle_kept"]) > 0


if __name__ == "__main__":
    main()
