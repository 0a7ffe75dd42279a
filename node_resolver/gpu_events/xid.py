"""What an XID code means: the common codes of NVIDIA's public XID catalog.

Each entry is a short description and whether the code usually points at the
application (its own bug: restart or fix the job) or at the hardware and
driver (drain the node, reset the GPU, call the vendor). The catalog
(docs.nvidia.com/deploy/xid-errors) is the authority; codes missing here are
recorded and shown by number all the same. The server's GraphQL, alerts and
views read this table; it is declared once, here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .records import GpuEventKind

__all__ = ["XID_CATALOG", "XidCause", "XidInfo", "describe", "xid_info"]


class XidCause(enum.Enum):
    """Where an XID usually points."""

    APPLICATION = "APPLICATION"
    HARDWARE_DRIVER = "HARDWARE_DRIVER"


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog entry."""

    code: int
    description: str
    cause: XidCause


_APP = XidCause.APPLICATION
_HW = XidCause.HARDWARE_DRIVER

XID_CATALOG: dict[int, XidInfo] = {
    info.code: info
    for info in (
        XidInfo(8, "GPU stopped processing (channel timeout)", _APP),
        XidInfo(13, "Graphics engine exception (e.g. an out-of-range address in a kernel)", _APP),
        XidInfo(31, "GPU memory page fault (an illegal address)", _APP),
        XidInfo(32, "Invalid or corrupted push buffer stream", _HW),
        XidInfo(38, "Driver firmware error", _HW),
        XidInfo(43, "GPU stopped processing (the application's context faulted)", _APP),
        XidInfo(45, "Preemptive cleanup after an earlier error", _APP),
        XidInfo(48, "Double-bit ECC error", _HW),
        XidInfo(56, "Display engine error", _HW),
        XidInfo(57, "Error programming video memory interface", _HW),
        XidInfo(61, "Internal micro-controller breakpoint or warning", _HW),
        XidInfo(62, "Internal micro-controller halt", _HW),
        XidInfo(63, "ECC page retirement or row remapping recorded", _HW),
        XidInfo(64, "ECC page retirement or row remapping failed", _HW),
        XidInfo(68, "Video decoder (NVDEC) exception", _HW),
        XidInfo(69, "Graphics engine class error", _HW),
        XidInfo(74, "NVLink error", _HW),
        XidInfo(79, "GPU has fallen off the bus", _HW),
        XidInfo(92, "High single-bit ECC error rate", _HW),
        XidInfo(94, "Contained ECC error (only the application that hit it is affected)", _HW),
        XidInfo(95, "Uncontained ECC error", _HW),
        XidInfo(109, "Context switch timeout", _APP),
        XidInfo(119, "GSP RPC timeout", _HW),
        XidInfo(120, "GSP error", _HW),
        XidInfo(121, "C2C link corrected error", _HW),
        XidInfo(123, "SPI PMU RPC write failure", _HW),
        XidInfo(136, "Link training failure", _HW),
        XidInfo(140, "Unrecovered ECC error", _HW),
        XidInfo(143, "GPU initialization failure", _HW),
        XidInfo(154, "GPU recovery action changed", _HW),
    )
}

_KIND_DESCRIPTIONS = {
    GpuEventKind.ECC_DOUBLE_BIT: "Double-bit (uncorrectable) ECC error",
    GpuEventKind.ECC_SINGLE_BIT: "Single-bit (corrected) ECC error",
    GpuEventKind.GPU_LOST: "GPU lost: NVML answers GPU_IS_LOST",
}


def xid_info(code: int) -> XidInfo | None:
    """The catalog's entry for ``code``; None for a code it does not list."""
    return XID_CATALOG.get(code)


def describe(kind: GpuEventKind, xid: int | None) -> str | None:
    """A short description of an event: its XID's, or its kind's; None for an unlisted XID."""
    if kind is GpuEventKind.XID:
        info = None if xid is None else XID_CATALOG.get(xid)
        return None if info is None else info.description
    return _KIND_DESCRIPTIONS.get(kind)
