"""The allocation join's rules: each verdict, and never a wrong ALLOCATED on bad or missing data."""

from __future__ import annotations

from dataclasses import replace

from api.kube.dra_cache import DraCache
from graph_schema.allocation_join import (
    AllocationRules,
    AllocationSource,
    AllocationVerdict,
    allocation_table,
    judge_process,
    pod_gpu_request,
)
from graph_schema.records import (
    ClaimDeviceRecord,
    ResourceClaimRecord,
    ResourceSliceRecord,
    SliceDeviceRecord,
)
from node_resolver.models import (
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
    NodeSnapshot,
)
from tests.support.graph import MemoryCluster, gpu_uuid, pod_record, process, snapshot

NODE = "n1"
G0, G1 = gpu_uuid(NODE, 0), gpu_uuid(NODE, 1)
CID = "c" * 64
V = AllocationVerdict


def _plugin(device: str, gpu: str | None, resource: str = "nvidia.com/gpu") -> DeviceAllocation:
    return DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, resource, device, gpu_uuid=gpu)


def _kubelet(*devices: DeviceAllocation, pod: str = "p") -> NodeAllocations:
    return NodeAllocations(
        available=True, containers=(ContainerAllocations("ml", pod, "c0", tuple(devices)),)
    )


def _with(allocations: NodeAllocations | None) -> NodeSnapshot:
    return replace(snapshot(NODE, []), allocations=allocations)


def _cluster(**pod: object) -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.add_pod(replace(pod_record("ml", "p", NODE, container_ids=[CID]), **pod))  # type: ignore[arg-type]
    return cluster


def verdict(
    cluster: MemoryCluster,
    snap: NodeSnapshot,
    gpu: str,
    rules: AllocationRules | None = None,
    *,
    pod_uid: str = "uid-ml-p",
) -> AllocationVerdict:
    table = allocation_table(NODE, snap, cluster, rules or AllocationRules())
    return judge_process(
        table, cluster.pod_by_uid(pod_uid), process(1, 1, container_id=CID, pod_uid=pod_uid), gpu
    )


def test_plugin_device_on_this_gpu_is_allocated_and_elsewhere_not() -> None:
    snap = _with(_kubelet(_plugin(G0, G0)))
    assert verdict(_cluster(), snap, G0) is V.ALLOCATED
    assert verdict(_cluster(), snap, G1) is V.NOT_ALLOCATED


def test_an_unknown_device_id_is_never_allocated_nor_not_allocated() -> None:
    snap = _with(_kubelet(_plugin(G0, G0), _plugin("GPU-nowhere", None)))
    assert verdict(_cluster(), snap, G1) is V.UNKNOWN
    # A device that is no GPU (another vendor's NIC) does not make it unknown.
    nic = _kubelet(_plugin(G0, G0), _plugin("mlx5_1", None, "rdma/hca"))
    assert verdict(_cluster(), _with(nic), G1) is V.NOT_ALLOCATED


def test_no_data_old_agent_and_unlisted_pods_are_unknown() -> None:
    none = _with(NodeAllocations(available=False, reason="socket missing"))
    table = allocation_table(NODE, none, _cluster(), AllocationRules())
    assert (table.source, table.reason) == (AllocationSource.NONE, "socket missing")
    assert verdict(_cluster(), none, G0) is V.UNKNOWN
    old = _with(None)
    assert "older agent" in (
        allocation_table(NODE, old, _cluster(), AllocationRules()).reason or ""
    )
    # The kubelet's answer predates the pod: it is not listed.
    other = _with(_kubelet(_plugin(G0, G0), pod="someone-else"))
    assert verdict(_cluster(), other, G1) is V.UNKNOWN


def test_a_pod_gone_from_the_cache_is_unknown_and_a_host_process_no_pod() -> None:
    snap = _with(_kubelet(_plugin(G0, G0)))
    assert verdict(_cluster(), snap, G1, pod_uid="uid-deleted") is V.UNKNOWN
    table = allocation_table(NODE, snap, _cluster(), AllocationRules())
    assert judge_process(table, None, process(9, 1), G0) is V.NO_POD


def _dra(*, slices: bool = True, claim: bool = True, share: str | None = None) -> DraCache:
    dra = DraCache()
    dra.served = True
    devices = (ClaimDeviceRecord("gpu.nvidia.com", NODE, "gpu-0", share, share is not None),)
    dra.replace_claims(
        [ResourceClaimRecord("ml", "p-gpu", "u", devices, (("p", "uid-ml-p"),))] if claim else []
    )
    dra.replace_slices(
        [ResourceSliceRecord("s", "gpu.nvidia.com", NODE, NODE, (SliceDeviceRecord("gpu-0", G0),))]
        if slices
        else [
            ResourceSliceRecord(
                "s", "gpu.nvidia.com", NODE, NODE, (SliceDeviceRecord("gpu-1", G1),)
            )
        ]
    )
    return dra


def _claimed_cluster(gpu_request: int | None = None) -> MemoryCluster:
    cluster = MemoryCluster()
    pod = pod_record("ml", "p", NODE, container_ids=[CID], gpu_request=gpu_request)
    containers = (replace(pod.containers[0], claims=("gpu",)),)
    cluster.add_pod(replace(pod, resource_claims=(("gpu", "p-gpu"),), containers=containers))
    return cluster


def test_api_only_node_judges_from_claims_and_slices() -> None:
    rules = AllocationRules(dra=_dra())
    no_kubelet = _with(NodeAllocations(available=False, reason="socket missing"))
    cluster = _claimed_cluster()
    assert allocation_table(NODE, no_kubelet, cluster, rules).source is AllocationSource.API_ONLY
    assert verdict(cluster, no_kubelet, G0, rules) is V.ALLOCATED
    assert verdict(cluster, no_kubelet, G1, rules) is V.NOT_ALLOCATED
    # Device-plugin GPUs too: only the kubelet knows which, so the rest is unknown.
    assert verdict(_claimed_cluster(gpu_request=1), no_kubelet, G1, rules) is V.UNKNOWN
    assert pod_gpu_request(cluster.pods()[0], rules) == 1


def test_a_claim_whose_slice_or_claim_is_gone_is_unknown() -> None:
    no_kubelet = _with(NodeAllocations(available=False, reason="x"))
    # The slice no longer publishes gpu-0 (the node still has a slice): unknown, never allocated.
    rules = AllocationRules(dra=_dra(slices=False))
    assert verdict(_claimed_cluster(), no_kubelet, G0, rules) is V.UNKNOWN
    assert verdict(_claimed_cluster(), no_kubelet, G1, rules) is V.UNKNOWN
    kubelet = _with(_kubelet())
    gone = AllocationRules(dra=_dra(claim=False))
    assert verdict(_claimed_cluster(), kubelet, G1, gone) is V.UNKNOWN


def test_both_routes_report_a_dra_device_once_and_the_share_comes_from_the_claim() -> None:
    kubelet_entry = DeviceAllocation(
        AllocationMechanism.DRA, "ml/p-gpu", "gpu-0", G0, driver="gpu.nvidia.com", pool=NODE
    )
    rules = AllocationRules(dra=_dra(share="s-1"))
    table = allocation_table(NODE, _with(_kubelet(kubelet_entry)), _claimed_cluster(), rules)
    (only,) = table.for_gpu(G0)
    assert only.shared and only.container == "c0" and only.resource == "ml/p-gpu"
    assert pod_gpu_request(_claimed_cluster().pods()[0], rules) == 1
