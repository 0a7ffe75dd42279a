"""A fake /proc tree written as plain files, for tests and the demo.

The agent's PID resolver reads ``<root>/<pid>/{stat,comm,cmdline,cgroup}``
and ``<root>/<pid>/task/``; pointing its ``--proc-root`` at a directory laid
out by ``write_process`` makes any PID look like a live process in any
container. ``kubelet_cgroup`` writes the cgroup file kubelet would give a
pod's container, so the process maps back to that pod::

    write_process(root, 4242, comm="python", start_time=5000,
                  cgroup=kubelet_cgroup(pod_uid, container_id, driver="systemd"),
                  cmdline=["python", "train.py"])
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HOST_CGROUP", "kubelet_cgroup", "remove_process", "stat_line", "write_process"]

# A host process outside any container: the cgroup v2 root.
HOST_CGROUP = "0::/\n"

# The kernel keeps 16 bytes of a process name, NUL included.
COMM_LIMIT = 15

_QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
_DRIVERS = ("cgroupfs", "systemd")


def stat_line(pid: int, comm: str, *, start_time: int, state: str = "S", ppid: int = 1) -> str:
    """A ``/proc/<pid>/stat`` line as the kernel writes it (52 fields)."""
    # Fields 4..52; field 22 (starttime) is index 18 of this list.
    fields = [str(ppid), *(["0"] * 17), str(start_time), *(["0"] * 30)]
    return f"{pid} ({comm}) {state} {' '.join(fields)}\n"


def write_process(
    root: Path,
    pid: int,
    *,
    comm: str,
    start_time: int,
    cgroup: str = HOST_CGROUP,
    cmdline: Sequence[str] = (),
    state: str = "S",
    threads: int = 1,
) -> Path:
    """Create (or replace) ``root/<pid>`` describing one process; returns its directory.

    ``comm`` is cut to 15 characters in the ``comm`` file, as the kernel does;
    ``threads`` task directories are made, numbered from ``pid``.
    """
    proc = root / str(pid)
    if proc.exists():
        shutil.rmtree(proc)
    (proc / "task").mkdir(parents=True)
    for tid in range(pid, pid + threads):
        (proc / "task" / str(tid)).mkdir()
    (proc / "stat").write_text(stat_line(pid, comm, start_time=start_time, state=state))
    (proc / "comm").write_text(comm[:COMM_LIMIT] + "\n")
    (proc / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in cmdline))
    (proc / "cgroup").write_text(cgroup)
    return proc


def remove_process(root: Path, pid: int) -> None:
    """Remove ``root/<pid>``, as if the process exited."""
    shutil.rmtree(root / str(pid), ignore_errors=True)


def kubelet_cgroup(
    pod_uid: str, container_id: str, *, qos: str = "burstable", driver: str = "cgroupfs"
) -> str:
    """The cgroup v2 ``/proc/<pid>/cgroup`` file kubelet gives a pod's container.

    ``qos`` is the pod's QoS class (``guaranteed``, ``burstable`` or
    ``besteffort``; Guaranteed pods sit directly under kubepods). ``driver`` is
    kubelet's cgroup driver: ``cgroupfs`` names the container by its bare ID,
    ``systemd`` by a containerd scope. A ``containerd://`` style prefix on
    ``container_id`` is dropped.
    """
    qos = qos.lower()
    if qos not in _QOS_CLASSES:
        raise ValueError(f"qos must be one of {', '.join(_QOS_CLASSES)}, got {qos!r}")
    if driver not in _DRIVERS:
        raise ValueError(f"driver must be one of {', '.join(_DRIVERS)}, got {driver!r}")
    bare = container_id.split("://", 1)[-1]
    if driver == "cgroupfs":
        parent = "/kubepods" if qos == "guaranteed" else f"/kubepods/{qos}"
        return f"0::{parent}/pod{pod_uid}/{bare}\n"
    uid = pod_uid.replace("-", "_")
    if qos == "guaranteed":
        parent, pod = "/kubepods.slice", f"kubepods-pod{uid}.slice"
    else:
        parent = f"/kubepods.slice/kubepods-{qos}.slice"
        pod = f"kubepods-{qos}-pod{uid}.slice"
    return f"0::{parent}/{pod}/cri-containerd-{bare}.scope\n"
