"""The XID catalog: what the common codes mean and where they point; unknown codes by number."""

from __future__ import annotations

import pytest

from node_resolver.gpu_events.records import GpuEventKind
from node_resolver.gpu_events.xid import XID_CATALOG, XidCause, describe, xid_info


def test_every_entry_is_filed_under_its_own_code_with_a_description() -> None:
    for code, info in XID_CATALOG.items():
        assert info.code == code
        assert info.description.strip() == info.description and info.description
        assert isinstance(info.cause, XidCause)


@pytest.mark.parametrize(
    "code,cause",
    [
        # An illegal memory access and a page fault: the application's own bug.
        (13, XidCause.APPLICATION),
        (31, XidCause.APPLICATION),
        (43, XidCause.APPLICATION),
        # A double-bit ECC error, a GPU fallen off the bus: drain, reset, call the vendor.
        (48, XidCause.HARDWARE_DRIVER),
        (79, XidCause.HARDWARE_DRIVER),
        (95, XidCause.HARDWARE_DRIVER),
    ],
)
def test_the_common_codes_point_where_nvidias_catalog_says(code: int, cause: XidCause) -> None:
    info = xid_info(code)
    assert info is not None and info.cause is cause
    assert describe(GpuEventKind.XID, code) == info.description


def test_a_code_the_catalog_does_not_list_has_no_description_and_no_guess() -> None:
    assert 999 not in XID_CATALOG
    assert xid_info(999) is None
    assert describe(GpuEventKind.XID, 999) is None
    assert describe(GpuEventKind.XID, None) is None


@pytest.mark.parametrize(
    "kind", [GpuEventKind.ECC_DOUBLE_BIT, GpuEventKind.ECC_SINGLE_BIT, GpuEventKind.GPU_LOST]
)
def test_the_other_kinds_are_described_by_kind(kind: GpuEventKind) -> None:
    described = describe(kind, None)
    assert described
    # An XID code carried along does not change what the kind means.
    assert describe(kind, 13) == described
