"""Fixture /proc trees: the files the agent's PID resolver reads, for each demo process."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from .cluster.fake_proc import write_process
from .scenario import DemoProcess

__all__ = ["write_proc_tree"]


def write_proc_tree(root: Path, processes: Iterable[DemoProcess]) -> None:
    """Write ``root/<pid>/{stat,comm,cmdline,cgroup}`` for every process, replacing ``root``."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for process in processes:
        write_process(
            root,
            process.pid,
            comm=process.comm,
            start_time=process.start_time,
            cgroup=process.cgroup,
            cmdline=process.cmdline,
        )
