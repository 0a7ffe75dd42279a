"""One verdict vocabulary: the agent judges the kubelet's record as the server does, in one enum."""

from __future__ import annotations

from dataclasses import replace

import pytest

from graph_schema import allocation_join as server
from graph_schema.allocation_join import AllocationRules, allocation_table, judge_process
from node_resolver.allocation_verdicts import AllocationVerdict, ContainerVerdicts
from node_resolver.models import (
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
)
from tests.support.graph import MemoryCluster, gpu_uuid, pod_record, process, snapshot

NODE = "n1"
G0, G1 = gpu_uuid(NODE, 0), gpu_uuid(NODE, 1)
CID = "c" * 64
V = AllocationVerdict


def _device(gpu: str | None, resource: str = "nvidia.com/gpu") -> DeviceAllocation:
    return DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, resource, gpu or "x", gpu_uuid=gpu)


def _judged(devices: list[DeviceAllocation] | None, gpu: str) -> tuple[V, V]:
    """(the agent's verdict, the server's) for container c0 of ml/p on ``gpu``."""
    listed = () if devices is None else (ContainerAllocations("ml", "p", "c0", tuple(devices)),)
    kubelet = NodeAllocations(available=True, containers=listed)
    agent = ContainerVerdicts(kubelet).verdict("ml", "p", "c0", gpu)
    cluster = MemoryCluster()
    pod = pod_record("ml", "p", NODE, container_ids=[CID])
    cluster.add_pod(pod)
    table = allocation_table(
        NODE, replace(snapshot(NODE, []), allocations=kubelet), cluster, AllocationRules()
    )
    judged = judge_process(table, pod, process(1, 1, container_id=CID, pod_uid=pod.uid), gpu)
    return agent, judged


def test_the_server_judges_in_the_agents_vocabulary() -> None:
    assert server.AllocationVerdict is AllocationVerdict
    # The values the occupancy logs hold and the agents send; GraphQL's enum names.
    assert [v.value for v in V] == ["ALLOCATED", "NOT_ALLOCATED", "NO_POD", "UNKNOWN"]
    assert [v.name for v in V] == [v.value for v in V]


@pytest.mark.parametrize(
    ("devices", "gpu", "expected"),
    [
        ([_device(G0)], G0, V.ALLOCATED),
        ([_device(G0)], G1, V.NOT_ALLOCATED),
        # A device matching no GPU of the scan could be this one.
        ([_device(G0), _device(None)], G1, V.UNKNOWN),
        ([_device(None), _device(G1)], G1, V.ALLOCATED),
        # The kubelet's answer predates the container.
        (None, G0, V.UNKNOWN),
    ],
)
def test_the_agent_judges_the_kubelets_record_as_the_server_does(
    devices: list[DeviceAllocation] | None, gpu: str, expected: V
) -> None:
    assert _judged(devices, gpu) == (expected, expected)


def test_a_device_the_agent_cannot_tell_from_a_gpu_leaves_only_its_verdict_unknown() -> None:
    """The server knows which resource names are GPUs; the agent never guesses NOT_ALLOCATED."""
    nic = _device(None, resource="rdma/hca")
    assert _judged([_device(G0), nic], G1) == (V.UNKNOWN, V.NOT_ALLOCATED)
