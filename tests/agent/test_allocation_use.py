"""Allocation use: each allocation judged ACTIVE, IDLE, UNUSED or UNKNOWN, its lifetime and idle
episodes in the occupancy log, and its counters on the agent's /metrics.

A real agent (its gRPC server and /metrics) over a sampler that the test
scans by hand at a hand-moved clock; the fake kubelet's PodResources over
real gRPC on a unix socket, polled right before each scan; the occupancy log
in real SQLite; GPUs from the fake NVML file. Pod names reach the agent
through its own PutPodNames.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.demo.cluster.fake_proc import kubelet_cgroup
from api.demo.cluster.kubelet import FakeKubelet
from node_resolver.allocation_use import AllocationJudge, IdlePolicy, device_weight
from node_resolver.cli import add_agent_arguments
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.history.records import UsageGroup, UsageRow
from node_resolver.history_codec import usage_row_from_proto
from node_resolver.models import (
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    DeviceAllocation,
    GpuSample,
    MigDevice,
    NodeAllocations,
    NodeSample,
    NodeSnapshot,
)
from node_resolver.pod_names import PodName, PodNames
from node_resolver.pod_resources import PodResourcesClient, PodResourcesPoller
from tests.support.agents import (
    AgentThread,
    FakeProc,
    StaticResolver,
    gpu_json,
    nvml_json,
    resolved,
    start_agent_process,
    start_agent_thread,
    write_proc_tree,
)
from tests.support.clock import ManualClock
from tests.support.libnvml import FakeGpu, FakeNode, FakeProcess, build_library, library_env
from tests.support.polling import eventually

NODE = "node-a"
T0 = 1_800_000_000.0
WINDOW = 600.0
# Scans every minute: the judge counts a step between scans up to ten intervals.
INTERVAL = 60.0
GIB = 1 << 30
U = AllocationUse


def gpu(index: int) -> str:
    return f"GPU-{index:08d}-0000-0000-0000-000000000000"


def mig(slot: int) -> str:
    return f"MIG-{slot:08d}-0000-0000-0000-000000000000"


def holder(name: str, *device_ids: str, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A pod of namespace ml whose container main was given ``device_ids``."""
    devices = [{"resourceName": resource, "deviceIds": list(device_ids)}] if device_ids else []
    return {"namespace": "ml", "name": name, "containers": [{"name": "main", "devices": devices}]}


def dra_holder(name: str, *devices: str) -> dict[str, Any]:
    claims = [
        {"claimName": f"{name}-gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": d}
        for d in devices
    ]
    return {"namespace": "ml", "name": name, "containers": [{"name": "main", "claims": claims}]}


def container_id(pod: str) -> str:
    return (pod.encode().hex() * 64)[:64]


def proc(pid: int, sm: int | None, *, mig_uuid: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"pid": pid, "usedMemoryBytes": GIB, "smUtilization": sm}
    if mig_uuid:
        entry["migDeviceUuid"] = mig_uuid
    return entry


