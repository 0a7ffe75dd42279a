"""``GET /gpu-pods``: the original design's call, over real agents."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from api.http.gpu_pods import gpu_pods_response
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster
from node_resolver.fake_nvml import write_fake_nvml
from node_resolver.models import (
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
)
from tests.support.graph import SmallWorld, gpu_uuid
from tests.support.polling import eventually_async
from tests.support.server import GraphTestCluster, Served, serving


@pytest.fixture
async def server(cluster: GraphTestCluster) -> AsyncIterator[Served]:
    async with serving(cluster.settings(snapshot_ttl=0)) as served:
        yield served


EXPECTED_NODE_0 = {
    "GpuPods": {
        "GPU-node-0-0": {
            "pidPods": [
                {
                    "pid": 1001,
                    "processName": "python",
                    "UsedGpuMemory": 3072,
                    "pod": "worker-0",
                    "allocation": "UNKNOWN",
                },
                {
                    "pid": 1002,
                    "processName": "python",
                    "UsedGpuMemory": 5120,
                    "pod": "worker-1",
                    "allocation": "UNKNOWN",
                },
            ]
        }
    },
    "GpuInfos": {
        "GPU-node-0-0": {
            "uuid": "GPU-node-0-0",
            "gpuName": "NVIDIA H200",
            "usageGpu": 87,
            "allocations": [],
        },
        "GPU-node-0-1": {
            "uuid": "GPU-node-0-1",
            "gpuName": "NVIDIA H200",
            "usageGpu": 12,
            "allocations": [],
        },
    },
}


async def test_returns_the_original_shape_for_the_worker_pods_node(server: Served) -> None:
    response = await server.client.get("/gpu-pods", params={"worker_id": "worker-1"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    body["GpuPods"]["GPU-node-0-0"]["pidPods"].sort(key=lambda p: p["pid"])
    # Only processes that belong to a cached pod are listed (as in the original):
    # GPU-node-0-1's host process and vanished pod's process are not.
    assert body == EXPECTED_NODE_0

    with_namespace = await server.client.get(
        "/gpu-pods", params={"worker_id": "worker-0", "namespace": "ml"}
    )
    assert with_namespace.status_code == 200
    body = with_namespace.json()
    body["GpuPods"]["GPU-node-0-0"]["pidPods"].sort(key=lambda p: p["pid"])
    assert body == EXPECTED_NODE_0

    other_node = await server.client.get("/gpu-pods", params={"worker_id": "trainer-0"})
    assert other_node.json() == {
        "GpuPods": {
            "GPU-node-1-0": {
                "pidPods": [
                    {
                        "pid": 2001,
                        "processName": "torchrun",
                        "UsedGpuMemory": 7168,
                        "pod": "trainer-0",
                        "allocation": "UNKNOWN",
                    }
                ]
            }
        },
        "GpuInfos": {
            "GPU-node-1-0": {
                "uuid": "GPU-node-1-0",
                "gpuName": "NVIDIA H200",
                "usageGpu": 99,
                "allocations": [],
            }
        },
    }


async def test_missing_unknown_unscheduled_and_ambiguous_pods(server: Served) -> None:
    missing = await server.client.get("/gpu-pods")
    assert missing.status_code == 400
    assert "worker_id" in missing.json()["error"]

    unknown = await server.client.get("/gpu-pods", params={"worker_id": "nobody"})
    assert unknown.status_code == 404
    assert "nobody" in unknown.json()["error"]

    wrong_ns = await server.client.get(
        "/gpu-pods", params={"worker_id": "worker-1", "namespace": "team-b"}
    )
    assert wrong_ns.status_code == 404
    assert "team-b/worker-1" in wrong_ns.json()["error"]

    pending = await server.client.get("/gpu-pods", params={"worker_id": "pending-0"})
    assert pending.status_code == 404
    assert "not scheduled" in pending.json()["error"]

    ambiguous = await server.client.get("/gpu-pods", params={"worker_id": "worker-0"})
    assert ambiguous.status_code == 400
    body = ambiguous.json()
    assert body["namespaces"] == ["ml", "other"]
    assert "ml, other" in body["error"]

    # A repeated parameter is the caller's to settle: neither value is picked for them.
    for repeated in (
        "worker_id=worker-1&worker_id=pending-0",
        "worker_id=worker-1&namespace=ml&namespace=other",
    ):
        twice = await server.client.get(f"/gpu-pods?{repeated}")
        assert twice.status_code == 400
        assert "given 2 times; give it once" in twice.json()["error"]

    metrics = (await server.client.get("/metrics")).text
    assert 'gpugraph_gpu_pods_requests_total{status="404"} 3.0' in metrics
    assert 'gpugraph_gpu_pods_requests_total{status="400"} 4.0' in metrics


async def test_an_unreachable_agent_is_a_502_naming_the_node(
    cluster: GraphTestCluster, server: Served
) -> None:
    await cluster.agents["node-1"].stop()
    response = await server.client.get("/gpu-pods", params={"worker_id": "trainer-0"})
    assert response.status_code == 502
    body = response.json()
    assert body["node"] == "node-1"
    assert "node-1" in body["error"]
    # Other nodes still answer.
    fine = await server.client.get("/gpu-pods", params={"worker_id": "worker-1"})
    assert fine.status_code == 200


async def test_an_agent_that_reads_no_gpu_is_a_502_in_graphqls_words(
    cluster: GraphTestCluster, server: Served
) -> None:
    failing = {"gpus": [], "error": "NVML_ERROR_DRIVER_NOT_LOADED"}
    write_fake_nvml(cluster.agents["node-1"].nvml_path, failing)

    async def refused() -> object:
        response = await server.client.get("/gpu-pods", params={"worker_id": "trainer-0"})
        return response if response.status_code == 502 else None

    response = await eventually_async(refused)
    assert response.json() == {
        "error": "GPU sampling failed on node 'node-1': NVML_ERROR_DRIVER_NOT_LOADED",
        "node": "node-1",
    }


@pytest.mark.parametrize(
    ("scope", "infos", "pids"),
    [
        # ml's processes only; the lost GPU runs nothing of ml's, and host processes
        # are never listed here.
        (Scope(pod_namespaces=frozenset({"ml"})), [0, 1], {0: [101, 202], 1: [103]}),
        (Scope(pod_namespaces=frozenset({"serving"})), [], {}),
        # With list nodes every GPU is listed, processes still by namespace.
        (Scope(pod_namespaces=frozenset({"serving"}), all_nodes=True), [0, 1, 2], {}),
    ],
)
async def test_the_answer_shows_what_the_callers_view_may_see(
    scope: Scope, infos: list[int], pids: dict[int, list[int]]
) -> None:
    world = SmallWorld()
    received = await world.agents.fetch("node-a")
    view = VisibleCluster(world.cluster, scope)
    answer = gpu_pods_response(ViewCache().visible_gpus(view, "node-a", received.snapshot), view)
    assert list(answer["GpuInfos"]) == [gpu_uuid("node-a", i) for i in infos]  # type: ignore[call-overload]
    gpu_pods = answer["GpuPods"]
    assert isinstance(gpu_pods, dict)
    assert {u: [p["pid"] for p in g["pidPods"]] for u, g in gpu_pods.items()} == {
        gpu_uuid("node-a", i): found for i, found in pids.items()
    }


@pytest.mark.parametrize(
    ("scope", "shown"),
    [
        (Scope(pod_namespaces=frozenset({"ml"})), ["train-1", "train-2"]),
        (None, ["train-1", "train-2", "old"]),
    ],
)
async def test_each_gpu_carries_its_allocations_use_as_the_caller_may_see_them(
    scope: Scope | None, shown: list[str]
) -> None:
    world = SmallWorld()
    received = await world.agents.fetch("node-a")
    gpu = gpu_uuid("node-a", 0)
    held = [
        ("ml", "train-1", AllocationUseState(AllocationUse.ACTIVE)),
        ("ml", "train-2", AllocationUseState(AllocationUse.IDLE, idle_since=1_800_000_000.0,
                                             idle_seconds=900.0)),
        # Another tenant's, whose pod is gone: UNUSED, withheld from ml.
        ("serving", "old", AllocationUseState(AllocationUse.UNUSED, idle_since=1_799_990_000.0,
                                              idle_seconds=9000.0)),
    ]  # fmt: skip
    containers = []
    uses = {}
    for n, (namespace, pod, use) in enumerate(held):
        device = DeviceAllocation(
            AllocationMechanism.DEVICE_PLUGIN, "nvidia.com/gpu.shared", f"{gpu}::{n}",
            gpu_uuid=gpu, shared=True,
        )  # fmt: skip
        containers.append(ContainerAllocations(namespace, pod, "c0", (device,)))
        uses[(namespace, pod, "c0", device.resource, device.device_id)] = use
    allocations = NodeAllocations(available=True, containers=tuple(containers), uses=uses)
    snapshot = dataclasses.replace(received.snapshot, allocations=allocations)
    view = VisibleCluster(world.cluster, scope or EVERYTHING)
    answer = gpu_pods_response(ViewCache().visible_gpus(view, "node-a", snapshot), view)
    infos = answer["GpuInfos"]
    assert isinstance(infos, dict)
    listed = {a["pod"]: a for a in infos[gpu]["allocations"]}
    assert list(listed) == shown
    assert listed["train-1"] == {
        "namespace": "ml", "pod": "train-1", "container": "c0", "deviceId": f"{gpu}::0",
        "use": "ACTIVE", "idleSince": None, "idleSeconds": 0.0,
    }  # fmt: skip
    assert (listed["train-2"]["use"], listed["train-2"]["idleSeconds"]) == ("IDLE", 900.0)
    assert listed["train-2"]["idleSince"] == "2027-01-15T08:00:00+00:00"
