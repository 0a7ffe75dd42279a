"""Pod names pushed to agents from the cache's events: the real cache and pool, fake clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import pytest

from api.agents.pod_names import PodNamePusher, resync_slices
from api.agents.pool import AgentPool
from api.demo.cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from api.demo.cluster.manifests import make_pod, pod_uid_for
from api.kube.cache import ClusterCache
from api.kube.parse import claim_record, slice_record
from api.kube.parse import pod_record as parse_pod
from api.metrics import Metrics
from graph_schema.records import ResourceSliceRecord
from node_resolver.pod_names import PodName
from tests.support.graph import pod_record
from tests.support.polling import eventually_async


class Addresses:
    """Every node's agent at ``<node>:1``."""

    def address(self, node_name: str) -> str:
        return f"{node_name}:1"


class Agents:
    """Fake agent clients that record the names they are sent; ``failing`` nodes refuse."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, PodName]] = {}
        self.failing: set[str] = set()

    def __call__(self, target: str, token: str | None) -> object:
        agents = self
        node = target.split(":")[0]

        class Client:
            async def put_pod_names(
                self, node_name: str, pods: list[PodName], *, timeout: float
            ) -> int:
                assert node_name == node
                if node in agents.failing:
                    raise ConnectionError("agent down")
                known = agents.names.setdefault(node, {})
                known.update({p.uid: p for p in pods})
                return len(pods)

            def close(self) -> Awaitable[None] | None:
                return None

        return Client()


@pytest.fixture
async def world() -> tuple[ClusterCache, Agents, PodNamePusher]:
    cache = ClusterCache()
    agents = Agents()
    pool = AgentPool(Addresses(), client_factory=agents)  # type: ignore[arg-type]
    pusher = PodNamePusher(cache, pool, asyncio.get_running_loop(), batch_seconds=0.01)
    cache.subscribe(pusher.on_change)
    pusher.start()
    return cache, agents, pusher


async def test_the_first_list_names_every_pod_even_before_nodes_are_listed(
    world: tuple[ClusterCache, Agents, PodNamePusher],
) -> None:
    cache, agents, pusher = world
    # Pods land first: the nodes are not listed yet.
    cache.replace_pods(
        [
            pod_record("ml", "a", "node-1", container_ids=["c" * 64]),
            pod_record("ml", "b", "node-2"),
            pod_record("ml", "pending", None),
        ]
    )
    await eventually_async(lambda: len(agents.names) == 2, what="both nodes named")
    named = agents.names["node-1"]["uid-ml-a"]
    assert (named.namespace, named.name, dict(named.containers)) == ("ml", "a", {"c" * 64: "c0"})
    # A pod added later reaches its node on its own.
    cache.upsert_pod(pod_record("research", "late", "node-2"))
    await eventually_async(lambda: "uid-research-late" in agents.names["node-2"], what="late pod")
    await pusher.stop()


async def test_a_failed_push_is_retried(
    world: tuple[ClusterCache, Agents, PodNamePusher], monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.agents.pod_names as module

    monkeypatch.setattr(module, "RETRY_SECONDS", 0.05)
    cache, agents, pusher = world
    agents.failing.add("node-1")
    cache.upsert_pod(pod_record("ml", "a", "node-1"))
    await eventually_async(lambda: pusher.pushed == 0 and "node-1" not in agents.names)
    agents.failing.clear()
    await eventually_async(lambda: "node-1" in agents.names, what="the retry")
    await pusher.stop()


def test_a_resync_goes_out_a_slice_of_the_nodes_at_a_time() -> None:
    nodes = [f"node-{i}" for i in range(1000)]
    slices = resync_slices(nodes, 300.0, 1.0)
    # One slice a second across the period: 1,000 nodes go out 3 or 4 at a time.
    assert len(slices) == 300
    assert {len(s) for s in slices} == {3, 4}
    assert sorted(n for s in slices for n in s) == sorted(nodes)
    # Fewer nodes than steps: one node per slice; none: one empty slice (the loop waits).
    assert resync_slices(["a", "b"], 300.0, 1.0) == [["a"], ["b"]]
    assert resync_slices([], 300.0, 1.0) == [[]]


async def test_every_nodes_names_go_out_again_at_the_resync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import api.agents.pod_names as module

    monkeypatch.setattr(module, "RESYNC_STEP_SECONDS", 0.05)
    cache = ClusterCache()
    agents = Agents()
    pool = AgentPool(Addresses(), client_factory=agents)  # type: ignore[arg-type]
    cache.replace_pods([pod_record("ml", f"p{i}", f"node-{i}") for i in range(3)])
    pusher = PodNamePusher(
        cache, pool, asyncio.get_running_loop(), batch_seconds=0.01, resync_seconds=0.2
    )
    # No watch events heard: only the resync can name these pods.
    pusher.start()
    try:
        await eventually_async(lambda: len(agents.names) == 3, what="every node named")
        agents.names.clear()
        await eventually_async(lambda: len(agents.names) == 3, what="named again")
    finally:
        await pusher.stop()
        await pool.close()


async def test_a_node_whose_push_failed_counts_as_pending_on_metrics(
    world: tuple[ClusterCache, Agents, PodNamePusher],
) -> None:
    cache, agents, pusher = world
    metrics = Metrics()
    metrics.watch_pod_names(pusher)
    agents.failing.add("node-2")
    cache.replace_pods([pod_record("ml", "a", "node-1"), pod_record("ml", "b", "node-2")])
    await eventually_async(lambda: "node-1" in agents.names, what="node-1 named")
    # node-2's agent refused: it waits for its retry, and the series say so.
    await eventually_async(lambda: pusher.pending_nodes() == 1, what="node-2 pending")
    text = metrics.render().decode()
    assert "gpugraph_pod_names_pending_nodes 1.0" in text
    assert "gpugraph_pod_names_pushed_total 1.0" in text
    await pusher.stop()


GPU = "GPU-00000000-0000-0000-0000-000000000000"
SHARED = ("a-gpu", "gpu.nvidia.com", "node-1", "gpu-0")


def _slice(memory: str) -> ResourceSliceRecord:
    device = SliceDevice("gpu-0", GPU, capacity={"memory": memory})
    return slice_record(make_resource_slice("node-1", [device]))


@pytest.fixture
async def claims_world() -> AsyncIterator[tuple[ClusterCache, Agents, PodNamePusher]]:
    """A cache with its DRA claims and slices, and a pusher that tells agents what they hold."""
    cache = ClusterCache()
    agents = Agents()
    pool = AgentPool(Addresses(), client_factory=agents)  # type: ignore[arg-type]
    pusher = PodNamePusher(
        cache, pool, asyncio.get_running_loop(), claims=cache.dra, batch_seconds=0.01
    )
    cache.subscribe(pusher.on_change)
    cache.dra.subscribe(pusher.on_claims_change)
    pusher.start()
    try:
        yield cache, agents, pusher
    finally:
        await pusher.stop()


async def test_a_pods_name_carries_the_share_of_each_dra_device_its_claims_consume(
    claims_world: tuple[ClusterCache, Agents, PodNamePusher],
) -> None:
    cache, agents, pusher = claims_world
    for pod in ("a", "whole"):
        cache.upsert_pod(parse_pod(make_pod(pod, "ml", "node-1", claims={"gpu": f"{pod}-gpu"})))
    await eventually_async(lambda: len(agents.names.get("node-1", {})) == 2, what="names")
    named = agents.names["node-1"]
    uid = pod_uid_for("ml", "a")
    # The slice first: its capacities push the node's names again, no claim known yet.
    pushed = pusher.pushed
    cache.dra.upsert_slice(_slice("80Gi"))
    await eventually_async(lambda: pusher.pushed == pushed + 2, what="the slice's push")
    assert named[uid].device_shares == {}
    consumed = ClaimDevice("gpu-0", "node-1", share_id="s", consumed={"memory": "20Gi"})
    cache.dra.upsert_claim(
        claim_record(make_resource_claim("ml", "a-gpu", [consumed], reserved_for=["a"]))
    )
    cache.dra.upsert_claim(
        claim_record(
            make_resource_claim(
                "ml", "whole-gpu", [ClaimDevice("gpu-1", "node-1")], reserved_for=["whole"]
            )
        )
    )
    # The claim's arrival pushes its pod's name with the share.
    await eventually_async(lambda: named[uid].device_shares, what="the claim's share")
    assert named[uid].device_shares == {SHARED: 0.25}
    assert named[pod_uid_for("ml", "whole")].device_shares == {}, "no consumed capacity"
    # A slice that changes its device's capacity changes the share.
    cache.dra.upsert_slice(_slice("40Gi"))
    await eventually_async(
        lambda: named[uid].device_shares == {SHARED: 0.5}, what="the slice's new capacity"
    )
    assert named[uid].device_migs == {}, "a whole GPU is no MIG device"


async def test_a_pods_name_says_which_mig_device_each_dra_mig_device_is(
    claims_world: tuple[ClusterCache, Agents, PodNamePusher],
) -> None:
    # The kubelet names it gpu-0-mig-...: the agent knows its parent GPU, and the slice which
    # of the parent's MIG devices it is.
    cache, agents, pusher = claims_world
    mig = "MIG-11111111-0000-0000-0000-000000000000"
    device = SliceDevice("gpu-0-mig-19-0-1", mig, type="mig", parent_uuid=GPU)
    cache.upsert_pod(parse_pod(make_pod("m", "ml", "node-1", claims={"gpu": "m-gpu"})))
    cache.dra.upsert_slice(slice_record(make_resource_slice("node-1", [device])))
    # Its name goes out first; the claim (which consumes no capacity) lands after.
    uid = pod_uid_for("ml", "m")
    await eventually_async(lambda: uid in agents.names.get("node-1", {}), what="the name")
    await eventually_async(lambda: pusher.pending_nodes() == 0, what="the pushes done")
    cache.dra.upsert_claim(
        claim_record(
            make_resource_claim(
                "ml", "m-gpu", [ClaimDevice(device.name, "node-1")], reserved_for=["m"]
            )
        )
    )
    await eventually_async(
        lambda: agents.names["node-1"][uid].device_migs,
        what="the MIG device pushed",
    )
    named = agents.names["node-1"][uid]
    assert named.device_migs == {("m-gpu", "gpu.nvidia.com", "node-1", device.name): mig}
    assert named.device_shares == {}, "it consumes no capacity"
