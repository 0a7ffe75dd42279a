"""NVIDIA's XID messages in the kernel log: who the driver blamed.

The driver writes ``NVRM: Xid (PCI:0000:3b:00): 13, pid=12345, name=python3,
...`` when a GPU raises an XID. NVML's event says which GPU and which XID but
not which process; this line names it. The reader follows a file as it grows:
``/dev/kmsg`` (records ``PRI,SEQ,USEC,FLAGS;MESSAGE``, one per read) or a file
of plain lines (a syslog file, or a test's). It starts at the end, so nothing
written before the agent started is read again after a restart, and a line it
does not understand is counted and skipped.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import select
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["KernelLineCounts", "KernelLogReader", "KernelXid", "parse_line", "pci_key"]

log = logging.getLogger(__name__)

# A /dev/kmsg record: priority and facility, sequence number, microseconds since boot,
# flags, then the message (continuation lines of key=value start with a space).
_KMSG = re.compile(r"^\d+,\d+,\d+,[^;]*;(?P<message>.*)$")
_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\):"
    r"\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$"
)
_PID = re.compile(r"^pid=(?:(?P<pid>\d+)|'?<unknown>'?)\s*(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*?)\s*(?:,\s*|$)")
_MESSAGE_CHARS = 240
# A line longer than this is not one of the driver's; it is skipped unread.
MAX_LINE_BYTES = 8192
POLL_SECONDS = 0.25
REOPEN_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class KernelXid:
    """One parsed XID message."""

    # (domain, bus, device) of the GPU, as NVML's bus ID gives them too.
    pci: tuple[int, int, int]
    pci_text: str
    xid: int
    pid: int | None
    name: str
    message: str


def pci_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "0000:3b:00" (the kernel's) or "00000000:3B:00.0" (NVML's)."""
    parts = bus_id.strip().split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)
    except ValueError:
        return None


def _message(line: str) -> str:
    """The message of a /dev/kmsg record, or the line itself when it is not one."""
    match = _KMSG.match(line)
    return match.group("message") if match else line


def parse_line(line: str) -> KernelXid | None:
    """The XID message in ``line``; None for any other line; ValueError for a broken one."""
    message = _message(line.rstrip("\r\n"))
    at = message.find("NVRM: Xid")
    if at < 0:
        return None
    match = _XID.search(message, at)
    if match is None:
        raise ValueError(f"an XID message this agent cannot read: {message[at : at + 80]!r}")
    pci = pci_key(match.group("pci"))
    if pci is None:  # the pattern admits only hex, so this does not happen
        raise ValueError(f"an unreadable PCI address: {match.group('pci')!r}")
    rest = match.group("rest") or ""
    pid: int | None = None
    name = ""
    found = _PID.match(rest)
    if found is not None:
        pid = int(found.group("pid")) if found.group("pid") else None
        rest = rest[found.end() :]
        named = _NAME.match(rest)
        if named is not None:
            name = named.group("name")
            name = "" if name.strip("'") == "<unknown>" else name
            rest = rest[named.end() :]
    return KernelXid(
        pci=pci,
        pci_text=match.group("pci").lower(),
        xid=int(match.group("xid")),
        pid=pid,
        name=name[:64],
        message=rest.strip()[:_MESSAGE_CHARS],
    )


@dataclass(slots=True)
class KernelLineCounts:
    """What the reader made of the lines it read."""

    xid: int = 0
    # Lines that are no XID message: most of a kernel log.
    skipped: int = 0
    # XID messages it could not read, and records too long to be the driver's.
    malformed: int = 0


class KernelLogReader:
    """Follows ``path`` in a daemon thread, handing each XID message to ``on_xid``."""

    def __init__(
        self,
        path: str,
        on_xid: Callable[[KernelXid], None],
        *,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.path = path
        self._on_xid = on_xid
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counts = KernelLineCounts()
        # "ok" once the file is open and read from its end; else why it is not.
        self.status = "starting"
        # Set once the reader is at the end of the file and follows it (tests wait on it).
        self.following = threading.Event()
        self._rotated = False
        # Reads of a character device so far, empty ones included (tests wait on it).
        self.device_reads = 0

    def start(self) -> None:
        """Start following from the file's current end."""
        self._thread = threading.Thread(target=self._run, name="kernel-log", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following (within one poll interval)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                self._failed(exc)
                self._stop.wait(REOPEN_SECONDS)
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    # Opened, but reading it says only "Invalid argument".
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                if stat.S_ISCHR(mode):
                    self._follow_records(fd)
                else:
                    self._follow_lines(fd)
            except OSError as exc:
                self._failed(exc)
                self._stop.wait(REOPEN_SECONDS)
            finally:
                os.close(fd)

    def _failed(self, exc: OSError) -> None:
        status = f"{type(exc).__name__}: {exc.strerror or exc}"
        if status != self.status:
            log.warning("cannot read the kernel log %s: %s", self.path, status)
        self.status = status
        self.following.clear()

    def _started(self) -> None:
        if self.status != "ok":
            log.info("following NVIDIA's XID messages in %s", self.path)
        self.status = "ok"
        self.following.set()

    def _follow_records(self, fd: int) -> None:
        """/dev/kmsg: every read returns one record; SEEK_END skips what is there already."""
        os.lseek(fd, 0, os.SEEK_END)
        self._started()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], self._poll)
            if not ready:
                continue
            try:
                record = os.read(fd, MAX_LINE_BYTES)
                self.device_reads += 1
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them
                    continue
                if exc.errno == errno.EINVAL:  # a record larger than the buffer
                    self.counts.malformed += 1
                    continue
                raise
            if not record:  # not /dev/kmsg after all (a device at its end): wait, do not spin
                self._stop.wait(self._poll)
                continue
            self._line(record)

    def _follow_lines(self, fd: int) -> None:
        """A regular file: read what is appended; a file replaced or cut is read from its start."""
        # Only the first opening starts at the end: after a rotation everything there is new.
        position = os.lseek(fd, 0, os.SEEK_SET if self._rotated else os.SEEK_END)
        identity = os.fstat(fd).st_ino
        self._started()
        partial = b""
        while not self._stop.is_set():
            chunk = os.read(fd, 65536)
            if chunk:
                position += len(chunk)
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                if len(partial) > MAX_LINE_BYTES:
                    self.counts.malformed += 1
                    partial = b""
                for line in lines:
                    self._line(line)
                continue
            with contextlib.suppress(OSError):
                now = os.stat(self.path)
                if now.st_ino != identity or now.st_size < position:
                    self._rotated = True
                    return
            self._stop.wait(self._poll)

    def _line(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE_BYTES:
            self.counts.malformed += 1
            return
        text = raw.decode("utf-8", "replace")
        try:
            parsed = parse_line(text)
        except ValueError:
            self.counts.malformed += 1
            return
        if parsed is None:
            self.counts.skipped += 1
            return
        self.counts.xid += 1
        try:
            self._on_xid(parsed)
        except Exception:
            log.exception("handling a kernel XID message failed")
