"""Reading one host process from a /proc tree, tolerating processes that exit mid-read.

The tree is usually the host's ``/proc`` (or ``/host/proc`` inside the agent's
pod); tests and the demo point it at a directory of plain files laid out the
same way. A process that is gone by the time we read it raises ``ProcessGone``;
one whose ``stat`` exists but cannot be read (EACCES, EIO, ...) raises
``ProcessUnreadable``, because such a process is alive and must not vanish.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

__all__ = [
    "CMDLINE_LIMIT",
    "ProcFS",
    "ProcSnapshot",
    "ProcStat",
    "ProcessGone",
    "ProcessUnreadable",
    "parse_cmdline",
    "parse_stat",
]

# Command lines can be megabytes long; nobody reads past the first few kilobytes.
CMDLINE_LIMIT = 4096

# Errors that mean "this PID no longer names a live process".
_GONE = (errno.ENOENT, errno.ESRCH)


class ProcessGone(Exception):
    """The process exited (or its PID was reused) while it was being read."""


class ProcessUnreadable(Exception):
    """The process's ``stat`` exists but could not be read; the message says why."""


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that PID resolution needs."""

    pid: int
    comm: str
    state: str
    # Clock ticks after boot (field 22): with the PID, it names one process.
    start_time: int


@dataclass(frozen=True, slots=True)
class ProcSnapshot:
    """One process as read in one pass; every field belongs to the same process."""

    pid: int
    start_time: int
    name: str | None
    cmdline: str | None
    cgroup: str | None


def parse_stat(text: str) -> ProcStat:
    """Parse ``/proc/<pid>/stat`` text; raises ValueError when it is malformed."""
    # comm may hold spaces and parentheses, so it ends at the *last* ')'.
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ValueError("stat has no '(comm)' field")
    try:
        pid = int(text[:open_at])
    except ValueError:
        raise ValueError(f"stat has a bad pid field: {text[:open_at]!r}") from None
    rest = text[close_at + 1 :].split()
    # rest[0] is field 3 (state), so field N is rest[N - 3].
    if len(rest) < 20:
        raise ValueError(f"stat has {len(rest) + 2} fields, expected at least 22")
    try:
        start_time = int(rest[19])
    except ValueError:
        raise ValueError("stat has a non-numeric starttime field") from None
    return ProcStat(pid, text[open_at + 1 : close_at], rest[0], start_time)


def parse_cmdline(raw: bytes) -> str:
    """Turn NUL-separated ``/proc/<pid>/cmdline`` bytes into one space-joined string."""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace")


class ProcFS:
    """A /proc tree rooted at ``root``."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def stat(self, pid: int) -> ProcStat:
        """Read ``<pid>/stat``: ProcessGone if the process is gone, ProcessUnreadable on errors."""
        try:
            raw = self._read(pid, "stat", 4096)
        except OSError as exc:
            if exc.errno in _GONE:
                raise ProcessGone(pid) from exc
            raise ProcessUnreadable(f"{self.root}/{pid}/stat: {exc.strerror}") from exc
        try:
            return parse_stat(raw.decode("utf-8", errors="replace"))
        except ValueError as exc:
            raise ValueError(f"{self.root}/{pid}/stat: {exc}") from None

    def comm(self, pid: int) -> str | None:
        """Read ``<pid>/comm`` (the process name); None if unreadable."""
        raw = self._optional(pid, "comm", 256)
        return None if raw is None else raw.rstrip(b"\n").decode("utf-8", errors="replace")

    def cmdline(self, pid: int) -> str | None:
        """Read ``<pid>/cmdline`` (at most CMDLINE_LIMIT bytes); None if unreadable."""
        raw = self._optional(pid, "cmdline", CMDLINE_LIMIT)
        return None if raw is None else parse_cmdline(raw)

    def cgroup(self, pid: int) -> str | None:
        """Read ``<pid>/cgroup``; None if unreadable."""
        raw = self._optional(pid, "cgroup", 1 << 16)
        return None if raw is None else raw.decode("utf-8", errors="replace")

    def snapshot(self, pid: int, *, cmdline: bool = False) -> ProcSnapshot:
        """Read one process consistently; ProcessGone if it exits or its PID is reused."""
        first = self.stat(pid)
        if _exited(first) and not self._has_live_threads(pid):
            raise ProcessGone(pid)
        name = self.comm(pid)
        cgroup = self.cgroup(pid)
        args = self.cmdline(pid) if cmdline else None
        # Everything above must describe the process we started with, not a successor.
        if self.stat(pid).start_time != first.start_time:
            raise ProcessGone(pid)
        return ProcSnapshot(pid, first.start_time, name, args, cgroup)

    def _optional(self, pid: int, name: str, limit: int) -> bytes | None:
        try:
            return self._read(pid, name, limit)
        except OSError as exc:
            if exc.errno in _GONE:
                raise ProcessGone(pid) from exc
            # e.g. EACCES: the process is alive, we just cannot see this detail.
            return None

    def _read(self, pid: int, name: str, limit: int) -> bytes:
        fd = os.open(f"{self.root}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks: list[bytes] = []
            size = 0
            while size < limit:
                chunk = os.read(fd, limit - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _has_live_threads(self, pid: int) -> bool:
        # A zombie leader whose other threads still run (main called pthread_exit) is alive.
        try:
            return len(os.listdir(f"{self.root}/{pid}/task")) > 1
        except OSError:
            return False


def _exited(stat: ProcStat) -> bool:
    return stat.state in ("Z", "X", "x")
