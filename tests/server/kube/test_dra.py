"""ResourceClaims and ResourceSlices in the cache: parsing, discovery and list/watch per version,
and the share of a device a claim consumes by capacity."""

from __future__ import annotations

import pytest

from api.demo.cluster import make_node, make_pod
from api.demo.cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from api.kube.dra_cache import DraCache, consumed_share
from api.kube.dra_watcher import pick_version
from api.kube.parse import ParseError, claim_record, pod_record, quantity_amount, slice_record
from graph_schema.gpu_resources import GpuResources
from graph_schema.records import ClaimDeviceRecord, ResourceClaimRecord
from tests.support.kube import stub_api, watched_cache
from tests.support.polling import eventually

GPU = "GPU-00000000-0000-0000-0000-000000000000"
MIG = "MIG-11111111-1111-1111-1111-111111111111"


def test_gpu_request_counts_every_gpu_like_resource() -> None:
    assert pod_record(make_pod("a", gpu_limit=2)).gpu_request == 2
    shared = make_pod("b", gpu_limit=1, gpu_resource="nvidia.com/gpu.shared")
    assert pod_record(shared).gpu_request == 1
    mig = make_pod(
        "c", containers=("x", "y"), gpu_limit=[1, 2], gpu_resource="nvidia.com/mig-1g.10gb"
    )
    assert pod_record(mig).gpu_request == 3
    other = make_pod("d", gpu_limit=1, gpu_resource="example.com/vgpu")
    assert pod_record(other).gpu_request is None, "not a GPU name by default"
    custom = GpuResources(names=("example.com/*",))
    assert pod_record(other, custom).gpu_request == 1, "the names are a setting"


def test_pod_keeps_its_claims_from_templates() -> None:
    pod = pod_record(make_pod("t", claims={"gpu": "t-gpu-x7k2p"}))
    assert pod.resource_claims == (("gpu", "t-gpu-x7k2p"),)
    assert pod.containers[0].claims == ("gpu",)
    assert pod.gpu_request is None, "DRA devices are counted by the join, from the claim"


def test_claim_record_reads_devices_shares_and_reservations() -> None:
    claim = claim_record(
        make_resource_claim(
            "ml",
            "c",
            [ClaimDevice("gpu-0", "node-a"), ClaimDevice("gpu-1", "node-a", share_id="s-1")],
            reserved_for=["p"],
        )
    )
    assert claim.devices == (
        ClaimDeviceRecord("gpu.nvidia.com", "node-a", "gpu-0"),
        ClaimDeviceRecord(
            "gpu.nvidia.com", "node-a", "gpu-1", "s-1", True, (("memory", 20 * 2**30),)
        ),
    )
    assert [name for name, _ in claim.reserved_for] == ["p"]
    pending = claim_record(make_resource_claim("ml", "d", []))
    assert pending.devices == () and pending.reserved_for == ()
    broken = make_resource_claim("ml", "e", [ClaimDevice("gpu-0", "node-a")])
    del broken["status"]["allocation"]["devices"]["results"][0]["pool"]
    with pytest.raises(ParseError, match="lacks driver/pool/device"):
        claim_record(broken)


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_slice_record_reads_attributes_of_each_version(version: str) -> None:
    record = slice_record(
        make_resource_slice(
            "node-a",
            [
                SliceDevice("gpu-0", GPU),
                SliceDevice("gpu-0-mig-1g10gb-9-0", MIG, "mig", parent_uuid=GPU),
            ],
            version=version,
        )
    )
    assert (record.driver, record.pool, record.node_name) == ("gpu.nvidia.com", "node-a", "node-a")
    full, mig = record.devices
    assert (full.uuid, full.type, full.product_name, full.parent_uuid) == (
        GPU,
        "gpu",
        "NVIDIA H200",
        None,
    )
    assert (mig.uuid, mig.parent_uuid, mig.type) == (MIG, GPU, "mig")


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_slice_record_reads_each_devices_capacity(version: str) -> None:
    capacity = {"memory": "80Gi", "multiprocessors": "132", "power": "700"}
    record = slice_record(
        make_resource_slice(
            "node-a",
            [SliceDevice("gpu-0", GPU, capacity=capacity), SliceDevice("gpu-1", GPU)],
            version=version,
        )
    )
    assert record.devices[0].capacity == (
        ("memory", 80 * 2**30),
        ("multiprocessors", 132.0),
        ("power", 700.0),
    )
    assert record.devices[1].capacity == ()


