"""The production NVML path end to end: fake libnvidia-ml.so.1, real pynvml, agent, server.

The agent runs as ``python -m node_resolver`` without ``--nvml-fake``, so it
imports nvidia-ml-py, which loads the fake C library; the server reaches it
over gRPC at its node's InternalIP and joins its processes to pods.
"""

from __future__ import annotations

import asyncio
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
