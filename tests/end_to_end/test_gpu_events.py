"""GPU health events end to end: the agent as deployed (``python -m node_resolver``) on the
fake libnvidia-ml.so.1 through the real nvidia-ml-py, a fake kubelet, a kernel log that is
a real file in /dev/kmsg's record format, real gRPC and a real SQLite log."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.demo.cluster.kubelet import FakeKubelet
from api.demo.cluster.manifests import container_id_for, pod_uid_for
from node_resolver.client import AgentClient
from node_resolver.gpu_events.records import EventPage, EventQuery, GpuEvent, GpuEventKind
from node_resolver.pod_names import PodName
from tests.support.agents import AgentProcess, FakeProc, start_agent_process, write_proc_tree
from tests.support.libnvml import (
    NOT_SUPPORTED,
    FakeGpu,
    FakeMig,
    FakeNode,
    FakeProcess,
    build_library,
    library_env,
)
from tests.support.libnvml.events import (
    DOUBLE_BIT_ECC,
    SINGLE_BIT_ECC,
    XID,
    FakeEvents,
    kernel_pci,
    pci_bus_id,
)
from tests.support.polling import eventually
from tests.support.server import Proc

NODE = "gpu-node"
GIB = 1 << 30
# How long a follower's call waits on the agent for the next event.
FOLLOW_WAIT = 5.0


@dataclass
class Pod:
    """A pod with one container "main" and one process on a GPU."""

    namespace: str
    name: str
    pid: int
    # The device ID the kubelet gave it ("GPU-…::1", or a MIG device's UUID).
    device: str

    @property
    def uid(self) -> str:
        return pod_uid_for(self.namespace, self.name)

    @property
    def container_id(self) -> str:
        return container_id_for(self.uid, "main").split("://", 1)[1]

    def name_record(self) -> PodName:
        return PodName(self.uid, self.namespace, self.name, {self.container_id: "main"})


@dataclass
class World:
    """One node: its fake NVML config, events file, kernel log, kubelet, /proc and log dir."""

    root: Path
    node: FakeNode
    pods: Sequence[Pod]
    kernel_log: bool = True
    events: FakeEvents = field(init=False)
    agent: AgentProcess | None = None
    kubelet: FakeKubelet | None = None

    def __post_init__(self) -> None:
        self.events = FakeEvents(self.root / "nvml-events")
        self.config = self.node.write(self.root / "nvml.conf")
        self.kmsg = self.root / "kmsg"
        # What the kernel had logged before the agent started: never to be read.
        self.kmsg.write_text(
            _kmsg(1, "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=old, an XID before the agent")
        )
        self.history_dir = self.root / "history"
        write_proc_tree(
            self.root / "proc",
            {
                pod.pid: FakeProc(comm="python3", cgroup=Proc(pod.pid, "x", pod.uid).cgroup())
                for pod in self.pods
            },
        )
        self.socket = self.root / "kubelet.sock"
        data = {
            "pods": [
                {
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "containers": [
                        {
                            "name": "main",
                            "devices": [
                                {"resourceName": "nvidia.com/gpu", "deviceIds": [pod.device]}
                            ],
                        }
                    ],
                }
                for pod in self.pods
            ]
        }
        self.kubelet = FakeKubelet(self.socket, data=data).start()

    def start(self, name: str = "agent") -> AgentProcess:
        """Start the agent and wait until its processes are named and its events are on."""
        args = [
            "--history-dir", str(self.history_dir),
            "--pod-resources-socket", str(self.socket),
            "--metrics-listen", "127.0.0.1:0",
        ]  # fmt: skip
        if self.kernel_log:
            args += ["--kernel-log", str(self.kmsg)]
        self.agent = start_agent_process(
            None,
            log_path=self.root / f"{name}.log",
            node_name=NODE,
            proc_root=self.root / "proc",
            extra_args=args,
            env=library_env(build_library(), self.config, **self.events.env()),
        )
        asyncio.run(self._push_names())
        return self.agent

    async def _push_names(self) -> None:
        async with AgentClient(self.address) as client:
            await client.put_pod_names(NODE, [p.name_record() for p in self.pods], timeout=10)

    @property
    def address(self) -> str:
        assert self.agent is not None
        return self.agent.address

    def status(self) -> str | None:
        async def once() -> str | None:
            async with AgentClient(self.address) as client:
                return (await client.get_snapshot(timeout=10)).gpu_event_status

        return asyncio.run(once())

    def until_status(self, wanted: str) -> None:
        eventually(lambda: self.status() == wanted, timeout=30, what=f"event status {wanted!r}")

    def until_ready(self) -> None:
        """Events on, the kubelet's allocations in, every pod's process found in its pod."""

        async def snapshot() -> Any:
            async with AgentClient(self.address) as client:
                return await client.get_snapshot(timeout=10)

        def ready() -> bool:
            got = asyncio.run(snapshot())
            in_pods = {
                p.container.pod_uid
                for gpu in got.sample.gpus
                for p in gpu.processes
                if p.container is not None
            }
            return bool(
                got.gpu_event_status == "ok"
                and got.allocations is not None
                and got.allocations.available
                and in_pods >= {pod.uid for pod in self.pods}
            )

        eventually(ready, timeout=30, what="the agent ready")

    def kernel(self, seq: int, message: str) -> None:
        """Append one record to the kernel log, as /dev/kmsg writes them."""
        with self.kmsg.open("a") as file:
            file.write(_kmsg(seq, message))

    def page(self, query: EventQuery, *, wait: float = 0.0, token: str = "") -> EventPage:
        async def once() -> EventPage:
            async with AgentClient(self.address) as client:
                return await client.get_gpu_events(
                    query, page_token=token, wait_seconds=wait, timeout=wait + 10
                )

        return asyncio.run(once())

    def follow_until(self, after: int, done: Any, what: str) -> list[GpuEvent]:
        """Events logged after sequence ``after``, followed until ``done(events)`` holds."""
        seen: list[GpuEvent] = []

        def more() -> bool:
            last = seen[-1].id if seen else after
            page = self.page(EventQuery(after_sequence=last), wait=FOLLOW_WAIT)
            assert page.status == "ok", page.status
            seen.extend(page.events)
            return bool(done(seen))

        eventually(more, timeout=60, what=what)
        return seen

    def metrics(self) -> str:
        assert self.agent is not None
        line = next(
            line for line in self.agent.logs().splitlines() if "serving /metrics on " in line
        )
        address = line.split("serving /metrics on ", 1)[1].split()[0]
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None

    def close(self) -> None:
        self.stop()
        if self.kubelet is not None:
            self.kubelet.stop()


def _kmsg(seq: int, message: str) -> str:
    return f"3,{seq},{1_000_000 + seq},-;{message}\n"


def _xid_line(pci: str, xid: int, pid: int | str, name: str, text: str) -> str:
    return f"NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name={name}, {text}"


def _procs(event: GpuEvent) -> list[tuple[int, str, str, str, str]]:
    return sorted(
        (p.pid, p.pod_namespace, p.pod_name, p.container_name, p.allocation_verdict)
        for p in event.processes
    )


XID_KIND = GpuEventKind.XID
SBE_KIND = GpuEventKind.ECC_SINGLE_BIT
TRAINER = Pod("ml", "trainer", 4242, "GPU-shared-0::0")
NOTEBOOK = Pod("research", "notebook", 4343, "GPU-shared-0::1")
OTHER = Pod("ml", "other-gpu", 4444, "GPU-other-1")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[World]:
    gpus = [
        FakeGpu(
            "GPU-shared-0",
            processes=[FakeProcess(TRAINER.pid, 3 * GIB), FakeProcess(NOTEBOOK.pid, 2 * GIB)],
        ),
        FakeGpu("GPU-other-1", processes=[FakeProcess(OTHER.pid, GIB)]),
    ]
    world = World(tmp_path, FakeNode(gpus), [TRAINER, NOTEBOOK, OTHER])
    yield world
    world.close()


def test_an_xid_on_a_shared_gpu_names_both_pods_and_the_culprit_from_the_kernel(
    shared: World,
) -> None:
    shared.start()
    shared.until_ready()
    # An NVML XID and the driver's kernel message for it: one event, with the culprit.
    shared.events.emit(0, XID, 13)
    shared.kernel(
        2,
        _xid_line(
            kernel_pci(0), 13, TRAINER.pid, "python3",
            "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
        ),
    )  # fmt: skip
    shared.events.emit(0, SINGLE_BIT_ECC, 0)
    events = shared.follow_until(
        0, lambda seen: {e.kind for e in seen} == {XID_KIND, SBE_KIND}, "both events"
    )
    assert sorted((e.kind.value, e.xid or 0, e.source) for e in events) == [
        ("ECC_SINGLE_BIT", 0, "nvml"),
        ("XID", 13, "nvml+kernel"),
    ]
    (xid,) = (e for e in events if e.kind is XID_KIND)
    assert (xid.gpu_uuid, xid.pci_bus_id, xid.mig_device_uuid) == (
        "GPU-shared-0",
        pci_bus_id(0),
        "",
    )
    assert (xid.culprit_pid, xid.culprit_name) == (TRAINER.pid, "python3")
    assert xid.message.endswith("Out Of Range Address")
    assert _procs(xid) == [
        (TRAINER.pid, "ml", "trainer", "main", "ALLOCATED"),
        (NOTEBOOK.pid, "research", "notebook", "main", "ALLOCATED"),
    ]
    assert sorted((a.namespace, a.name) for a in xid.allocated) == [
        ("ml", "trainer"),
        ("research", "notebook"),
    ]
    # The node-local filters: a namespace, a GPU, a kind.
    assert {e.id for e in shared.page(EventQuery(namespaces=["research"])).events} == {
        e.id for e in events
    }
    assert shared.page(EventQuery(gpu_uuids=["GPU-other-1"])).events == []
    assert [e.kind for e in shared.page(EventQuery(kinds=[GpuEventKind.XID])).events] == [
        GpuEventKind.XID
    ]
    metrics = shared.metrics()
    assert (
        'gpugraph_gpu_events_total{gpu_uuid="GPU-shared-0",kind="XID",node="gpu-node",xid="13"}'
        " 1.0" in metrics
    )
    for namespace, pod in (("ml", "trainer"), ("research", "notebook")):
        assert (
            f'gpugraph_pod_gpu_events_total{{kind="XID",namespace="{namespace}",pod="{pod}",'
            'xid="13"} 1.0' in metrics
        )
    assert 'gpugraph_pod_gpu_events_total{kind="XID",namespace="ml",pod="other-gpu"' not in (
        metrics
    )

    # The record outlives the agent; the kernel line it read is not read again.
    shared.stop()
    shared.start("agent-2")
    shared.until_ready()
    shared.events.emit(1, DOUBLE_BIT_ECC, 0)
    later = shared.follow_until(
        events[-1].id, lambda seen: bool(seen), "an event after the restart"
    )
    assert [(e.kind, e.gpu_uuid) for e in later] == [(GpuEventKind.ECC_DOUBLE_BIT, "GPU-other-1")]
    assert _procs(later[0]) == [(OTHER.pid, "ml", "other-gpu", "main", "ALLOCATED")]
    kept = shared.page(EventQuery(since=0.0)).events
    assert sorted((e.kind.value, e.xid or 0) for e in kept) == [
        ("ECC_DOUBLE_BIT", 0),
        ("ECC_SINGLE_BIT", 0),
        ("XID", 13),
    ]
    (kept_xid,) = (e for e in kept if e.kind is XID_KIND)
    assert (_procs(kept_xid), kept_xid.culprit_pid) == (_procs(xid), TRAINER.pid)


def test_an_xid_on_a_mig_device_names_only_that_devices_pods(tmp_path: Path) -> None:
    first = Pod("ml", "slice-a", 5001, "MIG-aaaa")
    second = Pod("research", "slice-b", 5002, "MIG-bbbb")
    gpu = FakeGpu(
        "GPU-mig-0",
        mig_mode=1,
        mig=[
            FakeMig("MIG-aaaa", gi=1, ci=0, processes=[FakeProcess(first.pid, GIB)]),
            FakeMig("MIG-bbbb", gi=2, ci=0, processes=[FakeProcess(second.pid, GIB)]),
        ],
    )
    world = World(tmp_path, FakeNode([gpu]), [first, second], kernel_log=False)
    try:
        world.start()
        world.until_ready()
        world.events.emit(0, XID, 31, gi=2, ci=0)
        (event,) = world.follow_until(0, bool, "the XID")
        assert (event.kind, event.xid, event.gpu_uuid, event.mig_device_uuid) == (
            GpuEventKind.XID,
            31,
            "GPU-mig-0",
            "MIG-bbbb",
        )
        assert _procs(event) == [(second.pid, "research", "slice-b", "main", "ALLOCATED")]
        assert [(a.namespace, a.name) for a in event.allocated] == [("research", "slice-b")]
        # The GPU's UUID finds its MIG devices' events; the other tenant's namespace does not.
        assert [e.id for e in world.page(EventQuery(gpu_uuids=["GPU-mig-0"])).events] == [event.id]
        assert world.page(EventQuery(namespaces=["ml"])).events == []
    finally:
        world.close()


def test_a_gpu_lost_mid_run_is_an_event_with_the_processes_it_had(shared: World) -> None:
    shared.start()
    shared.until_ready()
    lost = FakeNode(
        [
            FakeGpu(
                "GPU-shared-0",
                processes=[FakeProcess(TRAINER.pid, 3 * GIB), FakeProcess(NOTEBOOK.pid, GIB)],
            ),
            FakeGpu("GPU-other-1", lost=True),
        ]
    )
    lost.write(shared.config)
    (event,) = shared.follow_until(0, bool, "the lost GPU")
    assert (event.kind, event.gpu_uuid, event.source) == (
        GpuEventKind.GPU_LOST,
        "GPU-other-1",
        "scan",
    )
    assert _procs(event) == [(OTHER.pid, "ml", "other-gpu", "main", "ALLOCATED")]
    # Events of the other GPU still arrive, and the lost one is not lost again every scan.
    shared.events.emit(0, DOUBLE_BIT_ECC, 0)
    (ecc,) = shared.follow_until(event.id, bool, "an ECC event after the loss")
    assert ecc.kind is GpuEventKind.ECC_DOUBLE_BIT


def test_a_storm_is_counted_whole_in_few_records(shared: World) -> None:
    shared.start()
    shared.until_ready()
    storm = 20_000
    shared.events.emit(0, SINGLE_BIT_ECC, 0, count=storm)
    events = shared.follow_until(
        0, lambda seen: sum(e.count for e in seen) >= storm, "the whole storm counted"
    )
    assert sum(e.count for e in events) == storm
    # A burst, then about one record a second: a storm cannot fill the log.
    assert len(events) < 100, len(events)
    assert {e.kind for e in events} == {GpuEventKind.ECC_SINGLE_BIT}
    assert _procs(events[-1]) == [
        (TRAINER.pid, "ml", "trainer", "main", "ALLOCATED"),
        (NOTEBOOK.pid, "research", "notebook", "main", "ALLOCATED"),
    ]
    assert (
        'gpugraph_gpu_events_total{gpu_uuid="GPU-shared-0",kind="ECC_SINGLE_BIT",'
        f'node="gpu-node",xid=""}} {float(storm)}' in shared.metrics()
    )


def test_kernel_lines_it_cannot_use_are_counted_and_skipped(shared: World) -> None:
    shared.start()
    shared.until_ready()
    for line in [
        "nonsense without the kmsg prefix",
        "6,10,1,-;usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "3,11,2,-;NVRM: Xid (PCI:zzzz): thirteen",
        " SUBSYSTEM=pci",
        "3,12,3,-;NVRM: Xid (PCI:0000:99:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "3,13,4,-;" + "x" * 20_000,
        "3,14,5,-;"
        + _xid_line(kernel_pci(1), 43, 99999, "gone", "Ch 00000010, a process that exited"),
    ]:
        with shared.kmsg.open("a") as file:
            file.write(line + "\n")
    events = shared.follow_until(0, lambda seen: len(seen) >= 2, "the two XID lines")
    by_xid = {e.xid or 0: e for e in events}
    assert sorted(by_xid) == [43, 79]
    # No GPU of this node has that address: recorded as far as known.
    unknown = by_xid[79]
    assert (unknown.gpu_uuid, unknown.pci_bus_id, unknown.culprit_pid, unknown.processes) == (
        "",
        "0000:99:00",
        None,
        (),
    )
    # The culprit had exited: named as the kernel named it, beside who is on the GPU.
    gone = by_xid[43]
    assert (gone.gpu_uuid, gone.culprit_pid, gone.culprit_name, gone.source) == (
        "GPU-other-1",
        99999,
        "gone",
        "kernel",
    )
    assert _procs(gone) == [(OTHER.pid, "ml", "other-gpu", "main", "ALLOCATED")]
    metrics = shared.metrics()
    assert 'gpugraph_kernel_log_lines_total{result="malformed"} 2.0' in metrics
    assert 'gpugraph_kernel_log_lines_total{result="xid"} 2.0' in metrics
    assert shared.agent is not None and shared.agent.process.poll() is None


def test_without_event_support_the_status_says_so_and_the_agent_goes_on(
    tmp_path: Path,
) -> None:
    gpu = FakeGpu(
        "GPU-old-0",
        processes=[FakeProcess(TRAINER.pid, GIB)],
        errors={"nvmlDeviceGetSupportedEventTypes": NOT_SUPPORTED},
    )
    world = World(tmp_path, FakeNode([gpu]), [TRAINER], kernel_log=False)
    try:
        world.start()
        world.until_status("unsupported")
        page = world.page(EventQuery())
        assert (page.status, page.event_status, page.events) == ("ok", "unsupported", [])
        # A request that makes no sense is the caller's error, with the reason.
        with pytest.raises(grpc.RpcError) as refused:
            world.page(EventQuery(since=10.0, until=5.0))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "until must be after since" in str(refused.value.details())
    finally:
        world.close()


def test_a_failing_wait_restarts_the_event_thread(shared: World) -> None:
    shared.start()
    shared.until_ready()
    shared.events.fail_next_wait(999)
    shared.until_status("waiting for events failed: UNKNOWN")
    shared.until_status("ok")
    shared.events.emit(1, XID, 79)
    (event,) = shared.follow_until(0, bool, "an XID after the restart")
    assert (event.kind, event.xid, event.gpu_uuid) == (GpuEventKind.XID, 79, "GPU-other-1")