def test_consumed_capacity_is_read_in_base_units_and_garbage_left_out() -> None:
    raw = make_resource_claim(
        "ml",
        "c",
        [
            ClaimDevice(
                "gpu-0",
                "node-a",
                share_id="s",
                consumed={"memory": "10G", "cores": "1500m", "bad": "ten", "inf": "Inf"},
            )
        ],
    )
    raw["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["n"] = 3
    (device,) = claim_record(raw).devices
    assert device.consumed == (("memory", 10e9), ("cores", 1.5), ("n", 3.0))
    assert device.consumed_capacity
    assert [quantity_amount(q) for q in ("40Gi", "500m", 7, True, None, "1e3", "NaN")] == [
        40 * 2**30,
        0.5,
        7.0,
        None,
        None,
        1000.0,
        None,
    ]


def test_a_devices_share_is_its_largest_consumed_part_of_a_published_capacity() -> None:
    capacity = (("memory", 80.0), ("multiprocessors", 132.0), ("zero", 0.0))
    assert consumed_share((("memory", 20.0),), capacity) == 0.25
    # Several capacities: the one it takes most of.
    assert consumed_share((("memory", 10.0), ("multiprocessors", 66.0)), capacity) == 0.5
    # More than the device has (a stale slice): all of it, no more.
    assert consumed_share((("memory", 160.0),), capacity) == 1.0
    # Nothing to divide by, or nothing taken: not known (the agents weigh it 1).
    assert consumed_share((("power", 300.0), ("zero", 1.0)), capacity) is None
    assert consumed_share((("memory", 0.0),), capacity) is None
    assert consumed_share((), capacity) is None


def test_the_cache_gives_a_claimed_devices_share_from_its_slice() -> None:
    dra = DraCache()
    heard: list[tuple[str, object]] = []
    dra.subscribe(lambda kind, record: heard.append((kind, record)))
    taken = ClaimDeviceRecord("gpu.nvidia.com", "node-a", "gpu-0", "s", True, (("memory", 20.0),))
    assert dra.share(taken) is None, "no slice yet"
    published = slice_record(
        make_resource_slice(
            "node-a", [SliceDevice("gpu-0", GPU, capacity={"memory": "80"})], version="v1"
        )
    )
    dra.upsert_slice(published)
    assert dra.share(taken) == 0.25
    assert dra.share(ClaimDeviceRecord("gpu.nvidia.com", "node-a", "gpu-0")) is None
    dra.replace_claims([])
    assert heard == [("resourceslice", published), ("resourceclaim", None)]


def test_every_change_of_the_claims_moves_their_version_and_a_slice_does_not() -> None:
    dra = DraCache()
    claim = ResourceClaimRecord("ml", "c", "uid", (ClaimDeviceRecord("d", "p", "gpu-0"),))
    seen = [dra.claims_version]
    for change in (
        lambda: dra.replace_claims([claim]),
        lambda: dra.upsert_claim(claim),
        lambda: dra.delete_claim("ml", "c"),
    ):
        change()
        assert dra.claims_version not in seen
        seen.append(dra.claims_version)
    dra.replace_slices([])
    assert dra.claims_version == seen[-1]


def test_pick_version_prefers_ga() -> None:
    assert pick_version(["v1beta1", "v1", "v1beta2"]) == "v1"
    assert pick_version(["v1beta1", "v1beta2"]) == "v1beta2"
    assert pick_version(["v1alpha3"]) is None


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_claims_and_slices_are_listed_and_watched(version: str) -> None:
    with stub_api(dra_version=version) as server:
        server.load(
            pods=[make_pod("p", "ml", "node-a", claims={"gpu": "p-gpu-1"})],
            nodes=[make_node("node-a")],
            claims=[
                make_resource_claim(
                    "ml", "p-gpu-1", [ClaimDevice("gpu-0", "node-a")], reserved_for=["p"]
                )
            ],
            slices=[make_resource_slice("node-a", [SliceDevice("gpu-0", GPU)], version=version)],
        )
        with watched_cache(server) as (cache, _):
            dra = cache.dra
            eventually(lambda: dra.ready, what="claims and slices listed")
            assert dra.api_version == version and dra.served
            claim = dra.claim("ml", "p-gpu-1")
            assert claim is not None and claim.devices[0].device == "gpu-0"
            device = dra.device("gpu.nvidia.com", "node-a", "gpu-0")
            assert device is not None and device.uuid == GPU
            assert dra.has_slices_on("node-a")
            server.add_claim(make_resource_claim("ml", "late", [ClaimDevice("gpu-1", "node-a")]))
            eventually(lambda: dra.claim("ml", "late"), what="a watched claim")
            server.delete_claim("ml", "p-gpu-1")
            eventually(lambda: dra.claim("ml", "p-gpu-1") is None, what="a deleted claim")
            server.delete_slice("node-a-gpu.nvidia.com")
            eventually(lambda: not dra.has_slices_on("node-a"), what="a deleted slice")


def test_server_without_dra_is_cleanly_none() -> None:
    with stub_api(dra_version=None) as server:
        server.load(pods=[make_pod("p", "ml", "node-a")], nodes=[make_node("node-a")])
        with watched_cache(server) as (cache, _):
            eventually(lambda: cache.dra.served is False, what="discovery finding no DRA")
            assert cache.dra.ready and cache.dra.api_version is None
            assert server.count("resourceclaims", "list") == 0
