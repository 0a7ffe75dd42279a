"""Write fake /proc trees: one directory per PID holding stat, comm, cmdline and cgroup."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path


def stat_line(pid: int, comm: str, *, start_time: int, state: str = "S", ppid: int = 1) -> str:
    """Build a /proc/<pid>/stat line as the kernel writes it (52 fields)."""
    # Fields 4..52; field 22 (starttime) is index 18 of this list.
    fields = [str(ppid), *(["0"] * 17), str(start_time), *(["0"] * 30)]
    return f"{pid} ({comm}) {state} {' '.join(fields)}\n"


def write_process(
    root: Path,
    pid: int,
    *,
    comm: str,
    start_time: int,
    cgroup: str = "0::/\n",
    cmdline: Sequence[str] = (),
    state: str = "S",
    threads: int = 1,
) -> Path:
    """Create (or replace) ``root/<pid>`` describing one process; returns its directory."""
    proc = root / str(pid)
    if proc.exists():
        shutil.rmtree(proc)
    (proc / "task").mkdir(parents=True)
    for tid in range(pid, pid + threads):
        (proc / "task" / str(tid)).mkdir()
    (proc / "stat").write_text(stat_line(pid, comm, start_time=start_time, state=state))
    (proc / "comm").write_text(comm[:15] + "\n")
    (proc / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in cmdline))
    (proc / "cgroup").write_text(cgroup)
    return proc


def remove_process(root: Path, pid: int) -> None:
    """Remove ``root/<pid>``, as if the process exited."""
    shutil.rmtree(root / str(pid), ignore_errors=True)
