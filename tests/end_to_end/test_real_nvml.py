"""The production NVML path end to end: fake libnvidia-ml.so.1, real pynvml, agent, server.

The agent runs as ``python -m node_resolver`` without ``--nvml-fake``, so it
imports nvidia-ml-py, which loads the fake C library; the server reaches it
over gRPC at its node's InternalIP and joins its processes to pods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from api.demo.cluster.manifests import make_node
from tests.support.agents import FakeProc, start_agent_process, write_proc_tree
from tests.support.libnvml import (
    FakeGpu,
    FakeNode,
    FakeProcess,
    Variant,
    build_library,
    library_env,
)
from tests.support.server import GIB, GraphTestCluster, Proc, node_ips, serving

QUERY = """
query ($namespace: String!, $name: String!) {
  pod(namespace: $namespace, name: $name) {
    name
    node {
      name
      gpus { uuid processes { pid name usedMemoryBytes type pod { namespace name } } }
    }
  }
}
"""


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    cluster = GraphTestCluster(tmp_path)
    await cluster.start()  # the stub API server only: this cluster has no in-process agents
    yield cluster
    await cluster.stop()


@pytest.mark.parametrize("variant", [Variant.CURRENT, Variant.R535])
async def test_a_pods_gpu_process_reaches_the_graph_through_real_nvml(
    tmp_path: Path, stub: GraphTestCluster, variant: Variant
) -> None:
    ip = node_ips(1)[-1]
    stub.stub.add_node(make_node("gpu-node", ip, gpus=1))
    uid = stub.add_pod("trainer", "ml", node="gpu-node")
    proc_root = write_proc_tree(
        tmp_path / "proc",
        {
            4242: FakeProc(comm="python", cgroup=Proc(4242, "python", pod_uid=uid).cgroup()),
            4300: FakeProc(comm="Xorg"),
        },
    )
    processes = [FakeProcess(4242, 3 * GIB), FakeProcess(4300, GIB, compute=False, graphics=True)]
    config = FakeNode([FakeGpu("GPU-real-0", processes=processes)]).write(tmp_path / "nvml.conf")
    agent = await asyncio.to_thread(
        start_agent_process,
        None,
        log_path=tmp_path / "agent.log",
        host=ip,
        node_name="gpu-node",
        proc_root=proc_root,
        pid_resolver="cgroup",
        env=library_env(build_library(variant), config),
    )
    with agent:
        stub.port = int(agent.address.rsplit(":", 1)[1])
        async with serving(stub.settings()) as server:
            result = await server.query(QUERY, {"namespace": "ml", "name": "trainer"})
    assert "errors" not in result, result
    node = result["data"]["pod"]["node"]
    (gpu,) = node["gpus"]
    assert (node["name"], gpu["uuid"]) == ("gpu-node", "GPU-real-0")
    assert sorted(
        (p["pid"], p["name"], p["usedMemoryBytes"], p["type"], p["pod"]) for p in gpu["processes"]
    ) == [
        (4242, "python", 3 * GIB, "COMPUTE", {"namespace": "ml", "name": "trainer"}),
        (4300, "Xorg", GIB, "GRAPHICS", None),
    ]


MPS_QUERY = """
query ($namespace: String!, $name: String!) {
  pod(namespace: $namespace, name: $name) {
    node { gpus { processes { pid name type smUtilization pod { name } } fieldErrors } }
  }
}
"""


async def test_an_mps_client_on_blackwell_reaches_the_graph_with_its_type_and_sm(
    tmp_path: Path, stub: GraphTestCluster
) -> None:
    # An MPS server and a pod's MPS client on a GPU whose legacy utilization call answers
    # NOT_SUPPORTED: the client is named as one, and its SM share still comes through.
    ip = node_ips(1)[-1]
    stub.stub.add_node(make_node("gpu-node", ip, gpus=1))
    uid = stub.add_pod("infer", "ml", node="gpu-node")
    proc_root = write_proc_tree(
        tmp_path / "proc",
        {
            4242: FakeProc(comm="python", cgroup=Proc(4242, "python", pod_uid=uid).cgroup()),
            4100: FakeProc(comm="nvidia-cuda-mps"),  # the kernel keeps 15 characters,
        },
    )
    processes = [FakeProcess(4100, GIB // 4), FakeProcess(4242, 3 * GIB, compute=False, mps=True)]
    # Stamped after any scan's window opens, so every scan reads it.
    later_us = int((time.time() + 24 * 3600) * 1_000_000)
    gpu = FakeGpu("GPU-bw", blackwell=True, processes=processes, samples=[(4242, later_us, 64)])
    config = FakeNode([gpu], driver="570.86.15").write(tmp_path / "nvml.conf")
    agent = await asyncio.to_thread(
        start_agent_process,
        None,
        log_path=tmp_path / "agent.log",
        host=ip,
        node_name="gpu-node",
        proc_root=proc_root,
        pid_resolver="cgroup",
        env=library_env(build_library(Variant.CURRENT), config),
    )
    with agent:
        stub.port = int(agent.address.rsplit(":", 1)[1])
        async with serving(stub.settings()) as server:
            result = await server.query(MPS_QUERY, {"namespace": "ml", "name": "infer"})
    assert "errors" not in result, result
    (shown,) = result["data"]["pod"]["node"]["gpus"]
    assert sorted(
        (p["pid"], p["name"], p["type"], p["smUtilization"], p["pod"]) for p in shown["processes"]
    ) == [
        (4100, "nvidia-cuda-mps", "COMPUTE", None, None),
        (4242, "python", "MPS", 64, {"name": "infer"}),
    ]
    assert shown["fieldErrors"] == {"migEnabled": "NOT_SUPPORTED"}
