"""An agent's own /metrics: its node's GPU series, named by the pods the server pushed.

Real agents (a subprocess, as deployed, and one in a thread) serve real HTTP
on loopback; names arrive over real gRPC (PutPodNames).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.demo.cluster.fake_proc import kubelet_cgroup
from api.demo.cluster.kubelet import FakeKubelet
from node_resolver.cli import METRICS_LISTENING
from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.metrics.families import CONTAINER_LABELS, GpuSeries
from node_resolver.pod_names import PodName
from node_resolver.pod_resources import PodResourcesClient, PodResourcesPoller
from tests.support.agents import (
    CONTAINER_ID,
    POD_UID,
    FakeProc,
    StaticResolver,
    agent_command,
    agent_env,
    gpu_json,
    nvml_json,
    resolved,
    start_agent_process,
    start_agent_thread,
    write_proc_tree,
)
from tests.support.polling import eventually
from tests.support.prometheus import promtool, require_prometheus

GiB = 1 << 30
GRPC_TOKEN = "grpc-token"
METRICS_TOKEN = "metrics-token"
STRANGER_UID = "0f0f0f0f-1111-2222-3333-444455556666"
STRANGER_CONTAINER = "e" * 64

Series = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Series:
    """Every sample of an exposition by series name (prometheus_client's own parser)."""
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def scrape(address: str, token: str | None = METRICS_TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"http://{address}/metrics", headers=headers, timeout=10)


def metrics_address(logs: str) -> str:
    for line in logs.splitlines():
        if METRICS_LISTENING in line:
            return line.split(METRICS_LISTENING, 1)[1].split(",")[0].split()[0]
    raise AssertionError(f"no /metrics address in the log:\n{logs}")


def put_names(address: str, pods: list[PodName]) -> int:
    async def put() -> int:
        async with AgentClient(address, token=GRPC_TOKEN) as client:
            return await client.put_pod_names("node-a", pods, timeout=10)

    return asyncio.run(put())


def test_series_carry_pod_names_once_the_server_sends_them(tmp_path: Path) -> None:
    proc = write_proc_tree(
        tmp_path / "proc",
        {
            4242: FakeProc("trainer", kubelet_cgroup(POD_UID, CONTAINER_ID)),
            4243: FakeProc("trainer", kubelet_cgroup(POD_UID, CONTAINER_ID)),
            5000: FakeProc("stranger", kubelet_cgroup(STRANGER_UID, STRANGER_CONTAINER)),
            100: FakeProc("Xorg"),
        },
    )
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(
        nvml,
        nvml_json(
            [
                gpu_json(
                    0,
                    [
                        {"pid": 4242, "usedMemoryBytes": 3 * GiB},
                        {"pid": 4243, "usedMemoryBytes": 1 * GiB},
                        {"pid": 100, "usedMemoryBytes": GiB // 2},
                    ],
                ),
                gpu_json(1, [{"pid": 5000, "usedMemoryBytes": 2 * GiB}]),
            ]
        ),
    )
    (tmp_path / "token").write_text(GRPC_TOKEN)
    (tmp_path / "metrics-token").write_text(METRICS_TOKEN + "\n")
    agent = start_agent_process(
        nvml,
        log_path=tmp_path / "agent.log",
        proc_root=proc,
        token_file=tmp_path / "token",
        extra_args=[
            "--metrics-listen",
            "127.0.0.1:0",
            "--metrics-token-file",
            str(tmp_path / "metrics-token"),
        ],
    )
    with agent:
        address = metrics_address(agent.logs())
        assert "token required" in agent.logs().split(METRICS_LISTENING, 1)[1].splitlines()[0]
        exposition = scrape(address).text
        assert "_created" not in exposition  # no prometheus_client bookkeeping series
        before = parse(exposition)
        memory = "gpugraph_container_gpu_memory_used_bytes"
        # Not named yet: the pod's UID alone, and no names made up.
        assert sorted(
            (labels["pod_uid"], labels["namespace"], labels["pod"], labels["container"], value)
            for labels, value in before[memory]
        ) == [(STRANGER_UID, "", "", "", 2 * GiB), (POD_UID, "", "", "", 4 * GiB)]
        ((labels, _),) = [s for s in before[memory] if s[0]["pod_uid"] == POD_UID]
        assert labels["node"] == "node-a" and labels["gpu"] == "0"
        assert labels["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
        unattributed = {
            (lab["gpu"], lab["reason"]): v
            for lab, v in before["gpugraph_gpu_unattributed_memory_bytes"]
        }
        assert unattributed[("0", "host_process")] == GiB // 2
        assert unattributed[("1", "host_process")] == 0
        # Which pods live on other nodes only the server knows: no such reason here.
        assert {reason for _, reason in unattributed} == {
            "host_process",
            "unknown_container",
            "unresolved",
        }
        processes = before["gpugraph_container_gpu_processes"]
        assert sorted(v for _, v in processes) == [1, 2]

        # The server names the pod (not the stranger, which is on no pod of this node).
        named = PodName(POD_UID, "ml", "trainer-0", {CONTAINER_ID: "worker"})
        assert put_names(agent.address, [named]) == 1

        def named_series() -> list[tuple[dict[str, str], float]]:
            return [s for s in parse(scrape(address).text)[memory] if s[0]["pod"]]

        eventually(lambda: len(named_series()) == 1)
        ((labels, value),) = named_series()
        assert (labels["namespace"], labels["pod"], labels["container"]) == (
            "ml",
            "trainer-0",
            "worker",
        )
        assert labels["pod_uid"] == POD_UID and value == 4 * GiB
        after = parse(scrape(address).text)
        ((stranger, _),) = [s for s in after[memory] if s[0]["pod_uid"] == STRANGER_UID]
        assert (stranger["namespace"], stranger["pod"], stranger["container"]) == ("", "", "")
        # GPU series as the server names them, from the same declaration.
        assert {labels["gpu"] for labels, _ in after["gpugraph_gpu_memory_total_bytes"]} == {
            "0",
            "1",
        }
        assert "gpugraph_agent_snapshot_age_seconds" in after
        assert agent.stop() == 0
    assert "Traceback" not in agent.logs()


def test_the_metrics_token_is_refused_before_anything_is_rendered(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 7, "usedMemoryBytes": GiB}])]))
    with start_agent_thread(
        FakeGpuSource(nvml), token=GRPC_TOKEN, metrics=True, metrics_token=METRICS_TOKEN
    ) as running:
        metrics = running.server.metrics
        assert metrics is not None and metrics.address is not None
        for token in (None, "wrong", GRPC_TOKEN, METRICS_TOKEN + "x"):
            refused = scrape(metrics.address, token)
            assert refused.status_code == 401, token
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "gpugraph" not in refused.text
        basic = httpx.get(
            f"http://{metrics.address}/metrics", auth=("u", METRICS_TOKEN), timeout=10
        )
        assert basic.status_code == 401
        assert metrics.scrapes == 0
        # Health carries nothing and needs no token, as the gRPC health service.
        assert httpx.get(f"http://{metrics.address}/healthz", timeout=10).text == "ok\n"
        allowed = scrape(metrics.address, METRICS_TOKEN)
        assert allowed.status_code == 200 and metrics.scrapes == 1
        assert allowed.headers["content-type"].startswith("text/plain; version=")
        # The scheme in any case, as RFC 6750 allows.
        lower = httpx.get(
            f"http://{metrics.address}/metrics",
            headers={"Authorization": f"bearer {METRICS_TOKEN}"},
            timeout=10,
        )
        assert lower.status_code == 200


