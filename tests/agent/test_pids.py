"""PID resolvers on /proc trees: placement, races, PID reuse, names and command lines."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from api.demo.cluster.fake_proc import kubelet_cgroup, remove_process, write_process
from node_resolver.models import ContainerRef
from node_resolver.pids import (
    CgroupResolver,
    ChainResolver,
    ContainerdResolver,
    ProcResolver,
    ResolvedProcess,
    build_resolver,
)

POD_A = "11111111-2222-3333-4444-555555555555"
POD_B = "66666666-7777-8888-9999-aaaaaaaaaaaa"
CID_A = "a" * 64
CID_B = "b" * 64


def cgroupfs(pod: str, cid: str) -> str:
    return kubelet_cgroup(pod, cid)


def systemd(pod: str, cid: str) -> str:
    return kubelet_cgroup(pod, cid, driver="systemd")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_process(
        tmp_path, 100, comm="python", start_time=1000, cgroup=cgroupfs(POD_A, CID_A),
        cmdline=["python", "train.py", "--api-key=hunter2"],
    )  # fmt: skip
    write_process(tmp_path, 101, comm="worker 1", start_time=1001, cgroup=cgroupfs(POD_A, CID_A))
    write_process(tmp_path, 200, comm="infer", start_time=1100, cgroup=systemd(POD_B, CID_B))
    write_process(tmp_path, 300, comm="Xorg", start_time=50, cgroup="0::/system.slice/x.service\n")
    return tmp_path


def test_cgroup_resolver_places_containers_and_host_processes(tree: Path) -> None:
    resolved = CgroupResolver(proc_root=str(tree)).resolve([100, 101, 200, 300])
    assert {pid: p.container for pid, p in resolved.items()} == {
        100: ContainerRef(CID_A, "", POD_A),
        101: ContainerRef(CID_A, "", POD_A),
        200: ContainerRef(CID_B, "containerd", POD_B),
        300: None,
    }
    assert resolved[101].name == "worker 1"
    assert resolved[100].start_time == 1000


def test_missing_and_vanished_pids_are_dropped_quietly(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resolver = CgroupResolver(proc_root=str(tree))
    remove_process(tree, 101)
    with caplog.at_level(logging.DEBUG):
        resolved = resolver.resolve([100, 101, 999])
    assert set(resolved) == {100}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_cmdline_only_when_exposed(tree: Path) -> None:
    hidden = CgroupResolver(proc_root=str(tree)).resolve([100])[100]
    shown = CgroupResolver(proc_root=str(tree), expose_cmdline=True).resolve([100])[100]
    assert hidden.cmdline is None
    assert shown.cmdline == "python train.py --api-key=hunter2"
    assert hidden.name == shown.name == "python"


def test_name_follows_comm_changes(tree: Path) -> None:
    resolver = CgroupResolver(proc_root=str(tree))
    assert resolver.resolve([200])[200].name == "infer"
    (tree / "200" / "comm").write_text("infer:step9\n")
    assert resolver.resolve([200])[200].name == "infer:step9"


def test_an_unparseable_stat_keeps_the_process_unresolved_and_warns_once_per_episode(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = (tree / "101" / "stat").read_text()
    (tree / "101" / "stat").write_text("garbage\n")
    resolver = CgroupResolver(proc_root=str(tree))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            resolved = resolver.resolve([100, 101, 200])
            assert set(resolved) == {100, 101, 200}, "the GPU process does not vanish"
            assert resolved[101] == ResolvedProcess(101, None, None, None, None)
            assert resolved[100].name is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning while it stays unparseable, not one per scan"
    assert "101" in warnings[0] and "unresolved" in warnings[0]
    # It parses again, then breaks again: a new episode, a new warning.
    (tree / "101" / "stat").write_text(good)
    assert resolver.resolve([101])[101].start_time is not None
    (tree / "101" / "stat").write_text("garbage\n")
    with caplog.at_level(logging.WARNING):
        resolver.resolve([101])
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_unreadable_cgroup_leaves_the_process_unplaced_but_reported(tree: Path) -> None:
    # A directory where the file should be: reading it fails with EISDIR, not "gone".
    (tree / "200" / "cgroup").unlink()
    (tree / "200" / "cgroup").mkdir()
    resolved = CgroupResolver(proc_root=str(tree)).resolve([200])
    assert resolved[200].container is None
    assert resolved[200].name == "infer"


def test_an_unreadable_stat_keeps_the_process_unresolved_and_warns_once(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Reading a directory fails with EISDIR: the entry exists, so the process is alive.
    for pid in (100, 200):
        (tree / str(pid) / "stat").unlink()
        (tree / str(pid) / "stat").mkdir()
    resolver = CgroupResolver(proc_root=str(tree))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            resolved = resolver.resolve([100, 200, 300, 999])
            assert set(resolved) == {100, 200, 300}
            assert resolved[100] == ResolvedProcess(100, None, None, None, None)
            assert resolved[300].name == "Xorg"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unresolved" in warnings[0]


def test_chain_resolver_closes_every_resolver(tree: Path) -> None:
    closed: list[str] = []

    class Recording(ProcResolver):
        def __init__(self, name: str) -> None:
            super().__init__(proc_root=str(tree))
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    ChainResolver([Recording("cgroup"), Recording("containerd")], proc_root=str(tree)).close()
    assert closed == ["cgroup", "containerd"]


def test_base_resolver_places_nothing(tree: Path) -> None:
    resolved = ProcResolver(proc_root=str(tree)).resolve([100, 300])
    assert [p.container for p in resolved.values()] == [None, None]


def missing_socket(tree: Path) -> Path:
    """A socket path with nothing at it."""
    return tree / "no.sock"


def dead_socket(tree: Path) -> Path:
    """A socket file nobody listens on, as after containerd crashed."""
    path = tree / "dead.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()
    return path


@pytest.mark.parametrize(
    ("containerd", "warning"),
    [(missing_socket, "no.sock"), (dead_socket, "UNAVAILABLE")],
    ids=["socket-missing", "containerd-down"],
)
def test_containerd_unreachable_is_logged_once_and_unresolved(
    tree: Path,
    caplog: pytest.LogCaptureFixture,
    containerd: Callable[[Path], Path],
    warning: str,
) -> None:
    resolver = ContainerdResolver(socket=str(containerd(tree)), proc_root=str(tree))
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                resolved = resolver.resolve([100, 200, 300])
                assert set(resolved) == {100, 200, 300}
                assert all(p.container is None for p in resolved.values())
    finally:
        resolver.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warning in warnings[0].getMessage()


def test_auto_without_containerd_socket_uses_cgroup_only(
    tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resolver = build_resolver("auto", proc_root=str(tree), containerd_socket=str(tree / "x"))
    assert isinstance(resolver, ChainResolver)
    with caplog.at_level(logging.WARNING):
        resolved = resolver.resolve([100, 300])
    assert resolved[100].container == ContainerRef(CID_A, "", POD_A)
    assert resolved[300].container is None
    # No socket means containerd is simply not asked: nothing to warn about.
    assert not caplog.records


def test_build_resolver_kinds(tree: Path) -> None:
    assert isinstance(build_resolver("cgroup", proc_root=str(tree)), CgroupResolver)
    containerd = build_resolver(
        "containerd", containerd_socket="/x.sock", containerd_namespace="ns"
    )
    assert isinstance(containerd, ContainerdResolver)
    assert (containerd.tasks.socket_path, containerd.tasks.namespace) == ("/x.sock", "ns")
    exposed = build_resolver("cgroup", proc_root=str(tree), expose_cmdline=True)
    assert exposed.resolve([100])[100].cmdline is not None
    with pytest.raises(ValueError, match="unknown PID resolver 'docker'"):
        build_resolver("docker")


def test_real_proc_this_process_and_a_dead_one() -> None:
    child = subprocess.Popen(["sleep", "30"])
    resolver = build_resolver("cgroup")
    try:
        # Popen returns mid-exec: the new image's name and arguments appear a moment later.
        deadline = time.monotonic() + 30
        while not Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "child never finished exec"
            time.sleep(0.01)
        resolved = resolver.resolve([os.getpid(), child.pid])
        assert resolved[child.pid].name == "sleep"
        assert resolved[os.getpid()].pid == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in resolver.resolve([child.pid])
