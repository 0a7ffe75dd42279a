"""NVML events for the fake library: lines appended to the file ``FAKE_NVML_EVENTS`` names.

``fake_nvml_events.c`` delivers each line appended after an event set was
created to waits on that set, as ``nvmlEventSetWait_v2`` would a driver's
event; ``fail`` makes the next wait of every set fail, as a driver reset does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "DOUBLE_BIT_ECC",
    "EVENTS_ENV",
    "NO_INSTANCE",
    "SINGLE_BIT_ECC",
    "XID",
    "FakeEvents",
    "kernel_pci",
    "pci_bus_id",
]

EVENTS_ENV = "FAKE_NVML_EVENTS"
# nvmlEventType values, as nvml.h numbers them.
SINGLE_BIT_ECC = 0x1
DOUBLE_BIT_ECC = 0x2
XID = 0x8
# An event's GPU or compute instance ID when it belongs to no MIG device.
NO_INSTANCE = 0xFFFFFFFF


def pci_bus_id(index: int) -> str:
    """The bus ID NVML reports for the fake's GPU ``index``, e.g. "00000000:3B:00.0"."""
    return f"00000000:{0x3B + index:02X}:00.0"


def kernel_pci(index: int) -> str:
    """The same address as NVIDIA's kernel messages write it, e.g. "0000:3b:00"."""
    return f"0000:{0x3B + index:02x}:00"


class FakeEvents:
    """The events file of one fake library (created empty)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def env(self) -> dict[str, str]:
        """The environment entry that points the library at this file."""
        return {EVENTS_ENV: os.fspath(self.path)}

    def emit(
        self,
        gpu: int,
        kind: int,
        data: int = 0,
        *,
        gi: int = NO_INSTANCE,
        ci: int = NO_INSTANCE,
        count: int = 1,
    ) -> None:
        """Append ``count`` events of type ``kind`` on GPU ``gpu`` (its index)."""
        self._append([f"{gpu} {kind} {data} {gi} {ci}"] * count)

    def fail_next_wait(self, code: int) -> None:
        """Make the next wait on every set return NVML error ``code``."""
        self._append([f"fail {code}"])

    def _append(self, lines: Iterable[str]) -> None:
        # One write of whole lines: the library never sees half of one as an event.
        with self.path.open("a") as file:
            file.write("".join(f"{line}\n" for line in lines))