class Node:
    """One node's agent, scanned by hand; ``restart`` starts a new agent on the same log."""

    def __init__(self, tmp: Path, sockets: Path, *, idle_after: float = WINDOW) -> None:
        self.tmp = tmp
        self.clock = ManualClock(T0)
        self.nvml = tmp / "nvml.json"
        self.kubelet = FakeKubelet(sockets / "kubelet.sock").start()
        self.kubelet_client = PodResourcesClient(self.kubelet.socket_path)
        self.policy = IdlePolicy(idle_after, 1.0)
        # PID -> its pod; what the PID resolver answers.
        self.owners: dict[int, str] = {}
        self.resolver = StaticResolver({})
        self.gpus([])
        self.agent: AgentThread | None = None
        self.start()

    def start(self) -> None:
        names = PodNames()
        self.poller = PodResourcesPoller(
            self.kubelet_client.list,
            list_replicas=self.kubelet_client.replicas,
            interval=1e6,  # the test polls, right before each scan
            clock=self.clock,
        )
        self.judge = AllocationJudge(
            node_name=NODE, boot_id="boot-1", policy=self.policy, pod_names=names, interval=INTERVAL
        )
        settings = HistorySettings(self.tmp / "history", 30 * 86400.0, flush_interval=1e6)
        self.history = HistoryLog(
            settings, boot_id="boot-1", pod_names=names, clock=self.clock, allocations=self.judge
        )
        # The sampler's own thread scans once at start, then waits out its interval.
        self.agent = start_agent_thread(
            FakeGpuSource(self.nvml),
            node_name=NODE,
            resolver=self.resolver,
            interval=1e6,
            history=self.history,
            pod_resources=self.poller,
            judge=self.judge,
            clock=self.clock,
            metrics=True,
        )

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self.kubelet_client.close()
        self.kubelet.stop()

    # -- what the node runs ----------------------------------------------------------

    def pods(self, *pods: Mapping[str, Any], allocatable: Mapping[str, Sequence[str]] = {}) -> None:
        self.kubelet.set_data({"pods": list(pods), "allocatable": dict(allocatable)})

    def gpus(self, gpus: Sequence[Mapping[str, Any]]) -> None:
        write_fake_nvml(self.nvml, nvml_json(list(gpus)))

    def runs(self, pid: int, pod: str) -> None:
        """PID ``pid`` is in container main of pod ml/``pod``."""
        self.owners[pid] = pod
        self.resolver.processes[pid] = resolved(
            pid, container_id=container_id(pod), pod_uid=f"uid-{pod}"
        )

    def name_pods(
        self,
        *pods: str,
        shares: Mapping[str, float] = {},
        migs: Mapping[str, Mapping[str, str]] = {},
    ) -> None:
        """The server's PutPodNames for ``pods``; ``shares``: pod -> the share of each device
        of its claim (``dra_holder``'s) that the server computed; ``migs``: pod -> device ->
        the MIG device its slice says the device is."""
        names = [
            PodName(
                f"uid-{p}",
                "ml",
                p,
                {container_id(p): "main"},
                {(f"{p}-gpu", "gpu.nvidia.com", NODE, f"gpu-{i}"): shares[p] for i in range(8)}
                if p in shares
                else {},
                {
                    (f"{p}-gpu", "gpu.nvidia.com", NODE, device): uuid
                    for device, uuid in migs.get(p, {}).items()
                },
            )
            for p in pods
        ]
        asyncio.run(self._call(lambda c: c.put_pod_names(NODE, names, timeout=10)))

    # -- scanning and asking -------------------------------------------------------------

    def scan(self, at: float) -> None:
        """One scan at T0 + ``at`` seconds, with the kubelet's answer of that moment."""
        assert self.agent is not None
        self.clock.now = T0 + at
        self.poller.poll()
        self.agent.sampler.scan()

    def snapshot(self) -> NodeSnapshot:
        return asyncio.run(self._call(lambda c: c.get_snapshot(timeout=10)))

    def uses(self) -> dict[tuple[str, str], AllocationUseState]:
        """(pod, device ID) -> its judged use, as the agent's GetSnapshot reply carries it."""
        allocations = self.snapshot().allocations
        assert allocations is not None and allocations.available
        found = {}
        for c in allocations.containers:
            for d in c.devices:
                state = allocations.use_of(c, d)
                assert state is not None, (c.pod, d.device_id)
                found[(c.pod, d.device_id)] = state
        return found

    def usage(self, since: float, until: float, *groups: UsageGroup) -> list[UsageRow]:
        """The agent's GetUsage over [T0 + since, T0 + until)."""
        assert self.agent is not None
        request = agent_pb2.GetUsageRequest(
            since=T0 + since,
            until=T0 + until,
            group_by=[f"USAGE_GROUP_{g.value}" for g in groups],
        )
        with grpc.insecure_channel(self.agent.address) as channel:
            reply = agent_pb2_grpc.NodeAgentStub(channel).GetUsage(request, timeout=10)
        assert reply.status == "ok"
        return [usage_row_from_proto(row, frozenset(groups), NODE) for row in reply.rows]

    def metrics(self) -> dict[str, dict[tuple[str, ...], float]]:
        """Each allocation series by (pod, gpu_uuid, mig_device), from the agent's /metrics."""
        assert self.agent is not None and self.agent.server.metrics is not None
        text = httpx.get(f"http://{self.agent.server.metrics.address}/metrics", timeout=10).text
        out: dict[str, dict[tuple[str, ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if "alloc" in sample.name:
                    key = (sample.labels["pod"], sample.labels["gpu_uuid"],
                           sample.labels.get("mig_device", ""))  # fmt: skip
                    out.setdefault(sample.name, {})[key] = sample.value
        return out

    async def _call(self, call: Any) -> Any:
        assert self.agent is not None
        async with AgentClient(self.agent.address) as client:
            return await call(client)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # A unix socket path must fit in 108 bytes; pytest's tmp_path may not.
    sockets = Path(tempfile.mkdtemp(prefix="au-", dir="/tmp"))
    running = Node(tmp_path, sockets)
    try:
        yield running
    finally:
        running.close()
        shutil.rmtree(sockets, ignore_errors=True)


def scans(node: Node, until: float, start: float = 0.0) -> None:
    """A scan every INTERVAL from ``start`` up to and including ``until``."""
    at = start
    while at <= until:
        node.scan(at)
        at += INTERVAL


# -- each verdict, each kind of allocation ---------------------------------------------------


def test_each_verdict_on_whole_gpus(node: Node) -> None:
    node.pods(
        holder("busy", gpu(0)),
        holder("idle", gpu(1)),
        holder("notebook", gpu(2)),
        holder("blind", gpu(3)),
        holder("stray", "GPU-not-on-this-node"),
    )
    for pid, pod in ((10, "busy"), (11, "idle")):
        node.runs(pid, pod)
    node.name_pods("busy", "idle", "notebook", "blind")
    node.gpus(
        [
            gpu_json(0, [proc(10, 45)]),
            gpu_json(1, [proc(11, 0)]),
            gpu_json(2),
            gpu_json(3, [proc(13, 0)], fieldErrors={"processes": "NO_PERMISSION"}),
        ]
    )
    scans(node, 300)
    # A new allocation is idle only after a whole window of it.
    assert {pod: s.use for (pod, _), s in node.uses().items()} == {
        "busy": U.ACTIVE,
        "idle": U.ACTIVE,
        "notebook": U.ACTIVE,
        "blind": U.UNKNOWN,
        "stray": U.UNKNOWN,
    }
    scans(node, 720, start=360)
    uses = {pod: s for (pod, _), s in node.uses().items()}
    assert {pod: s.use for pod, s in uses.items()} == {
        "busy": U.ACTIVE,
        "idle": U.IDLE,
        "notebook": U.UNUSED,
        "blind": U.UNKNOWN,
        "stray": U.UNKNOWN,
    }
    # Idle since the first scan, which already read nothing running.
    assert uses["idle"].idle_since == T0 and uses["idle"].idle_seconds == 720
    assert uses["notebook"].idle_since == T0
    for pod in ("busy", "blind", "stray"):
        assert uses[pod].idle_since is None and uses[pod].idle_seconds == 0
    assert {s.weight for s in uses.values()} == {1.0}


def test_a_mig_device_with_a_process_is_active_and_weighs_its_share_of_memory(node: Node) -> None:
    mig_devices = [
        {"index": 0, "uuid": mig(0), "memoryTotalBytes": int(9.75 * GIB)},
        {"index": 1, "uuid": mig(1), "memoryTotalBytes": 40 * GIB},
        {"index": 2, "uuid": mig(2), "memoryTotalBytes": 20 * GIB},
    ]
    node.pods(
        holder("mig-busy", mig(0), resource="nvidia.com/mig-1g.10gb"),
        holder("mig-free", mig(1), resource="nvidia.com/mig-3g.40gb"),
        holder("mig-blind", mig(2), resource="nvidia.com/mig-2g.20gb"),
    )
    node.runs(20, "mig-busy")
    node.runs(21, "stranger")
    node.name_pods("mig-busy", "mig-free", "mig-blind")
    node.gpus(
        [
            gpu_json(
                0,
                # NVML gives no per-process utilization on a MIG device.
                [proc(20, None, mig_uuid=mig(0)), proc(21, None, mig_uuid=mig(2))],
                memoryTotalBytes=80 * GIB,
                migEnabled=True,
                migDevices=mig_devices,
            )
        ]
    )
    scans(node, 900)
    uses = {pod: s for (pod, _), s in node.uses().items()}
    # PID 21 is in a container the agent cannot name: it could be mig-blind's.
    assert {pod: s.use for pod, s in uses.items()} == {
        "mig-busy": U.ACTIVE,
        "mig-free": U.UNUSED,
        "mig-blind": U.UNKNOWN,
    }
    assert {pod: s.weight for pod, s in uses.items()} == {
        "mig-busy": 1 / 8,
        "mig-free": 4 / 8,
        "mig-blind": 2 / 8,
    }


def test_time_sliced_replicas_are_judged_by_their_own_processes(node: Node) -> None:
    replicas = [f"{gpu(0)}::{n}" for n in range(4)]
    shared = "nvidia.com/gpu.shared"
    node.pods(
        holder("ts-busy", replicas[0], resource=shared),
        holder("ts-idle", replicas[1], resource=shared),
        holder("ts-free", replicas[2], resource=shared),
        allocatable={shared: replicas},
    )
    node.runs(30, "ts-busy")
    node.runs(31, "ts-idle")
    node.name_pods("ts-busy", "ts-idle", "ts-free")
    node.gpus([gpu_json(0, [proc(30, 80), proc(31, 1)])])
    scans(node, 600)
    uses = {pod: s for (pod, _), s in node.uses().items()}
    # Another pod's busy process on the same GPU does not make a replica active.
    assert {pod: s.use for pod, s in uses.items()} == {
        "ts-busy": U.ACTIVE,
        "ts-idle": U.IDLE,
        "ts-free": U.UNUSED,
    }
    # Four replicas the kubelet can hand out: each a quarter of the GPU.
    assert {s.weight for s in uses.values()} == {0.25}


def test_a_dra_device_is_judged_on_the_gpu_of_its_minor_number(node: Node) -> None:
    node.pods(dra_holder("dra-idle", "gpu-1"), dra_holder("dra-busy", "gpu-0", "gpu-9"))
    node.runs(40, "dra-idle")
    node.runs(41, "dra-busy")
    node.name_pods("dra-idle", "dra-busy")
    node.gpus(
        [
            gpu_json(0, [proc(41, 70)], minorNumber=0),
            gpu_json(1, [proc(40, 0)], minorNumber=1),
        ]
    )
    scans(node, 600)
    uses = node.uses()
    assert {key: s.use for key, s in uses.items()} == {
        ("dra-idle", "gpu-1"): U.IDLE,
        ("dra-busy", "gpu-0"): U.ACTIVE,
        # No GPU of this node has minor number 9.
        ("dra-busy", "gpu-9"): U.UNKNOWN,
    }
    assert {s.weight for s in uses.values()} == {1.0}


def test_a_dra_mig_device_weighs_its_own_share_once_the_server_says_which_it_is(
    node: Node,
) -> None:
    """The kubelet names a DRA MIG device gpu-<minor>-mig-...: its parent GPU, not which of
    its MIG devices. Until the server's names say (from the device's ResourceSlice), the GPU
    is split evenly among its three; after, each weighs its own memory slices, is judged on
    its own MIG device and labels its series with it."""
    busy, idle = "gpu-0-mig-19-0-1", "gpu-0-mig-5-4-4"
    node.pods(dra_holder("dra-busy", busy), dra_holder("dra-idle", idle))
    node.runs(50, "dra-busy")
    node.name_pods("dra-busy", "dra-idle")
    mig_devices = [
        {"index": 0, "uuid": mig(0), "memoryTotalBytes": 10 * GIB},
        {"index": 1, "uuid": mig(1), "memoryTotalBytes": 40 * GIB},
        {"index": 2, "uuid": mig(2), "memoryTotalBytes": 20 * GIB},
    ]
    node.gpus(
        [
            gpu_json(
                0,
                [proc(50, None, mig_uuid=mig(0))],
                minorNumber=0,
                memoryTotalBytes=80 * GIB,
                migEnabled=True,
                migDevices=mig_devices,
            )
        ]
    )
    scans(node, 600)
    assert {key: s.weight for key, s in node.uses().items()} == {
        ("dra-busy", busy): 1 / 3,
        ("dra-idle", idle): 1 / 3,
    }
    node.name_pods(
        "dra-busy", "dra-idle", migs={"dra-busy": {busy: mig(0)}, "dra-idle": {idle: mig(1)}}
    )
    scans(node, 1200, start=660)
    uses = node.uses()
    assert {key: (s.use, s.weight) for key, s in uses.items()} == {
        ("dra-busy", busy): (U.ACTIVE, 1 / 8),
        ("dra-idle", idle): (U.UNUSED, 4 / 8),
    }
    by_pod = {r.pod_name: r for r in node.usage(0, 1200, UsageGroup.POD)}
    assert by_pod["dra-busy"].allocated_gpu_seconds == pytest.approx(600 / 3 + 600 / 8)
    assert by_pod["dra-idle"].allocated_gpu_seconds == pytest.approx(600 / 3 + 600 * 4 / 8)
    # Its series names the MIG device from then on, the counter going on where it was.
    allocated = node.metrics()["gpugraph_container_gpu_allocated_seconds_total"]
    assert allocated[("dra-busy", gpu(0), mig(0))] == pytest.approx(600 / 3 + 600 / 8)
    assert allocated[("dra-idle", gpu(0), mig(1))] == pytest.approx(600 / 3 + 600 * 4 / 8)
    snapshot = node.snapshot().allocations
    assert snapshot is not None
    assert {d.device_id: d.mig_device_uuid for c in snapshot.containers for d in c.devices} == {
        busy: mig(0),
        idle: mig(1),
    }
    # The agent restarts; the names it reads back keep no MIG devices. Its open records
    # do: the devices stay as they were until the server names them again.
    node.restart()
    node.scan(1260)
    assert {key: s.weight for key, s in node.uses().items()} == {
        ("dra-busy", busy): 1 / 8,
        ("dra-idle", idle): 4 / 8,
    }
    snapshot = node.snapshot().allocations
    assert snapshot is not None
    assert {d.device_id: d.mig_device_uuid for c in snapshot.containers for d in c.devices} == {
        busy: mig(0),
        idle: mig(1),
    }


def test_a_dra_device_weighs_the_share_of_its_consumed_capacity_the_server_sent(
    node: Node,
) -> None:
    """ml/quarter's claim consumes a quarter of GPU 0 from the start; ml/late's share of GPU 1
    (a half) reaches the agent only after its scan at 600 s, when it has been idle a window.
    Both hold their GPUs at 0% SM for 20 minutes; then the agent restarts, its pod names
    (which keep no shares) read back from the log."""
    node.pods(dra_holder("quarter", "gpu-0"), dra_holder("late", "gpu-1"))
    node.runs(60, "quarter")
    node.runs(61, "late")
    node.name_pods("quarter", "late", shares={"quarter": 0.25})
    node.gpus(
        [
            gpu_json(0, [proc(60, 0)], minorNumber=0),
            gpu_json(1, [proc(61, 0)], minorNumber=1),
        ]
    )
    scans(node, 600)
    assert node.uses()[("late", "gpu-1")].weight == 1.0, "a share not known weighs 1"
    node.name_pods("quarter", "late", shares={"quarter": 0.25, "late": 0.5})
    scans(node, 1200, start=660)
    uses = node.uses()
    assert {key: (s.use, s.weight) for key, s in uses.items()} == {
        ("quarter", "gpu-0"): (U.IDLE, 0.25),
        ("late", "gpu-1"): (U.IDLE, 0.5),
    }
    # The new weight leaves the idle clock where it was.
    assert (uses[("late", "gpu-1")].idle_since, uses[("late", "gpu-1")].idle_seconds) == (
        T0,
        1200,
    )
    # Weight 1 until the share came, half of it after; the log and the counters alike.
    by_pod = {r.pod_name: r for r in node.usage(0, 1200, UsageGroup.POD)}
    expected = {"quarter": 0.25 * 1200, "late": 600 + 0.5 * 600}
    for pod, seconds in expected.items():
        assert by_pod[pod].allocated_gpu_seconds == seconds, pod
        assert by_pod[pod].idle_allocated_gpu_seconds == seconds, pod
    metrics = node.metrics()
    allocated = metrics["gpugraph_container_gpu_allocated_seconds_total"]
    idle = metrics["gpugraph_container_gpu_idle_allocated_seconds_total"]
    assert allocated[("quarter", gpu(0), "")] == idle[("quarter", gpu(0), "")] == 300
    assert allocated[("late", gpu(1), "")] == idle[("late", gpu(1), "")] == 900

    # A weight once known stays, though the names the restarted agent reads back carry none.
    node.restart()
    node.scan(1260)
    assert {key: s.weight for key, s in node.uses().items()} == {
        ("quarter", "gpu-0"): 0.25,
        ("late", "gpu-1"): 0.5,
    }
    (late,) = [r for r in node.usage(600, 1260, UsageGroup.POD) if r.pod_name == "late"]
    assert late.allocated_gpu_seconds == 0.5 * 660


# -- the idle clock and the accounting ----------------------------------------------------


def test_the_idle_clock_survives_an_agent_restart(node: Node) -> None:
    node.pods(holder("notebook", gpu(0)))
    node.name_pods("notebook")
    node.gpus([gpu_json(0)])
    scans(node, 7200)
    assert node.uses()[("notebook", gpu(0))].idle_seconds == 7200
    node.restart()
    node.scan(7200 + 30)
    after = node.uses()[("notebook", gpu(0))]
    assert after.use is U.UNUSED
    assert after.idle_since == T0 and after.idle_seconds == 7230
    # One allocation, one lifetime, across both runs of the agent.
    (row,) = node.usage(0, 7230, UsageGroup.POD)
    assert (row.pod_name, row.allocated_gpu_seconds) == ("notebook", 7230)
    assert row.idle_allocated_gpu_seconds == 7230 and row.gpu_seconds == 0


def test_allocated_and_idle_gpu_seconds_of_a_known_timeline(node: Node) -> None:
    """ml/train holds GPU 0 for an hour: busy until its scan at 1140 s, then at 0% SM until
    the kubelet stops listing it after the scan at 3600 s. ml/small holds a MIG device
    (an eighth of GPU 1) all along with nothing on it."""
    node.pods(holder("train", gpu(0)), holder("small", mig(0), resource="nvidia.com/mig-1g.10gb"))
    node.runs(50, "train")
    node.name_pods("train", "small")
    mig_gpu = gpu_json(
        1,
        memoryTotalBytes=80 * GIB,
        migEnabled=True,
        migDevices=[{"index": 0, "uuid": mig(0), "memoryTotalBytes": 10 * GIB}],
    )
    node.gpus([gpu_json(0, [proc(50, 60)]), mig_gpu])
    scans(node, 1140)
    node.gpus([gpu_json(0, [proc(50, 0)]), mig_gpu])
    scans(node, 3600, start=1200)
    metrics = node.metrics()
    node.pods(holder("small", mig(0), resource="nvidia.com/mig-1g.10gb"))
    node.gpus([gpu_json(0), mig_gpu])
    scans(node, 3660, start=3660)

    by_pod = {r.pod_name: r for r in node.usage(0, 4000, UsageGroup.POD)}
    train, small = by_pod["train"], by_pod["small"]
    assert train.allocated_gpu_seconds == 3600
    # Idle from the last busy scan: the reading at 1200 s covers the minute before it.
    assert train.idle_allocated_gpu_seconds == 3600 - 1140
    assert train.gpu_seconds == 3600
    assert small.allocated_gpu_seconds == 3660 / 8 and small.idle_allocated_gpu_seconds == 3660 / 8
    # Any range: each lifetime and each idle stretch counted for its overlap.
    (late,) = node.usage(3000, 4000, UsageGroup.NAMESPACE)
    assert late.namespace == "ml"
    assert late.allocated_gpu_seconds == 600 + 660 / 8
    assert late.idle_allocated_gpu_seconds == 600 + 660 / 8
    (early,) = [r for r in node.usage(0, 1000, UsageGroup.POD) if r.pod_name == "train"]
    assert (early.allocated_gpu_seconds, early.idle_allocated_gpu_seconds) == (1000, 0)

    # The agent's counters agree, in GPU-equivalent seconds, with its gauge of idle time.
    allocated = metrics["gpugraph_container_gpu_allocated_seconds_total"]
    idle = metrics["gpugraph_container_gpu_idle_allocated_seconds_total"]
    assert allocated[("train", gpu(0), "")] == 3600
    assert idle[("train", gpu(0), "")] == 3600 - 1140
    assert allocated[("small", gpu(1), mig(0))] == 3600 / 8
    gauge = metrics["gpugraph_container_gpu_allocation_idle_seconds"]
    assert gauge[("train", gpu(0), "")] == 3600 - 1140
    assert gauge[("small", gpu(1), mig(0))] == 3600


def test_counters_are_monotonic_when_an_allocation_ends_and_another_begins(node: Node) -> None:
    node.pods(holder("job", gpu(0)))
    node.name_pods("job")
    node.gpus([gpu_json(0)])
    scans(node, 600)
    first = node.metrics()["gpugraph_container_gpu_allocated_seconds_total"][("job", gpu(0), "")]
    node.pods()
    node.scan(660)
    # The same pod and container given the same GPU again: the series goes on from its value.
    node.pods(holder("job", gpu(0)))
    node.scan(720)
    node.scan(780)
    again = node.metrics()["gpugraph_container_gpu_allocated_seconds_total"][("job", gpu(0), "")]
    assert first == 600 and again == 660


# -- faults: never a wrong IDLE ----------------------------------------------------------


def test_a_process_the_agent_cannot_name_yet_leaves_a_shared_gpu_unknown(node: Node) -> None:
    """The kubelet and NVML report a new container before the server pushed its pod's name."""
    replicas = [f"{gpu(0)}::{n}" for n in range(2)]
    node.pods(
        holder("old", replicas[0], resource="nvidia.com/gpu.shared"),
        holder("new", replicas[1], resource="nvidia.com/gpu.shared"),
    )
    node.runs(60, "old")
    node.runs(61, "new")
    node.name_pods("old")
    node.gpus([gpu_json(0, [proc(60, 50), proc(61, 90)])])
    scans(node, 1200)
    uses = node.uses()
    # PID 61 could be new's: never UNUSED.
    assert uses[("new", replicas[1])].use is U.UNKNOWN
    assert uses[("old", replicas[0])].use is U.ACTIVE
    node.name_pods("new")
    node.scan(1260)
    assert node.uses()[("new", replicas[1])].use is U.ACTIVE


def test_a_pod_deleted_within_the_window_is_never_idle(node: Node) -> None:
    node.pods(holder("brief", gpu(0)))
    node.name_pods("brief")
    node.gpus([gpu_json(0)])
    scans(node, 540)
    assert node.uses()[("brief", gpu(0))].use is U.ACTIVE
    node.pods()
    node.scan(600)
    assert node.uses() == {}
    (row,) = node.usage(0, 700, UsageGroup.POD)
    assert (row.allocated_gpu_seconds, row.idle_allocated_gpu_seconds) == (540, 0)


def test_a_gpu_that_disappears_is_unknown_and_stops_the_idle_clock(node: Node) -> None:
    node.pods(holder("held", gpu(1)))
    node.runs(70, "held")
    node.name_pods("held")
    node.gpus([gpu_json(0), gpu_json(1, [proc(70, 0)])])
    scans(node, 480)
    node.gpus([gpu_json(0)])
    scans(node, 3600, start=540)
    assert node.uses()[("held", gpu(1))].use is U.UNKNOWN
    node.gpus([gpu_json(0), gpu_json(1, [proc(70, 0)])])
    node.scan(3660)
    # Only judged time counts: 480 s before it vanished and 60 s after.
    state = node.uses()[("held", gpu(1))]
    assert state.use is U.ACTIVE
    node.scan(3720)
    assert node.uses()[("held", gpu(1))].use is U.IDLE


def test_a_clock_step_never_makes_a_running_pod_idle(node: Node) -> None:
    node.pods(holder("steady", gpu(0)))
    node.runs(80, "steady")
    node.name_pods("steady")
    node.gpus([gpu_json(0, [proc(80, 70)])])
    scans(node, 120)
    # The clock jumps a day ahead; the scan after reads a pause between kernels.
    node.gpus([gpu_json(0, [proc(80, 0)])])
    node.scan(86400 + 180)
    assert node.uses()[("steady", gpu(0))].use is U.ACTIVE
    # And back again: nothing is counted backwards.
    before = node.metrics()["gpugraph_container_gpu_allocated_seconds_total"]
    node.gpus([gpu_json(0, [proc(80, 70)])])
    node.scan(240)
    after = node.metrics()["gpugraph_container_gpu_allocated_seconds_total"]
    assert node.uses()[("steady", gpu(0))].use is U.ACTIVE
    assert after[("steady", gpu(0), "")] >= before[("steady", gpu(0), "")]


def test_unreadable_utilization_is_unknown_not_idle(node: Node) -> None:
    node.pods(holder("unread", gpu(0)))
    node.runs(90, "unread")
    node.name_pods("unread")
    node.gpus(
        [gpu_json(0, [proc(90, None)], fieldErrors={"processes.sm_utilization": "NOT_SUPPORTED"})]
    )
    scans(node, 1200)
    assert node.uses()[("unread", gpu(0))].use is U.UNKNOWN


def test_without_the_kubelet_nothing_is_judged_or_ended(node: Node) -> None:
    node.pods(holder("notebook", gpu(0)))
    node.name_pods("notebook")
    node.gpus([gpu_json(0)])
    scans(node, 660)
    node.kubelet.stop()
    # Past the last answer's useful age: the agent has no allocation data.
    node.scan(660 + 120)
    snapshot = node.snapshot()
    assert snapshot.allocations is not None and not snapshot.allocations.available
    assert node.judge.open_count == 1
    (row,) = node.usage(0, 1000, UsageGroup.POD)
    # Still open at its last judged scan; nothing counted for the time without data.
    assert row.allocated_gpu_seconds == 660


# -- weights and flags ----------------------------------------------------------------------


def test_weights_without_sizes_or_allocatable_replicas() -> None:
    parent = GpuSample(index=0, uuid="G", mig_devices=[MigDevice(0, "M0"), MigDevice(1, "M1")])
    plugin = AllocationMechanism.DEVICE_PLUGIN
    on_mig = DeviceAllocation(plugin, "r", "M0", gpu_uuid="G", mig_device_uuid="M0")
    assert device_weight(on_mig, {"G": parent}, {}, {}) == 0.5
    replica = DeviceAllocation(plugin, "r", "G::3", gpu_uuid="G", shared=True)
    # The replicas handed out are a floor; the kubelet's allocatable list says how many.
    assert device_weight(replica, {}, {}, {"G": 2}) == 0.5
    assert device_weight(replica, {}, {"G": 8}, {"G": 2}) == 0.125
    claim = DeviceAllocation(AllocationMechanism.DRA, "ml/c", "gpu-0", gpu_uuid="G")
    assert device_weight(claim, {}, {}, {}) == 1.0
    # A DRA device's consumed share, of a MIG device's own share too; only DRA has one.
    assert device_weight(claim, {}, {}, {}, 0.25) == 0.25
    dra = AllocationMechanism.DRA
    claimed_mig = DeviceAllocation(dra, "ml/c", "gpu-0-mig-0", gpu_uuid="G", mig_device_uuid="M0")
    assert device_weight(claimed_mig, {"G": parent}, {}, {}, 0.5) == 0.25
    assert device_weight(on_mig, {"G": parent}, {}, {}, 0.5) == 0.5


def test_the_judged_containers_are_one_object_while_the_answer_and_names_are() -> None:
    # The occupancy log and the event recorder re-judge only when the kubelet's answer is
    # another object: naming DRA MIG devices must not make every scan look like a new one.
    key = ("p-gpu", "gpu.nvidia.com", NODE, "gpu-0-mig-19-0-1")
    names = PodNames()
    names.put([PodName("u", "ml", "p", {container_id("p"): "main"}, {}, {key: "M0"})])
    judge = AllocationJudge(node_name=NODE, pod_names=names)
    dra = DeviceAllocation(
        AllocationMechanism.DRA, "ml/p-gpu", key[3], gpu_uuid="G", driver=key[1], pool=NODE
    )
    answer = NodeAllocations(
        available=True, containers=(ContainerAllocations("ml", "p", "main", (dra,)),)
    )
    sample = NodeSample(gpus=[GpuSample(index=0, uuid="G", mig_devices=[MigDevice(0, "M0")])])
    first, second = judge.judge(sample, answer, T0), judge.judge(sample, answer, T0 + 60)
    assert first is not None and second is not None
    assert first.containers is second.containers
    assert first.containers[0].devices[0].mig_device_uuid == "M0"


def test_the_idle_flags_and_their_defaults() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    defaults = parser.parse_args([])
    assert (defaults.idle_after, defaults.idle_sm_percent) == (600.0, 1.0)
    assert IdlePolicy() == IdlePolicy(defaults.idle_after, defaults.idle_sm_percent)
    args = parser.parse_args(["--idle-after", "2h", "--idle-sm-percent", "5"])
    assert (args.idle_after, args.idle_sm_percent) == (7200.0, 5.0)
    for bad in (["--idle-after", "soon"], ["--idle-sm-percent", "101"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


# -- the agent command, through nvidia-ml-py and the fake libnvidia-ml ----------------------


def test_the_agent_command_judges_through_nvml_with_its_idle_flags(tmp_path: Path) -> None:
    """The CLI's wiring: its flags, the kubelet's socket, the cgroup resolver over a /proc
    tree, and NVML's own per-process utilization samples (the fake library's)."""
    sockets = Path(tempfile.mkdtemp(prefix="au-", dir="/tmp"))
    pods = {"busy": (101, 60), "idle": (100, 0)}
    processes = {
        pid: FakeProc(cgroup=kubelet_cgroup(f"uid-{pod}", container_id(pod)))
        for pod, (pid, _) in pods.items()
    }
    proc = write_proc_tree(tmp_path / "proc", processes)
    # Samples stamped far ahead: always within NVML's window.
    future = 1 << 62
    node = FakeNode(
        [
            FakeGpu(gpu(i), processes=[FakeProcess(pid)], samples=[(pid, future, sm)])
            for i, (pid, sm) in enumerate(pods.values())
        ]
        + [FakeGpu(gpu(2))]
    )
    config = node.write(tmp_path / "nvml.conf")
    data = {"pods": [holder("busy", gpu(0)), holder("idle", gpu(1)), holder("notebook", gpu(2))]}
    socket = str(sockets / "kubelet.sock")
    flags = ["--pod-resources-socket", socket, "--idle-after", "1s", "--idle-sm-percent", "5"]
    try:
        with (
            FakeKubelet(socket, data=data),
            start_agent_process(
                None,
                log_path=tmp_path / "agent.log",
                proc_root=proc,
                extra_args=flags,
                env=library_env(build_library(), config),
            ) as agent,
        ):
            names = [PodName(f"uid-{p}", "ml", p, {container_id(p): "main"}) for p in pods]

            async def judged() -> dict[str, AllocationUse] | None:
                async with AgentClient(agent.address) as client:
                    await client.put_pod_names(NODE, names, timeout=10)
                    allocations = (await client.get_snapshot(timeout=10)).allocations
                if allocations is None or not allocations.uses:
                    return None
                uses = {
                    c.pod: allocations.use_of(c, d)
                    for c in allocations.containers
                    for d in c.devices
                }
                found = {pod: state.use for pod, state in uses.items() if state is not None}
                return found if found.get("notebook") is U.UNUSED else None

            found = eventually(lambda: asyncio.run(judged()), what="a window of judged scans")
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert found == {"busy": U.ACTIVE, "idle": U.IDLE, "notebook": U.UNUSED}
