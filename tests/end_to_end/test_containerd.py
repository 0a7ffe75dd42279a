"""PID resolution against a real containerd, runc and busybox containers, and the real agent.

A private containerd runs three containers in namespace k8s.io under kubelet-style
cgroupfs paths (two in one pod, one in another); one container runs a second
process. A plain host process runs beside them. The resolvers are checked on
those live processes directly, then through the agent: a fake-NVML file lists
the PIDs on two GPUs, the agent runs as a subprocess, and its gRPC snapshot must
place every process in the right container and pod. Killing a container must
make its PID disappear from the next snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from node_resolver.containerd import ContainerdPidMap, ContainerdTasks, boot_ticks
from node_resolver.fake_nvml import write_fake_nvml
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.models import ContainerRef
from node_resolver.pids import CgroupResolver, ContainerdResolver, build_resolver
from node_resolver.procfs import ProcFS
from tests.support.agents import gpu_json, nvml_json, start_agent_process
from tests.support.containerd import Container, LocalContainerd, require_containerd

pytestmark = pytest.mark.containerd

EVENTUALLY = 30.0


@dataclass
class Scene:
    containerd: LocalContainerd
    containers: list[Container]
    host: subprocess.Popen[bytes]

    def expected(self) -> dict[int, tuple[str, str]]:
        """PID -> (container ID, pod UID); ("", "") for the host process."""
        found = {pid: (c.id, c.pod_uid) for c in self.containers for pid in c.pids}
        return {**found, self.host.pid: ("", "")}


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    require_containerd()
    containerd = LocalContainerd(tmp_path_factory.mktemp("containerd"))
    host = subprocess.Popen(["sleep", "100000"])
    try:
        containerd.start()
        shared_pod = "0b5e6c1a-7d2f-4c8e-9a31-5f6e7d8c9b0a"
        containers = [
            containerd.run(pod_uid=shared_pod),
            containerd.run(pod_uid=shared_pod),
            containerd.run(pod_uid="e4d3c2b1-a098-4765-8432-10fedcba9876"),
        ]
        containerd.exec(containers[0])
        yield Scene(containerd, containers, host)
    finally:
        host.kill()
        host.wait()
        containerd.stop()


def test_harness_started_real_kubelet_style_containers(scene: Scene) -> None:
    first = scene.containers[0]
    assert len(first.pids) == 2
    cgroup = Path(f"/proc/{first.pids[1]}/cgroup").read_text()
    assert first.cgroup_path in cgroup
    assert all(len(c.pids) >= 1 for c in scene.containers)


def test_cgroup_resolver_places_live_processes(scene: Scene) -> None:
    resolved = CgroupResolver().resolve(scene.expected())
    assert set(resolved) == set(scene.expected())
    for pid, (container_id, pod_uid) in scene.expected().items():
        expected = ContainerRef(container_id, "", pod_uid) if container_id else None
        assert resolved[pid].container == expected, pid
    assert resolved[scene.containers[0].pids[1]].name == "sleep"


def test_containerd_resolver_places_live_processes(scene: Scene) -> None:
    resolver = ContainerdResolver(socket=str(scene.containerd.socket))
    try:
        resolved = resolver.resolve(scene.expected())
    finally:
        resolver.close()
    assert set(resolved) == set(scene.expected())
    for pid, (container_id, pod_uid) in scene.expected().items():
        expected = ContainerRef(container_id, "containerd", pod_uid) if container_id else None
        assert resolved[pid].container == expected, pid


def test_auto_resolver_places_live_processes(scene: Scene) -> None:
    resolver = build_resolver("auto", containerd_socket=str(scene.containerd.socket))
    try:
        resolved = resolver.resolve(scene.expected())
    finally:
        resolver.close()
    assert {pid: (p.container.container_id, p.container.pod_uid) if p.container else ("", "")
            for pid, p in resolved.items()} == scene.expected()  # fmt: skip


def test_auto_asks_containerd_for_what_the_cgroup_path_cannot_place(scene: Scene) -> None:
    # A container whose cgroup path names neither a pod nor a 64-hex ID.
    odd = scene.containerd.run(cgroup_path=f"/custom/job-{time.monotonic_ns()}")
    try:
        assert CgroupResolver().resolve(odd.pids)[odd.pids[0]].container is None
        auto = build_resolver("auto", containerd_socket=str(scene.containerd.socket))
        try:
            resolved = auto.resolve([*odd.pids, *scene.containers[2].pids])
        finally:
            auto.close()
        assert resolved[odd.pids[0]].container == ContainerRef(odd.id, "containerd", None)
        # The cgroup path still wins where it can place a process.
        placed = resolved[scene.containers[2].pids[0]].container
        assert placed == ContainerRef(scene.containers[2].id, "", scene.containers[2].pod_uid)
    finally:
        scene.containerd.kill(odd)


def test_containerd_resolver_needs_the_right_namespace(scene: Scene) -> None:
    resolver = ContainerdResolver(socket=str(scene.containerd.socket), namespace="elsewhere")
    try:
        resolved = resolver.resolve(scene.expected())
    finally:
        resolver.close()
    assert all(p.container is None for p in resolved.values())


def test_containerd_map_refreshes_only_for_processes_it_cannot_vouch_for(scene: Scene) -> None:
    tasks = ContainerdTasks(str(scene.containerd.socket))
    pid_map = ContainerdPidMap(tasks, settle_seconds=0)
    proc = ProcFS()

    def keys(pids: list[int]) -> list[tuple[int, int]]:
        return [(pid, proc.stat(pid).start_time) for pid in pids]

    try:
        known = [pid for c in scene.containers for pid in c.pids]
        first = pid_map.lookup(keys([*known, scene.host.pid]))
        assert first == {pid: c.id for c in scene.containers for pid in c.pids}
        assert pid_map.refreshes == 1
        # Same processes, and a host process that was already running: no new round trip.
        pid_map.lookup(keys([*known, scene.host.pid]))
        assert pid_map.refreshes == 1
        # A container started after the map was built is found by refreshing.
        late = scene.containerd.run()
        try:
            assert pid_map.lookup(keys(late.pids)) == {late.pids[0]: late.id}
            assert pid_map.refreshes == 2
        finally:
            scene.containerd.kill(late)
        # A process that claims to have started after the map was built (as a new owner of
        # a reused PID would) never gets the map's entry for that PID.
        pid = known[0]
        assert pid_map.lookup([(pid, boot_ticks() + 10_000)]) == {}
    finally:
        tasks.close()


def test_containerd_going_away_keeps_what_is_known_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    require_containerd()
    with LocalContainerd(tmp_path / "cd") as containerd:
        container = containerd.run()
        resolver = ContainerdResolver(socket=str(containerd.socket))
        try:
            before = resolver.resolve(container.pids)
            assert before[container.pids[0]].container == ContainerRef(
                container.id, "containerd", container.pod_uid
            )
            containerd.stop_daemon()
            newcomer = subprocess.Popen(["sleep", "100000"])
            try:
                with caplog.at_level(logging.WARNING):
                    for _ in range(3):
                        after = resolver.resolve([*container.pids, newcomer.pid])
                        # Known processes keep their container; the new one stays unresolved.
                        assert (
                            after[container.pids[0]].container
                            == before[container.pids[0]].container
                        )
                        assert after[newcomer.pid].container is None
            finally:
                newcomer.kill()
                newcomer.wait()
        finally:
            resolver.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "unresolved" in warnings[0].getMessage()


# -- through the agent ---------------------------------------------------------


def write_gpus(path: Path, gpu0: list[int], gpu1: list[int]) -> None:
    """A two-GPU fake NVML file listing the given host PIDs."""

    def gpu(index: int, pids: list[int]) -> dict[str, object]:
        processes = [{"pid": pid, "usedMemoryBytes": 1 << 30, "smUtilization": 10} for pid in pids]
        return gpu_json(index, processes, memoryUsedBytes=(1 << 30) * len(pids))

    write_fake_nvml(path, nvml_json([gpu(0, gpu0), gpu(1, gpu1)]))


Processes = dict[int, tuple[str, str, str, int]]


def snapshot(address: str) -> agent_pb2.Snapshot:
    """The agent's latest snapshot, over real gRPC."""
    with grpc.insecure_channel(address) as channel:
        return agent_pb2_grpc.NodeAgentStub(channel).GetSnapshot(
            agent_pb2.GetSnapshotRequest(), timeout=10
        )


