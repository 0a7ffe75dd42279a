"""Allocation truth end to end: fake kubelets (real gRPC) behind real agents, through ``serve``.

One cluster holds every mechanism, each on its own node:

- node-plain: nvidia.com/gpu; ml/plain-ok runs on the GPU it was given (GPU-P0),
  ml/stray was given GPU-P0 but runs on GPU-P1;
- node-mig: MIG ``mixed``; ml/mig-a requests nvidia.com/mig-1g.10gb and runs on its MIG device;
- node-ts: time-sliced nvidia.com/gpu.shared; ml/ts-a and ml/ts-b share GPU-T0 as replicas;
- node-dra: DRA with template claims; ml/dra-full (gpu-0), ml/dra-mig (a MIG device
  of gpu-1) and ml/dra-share-a/-b (gpu-0 shared through shareIDs, the API's word only);
- node-api: DRA, but no kubelet socket: claims and slices alone (API_ONLY);
- node-none: no kubelet and no slices: the old spec-based rule, labelled SPEC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from api.demo.cluster.manifests import pod_uid_for
from tests.support.polling import eventually_async
from tests.support.server import GIB, Gpu, GraphTestCluster, Proc, serving

MIG_A, MIG_B = (
    "MIG-a0000000-0000-0000-0000-000000000001",
    "MIG-a0000000-0000-0000-0000-000000000002",
)
DMIG = "MIG-d0000000-0000-0000-0000-000000000001"
DRA_MIG_DEVICE = "gpu-1-mig-1g10gb-9-0"


def _pod(name: str, resource: str = "nvidia.com/gpu", **devices: list[str]) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "name": name,
        "containers": [
            {
                "name": "main",
                "devices": [
                    {"resourceName": resource, "deviceIds": ids} for ids in devices.values()
                ],
            }
        ],
    }


def _dra_pod(name: str, claim: str, *devices: str) -> dict[str, Any]:
    return {
        "namespace": "ml",
        "name": name,
        "containers": [
            {
                "name": "main",
                "claims": [
                    {
                        "claimName": claim,
                        "driver": "gpu.nvidia.com",
                        "pool": "node-dra",
                        "device": d,
                    }
                    for d in devices
                ],
            }
        ],
    }


def build(workdir: Path) -> GraphTestCluster:
    c = GraphTestCluster(workdir)
    uid = lambda name: pod_uid_for("ml", name)  # noqa: E731
    c.add_node(
        "node-plain",
        gpus=[Gpu(0, "GPU-P0", processes=[(101, GIB)]), Gpu(1, "GPU-P1", processes=[(102, GIB)])],
        procs=[Proc(101, "python", uid("plain-ok")), Proc(102, "python", uid("stray"))],
        kubelet={
            "pods": [
                _pod("plain-ok", ids=["GPU-P0"]),
                _pod("stray", ids=["GPU-P0"]),
                _pod("gone", ids=["GPU-P1"]),
            ]
        },
    )
    c.add_pod("plain-ok", "ml", "node-plain", gpu_limit=1)
    c.add_pod("stray", "ml", "node-plain", gpu_limit=1)
    c.add_node(
        "node-mig",
        gpus=[
            Gpu(
                0, "GPU-M0", processes=[(201, GIB)], mig_devices=[MIG_A, MIG_B], mig_of={201: MIG_A}
            )
        ],
        procs=[Proc(201, "python", uid("mig-a"))],
        kubelet={"pods": [_pod("mig-a", "nvidia.com/mig-1g.10gb", ids=[MIG_A])]},
    )
    c.add_pod("mig-a", "ml", "node-mig", gpu_limit=1, gpu_resource="nvidia.com/mig-1g.10gb")
    c.add_node(
        "node-ts",
        gpus=[Gpu(0, "GPU-T0", processes=[(301, GIB), (302, GIB)])],
        procs=[Proc(301, "python", uid("ts-a")), Proc(302, "python", uid("ts-b"))],
        kubelet={
            "pods": [
                _pod("ts-a", "nvidia.com/gpu.shared", ids=["GPU-T0::0"]),
                _pod("ts-b", "nvidia.com/gpu.shared", ids=["GPU-T0::3"]),
            ]
        },
    )
    for name in ("ts-a", "ts-b"):
        c.add_pod(name, "ml", "node-ts", gpu_limit=1, gpu_resource="nvidia.com/gpu.shared")
    c.add_node(
        "node-dra",
        gpus=[
            Gpu(0, "GPU-D0", processes=[(401, GIB), (403, GIB), (404, GIB)]),
            Gpu(1, "GPU-D1", processes=[(402, GIB)], mig_devices=[DMIG], mig_of={402: DMIG}),
        ],
        procs=[
            Proc(401, "python", uid("dra-full")),
            Proc(402, "python", uid("dra-mig")),
            Proc(403, "python", uid("dra-share-a")),
            Proc(404, "python", uid("dra-share-b")),
        ],
        kubelet={
            "pods": [
                _dra_pod("dra-full", "dra-full-gpu-abc12", "gpu-0"),
                _dra_pod("dra-mig", "dra-mig-gpu-abc12", DRA_MIG_DEVICE),
                _dra_pod("dra-share-a", "dra-share-a-gpu-abc12", "gpu-0"),
                _dra_pod("dra-share-b", "dra-share-b-gpu-abc12", "gpu-0"),
            ]
        },
    )
    claims = {
        "dra-full": ClaimDevice("gpu-0", "node-dra"),
        "dra-mig": ClaimDevice(DRA_MIG_DEVICE, "node-dra"),
        "dra-share-a": ClaimDevice("gpu-0", "node-dra", share_id="share-a"),
        "dra-share-b": ClaimDevice("gpu-0", "node-dra", share_id="share-b"),
    }
    for pod, device in claims.items():
        generated = f"{pod}-gpu-abc12"
        c.add_pod(pod, "ml", "node-dra", claims={"gpu": generated})
        c.stub.add_claim(make_resource_claim("ml", generated, [device], reserved_for=[pod]))
    c.stub.add_slice(
        make_resource_slice(
            "node-dra",
            [
                SliceDevice("gpu-0", "GPU-D0"),
                SliceDevice("gpu-1", "GPU-D1"),
                SliceDevice(DRA_MIG_DEVICE, DMIG, "mig", parent_uuid="GPU-D1"),
            ],
        )
    )
    c.add_node(
        "node-api",
        gpus=[Gpu(0, "GPU-A0", processes=[(501, GIB)]), Gpu(1, "GPU-A1", processes=[(502, GIB)])],
        procs=[Proc(501, "python", uid("api-ok")), Proc(502, "python", uid("api-stray"))],
    )
    for pod in ("api-ok", "api-stray"):
        c.add_pod(pod, "ml", "node-api", claims={"gpu": f"{pod}-gpu-x"})
        c.stub.add_claim(
            make_resource_claim("ml", f"{pod}-gpu-x", [ClaimDevice("gpu-0", "node-api")])
        )
    c.stub.add_slice(
        make_resource_slice(
            "node-api", [SliceDevice("gpu-0", "GPU-A0"), SliceDevice("gpu-1", "GPU-A1")]
        )
    )
    c.add_node(
        "node-none",
        gpus=[Gpu(0, "GPU-N0", processes=[(601, GIB)])],
        procs=[Proc(601, "python", uid("old"))],
    )
    c.add_pod("old", "ml", "node-none", gpu_limit=1)
    return c


@pytest.fixture
async def mechanisms(tmp_path: Path) -> Any:
    cluster = build(tmp_path)
    await cluster.start()
    yield cluster
    await cluster.stop()


PROCESSES = """
{
  nodes {
    name allocationSource allocationSourceReason
    gpus {
      uuid
      allocations { pod { name } containerName mechanism resource deviceId shared migDeviceUuid }
      processes { pid allocation allocationRule pod { name gpuRequest } }
    }
  }
  pod(namespace: "ml", name: "dra-mig") {
    gpuRequest
    gpuAllocations { deviceId mechanism migDeviceUuid resource }
  }
}
"""


async def test_every_mechanism_end_to_end(mechanisms: GraphTestCluster) -> None:
    async with serving(mechanisms.settings()) as server:

        async def settled() -> dict[str, Any] | None:
            result = await server.query(PROCESSES)
            nodes = result.get("data", {}).get("nodes") or []
            sources = {n["name"]: n["allocationSource"] for n in nodes}
            # The DRA cache and the first kubelet answers come in the background.
            if sources.get("node-dra") != "POD_RESOURCES" or sources.get("node-api") != "API_ONLY":
                return None
            # The claims reflector syncs apart from the slices' (which API_ONLY needs).
            if (result["data"].get("pod") or {}).get("gpuRequest") is None:
                return None
            return result

        result = await eventually_async(settled, timeout=20, what="every node's allocation data")
        assert "errors" not in result, result
        nodes = {n["name"]: n for n in result["data"]["nodes"]}
        verdicts = {
            p["pod"]["name"] if p["pod"] else p["pid"]: (p["allocation"], p["allocationRule"])
            for n in nodes.values()
            for g in n["gpus"]
            for p in g["processes"]
        }
        requests = {
            p["pod"]["name"]: p["pod"]["gpuRequest"]
            for n in nodes.values()
            for g in n["gpus"]
            for p in g["processes"]
            if p["pod"]
        }
        pr, api = "POD_RESOURCES", "RESOURCE_CLAIMS"
        assert verdicts == {
            "plain-ok": ("ALLOCATED", pr),
            "stray": ("NOT_ALLOCATED", pr),
            "mig-a": ("ALLOCATED", pr),
            "ts-a": ("ALLOCATED", pr),
            "ts-b": ("ALLOCATED", pr),
            "dra-full": ("ALLOCATED", pr),
            "dra-mig": ("ALLOCATED", pr),
            "dra-share-a": ("ALLOCATED", pr),
            "dra-share-b": ("ALLOCATED", pr),
            "api-ok": ("ALLOCATED", api),
            "api-stray": ("NOT_ALLOCATED", api),
            "old": ("UNKNOWN", "SPEC"),
        }
        assert requests == {
            "plain-ok": 1, "stray": 1, "mig-a": 1, "ts-a": 1, "ts-b": 1, "dra-full": 1,
            "dra-mig": 1, "dra-share-a": 1, "dra-share-b": 1, "api-ok": 1, "api-stray": 1,
            "old": 1,
        }  # fmt: skip
        assert nodes["node-none"]["allocationSource"] == "NONE"
        assert "socket" in nodes["node-none"]["allocationSourceReason"]
        assert nodes["node-plain"]["allocationSourceReason"] is None

        gpus = {g["uuid"]: g for n in nodes.values() for g in n["gpus"]}
        ts = sorted(
            (a["pod"]["name"], a["deviceId"], a["shared"]) for a in gpus["GPU-T0"]["allocations"]
        )
        assert ts == [("ts-a", "GPU-T0::0", True), ("ts-b", "GPU-T0::3", True)]
        (mig,) = gpus["GPU-M0"]["allocations"]
        assert (mig["migDeviceUuid"], mig["resource"]) == (MIG_A, "nvidia.com/mig-1g.10gb")
        d0 = sorted(
            (a["pod"]["name"], a["mechanism"], a["shared"], a["resource"])
            for a in gpus["GPU-D0"]["allocations"]
        )
        # Both routes report each DRA device: it appears once; the shares come from the claims.
        assert d0 == [
            ("dra-full", "DRA", False, "ml/dra-full-gpu-abc12"),
            ("dra-share-a", "DRA", True, "ml/dra-share-a-gpu-abc12"),
            ("dra-share-b", "DRA", True, "ml/dra-share-b-gpu-abc12"),
        ]
        assert [a["containerName"] for a in gpus["GPU-D0"]["allocations"]] == ["main"] * 3
        # The plain node's kubelet still lists a pod the API server never had.
        assert [a["pod"] for a in gpus["GPU-P1"]["allocations"]] == [None]
        dra_mig = result["data"]["pod"]
        assert dra_mig["gpuRequest"] == 1
        assert dra_mig["gpuAllocations"] == [
            {
                "deviceId": DRA_MIG_DEVICE,
                "mechanism": "DRA",
                "migDeviceUuid": DMIG,
                "resource": "ml/dra-mig-gpu-abc12",
            }
        ]

        metrics = (await server.client.get("/metrics")).text
        unallocated = sorted(
            line
            for line in metrics.splitlines()
            if line.startswith("gpugraph_container_gpu_unallocated{")
        )
        assert len(unallocated) == 2, unallocated
        assert 'pod="stray"' in unallocated[1] and 'gpu_uuid="GPU-P1"' in unallocated[1]
        assert 'container="main"' in unallocated[1] and 'node="node-plain"' in unallocated[1]
        assert 'pod="api-stray"' in unallocated[0] and 'gpu_uuid="GPU-A1"' in unallocated[0]
        unrequested = [
            line
            for line in metrics.splitlines()
            if line.startswith("gpugraph_pod_gpus_unrequested{")
        ]
        assert unrequested == [], "MIG, time-sliced and DRA pods request what they use"

        gpu_pods = (await server.client.get("/gpu-pods", params={"worker_id": "stray"})).json()
        by_pod = {
            e["pod"]: e["allocation"] for g in gpu_pods["GpuPods"].values() for e in g["pidPods"]
        }
        assert by_pod == {"plain-ok": "ALLOCATED", "stray": "NOT_ALLOCATED"}


async def test_a_pod_deleted_after_the_kubelets_answer_is_unknown(
    mechanisms: GraphTestCluster,
) -> None:
    async with serving(mechanisms.settings()) as server:
        query = (
            '{ node(name: "node-plain") { gpus { processes { pid allocation pod { name } } } } }'
        )

        async def stray_verdict() -> str | None:
            result = await server.query(query)
            node = (result.get("data") or {}).get("node")
            for gpu in node["gpus"] if node else ():
                for p in gpu["processes"]:
                    if p["pid"] == 102:
                        return str(p["allocation"])
            return None

        await eventually_async(
            lambda: _equals(stray_verdict(), "NOT_ALLOCATED"), timeout=20, what="the stray judged"
        )
        # The kubelet still lists the pod; the API server has deleted it.
        mechanisms.stub.delete_pod("ml", "stray")
        await eventually_async(
            lambda: _equals(stray_verdict(), "UNKNOWN"), timeout=20, what="the deleted pod unknown"
        )
        metrics = (await server.client.get("/metrics")).text
        assert 'pod="stray"' not in metrics, "no series for an UNKNOWN verdict"


async def _equals(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def test_the_occupancy_log_keeps_the_kubelets_verdict_after_the_pod_is_gone(
    tmp_path: Path,
) -> None:
    cluster = GraphTestCluster(tmp_path, history=True)
    uid = lambda name: pod_uid_for("ml", name)  # noqa: E731
    cluster.add_node(
        "node-plain",
        gpus=[
            Gpu(0, "GPU-P0", processes=[(101, GIB), (103, GIB)]),
            Gpu(1, "GPU-P1", processes=[(102, GIB)]),
        ],
        procs=[
            Proc(101, "python", uid("plain-ok")),
            Proc(102, "python", uid("stray")),
            Proc(103, "Xorg"),
        ],
        kubelet={"pods": [_pod("plain-ok", ids=["GPU-P0"]), _pod("stray", ids=["GPU-P0"])]},
    )
    cluster.add_pod("plain-ok", "ml", "node-plain", gpu_limit=1)
    cluster.add_pod("stray", "ml", "node-plain", gpu_limit=1)
    query = (
        '{ gpuHistory(since: "2000-01-01T00:00:00Z") '
        "{ edges { node { pid podName pod { name } allocation } } } }"
    )
    await cluster.start()
    try:
        async with serving(cluster.settings()) as server:

            async def judged() -> dict[int, tuple[str | None, str]] | None:
                result = await server.query(query)
                edges = (result.get("data") or {}).get("gpuHistory", {}).get("edges", [])
                found = {e["node"]["pid"]: (e["node"]["podName"], e["node"]["allocation"])
                         for e in edges}  # fmt: skip
                return found if found.get(102, (None, ""))[1] == "NOT_ALLOCATED" else None

            found = await eventually_async(judged, timeout=20, what="the stray's record judged")
            assert found == {
                101: ("plain-ok", "ALLOCATED"),
                102: ("stray", "NOT_ALLOCATED"),
                103: (None, "NO_POD"),
            }
            # The verdict stays with the record once the pod is gone from the API server.
            cluster.stub.delete_pod("ml", "stray")

            async def gone() -> dict[str, Any] | None:
                result = await server.query(query)
                edges = result["data"]["gpuHistory"]["edges"]
                stray = next(e["node"] for e in edges if e["node"]["pid"] == 102)
                return stray if stray["pod"] is None else None

            stray = await eventually_async(gone, timeout=20, what="the stray's pod gone")
            assert (stray["podName"], stray["allocation"]) == ("stray", "NOT_ALLOCATED")
    finally:
        await cluster.stop()
