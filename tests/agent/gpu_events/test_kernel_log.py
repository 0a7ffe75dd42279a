"""NVIDIA's XID messages read from the kernel log: the parser, and the reader on real files."""

from __future__ import annotations

import os
import queue
from pathlib import Path

import pytest

from node_resolver.gpu_events.kernel_log import (
    MAX_LINE_BYTES,
    KernelLogReader,
    KernelXid,
    parse_line,
    pci_key,
)
from tests.support.polling import eventually


@pytest.mark.parametrize(
    ("line", "xid", "pid", "name", "message"),
    [
        (
            "3,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=12345, name=python3, "
            "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            13, 12345, "python3",
            "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
        ),
        (
            "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
            79, None, "", "GPU has fallen off the bus.",
        ),
        (
            "Dec  5 18:00:00 node kernel: NVRM: Xid (PCI:0000:3b:00.0): 31, Ch 00000010, "
            "intr 10000000. MMU Fault",
            31, None, "", "Ch 00000010, intr 10000000. MMU Fault",
        ),
        ("NVRM: Xid (PCI:0000:3B:00): 48", 48, None, "", ""),
    ],
)  # fmt: skip
def test_the_drivers_xid_messages_parse(
    line: str, xid: int, pid: int | None, name: str, message: str
) -> None:
    parsed = parse_line(line)
    assert parsed is not None
    assert (parsed.pci, parsed.xid, parsed.pid, parsed.name, parsed.message) == (
        (0, 0x3B, 0),
        xid,
        pid,
        name,
        message,
    )


def test_the_kernels_and_nvmls_pci_addresses_are_the_same_key() -> None:
    assert pci_key("0000:3b:00") == pci_key("00000000:3B:00.0") == (0, 0x3B, 0)
    assert pci_key("garbage") is None


@pytest.mark.parametrize(
    "line",
    ["6,10,1,-;usb 1-1: new device", " SUBSYSTEM=pci", "", "NVRM: GPU at PCI:0000:3b:00: ok"],
)
def test_other_lines_are_not_xids(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize(
    "line", ["3,11,2,-;NVRM: Xid (PCI:zzzz): thirteen", "NVRM: Xid (PCI:0000:3b:00) 13"]
)
def test_a_broken_xid_message_is_an_error_not_a_guess(line: str) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        parse_line(line)


def test_the_reader_follows_a_growing_file_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=before, written before start\n")
    found: queue.Queue[KernelXid] = queue.Queue()
    reader = KernelLogReader(str(log), found.put, poll_seconds=0.01)
    reader.start()
    try:
        assert reader.following.wait(30)
        with log.open("a") as file:
            file.write("unrelated\nNVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=after, ")
            file.flush()
            # The rest of the line, written later: a line is read whole.
            file.write("x\n" + "y" * (MAX_LINE_BYTES + 1) + "\nNVRM: Xid (PCI:bad\n")
        first = found.get(timeout=30)
        assert (first.xid, first.pid, first.name, first.message) == (43, 7, "after", "x")
        eventually(lambda: reader.counts.malformed == 2, what="two malformed lines counted")
        assert (reader.counts.xid, reader.counts.skipped) == (1, 1)
        # Rotated: the new file's lines are all new.
        log.rename(tmp_path / "kern.log.1")
        log.write_text("NVRM: Xid (PCI:0000:3c:00): 31, pid=8, name=rotated, y\n")
        rotated = found.get(timeout=30)
        assert (rotated.pci, rotated.xid, rotated.name) == ((0, 0x3C, 0), 31, "rotated")
        assert found.empty()
    finally:
        reader.stop()


@pytest.mark.parametrize(
    ("name", "says"),
    [("missing", "FileNotFoundError"), (".", "IsADirectoryError: Is a directory")],
)
def test_an_unreadable_log_is_a_status_not_a_crash(tmp_path: Path, name: str, says: str) -> None:
    reader = KernelLogReader(str(tmp_path / name), lambda line: None, poll_seconds=0.01)
    reader.start()
    try:
        eventually(lambda: reader.status.startswith(says), what="the status")
    finally:
        reader.stop()


@pytest.mark.parametrize("device", ["/dev/kmsg", "/dev/null"])
def test_a_character_device_is_followed_record_by_record_from_its_end(device: str) -> None:
    if not os.access(device, os.R_OK):
        pytest.skip(f"{device} is not readable here")
    reader = KernelLogReader(device, lambda line: None, poll_seconds=0.01)
    reader.start()
    try:
        assert reader.following.wait(30)
        assert reader.status == "ok"
        # What the kernel logged before (the boot's records) is not read: no XID, nothing bad.
        assert (reader.counts.xid, reader.counts.malformed) == (0, 0)
        if device == "/dev/null":
            # A device at its end reads nothing, which is no line (and no busy loop).
            eventually(lambda: reader.device_reads >= 3, what="reads at the device's end")
            assert reader.counts.skipped == 0
    finally:
        reader.stop()
    assert reader._thread is not None and not reader._thread.is_alive()