def processes_of(reply: agent_pb2.Snapshot) -> Processes:
    """PID -> (container ID, pod UID, runtime, GPU index) in a snapshot."""
    return {
        p.pid: (p.container_id, p.pod_uid, p.runtime, gpu.index)
        for gpu in reply.gpus
        for p in gpu.processes
    }


def processes(address: str) -> Processes:
    """The processes of the agent's latest snapshot."""
    return processes_of(snapshot(address))


def next_snapshot_after(address: str, moment: float) -> Processes:
    """The processes of the first snapshot the agent sampled after ``moment`` (Unix time)."""
    deadline = time.monotonic() + EVENTUALLY
    while time.monotonic() < deadline:
        reply = snapshot(address)
        if reply.sampled_at > moment:
            return processes_of(reply)
        time.sleep(0.05)
    raise AssertionError(f"no snapshot sampled after {moment}")


def wait_until(address: str, check: Callable[[Processes], bool]) -> Processes:
    """Poll snapshots until ``check`` holds; returns that snapshot's processes."""
    deadline = time.monotonic() + EVENTUALLY
    seen: Processes = {}
    while time.monotonic() < deadline:
        seen = processes(address)
        if check(seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"condition never held; last snapshot: {seen}")


@pytest.mark.parametrize("resolver", ["cgroup", "containerd"])
def test_agent_reports_containers_and_pods_then_drops_killed_ones(
    scene: Scene, tmp_path: Path, resolver: str
) -> None:
    victim = scene.containerd.run()
    expected = {**scene.expected(), victim.pids[0]: (victim.id, victim.pod_uid)}
    pids = sorted(expected)
    gpu0, gpu1 = pids[::2], pids[1::2]
    nvml = tmp_path / "nvml.json"
    write_gpus(nvml, gpu0, gpu1)
    runtime = "containerd" if resolver == "containerd" else ""

    agent = start_agent_process(
        nvml,
        log_path=tmp_path / f"agent-{resolver}.log",
        pid_resolver=resolver,
        extra_args=["--containerd-socket", str(scene.containerd.socket)],
    )
    with agent:
        seen = wait_until(agent.address, lambda procs: set(procs) == set(pids))
        for pid, (container_id, pod_uid) in expected.items():
            want_runtime = runtime if container_id else ""
            want_gpu = 0 if pid in gpu0 else 1
            assert seen[pid] == (container_id, pod_uid, want_runtime, want_gpu), pid
        assert seen[scene.host.pid][:2] == ("", "")

        scene.containerd.kill(victim)
        killed_at = time.time()
        # The fake NVML file still lists the PID; the agent drops it because it is
        # gone, from the first snapshot sampled after the kill.
        first = next_snapshot_after(agent.address, killed_at)
        assert victim.pids[0] not in first
        after = wait_until(agent.address, lambda procs: victim.pids[0] not in procs)
        assert set(after) == set(pids) - {victim.pids[0]}
        listed = {p["pid"] for g in json.loads(nvml.read_text())["gpus"] for p in g["processes"]}
        assert victim.pids[0] in listed
        assert agent.stop() == 0, agent.logs()


def test_harness_cleans_up_after_itself(tmp_path: Path) -> None:
    require_containerd()
    containerd = LocalContainerd(tmp_path / "cd")
    with containerd:
        container = containerd.run()
        containerd.exec(container)
        pids = list(container.pids)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert not containerd.socket.exists()
    assert not (tmp_path / "cd" / "state").exists()
    assert not any(
        (mount / container.cgroup_path.lstrip("/")).exists()
        for mount in Path("/sys/fs/cgroup").iterdir()
    )
