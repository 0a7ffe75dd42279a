"""Fake /proc trees: what write_process lays out reads back through ProcFS and the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.demo.cluster.fake_proc import kubelet_cgroup, remove_process, stat_line, write_process
from node_resolver.cgroup import parse_cgroup
from node_resolver.models import ContainerRef
from node_resolver.procfs import ProcessGone, ProcFS, ProcSnapshot, parse_stat

POD = "3f1c2a9e-1111-2222-3333-444455556666"
STATIC_POD = "0123456789abcdef0123456789abcdef"
CID = "c" * 64


def test_stat_line_has_the_kernels_52_fields() -> None:
    line = stat_line(4242, "my (prog)", start_time=987654, state="R", ppid=17)
    assert line.endswith("\n")
    after_comm = line[line.rindex(")") + 1 :].split()
    assert len(after_comm) + 2 == 52
    # Field 22 is starttime.
    assert after_comm[22 - 3] == "987654"
    # Field 4 is the parent PID.
    assert after_comm[4 - 3] == "17"
    stat = parse_stat(line)
    assert (stat.pid, stat.comm, stat.state, stat.start_time) == (4242, "my (prog)", "R", 987654)


@pytest.mark.parametrize("comm", ["trainer", "my prog", "python3 (worker)", "a) (b", "))"])
def test_procfs_reads_back_what_write_process_wrote(tmp_path: Path, comm: str) -> None:
    cgroup = kubelet_cgroup(POD, CID)
    proc = write_process(
        tmp_path,
        100,
        comm=comm,
        start_time=5000,
        cgroup=cgroup,
        cmdline=["python", "train.py", "--lr=0.1"],
    )
    assert proc == tmp_path / "100"
    procfs = ProcFS(str(tmp_path))
    assert procfs.stat(100).comm == comm
    # The comm file holds at most 15 characters, as the kernel's does.
    assert procfs.snapshot(100, cmdline=True) == ProcSnapshot(
        100, 5000, comm[:15], "python train.py --lr=0.1", cgroup
    )


def test_comm_is_cut_to_15_characters_like_the_kernel(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="nvidia-persistenced", start_time=1)
    assert (tmp_path / "100" / "comm").read_text() == "nvidia-persiste\n"
    assert ProcFS(str(tmp_path)).comm(100) == "nvidia-persiste"


def test_defaults_are_a_sleeping_host_process_with_one_thread(tmp_path: Path) -> None:
    proc = write_process(tmp_path, 100, comm="sleep", start_time=1)
    assert (proc / "cgroup").read_text() == "0::/\n"
    assert (proc / "cmdline").read_bytes() == b""
    assert sorted(p.name for p in (proc / "task").iterdir()) == ["100"]
    assert ProcFS(str(tmp_path)).stat(100).state == "S"


def test_threads_make_task_directories(tmp_path: Path) -> None:
    proc = write_process(tmp_path, 100, comm="x", start_time=1, threads=3)
    assert sorted(p.name for p in (proc / "task").iterdir()) == ["100", "101", "102"]


def test_write_process_replaces_and_remove_process_removes(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="old", start_time=1, threads=2)
    write_process(tmp_path, 100, comm="new", start_time=2)
    procfs = ProcFS(str(tmp_path))
    assert procfs.snapshot(100).name == "new"
    assert procfs.snapshot(100).start_time == 2
    assert sorted(p.name for p in (tmp_path / "100" / "task").iterdir()) == ["100"]
    remove_process(tmp_path, 100)
    with pytest.raises(ProcessGone):
        procfs.snapshot(100)
    # Removing an exited process again is harmless.
    remove_process(tmp_path, 100)


@pytest.mark.parametrize(
    ("qos", "driver", "expected"),
    [
        ("burstable", "cgroupfs", f"0::/kubepods/burstable/pod{POD}/{CID}\n"),
        ("besteffort", "cgroupfs", f"0::/kubepods/besteffort/pod{POD}/{CID}\n"),
        ("guaranteed", "cgroupfs", f"0::/kubepods/pod{POD}/{CID}\n"),
        (
            "burstable",
            "systemd",
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        ),
        (
            "besteffort",
            "systemd",
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        ),
        (
            "guaranteed",
            "systemd",
            f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
        ),
    ],
)
def test_kubelet_cgroup_layouts(qos: str, driver: str, expected: str) -> None:
    assert kubelet_cgroup(POD, CID, qos=qos, driver=driver) == expected


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
@pytest.mark.parametrize("pod_uid", [POD, STATIC_POD])
def test_kubelet_cgroup_round_trips_through_the_parser(qos: str, driver: str, pod_uid: str) -> None:
    ref = parse_cgroup(kubelet_cgroup(pod_uid, f"containerd://{CID}", qos=qos, driver=driver))
    # The cgroupfs driver's bare ID does not name the runtime.
    runtime = "containerd" if driver == "systemd" else ""
    assert ref == ContainerRef(CID, runtime, pod_uid)


def test_kubelet_cgroup_round_trips_through_procfs(tmp_path: Path) -> None:
    write_process(
        tmp_path, 100, comm="x", start_time=1, cgroup=kubelet_cgroup(POD, CID, driver="systemd")
    )
    cgroup = ProcFS(str(tmp_path)).cgroup(100)
    assert cgroup is not None
    assert parse_cgroup(cgroup) == ContainerRef(CID, "containerd", POD)


def test_kubelet_cgroup_rejects_unknown_qos_and_driver() -> None:
    with pytest.raises(ValueError, match="qos"):
        kubelet_cgroup(POD, CID, qos="platinum")
    with pytest.raises(ValueError, match="driver"):
        kubelet_cgroup(POD, CID, driver="cgroupv1")
