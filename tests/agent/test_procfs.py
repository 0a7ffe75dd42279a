"""Reading processes from /proc trees: odd names, vanishing processes, reused PIDs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from api.demo.cluster.fake_proc import remove_process, stat_line, write_process
from node_resolver.procfs import (
    CMDLINE_LIMIT,
    ProcessGone,
    ProcessUnreadable,
    ProcFS,
    ProcSnapshot,
    parse_cmdline,
    parse_stat,
)


@pytest.mark.parametrize(
    "comm",
    ["sleep", "my prog", "a) (b", "(x)", "))", "python3 (worker)", "tab\there", ""],
)
def test_parse_stat_splits_at_the_last_paren(comm: str) -> None:
    stat = parse_stat(stat_line(4242, comm, start_time=987654, state="R", ppid=17))
    assert (stat.pid, stat.comm, stat.state, stat.start_time) == (4242, comm, "R", 987654)


def test_parse_stat_of_this_process_matches_the_kernel() -> None:
    text = Path(f"/proc/{os.getpid()}/stat").read_text()
    stat = parse_stat(text)
    assert stat.pid == os.getpid()
    assert stat.start_time > 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1234",
        "1234 (sleep",
        "x (sleep) S 1 2 3",
        "1234 (sleep) S 1 2 3",
        "1234 (sleep) S 1 " + "0 " * 17 + "soon " + "0 " * 10,
    ],
)
def test_parse_stat_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_stat(text)


def test_parse_cmdline_joins_nul_separated_arguments() -> None:
    assert parse_cmdline(b"python3\0-m\0train\0--lr=0.1\0") == "python3 -m train --lr=0.1"
    assert parse_cmdline(b"") == ""
    # setproctitle-style: one argument, no trailing NUL.
    assert parse_cmdline(b"worker: idle") == "worker: idle"
    assert parse_cmdline(b"bad\xff\0arg\0") == "bad\ufffd arg"


def test_snapshot_reads_every_field_of_one_process(tmp_path: Path) -> None:
    write_process(
        tmp_path,
        100,
        comm="trainer (rank 0)",
        start_time=5000,
        cgroup="0::/kubepods/x\n",
        cmdline=["python", "train.py", "--token=s3cret"],
    )
    proc = ProcFS(str(tmp_path))
    assert proc.snapshot(100) == ProcSnapshot(
        100, 5000, "trainer (rank 0", None, "0::/kubepods/x\n"
    )
    full = proc.snapshot(100, cmdline=True)
    assert full.cmdline == "python train.py --token=s3cret"


def test_missing_pid_is_gone(tmp_path: Path) -> None:
    with pytest.raises(ProcessGone):
        ProcFS(str(tmp_path)).snapshot(7)


def test_process_vanishing_between_reads_is_gone(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="sleep", start_time=5000)
    (tmp_path / "100" / "cgroup").unlink()
    with pytest.raises(ProcessGone):
        ProcFS(str(tmp_path)).snapshot(100)


class _ReusingProcFS(ProcFS):
    """Replaces the process right after its name is read, as a PID reuse mid-scan would."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.tree = root

    def comm(self, pid: int) -> str | None:
        name = super().comm(pid)
        remove_process(self.tree, pid)
        write_process(self.tree, pid, comm="intruder", start_time=9999, cgroup="0::/\n")
        return name


def test_pid_reused_mid_read_is_gone(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="trainer", start_time=5000, cgroup="0::/kubepods/a\n")
    with pytest.raises(ProcessGone):
        _ReusingProcFS(tmp_path).snapshot(100)


def test_zombie_is_gone_unless_other_threads_live(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="defunct", start_time=5000, state="Z")
    write_process(tmp_path, 101, comm="leader-exited", start_time=5000, state="Z", threads=3)
    proc = ProcFS(str(tmp_path))
    with pytest.raises(ProcessGone):
        proc.snapshot(100)
    assert proc.snapshot(101).name == "leader-exited"


def test_malformed_stat_is_a_clear_error(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="x", start_time=1)
    (tmp_path / "100" / "stat").write_text("100 (x) S\n")
    with pytest.raises(ValueError, match=r"100/stat"):
        ProcFS(str(tmp_path)).snapshot(100)


def test_cmdline_is_capped(tmp_path: Path) -> None:
    write_process(tmp_path, 100, comm="x", start_time=1, cmdline=["a" * (CMDLINE_LIMIT * 3)])
    cmdline = ProcFS(str(tmp_path)).cmdline(100)
    assert cmdline is not None
    assert len(cmdline) == CMDLINE_LIMIT


def test_a_stat_that_exists_but_cannot_be_read_is_not_gone(tmp_path: Path) -> None:
    # EISDIR stands for any error but ENOENT/ESRCH (EACCES, EIO, ...): the process is alive.
    write_process(tmp_path, 100, comm="x", start_time=1)
    (tmp_path / "100" / "stat").unlink()
    (tmp_path / "100" / "stat").mkdir()
    with pytest.raises(ProcessUnreadable, match=r"100/stat"):
        ProcFS(str(tmp_path)).snapshot(100)


def test_real_process_and_its_exit() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        proc = ProcFS()
        # Popen returns mid-exec: the new image's name and arguments appear a moment later.
        deadline = time.monotonic() + 30
        while not Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "child never finished exec"
            time.sleep(0.01)
        snap = proc.snapshot(child.pid, cmdline=True)
        assert snap.name == "sleep"
        assert snap.cmdline == "sleep 30"
        assert snap.start_time == parse_stat(Path(f"/proc/{child.pid}/stat").read_text()).start_time
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessGone):
        proc.snapshot(child.pid)


def test_real_zombie_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Not reaped yet: the kernel keeps it as a zombie until we wait().
        deadline = time.monotonic() + 30
        while ProcFS().stat(child.pid).state != "Z":
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.01)
        with pytest.raises(ProcessGone):
            ProcFS().snapshot(child.pid)
    finally:
        child.wait()