def test_the_exposition_passes_promtool_and_uses_the_servers_declaration(tmp_path: Path) -> None:
    require_prometheus()
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(i, [{"pid": 10 + i}]) for i in range(2)]))
    with start_agent_thread(FakeGpuSource(nvml), metrics=True) as running:
        assert running.server.metrics is not None and running.server.metrics.address
        text = scrape(running.server.metrics.address, None).text
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (checked.stdout + checked.stderr).strip()
    # Every family the agent serves is one the server declares, under the same labels.
    declared = {f.name: f for f in GpuSeries().all()}
    served = {f.name for f in text_string_to_metric_families(text)}
    assert served and served <= set(declared)
    families = list(text_string_to_metric_families(text))
    labels = {lab for f in families for s in f.samples for lab in s.labels}
    assert labels <= {*CONTAINER_LABELS, "model", "reason", "mig_enabled", "driver_version"}


def test_the_cli_refuses_a_metrics_token_it_cannot_use(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    common = ["--node-name", "n", "--nvml-fake", str(nvml), "--listen", "127.0.0.1:0"]
    for extra, said in (
        (["--metrics-token-file", str(tmp_path / "t")], "needs --metrics-listen"),
        (
            ["--metrics-listen", "127.0.0.1:0", "--metrics-token-file", str(tmp_path / "none")],
            "cannot read token file",
        ),
    ):
        done = subprocess.run(
            agent_command(*common, *extra),
            env=agent_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_a_container_on_a_gpu_the_kubelet_did_not_give_it_is_unallocated(tmp_path: Path) -> None:
    gpu0 = "GPU-00000000-0000-0000-0000-000000000000"
    gpu1 = "GPU-11111111-1111-1111-1111-111111111111"
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(
        nvml,
        nvml_json(
            [
                gpu_json(0, [{"pid": 10}, {"pid": 11}], uuid=gpu0, minorNumber=0),
                gpu_json(1, [{"pid": 12}], uuid=gpu1, minorNumber=1),
            ]
        ),
    )
    given = {"resourceName": "nvidia.com/gpu", "deviceIds": [gpu1]}
    kubelet_pods = {
        "pods": [
            # Given GPU 1, runs on GPU 0 (a CUDA_VISIBLE_DEVICES override) and on GPU 1.
            {
                "namespace": "ml",
                "name": "stray",
                "containers": [{"name": "main", "devices": [given]}],
            },
            {"namespace": "ml", "name": "ungiven", "containers": [{"name": "main", "devices": []}]},
        ]
    }
    stray, ungiven = (
        ("1" * 8 + "-0000-0000-0000-000000000001"),
        ("2" * 8 + "-0000-0000-0000-000000000002"),
    )
    resolver = StaticResolver(
        {
            10: resolved(10, container_id="a" * 64, pod_uid=stray),
            12: resolved(12, container_id="a" * 64, pod_uid=stray),
            11: resolved(11, container_id="f" * 64, pod_uid=ungiven),
        }
    )
    sockdir = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))  # a unix socket path is short
    try:
        with FakeKubelet(sockdir / "kubelet.sock", data=kubelet_pods):
            client = PodResourcesClient(str(sockdir / "kubelet.sock"))
            poller = PodResourcesPoller(client.list, interval=0.05)
            with start_agent_thread(
                FakeGpuSource(nvml), resolver=resolver, pod_resources=poller, metrics=True
            ) as agent:
                assert agent.server.metrics is not None and agent.server.metrics.address
                address = agent.server.metrics.address
                name = "gpugraph_container_gpu_unallocated"

                def unallocated() -> list[dict[str, str]]:
                    return [labels for labels, _ in parse(scrape(address, None).text).get(name, [])]

                # By UID alone a container has no name for the kubelet's answer: no verdict.
                def judged() -> bool:
                    latest = agent.sampler.latest()
                    return latest is not None and latest.allocations is not None

                eventually(judged, what="the kubelet's answer in a scan")
                assert unallocated() == []
                agent.server.pod_names.put(
                    [
                        PodName(stray, "ml", "stray", {"a" * 64: "main"}),
                        PodName(ungiven, "ml", "ungiven", {"f" * 64: "main"}),
                    ]
                )
                found = eventually(unallocated, what="an unallocated series")
            client.close()
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
    # The pod given no GPU at all runs on one it was not given, too.
    assert sorted((s["pod"], s["gpu_uuid"]) for s in found) == [("stray", gpu0), ("ungiven", gpu0)]
    assert all(s["namespace"] == "ml" and s["container"] == "main" for s in found)
    assert all(s["node"] == "node-a" for s in found)
