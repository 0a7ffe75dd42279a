"""Fixture /proc trees: the files the agent's PID resolver reads, for each demo process."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from .scenario import DemoProcess

__all__ = ["stat_line", "write_proc_tree"]


def stat_line(pid: int, comm: str, start_time: int) -> str:
    """A ``/proc/<pid>/stat`` line as the kernel writes it, sleeping, child of PID 1."""
    # Fields 4..52; field 22 (starttime) is the 19th of them.
    rest = ["1", *(["0"] * 17), str(start_time), *(["0"] * 30)]
    return f"{pid} ({comm}) S {' '.join(rest)}\n"


def write_proc_tree(root: Path, processes: Iterable[DemoProcess]) -> None:
    """Write ``root/<pid>/{stat,comm,cmdline,cgroup}`` for every process, replacing ``root``."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for process in processes:
        proc = root / str(process.pid)
        (proc / "task" / str(process.pid)).mkdir(parents=True)
        (proc / "stat").write_text(stat_line(process.pid, process.comm, process.start_time))
        (proc / "comm").write_text(process.comm[:15] + "\n")
        (proc / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in process.cmdline))
        (proc / "cgroup").write_text(process.cgroup)
