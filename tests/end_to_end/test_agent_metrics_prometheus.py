"""A real Prometheus scrapes a real agent's own /metrics: with the metrics token it gets the
node's series, named once the server's names arrive; without it the target is down (401)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.pod_names import PodName
from tests.support.agents import (
    CONTAINER_ID,
    POD_UID,
    StaticResolver,
    gpu_json,
    nvml_json,
    resolved,
    start_agent_thread,
)
from tests.support.demo_process import free_port
from tests.support.polling import eventually
from tests.support.prometheus import require_prometheus, running_prometheus

GRPC_TOKEN = "grpc-token"
METRICS_TOKEN = "metrics-token"


def test_prometheus_scrapes_an_agent_with_its_token_and_sees_pod_names(
    tmp_path: Path,
) -> None:
    require_prometheus()
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 4242, "usedMemoryBytes": 3 << 30}])]))
    resolver = StaticResolver(
        {4242: resolved(4242, "trainer", container_id=CONTAINER_ID, pod_uid=POD_UID)}
    )
    token_file = tmp_path / "metrics-token"
    token_file.write_text(METRICS_TOKEN)
    wrong_file = tmp_path / "wrong-token"
    wrong_file.write_text(GRPC_TOKEN)  # the gRPC token is not the metrics token
    with start_agent_thread(
        FakeGpuSource(nvml),
        resolver=resolver,
        token=GRPC_TOKEN,
        metrics=True,
        metrics_token=METRICS_TOKEN,
    ) as agent:
        assert agent.server.metrics is not None and agent.server.metrics.address
        target = agent.server.metrics.address
        jobs: list[dict[str, Any]] = [
            {
                "job_name": "agents",
                "honor_labels": True,
                "authorization": {"credentials_file": str(token_file)},
                "static_configs": [{"targets": [target]}],
            },
            {
                "job_name": "wrong-token",
                "authorization": {"credentials_file": str(wrong_file)},
                "static_configs": [{"targets": [target]}],
            },
        ]
        (tmp_path / "prom").mkdir()
        with running_prometheus(tmp_path / "prom", free_port(), jobs) as prom:
            memory = 'gpugraph_container_gpu_memory_used_bytes{job="agents"}'
            eventually(lambda: len(prom.query(memory)) == 1, timeout=60)
            (series,) = prom.query(memory)
            # Not named yet: the UID alone (Prometheus keeps no empty label).
            assert series["metric"]["pod_uid"] == POD_UID
            assert not {"namespace", "pod", "container"} & set(series["metric"])
            assert float(series["value"][1]) == 3 << 30

            async def put() -> int:
                async with AgentClient(agent.address, token=GRPC_TOKEN) as client:
                    names = [PodName(POD_UID, "ml", "trainer-0", {CONTAINER_ID: "worker"})]
                    return await client.put_pod_names("node-a", names, timeout=10)

            assert asyncio.run(put()) == 1
            named = memory.replace("}", ',pod="trainer-0"}')
            eventually(lambda: len(prom.query(named)) == 1, timeout=60)
            (series,) = prom.query(named)
            assert (series["metric"]["namespace"], series["metric"]["container"]) == (
                "ml",
                "worker",
            )
            assert series["metric"]["node"] == "node-a"

            def refused() -> str:
                (down,) = [t for t in prom.targets() if t["labels"]["job"] == "wrong-token"]
                return str(down["health"]) + " " + str(down["lastError"])

            eventually(lambda: refused().startswith("down"), timeout=60)
            assert "401" in refused()
            assert prom.query('gpugraph_gpu_memory_used_bytes{job="wrong-token"}') == []
