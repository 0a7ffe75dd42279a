"""The kubelet's PodResources API: the client, the poller, and the IDs mapped to GPUs.

Every test talks real gRPC to the fake kubelet (the kubelet's own proto on a
unix socket), or to a socket that misbehaves the way a broken kubelet does.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.kubelet import FakeKubelet
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.models import (
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    NodeSnapshot,
)
from node_resolver.pod_resources import (
    KubeletContainer,
    PodResourcesClient,
    PodResourcesError,
    PodResourcesPoller,
)
from node_resolver.sampler import Sampler
from tests.support.agents import (
    AllAliveResolver,
    gpu_json,
    nvml_json,
    start_agent_process,
    start_agent_thread,
)
from tests.support.polling import eventually

GPU0, GPU1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
MIG = "MIG-22222222-2222-2222-2222-222222222222"

PODS: dict[str, Any] = {
    "pods": [
        {
            "namespace": "ml",
            "name": "plain",
            "containers": [
                {
                    "name": "main",
                    "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [GPU0]}],
                },
                {"name": "sidecar"},
            ],
        },
        {
            "namespace": "ml",
            "name": "sliced",
            "containers": [
                {
                    "name": "main",
                    "devices": [
                        {"resourceName": "nvidia.com/gpu.shared", "deviceIds": [f"{GPU0}::3"]}
                    ],
                }
            ],
        },
        {
            "namespace": "ml",
            "name": "mig",
            "containers": [
                {
                    "name": "main",
                    "devices": [{"resourceName": "nvidia.com/mig-1g.10gb", "deviceIds": [MIG]}],
                }
            ],
        },
        {
            "namespace": "ml",
            "name": "dra",
            "containers": [
                {
                    "name": "main",
                    "claims": [
                        {
                            "claimName": "dra-gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-a",
                            "device": "gpu-1",
                        },
                        {
                            "claimName": "dra-gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-a",
                            "device": "gpu-9",
                        },
                    ],
                }
            ],
        },
        {
            "namespace": "ml",
            "name": "stray",
            "containers": [
                {
                    "name": "main",
                    "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-gone"]}],
                }
            ],
        },
    ]
}


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # A unix socket path must fit in 108 bytes; pytest's tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nvml(tmp_path: Path) -> FakeGpuSource:
    path = tmp_path / "nvml.json"
    mig = {"index": 0, "uuid": MIG, "gpuInstanceId": 1, "computeInstanceId": 0}
    write_fake_nvml(
        path,
        nvml_json(
            [
                gpu_json(0, [{"pid": 10}], uuid=GPU0, minorNumber=0),
                gpu_json(
                    1, [{"pid": 11}], uuid=GPU1, minorNumber=1, migEnabled=True, migDevices=[mig]
                ),
            ]
        ),
    )
    return FakeGpuSource(path)


def _by_pod(
    containers: tuple[ContainerAllocations, ...],
) -> dict[tuple[str, str], tuple[DeviceAllocation, ...]]:
    return {(c.pod, c.container): c.devices for c in containers}


def test_every_mechanism_maps_to_its_gpu(sockdir: Path, nvml: FakeGpuSource) -> None:
    with FakeKubelet(sockdir / "kubelet.sock", data=PODS):
        client = PodResourcesClient(str(sockdir / "kubelet.sock"))
        poller = PodResourcesPoller(client.list)
        poller.poll()
        sampler = Sampler(nvml, AllAliveResolver(), node_name="node-a", pod_resources=poller)
        allocations = sampler.scan().allocations
        client.close()
    assert allocations is not None and allocations.available
    devices = _by_pod(allocations.containers)
    assert devices[("plain", "sidecar")] == (), "a container without devices is still listed"
    (plain,) = devices[("plain", "main")]
    assert (plain.gpu_uuid, plain.shared, plain.mechanism) == (
        GPU0,
        False,
        AllocationMechanism.DEVICE_PLUGIN,
    )
    (sliced,) = devices[("sliced", "main")]
    assert (sliced.gpu_uuid, sliced.shared, sliced.device_id) == (GPU0, True, f"{GPU0}::3")
    (mig,) = devices[("mig", "main")]
    assert (mig.gpu_uuid, mig.mig_device_uuid, mig.resource) == (
        GPU1,
        MIG,
        "nvidia.com/mig-1g.10gb",
    )
    full, unknown = devices[("dra", "main")]
    assert (full.mechanism, full.resource, full.device_id, full.gpu_uuid) == (
        AllocationMechanism.DRA,
        "ml/dra-gpu",
        "gpu-1",
        GPU1,
    )
    assert (full.driver, full.pool) == ("gpu.nvidia.com", "node-a")
    assert unknown.gpu_uuid is None, "a minor number no GPU has maps to none"
    (stray,) = devices[("stray", "main")]
    assert stray.gpu_uuid is None and stray.device_id == "GPU-gone"


def test_old_kubelet_lists_devices_without_dra(sockdir: Path) -> None:
    with FakeKubelet(sockdir / "kubelet.sock", data=PODS, old=True):
        client = PodResourcesClient(str(sockdir / "kubelet.sock"))
        containers = client.list()
        client.close()
    by_pod = {(c.pod, c.container): c for c in containers}
    assert by_pod[("plain", "main")].devices[0].device_ids == (GPU0,)
    assert by_pod[("dra", "main")].claim_devices == ()


def test_missing_socket_is_a_reason_logged_once(
    sockdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = PodResourcesClient(str(sockdir / "absent.sock"), timeout=2)
    poller = PodResourcesPoller(client.list)
    with caplog.at_level(logging.WARNING, logger="node_resolver.pod_resources"):
        poller.poll()
        poller.poll()
    client.close()
    state = poller.state()
    assert state.answer is None
    assert (
        state.reason is not None and "absent.sock" in state.reason and "UNAVAILABLE" in state.reason
    )
    assert len([r for r in caplog.records if "no allocation data" in r.message]) == 1


def test_hanging_kubelet_is_bounded_and_never_blocks_a_scan(
    sockdir: Path, nvml: FakeGpuSource
) -> None:
    kubelet = FakeKubelet(sockdir / "kubelet.sock", data=PODS).start()
    try:
        client = PodResourcesClient(str(sockdir / "kubelet.sock"), timeout=0.3)
        poller = PodResourcesPoller(client.list, interval=0.05)
        poller.poll()
        assert poller.state().answer is not None
        kubelet.hang()
        sampler = Sampler(nvml, AllAliveResolver(), node_name="node-a", pod_resources=poller)
        sampler.start()
        calls = kubelet.calls
        # The poller is stuck in a call; scans go on with the last good answer meanwhile.
        eventually(lambda: kubelet.calls > calls, what="a call hanging in the kubelet")
        scans = sampler.scans
        eventually(lambda: sampler.scans > scans + 2, what="scans while the kubelet hangs")
        latest = sampler.latest()
        assert latest is not None and latest.allocations is not None
        assert latest.allocations.available, "the last good answer is kept"
        # The call gives up at its deadline, with a reason, and the poller tries again.
        eventually(lambda: kubelet.calls > calls + 1, what="a second call after the deadline")
        assert poller._reason is not None and "did not answer within 0.3s" in poller._reason
        sampler.stop()
        client.close()
    finally:
        kubelet.stop()


def test_stale_answer_expires_with_reason() -> None:
    now = [100.0]
    answers: list[Any] = [(), PodResourcesError("kubelet PodResources socket s: UNAVAILABLE: x")]

    def listing() -> tuple[KubeletContainer, ...]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    poller = PodResourcesPoller(listing, max_age=60, clock=lambda: now[0])
    poller.poll()
    poller.poll()
    assert poller.state().answer is not None
    now[0] += 61
    state = poller.state()
    assert state.answer is None and state.reason is not None
    assert (
        state.reason.startswith("kubelet last answered 61s ago") and "UNAVAILABLE" in state.reason
    )


def _garbage_server(path: Path, stop: threading.Event) -> threading.Thread:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.05)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nthis is not gRPC" * 10)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_garbage_on_the_socket_is_a_reason(sockdir: Path) -> None:
    stop = threading.Event()
    thread = _garbage_server(sockdir / "kubelet.sock", stop)
    client = PodResourcesClient(str(sockdir / "kubelet.sock"), timeout=2)
    try:
        with pytest.raises(PodResourcesError, match="kubelet PodResources socket"):
            client.list()
    finally:
        client.close()
        stop.set()
        thread.join()


def test_allocations_travel_through_the_agents_grpc(sockdir: Path, nvml: FakeGpuSource) -> None:
    with FakeKubelet(sockdir / "kubelet.sock", data=PODS):
        client = PodResourcesClient(str(sockdir / "kubelet.sock"))
        poller = PodResourcesPoller(client.list, interval=0.05)
        with start_agent_thread(nvml, pod_resources=poller) as agent:

            async def fetch() -> NodeSnapshot:
                async with AgentClient(agent.address) as c:
                    return await c.get_snapshot(timeout=10)

            def received() -> NodeSnapshot | None:
                snapshot = asyncio.run(fetch())
                allocations = snapshot.allocations
                return snapshot if allocations is not None and allocations.available else None

            snapshot = eventually(received, what="allocations in the agent's reply")
        client.close()
    assert snapshot.allocations is not None
    devices = _by_pod(snapshot.allocations.containers)
    assert devices[("mig", "main")][0].mig_device_uuid == MIG
    assert devices[("sliced", "main")][0].shared
    assert [g.minor_number for g in snapshot.sample.gpus] == [0, 1]


def test_agent_without_kubelet_sends_the_reason(sockdir: Path, nvml: FakeGpuSource) -> None:
    client = PodResourcesClient(str(sockdir / "absent.sock"))
    poller = PodResourcesPoller(client.list, interval=0.05)
    with start_agent_thread(nvml, pod_resources=poller) as agent:

        async def fetch() -> NodeSnapshot:
            async with AgentClient(agent.address) as c:
                return await c.get_snapshot(timeout=10)

        snapshot = eventually(
            lambda: (
                (s := asyncio.run(fetch())).allocations
                and s.allocations.reason
                and "absent.sock" in s.allocations.reason
                and s
            ),
            what="the kubelet's failure in the reply",
        )
    client.close()
    assert snapshot.allocations is not None and not snapshot.allocations.available
    assert snapshot.sample.gpus, "the GPUs are served all the same"


def test_the_agent_command_reads_the_socket_its_flag_names(sockdir: Path, tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [], uuid=GPU0, minorNumber=0)]))
    with FakeKubelet(sockdir / "kubelet.sock", data=PODS):
        agent = start_agent_process(
            nvml,
            log_path=tmp_path / "agent.log",
            extra_args=["--pod-resources-socket", str(sockdir / "kubelet.sock")],
        )
        with agent:

            async def fetch() -> NodeSnapshot:
                async with AgentClient(agent.address) as c:
                    return await c.get_snapshot(timeout=10)

            snapshot = eventually(
                lambda: (s := asyncio.run(fetch())).allocations and s.allocations.available and s,
                what="the kubelet's answer through the agent command",
            )
    assert snapshot.allocations is not None
    devices = _by_pod(snapshot.allocations.containers)
    assert devices[("plain", "main")][0].gpu_uuid == GPU0


def test_the_agent_command_without_a_kubelet_logs_once_and_serves(
    sockdir: Path, tmp_path: Path
) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [], uuid=GPU0)]))
    absent = str(sockdir / "absent.sock")
    with start_agent_process(
        nvml, log_path=tmp_path / "agent.log", extra_args=["--pod-resources-socket", absent]
    ) as agent:

        async def fetch() -> NodeSnapshot:
            async with AgentClient(agent.address) as c:
                return await c.get_snapshot(timeout=10)

        snapshot = eventually(
            lambda: (
                (s := asyncio.run(fetch())).allocations
                and absent in (s.allocations.reason or "")
                and s
            ),
            what="the reason in the reply",
        )
        assert snapshot.sample.gpus[0].uuid == GPU0
        assert snapshot.allocations is not None and absent in (snapshot.allocations.reason or "")
        # Logged once, not once per poll.
        eventually(lambda: "no allocation data" in agent.logs(), what="the log line")
        scans_later = eventually(lambda: asyncio.run(fetch()).sampled_at > snapshot.sampled_at)
        assert scans_later
        assert agent.logs().count("no allocation data") == 1
