"""Idle allocations end to end: real agents judging each allocation, the fake kubelet over real
gRPC, real SQLite occupancy logs, through ``serve`` to GraphQL and the server's /metrics.

One node, its agent on a hand-moved clock and scanned by the test (no sleeps):

- GPU-0: ml/busy runs at 45% SM (ACTIVE);
- GPU-1: ml/idle runs at 45% SM until the scan at 120 s, then at 0% (IDLE since then);
- GPU-2: research/notebook holds it with no process (UNUSED);
- a device that matches no GPU, given to ml/lost (UNKNOWN);
- GPU-3, two MIG devices (half of it each): ml/mig-a has a process on its own (ACTIVE: NVML gives no
  per-process utilization there), ml/mig-b has none (UNUSED);
- GPU-4, time-sliced: ml/ts-a at 30% (ACTIVE), ml/ts-b at 0% (IDLE), each weighs 1/2;
- GPU-5 and GPU-6 through DRA: ml/dra at 0% (IDLE), ml/dra-busy at 80% (ACTIVE).

Scans every minute from 0 to 900 s with a 600 s idle window. A cluster of its own shares two
GPUs by DRA consumable capacity: each claim's allocation counts its share of the GPU.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.demo.cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from api.demo.cluster.manifests import pod_uid_for
from tests.end_to_end.test_auth import bearer
from tests.support.clock import ManualClock
from tests.support.demo_process import free_port
from tests.support.history_agents import DAY
from tests.support.polling import eventually_async
from tests.support.prometheus import promtool, require_prometheus, running_prometheus
from tests.support.server import GIB, AgentNode, Gpu, GraphTestCluster, Proc, Served, serving

T0 = DAY
WINDOW = 600.0
MIG_A = "MIG-a0000000-0000-0000-0000-000000000001"
MIG_B = "MIG-a0000000-0000-0000-0000-000000000002"

# (namespace, pod, pid, resource, device IDs); pid None: no process.
Holder = tuple[str, str, int | None, str, list[str]]
HOLDERS: list[Holder] = [
    ("ml", "busy", 10, "nvidia.com/gpu", ["GPU-0"]),
    ("ml", "idle", 11, "nvidia.com/gpu", ["GPU-1"]),
    ("research", "notebook", None, "nvidia.com/gpu", ["GPU-2"]),
    ("ml", "lost", None, "nvidia.com/gpu", ["GPU-not-on-this-node"]),
    ("ml", "mig-a", 13, "nvidia.com/mig-1g.10gb", [MIG_A]),
    ("ml", "mig-b", None, "nvidia.com/mig-1g.10gb", [MIG_B]),
    ("ml", "ts-a", 14, "nvidia.com/gpu.shared", ["GPU-4::0"]),
    ("ml", "ts-b", 15, "nvidia.com/gpu.shared", ["GPU-4::1"]),
]
DRA_HOLDERS = [("ml", "dra", 16, "gpu-5"), ("ml", "dra-busy", 17, "gpu-6")]


def every_pod(holders: list[Holder]) -> list[tuple[str, str, int | None]]:
    """(namespace, pod, pid) of every holder, the DRA ones included."""
    return [
        *((ns, name, pid) for ns, name, pid, _, _ in holders),
        *((ns, name, pid) for ns, name, pid, _ in DRA_HOLDERS),
    ]


def _kubelet(holders: list[Holder]) -> dict[str, Any]:
    pods: list[dict[str, Any]] = [
        {
            "namespace": ns,
            "name": name,
            "containers": [
                {"name": "main", "devices": [{"resourceName": resource, "deviceIds": ids}]}
            ],
        }
        for ns, name, _, resource, ids in holders
    ]
    pods += [
        {
            "namespace": ns,
            "name": name,
            "containers": [
                {
                    "name": "main",
                    "claims": [
                        {
                            "claimName": f"{name}-gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-a",
                            "device": device,
                        }
                    ],
                }
            ],
        }
        for ns, name, _, device in DRA_HOLDERS
    ]
    return {"pods": pods}


def _gpus(idle_sm: int) -> list[Gpu]:
    """The node's GPUs; ml/idle's process runs at ``idle_sm`` percent."""
    return [
        Gpu(0, "GPU-0", processes=[(10, GIB)], sm_of={10: 45}),
        Gpu(1, "GPU-1", processes=[(11, GIB)], sm_of={11: idle_sm}),
        Gpu(2, "GPU-2"),
        Gpu(3, "GPU-3", processes=[(13, GIB)], mig_devices=[MIG_A, MIG_B], mig_of={13: MIG_A}),
        Gpu(4, "GPU-4", processes=[(14, GIB), (15, GIB)], sm_of={14: 30, 15: 0}),
        Gpu(5, "GPU-5", processes=[(16, GIB)], sm_of={16: 0}),
        Gpu(6, "GPU-6", processes=[(17, GIB)], sm_of={17: 80}),
    ]


def build(
    workdir: Path, holders: list[Holder] = HOLDERS
) -> tuple[GraphTestCluster, AgentNode, ManualClock]:
    clock = ManualClock(T0)
    cluster = GraphTestCluster(workdir, history=True)
    procs = [
        Proc(pid, "python", pod_uid_for(ns, name))
        for ns, name, pid in every_pod(holders)
        if pid is not None
    ]
    node = cluster.add_node(
        "node-a",
        gpus=_gpus(45),
        procs=procs,
        kubelet=_kubelet(holders),
        clock=clock,
        # The test scans: the agent's own thread scans once, at start.
        interval=1e6,
        idle_after=WINDOW,
    )
    for ns, name, _ in every_pod(holders):
        cluster.add_pod(name, ns, "node-a")
    return cluster, node, clock


class Timeline:
    """The cluster, served, with its agent scanned along the module docstring's timeline."""

    def __init__(
        self,
        cluster: GraphTestCluster,
        node: AgentNode,
        clock: ManualClock,
        holders: list[Holder] = HOLDERS,
    ) -> None:
        self.cluster, self.node, self.clock = cluster, node, clock
        self.holders = holders

    def scan_at(self, at: float) -> None:
        self.clock.now = T0 + at
        self.node.scan()

    async def run(
        self, server: Served, after_scan: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        """Wait for the server's pod names to reach the agent, then scan 60 s apart to 900 s
        (``after_scan`` awaited after each, with the scan's time)."""
        judge = self.node.sampler.judge if self.node.sampler is not None else None
        assert judge is not None
        uids = [pod_uid_for(ns, name) for ns, name, _ in every_pod(self.holders)]
        await eventually_async(
            lambda: all(judge.pod_names.get(uid) is not None for uid in uids),
            what="the server's pod names on the agent",
        )
        for minute in range(1, 16):
            if minute == 3:
                self.node.write_gpus(_gpus(0))
            self.scan_at(60.0 * minute)
            if after_scan is not None:
                await after_scan(T0 + 60.0 * minute)


@pytest.fixture
async def timeline(tmp_path: Path) -> AsyncIterator[tuple[Timeline, Served]]:
    cluster, node, clock = build(tmp_path)
    await cluster.start()
    try:
        settings = cluster.settings(auth_mode="kubernetes", snapshot_ttl=0.0)
        async with serving(settings) as server:
            run = Timeline(cluster, node, clock)
            await run.run(server)
            yield run, server
    finally:
        await cluster.stop()


ALLOCATIONS = """{
  nodes { name gpus { uuid allocations {
    pod { namespace name } containerName mechanism deviceId shared migDeviceUuid gpuUuid nodeName
    use idleSince idleSeconds } } }
  idleGpuAllocations { pod { namespace name } deviceId gpuUuid nodeName use idleSince idleSeconds }
}"""

USAGE = """query ($since: DateTime!, $until: DateTime!) {
  gpuUsage(since: $since, until: $until, groupBy: [NAMESPACE]) {
    namespace gpuSeconds allocatedGpuSeconds idleAllocatedGpuSeconds
  }
}"""


def _iso(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


async def ask(server: Served, query: str, token: str, **variables: Any) -> dict[str, Any]:
    response = await server.client.post(
        "/graphql", json={"query": query, "variables": variables}, headers=bearer(token)
    )
    body: dict[str, Any] = response.json()
    assert "errors" not in body, body
    return body["data"]


async def test_each_verdict_of_each_mechanism_reaches_graphql(
    timeline: tuple[Timeline, Served],
) -> None:
    run, server = timeline
    admin = run.cluster.stub.reviews.token_of("admin")
    data = await ask(server, ALLOCATIONS, admin)
    (node,) = data["nodes"]
    listed = {a["pod"]["name"]: a for gpu in node["gpus"] for a in gpu["allocations"] if a["pod"]}
    assert {name: a["use"] for name, a in listed.items()} == {
        "busy": "ACTIVE",
        "idle": "IDLE",
        "notebook": "UNUSED",
        "mig-a": "ACTIVE",
        "mig-b": "UNUSED",
        "ts-a": "ACTIVE",
        "ts-b": "IDLE",
        "dra": "IDLE",
        "dra-busy": "ACTIVE",
    }
    assert {a["mechanism"] for a in listed.values()} == {"DEVICE_PLUGIN", "DRA"}
    assert listed["mig-b"]["migDeviceUuid"] == MIG_B and listed["ts-b"]["shared"]
    # Idle since the last scan that saw it run; UNUSED since the allocation began.
    assert listed["idle"]["idleSince"] == _iso(T0 + 120)
    assert listed["idle"]["idleSeconds"] == 780
    assert listed["notebook"]["idleSeconds"] == 900
    for name in ("busy", "mig-a", "ts-a", "dra-busy"):
        assert (listed[name]["idleSince"], listed[name]["idleSeconds"]) == (None, 0)

    # The device that matches no GPU is on no GPU's list, but the pod's own list says UNKNOWN.
    pod = await ask(
        server,
        '{ pod(namespace: "ml", name: "lost") { gpuAllocations { use idleSince idleSeconds } } }',
        admin,
    )
    assert pod["pod"]["gpuAllocations"] == [{"use": "UNKNOWN", "idleSince": None,
                                              "idleSeconds": None}]  # fmt: skip

    # Every IDLE or UNUSED allocation, longest idle first (ties by node, namespace, pod).
    idle = [(a["pod"]["name"], a["use"], a["idleSeconds"]) for a in data["idleGpuAllocations"]]
    assert idle == [
        ("dra", "IDLE", 900),
        ("mig-b", "UNUSED", 900),
        ("ts-b", "IDLE", 900),
        ("notebook", "UNUSED", 900),
        ("idle", "IDLE", 780),
    ]
    assert {a["nodeName"] for a in data["idleGpuAllocations"]} == {"node-a"}
    assert data["idleGpuAllocations"][1]["gpuUuid"] == "GPU-3"

    filtered = await ask(
        server,
        "{ long: idleGpuAllocations(minIdleSeconds: 800) { pod { name } }"
        ' research: idleGpuAllocations(namespace: "research") { pod { name } }'
        ' onA: idleGpuAllocations(nodeName: "node-a") { pod { name } } }',
        admin,
    )
    assert [a["pod"]["name"] for a in filtered["long"]] == ["dra", "mig-b", "ts-b", "notebook"]
    assert [a["pod"]["name"] for a in filtered["research"]] == ["notebook"]
    assert [a["pod"]["name"] for a in filtered["onA"]] == [name for name, _, _ in idle]


async def test_allocated_and_idle_gpu_seconds_of_the_timeline_by_namespace(
    timeline: tuple[Timeline, Served],
) -> None:
    run, server = timeline
    admin = run.cluster.stub.reviews.token_of("admin")
    data = await ask(server, USAGE, admin, since=_iso(T0), until=_iso(T0 + 900))
    rows = {r["namespace"]: r for r in data["gpuUsage"]}
    # ml: four whole devices 900 s each, the device on no GPU counted whole too; the two MIG
    # devices (sizes unknown: half of GPU-3 each) and the two replicas at 1/2.
    ml, research = rows["ml"], rows["research"]
    assert ml["allocatedGpuSeconds"] == pytest.approx(5 * 900 + 4 * 450)
    # IDLE or UNUSED: ml/idle from 120 s, dra all along, mig-b and ts-b (1/2) all along.
    assert ml["idleAllocatedGpuSeconds"] == pytest.approx(780 + 900 + 450 + 450)
    assert (research["allocatedGpuSeconds"], research["idleAllocatedGpuSeconds"]) == (900, 900)
    assert research["gpuSeconds"] == 0  # it never ran anything
    # Any range: the last five minutes.
    late = await ask(server, USAGE, admin, since=_iso(T0 + 600), until=_iso(T0 + 900))
    late_ml = next(r for r in late["gpuUsage"] if r["namespace"] == "ml")
    assert late_ml["allocatedGpuSeconds"] == pytest.approx(5 * 300 + 4 * 150)
    assert late_ml["idleAllocatedGpuSeconds"] == pytest.approx(300 + 300 + 150 + 150)


async def test_a_tenant_sees_only_its_own_allocations_and_usage(
    timeline: tuple[Timeline, Served],
) -> None:
    run, server = timeline
    token = run.cluster.stub.reviews.token_of("research-user")
    data = await ask(server, ALLOCATIONS, token)
    # Its GPU runs nothing of its own, but its pod was given it: the GPU it holds idle is
    # shown, with its allocation alone; the GPUs of other tenants' pods are not.
    shown = {g["uuid"]: g["allocations"] for n in data["nodes"] for g in n["gpus"]}
    assert list(shown) == ["GPU-2"]
    assert [(a["pod"]["name"], a["deviceId"]) for a in shown["GPU-2"]] == [("notebook", "GPU-2")]
    assert [a["pod"]["name"] for a in data["idleGpuAllocations"]] == ["notebook"]
    none = await ask(
        server,
        '{ idleGpuAllocations(namespace: "ml") { deviceId }'
        ' pod(namespace: "research", name: "notebook") { gpuAllocations { deviceId use } } }',
        token,
    )
    assert none["idleGpuAllocations"] == []
    assert none["pod"]["gpuAllocations"] == [{"deviceId": "GPU-2", "use": "UNUSED"}]
    usage = await ask(server, USAGE, token, since=_iso(T0), until=_iso(T0 + 900))
    assert [r["namespace"] for r in usage["gpuUsage"]] == ["research"]


async def test_a_negative_minimum_is_a_user_error(timeline: tuple[Timeline, Served]) -> None:
    run, server = timeline
    admin = run.cluster.stub.reviews.token_of("admin")
    response = await server.client.post(
        "/graphql",
        json={
            "query": "query ($m: Float) { idleGpuAllocations(minIdleSeconds: $m) { deviceId } }",
            "variables": {"m": -1},
        },
        headers=bearer(admin),
    )
    body = response.json()
    assert body.get("data") is None, body
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert "minIdleSeconds" in body["errors"][0]["message"]


async def test_the_servers_metrics_carry_the_agents_allocation_series(
    timeline: tuple[Timeline, Served],
) -> None:
    run, server = timeline
    admin = run.cluster.stub.reviews.token_of("admin")
    response = await server.client.get("/metrics", headers=bearer(admin))
    assert response.status_code == 200, response.text
    text = response.text
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("gpugraph_container_gpu_allocat") or (
                sample.name.startswith("gpugraph_container_gpu_idle_allocated")
            ):
                labels = sample.labels
                assert labels["node"] == "node-a"
                found.setdefault(sample.name, {})[labels["pod"]] = sample.value
    allocated = found["gpugraph_container_gpu_allocated_seconds_total"]
    idle = found["gpugraph_container_gpu_idle_allocated_seconds_total"]
    gauge = found["gpugraph_container_gpu_allocation_idle_seconds"]
    assert allocated["busy"] == 900 and allocated["ts-b"] == 450
    assert idle["idle"] == 780 and idle["busy"] == 0
    assert gauge["notebook"] == 900 and gauge["busy"] == 0
    # A device on no GPU has no series: there is no GPU to label it with.
    assert "lost" not in allocated


# The allocation series, as Prometheus stores each family's samples.
COUNTERS = (
    "gpugraph_container_gpu_allocated_seconds",
    "gpugraph_container_gpu_idle_allocated_seconds",
)


def openmetrics(scrapes: list[tuple[float, str]]) -> str:
    """The allocation counters of each (time, /metrics text) scrape, as OpenMetrics with each
    scrape's time: what Prometheus would have stored had it scraped at those moments."""
    series: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {
        name: {} for name in COUNTERS
    }
    for at, text in scrapes:
        for family in text_string_to_metric_families(text):
            if family.name not in series:
                continue
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = tuple(sorted(sample.labels.items()))
                    series[family.name].setdefault(key, []).append((at, sample.value))
    lines = []
    for name, found in series.items():
        lines.append(f"# TYPE {name} counter")
        for labels, points in sorted(found.items()):
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines += [f"{name}_total{{{text}}} {value} {at:.3f}" for at, value in points]
    return "\n".join([*lines, "# EOF", ""])


async def test_prometheus_increase_by_namespace_agrees_with_gpu_usage(tmp_path: Path) -> None:
    """Over the same 15 minutes, increase() of the server's counters by namespace, in a real
    Prometheus, is gpuUsage's allocatedGpuSeconds (and its idle part) within 10%.

    The server's /metrics is read after each scan and stored with the scan's time
    (promtool's backfill), so time moves by scans alone. The device on no GPU is left
    out: it has no GPU to label a series with (gpuUsage counts it)."""
    require_prometheus()
    holders = [h for h in HOLDERS if h[1] != "lost"]
    cluster, node, clock = build(tmp_path, holders)
    await cluster.start()
    scrapes: list[tuple[float, str]] = []
    try:
        settings = cluster.settings(auth_mode="kubernetes", snapshot_ttl=0.0)
        async with serving(settings) as server:
            admin = cluster.stub.reviews.token_of("admin")

            async def scrape(at: float) -> None:
                response = await server.client.get("/metrics", headers=bearer(admin))
                assert response.status_code == 200, response.text
                scrapes.append((at, response.text))

            await Timeline(cluster, node, clock, holders).run(server, scrape)
            usage = await ask(server, USAGE, admin, since=_iso(T0), until=_iso(T0 + 900))
    finally:
        await cluster.stop()
    source = tmp_path / "scrapes.om"
    source.write_text(openmetrics(scrapes))
    data = tmp_path / "prometheus"
    data.mkdir()
    made = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(data / "data"))
    assert made.returncode == 0, made.stdout + made.stderr
    with running_prometheus(data, free_port(), []) as prometheus:

        def by_namespace(counter: str) -> dict[str, float]:
            query = f"sum by (namespace) (increase({counter}_total[15m]))"
            response = httpx.get(
                f"{prometheus.url}/api/v1/query",
                params={"query": query, "time": T0 + 900},
                timeout=30,
            )
            body = response.json()
            assert body["status"] == "success", body
            return {r["metric"]["namespace"]: float(r["value"][1]) for r in body["data"]["result"]}

        allocated = by_namespace(COUNTERS[0])
        idle = by_namespace(COUNTERS[1])
    rows = {r["namespace"]: r for r in usage["gpuUsage"]}
    assert set(allocated) == set(rows) == {"ml", "research"}
    for namespace, row in rows.items():
        assert allocated[namespace] == pytest.approx(row["allocatedGpuSeconds"], rel=0.1)
        assert idle[namespace] == pytest.approx(row["idleAllocatedGpuSeconds"], rel=0.1)


async def test_the_idle_clock_goes_on_across_an_agent_restart(
    timeline: tuple[Timeline, Served],
) -> None:
    """The agent restarts after the scan at 900 s: its log gives back each allocation's idle
    clock (and the pods' names), so GraphQL's idle times go on from where they were."""
    run, server = timeline
    admin = run.cluster.stub.reviews.token_of("admin")
    await run.node.stop()
    await run.node.start()
    for at in (960.0, 1020.0):
        run.scan_at(at)

    async def idle_now() -> dict[str, tuple[str, float]] | None:
        body = await ask(server, "{ idleGpuAllocations { use idleSeconds pod { name } } }", admin)
        found = {a["pod"]["name"]: (a["use"], a["idleSeconds"]) for a in body["idleGpuAllocations"]}
        return found if len(found) == 5 else None

    found = await eventually_async(idle_now, what="the restarted agent's verdicts")
    # Idle since T0 (ml/idle since 120 s), counted on through the restart.
    assert found == {
        "notebook": ("UNUSED", 1020.0),
        "mig-b": ("UNUSED", 1020.0),
        "ts-b": ("IDLE", 1020.0),
        "dra": ("IDLE", 1020.0),
        "idle": ("IDLE", 900.0),
    }


# (namespace, pod, pid, its DRA device, SM percent, what its claim consumes of the device).
SharedByCapacity = tuple[str, str, int, str, int, dict[str, str]]
SHARED_BY_CAPACITY: list[SharedByCapacity] = [
    ("ml", "quarter", 20, "gpu-0", 0, {"memory": "20Gi"}),
    ("research", "half", 21, "gpu-1", 50, {"memory": "10Gi", "multiprocessors": "66"}),
]
CAPACITY = {"memory": "80Gi", "multiprocessors": "132"}


async def test_a_dra_device_shared_by_capacity_counts_its_share_of_each_second(
    tmp_path: Path,
) -> None:
    """Two claims share GPUs by DRA consumable capacity: ml/quarter's consumes 20Gi of GPU-0's
    80Gi (a quarter), at 0% SM; research/half's 10Gi of GPU-1's memory and 66 of its 132
    multiprocessors (the larger part: a half), at 50%. The server reads the claims and the
    slice from the API server and sends each share with the pod's name; the agent weighs
    each allocation by it, so gpuUsage and the counters count share x seconds."""
    clock = ManualClock(T0)
    cluster = GraphTestCluster(tmp_path, history=True)
    node = cluster.add_node(
        "node-a",
        gpus=[
            Gpu(int(device[-1]), f"GPU-{device[-1]}", processes=[(pid, GIB)], sm_of={pid: sm})
            for _, _, pid, device, sm, _ in SHARED_BY_CAPACITY
        ],
        procs=[
            Proc(pid, "python", pod_uid_for(ns, pod)) for ns, pod, pid, *_ in SHARED_BY_CAPACITY
        ],
        kubelet={
            "pods": [
                {
                    "namespace": ns,
                    "name": pod,
                    "containers": [
                        {
                            "name": "main",
                            "claims": [
                                {
                                    "claimName": f"{pod}-gpu",
                                    "driver": "gpu.nvidia.com",
                                    "pool": "node-a",
                                    "device": device,
                                }
                            ],
                        }
                    ],
                }
                for ns, pod, _, device, _, _ in SHARED_BY_CAPACITY
            ]
        },
        clock=clock,
        interval=1e6,
        idle_after=WINDOW,
    )
    for ns, pod, _, device, _, consumed in SHARED_BY_CAPACITY:
        cluster.add_pod(pod, ns, "node-a", claims={"gpu": f"{pod}-gpu"})
        taken = ClaimDevice(device, "node-a", share_id=f"{pod}-share", consumed=consumed)
        cluster.stub.add_claim(make_resource_claim(ns, f"{pod}-gpu", [taken], reserved_for=[pod]))
    cluster.stub.add_slice(
        make_resource_slice(
            "node-a",
            [
                SliceDevice(device, f"GPU-{device[-1]}", capacity=CAPACITY)
                for *_, device, _, _ in SHARED_BY_CAPACITY
            ],
        )
    )
    await cluster.start()
    try:
        settings = cluster.settings(auth_mode="kubernetes", snapshot_ttl=0.0)
        async with serving(settings) as server:
            judge = node.sampler.judge if node.sampler is not None else None
            assert judge is not None

            def shares() -> dict[str, dict[tuple[str, str, str, str], float]] | None:
                found = {}
                for ns, pod, *_ in SHARED_BY_CAPACITY:
                    named = judge.pod_names.get(pod_uid_for(ns, pod))
                    if named is None or not named.device_shares:
                        return None
                    found[pod] = dict(named.device_shares)
                return found

            sent = await eventually_async(shares, what="the claims' shares on the agent")
            assert sent == {
                "quarter": {("quarter-gpu", "gpu.nvidia.com", "node-a", "gpu-0"): 0.25},
                "half": {("half-gpu", "gpu.nvidia.com", "node-a", "gpu-1"): 0.5},
            }
            for minute in range(1, 16):
                clock.now = T0 + 60.0 * minute
                node.scan()
            admin = cluster.stub.reviews.token_of("admin")
            data = await ask(server, USAGE, admin, since=_iso(T0), until=_iso(T0 + 900))
            rows = {r["namespace"]: r for r in data["gpuUsage"]}
            # ml/quarter idle all along, research/half busy all along.
            assert (rows["ml"]["allocatedGpuSeconds"], rows["ml"]["idleAllocatedGpuSeconds"]) == (
                0.25 * 900,
                0.25 * 900,
            )
            research = rows["research"]
            assert (research["allocatedGpuSeconds"], research["idleAllocatedGpuSeconds"]) == (
                0.5 * 900,
                0,
            )
            response = await server.client.get("/metrics", headers=bearer(admin))
            counted = {
                sample.labels["pod"]: sample.value
                for family in text_string_to_metric_families(response.text)
                for sample in family.samples
                if sample.name == "gpugraph_container_gpu_allocated_seconds_total"
            }
            assert counted == {"quarter": 0.25 * 900, "half": 0.5 * 900}
    finally:
        await cluster.stop()
