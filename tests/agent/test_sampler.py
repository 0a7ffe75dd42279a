"""Sampler: background scans, PID resolution and error containment."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from api.demo.cluster.fake_proc import kubelet_cgroup
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.models import ContainerRef, NodeSample
from node_resolver.pids import ResolvedProcess, build_resolver
from node_resolver.sampler import Sampler
from tests.support.agents import (
    CountingSource,
    FakeProc,
    StaticResolver,
    gpu_json,
    nvml_json,
    resolved,
    write_proc_tree,
)
from tests.support.polling import eventually

CONTAINER = "a" * 64
POD = "3f1c2a9e-1111-2222-3333-444455556666"


@pytest.fixture
def source(tmp_path: Path) -> CountingSource:
    path = tmp_path / "nvml.json"
    procs = [{"pid": 10, "usedMemoryBytes": 5}, {"pid": 11}, {"pid": 12}]
    write_fake_nvml(path, nvml_json([gpu_json(0, procs), gpu_json(1, [{"pid": 10}])]))
    return CountingSource(FakeGpuSource(path))


def test_scan_annotates_processes_and_drops_exited_pids(source: CountingSource) -> None:
    resolver = StaticResolver(
        {
            10: resolved(10, "trainer", container_id=CONTAINER, pod_uid=POD),
            12: resolved(12, "Xorg"),
        }
    )
    sampler = Sampler(source, resolver, node_name="gpu-1", clock=lambda: 123.0)
    snapshot = sampler.scan()
    assert snapshot.node_name == "gpu-1" and snapshot.sampled_at == 123.0
    gpu0, gpu1 = snapshot.sample.gpus
    # PID 11 is gone (the resolver did not find it): dropped quietly.
    assert [(p.pid, p.name) for p in gpu0.processes] == [(10, "trainer"), (12, "Xorg")]
    assert gpu0.processes[0].container == ContainerRef(CONTAINER, "containerd", POD)
    assert gpu0.processes[0].used_memory_bytes == 5
    assert gpu0.processes[1].container is None, "a host process stays, with no container"
    assert [p.pid for p in gpu1.processes] == [10]
    assert resolver.calls == 1, "all GPUs' PIDs are resolved in one call"


def test_the_command_line_is_whatever_the_resolver_exposes(source: CountingSource) -> None:
    # --expose-cmdline gates the resolver alone: what it reads, the sampler passes on.
    resolver = StaticResolver({10: resolved(10, cmdline="python train.py"), 12: resolved(12)})
    gpu0 = Sampler(source, resolver, node_name="n").scan().sample.gpus[0]
    assert [(p.pid, p.cmdline) for p in gpu0.processes] == [(10, "python train.py"), (12, None)]


def test_a_failing_source_becomes_a_node_error_and_sampling_goes_on(
    source: CountingSource,
) -> None:
    source.fail_with = RuntimeError("driver exploded")
    resolver = StaticResolver({10: resolved(10)})
    sampler = Sampler(source, resolver, node_name="n", interval=0.01)
    sampler.start()
    try:
        eventually(lambda: sampler.scans >= 2)
        failed = sampler.latest()
        assert failed is not None
        assert failed.sample.error == "GPU scan failed: RuntimeError: driver exploded"
        assert failed.sample.gpus == []
        source.fail_with = None
        eventually(lambda: (s := sampler.latest()) is not None and s.sample.error is None)
    finally:
        sampler.stop()


def test_a_failing_resolver_keeps_the_gpus_and_unresolved_processes(
    source: CountingSource,
) -> None:
    class Broken:
        def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
            raise OSError("proc not mounted")

        def close(self) -> None:
            pass

    snapshot = Sampler(source, Broken(), node_name="n").scan()
    assert snapshot.sample.error == "PID resolution failed: OSError: proc not mounted"
    assert [p.pid for p in snapshot.sample.gpus[0].processes] == [10, 11, 12]
    assert snapshot.sample.gpus[0].utilization_gpu == 87


def test_background_thread_scans_every_interval_and_stops(source: CountingSource) -> None:
    sampler = Sampler(source, StaticResolver(), node_name="n", interval=0.02)
    assert sampler.latest() is None and not sampler.ready
    sampler.start()
    assert sampler.wait_ready(10)
    eventually(lambda: sampler.scans >= 3)
    sampler.stop(timeout=10)
    assert not any(t.name == "gpu-sampler" and t.is_alive() for t in threading.enumerate())
    scans = sampler.scans
    time.sleep(0.1)
    assert sampler.scans == scans == source.samples


def test_readers_never_trigger_a_scan(source: CountingSource) -> None:
    sampler = Sampler(source, StaticResolver(), node_name="n", interval=3600)
    sampler.start()
    try:
        assert sampler.wait_ready(10)
        for _ in range(100):
            assert sampler.latest() is not None
        assert source.samples == 1 and sampler.scans == 1
    finally:
        sampler.stop()


def test_rejects_a_non_positive_interval(source: CountingSource) -> None:
    with pytest.raises(ValueError, match="interval"):
        Sampler(source, StaticResolver(), node_name="n", interval=0)


def test_with_the_cgroup_resolver_over_a_proc_tree(tmp_path: Path) -> None:
    proc = write_proc_tree(
        tmp_path / "proc",
        {
            100: FakeProc("trainer", kubelet_cgroup(POD, CONTAINER)),
            200: FakeProc("nvidia-persistenced"),
        },
    )
    path = tmp_path / "nvml.json"
    write_fake_nvml(path, nvml_json([gpu_json(0, [{"pid": 100}, {"pid": 200}, {"pid": 300}])]))
    resolver = build_resolver("cgroup", proc_root=str(proc))
    snapshot = Sampler(FakeGpuSource(path), resolver, node_name="n").scan()
    found = {p.pid: (p.name, p.container) for p in snapshot.sample.gpus[0].processes}
    assert found == {
        # A cgroupfs path does not name the runtime.
        100: ("trainer", ContainerRef(CONTAINER, "", POD)),
        # The kernel keeps the first 15 characters of a process name.
        200: ("nvidia-persiste", None),
    }


def test_no_gpu_pid_in_proc_twice_running_is_a_node_error_naming_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An empty /proc tree: what the agent sees without hostPID or with a wrong --proc-root.
    path = tmp_path / "nvml.json"
    write_fake_nvml(path, nvml_json([gpu_json(0, [{"pid": 100}, {"pid": 200}])]))
    (tmp_path / "proc").mkdir()
    resolver = build_resolver("cgroup", proc_root=str(tmp_path / "proc"))
    sampler = Sampler(FakeGpuSource(path), resolver, node_name="n")
    with caplog.at_level(logging.WARNING, logger="node_resolver.sampler"):
        # Once may be the only GPU process exiting mid-scan: dropped quietly.
        first = sampler.scan().sample
        assert first.error is None and first.gpus[0].processes == []
        for _ in range(3):
            sample = sampler.scan().sample
            assert sample.error is not None
            assert "hostPID" in sample.error and "--proc-root" in sample.error
            # Nothing NVML reports is lost: the processes stay, unresolved.
            assert [(p.pid, p.name) for p in sample.gpus[0].processes] == [(100, None), (200, None)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "warned once, not on every scan"
    # With the right /proc the error clears.
    write_proc_tree(tmp_path / "proc", {100: FakeProc("trainer")})
    sample = sampler.scan().sample
    assert sample.error is None and [p.pid for p in sample.gpus[0].processes] == [100]


def test_stop_does_not_wait_forever_on_a_hung_scan(
    source: CountingSource, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    class Hung:
        def sample(self) -> NodeSample:
            release.wait()
            return source.sample()

        def close(self) -> None:
            pass

    sampler = Sampler(Hung(), StaticResolver(), node_name="n")
    sampler.start()
    try:
        with caplog.at_level(logging.WARNING, logger="node_resolver.sampler"):
            sampler.stop(timeout=0.05)
        assert "still running" in caplog.text
    finally:
        release.set()


def test_when_ready_runs_callbacks_once_the_first_snapshot_exists(source: CountingSource) -> None:
    sampler = Sampler(source, StaticResolver(), node_name="n")
    calls: list[str] = []
    sampler.when_ready(lambda: calls.append("early"))
    assert calls == []
    sampler.scan()
    sampler.scan()
    sampler.when_ready(lambda: calls.append("late"))
    assert calls == ["early", "late"]
