"""The GPU series: attribution per container, memory in no pod, unrequested GPUs, dead agents."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.agents.pool import AgentPool
from api.gpu_metrics import GpuMetricsExporter
from api.gpu_metrics.attribution import UNATTRIBUTED_REASONS
from api.metrics import Metrics
from graph_schema.records import NodeRecord
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster
from node_resolver.models import NodeSnapshot
from tests.support.graph import (
    GiB,
    MemoryCluster,
    MemorySnapshots,
    gpu_sample,
    node_record,
    pod_record,
    process,
    snapshot,
)
from tests.support.prometheus import promtool, require_prometheus

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: bytes) -> Samples:
    """Every sample of an exposition, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def where(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return {k: v for (n, k), v in samples.items() if n == name and wanted <= k}


def value(samples: Samples, name: str, **labels: str) -> float:
    found = where(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


class World:
    """Two GPU nodes and one CPU node; gpu-a's GPU 0 is shared by two pods."""

    def __init__(self) -> None:
        self.cluster = MemoryCluster()
        self.snapshots = MemorySnapshots()
        for node in ("gpu-a", "gpu-b"):
            self.cluster.add_node(node_record(node))
        self.cluster.add_node(node_record("cpu-only", gpus=None))
        self.chat0 = pod_record("inference", "chat-0", "gpu-a", container_ids=["c" * 64])
        self.chat1 = pod_record("inference", "chat-1", "gpu-a", container_ids=["d" * 64])
        # Asked for no GPU, uses one.
        self.notebook = pod_record(
            "research", "notebook", "gpu-a", container_ids=["e" * 64], gpu_request=None
        )
        # Asked for one, uses two.
        self.greedy = pod_record("ml", "greedy", "gpu-b", container_ids=["f" * 64])
        for pod in (self.chat0, self.chat1, self.notebook, self.greedy):
            self.cluster.add_pod(pod)

        def in_pod(pid: int, used: int, pod: Any, sm: int | None = None) -> Any:
            p = process(pid, used, container_id=pod.containers[0].container_id, pod_uid=pod.uid)
            p.sm_utilization = sm
            return p

        gone = process(50, 3 * GiB, container_id="9" * 64, pod_uid="uid-of-a-deleted-pod")
        self.snapshots.put(
            snapshot(
                "gpu-a",
                [
                    gpu_sample(
                        "gpu-a",
                        0,
                        [
                            in_pod(10, 20 * GiB, self.chat0, sm=30),
                            in_pod(11, 4 * GiB, self.chat0, sm=5),
                            in_pod(12, 10 * GiB, self.chat1, sm=20),
                        ],
                    ),
                    gpu_sample(
                        "gpu-a",
                        1,
                        [
                            process(40, 7 * GiB, name="python3"),  # a host process
                            process(41, 1 * GiB, name=None),  # /proc unreadable
                            gone,
                            in_pod(13, 2 * GiB, self.notebook),
                        ],
                    ),
                ],
            )
        )
        self.snapshots.put(
            snapshot(
                "gpu-b",
                [
                    gpu_sample("gpu-b", 0, [in_pod(20, GiB, self.greedy)]),
                    gpu_sample("gpu-b", 1, [in_pod(21, GiB, self.greedy)], temperature_c=None),
                ],
            )
        )

    def exporter(self, **options: Any) -> GpuMetricsExporter:
        return GpuMetricsExporter(self.cluster, self.snapshots, timeout=1.0, **options)

    def scrape(self, **options: Any) -> Samples:
        return parse(asyncio.run(self.exporter(**options).render()))


@pytest.fixture
def world() -> World:
    return World()


def test_a_shared_gpu_splits_memory_by_container(world: World) -> None:
    s = world.scrape()
    name = "gpugraph_container_gpu_memory_used_bytes"
    chat0 = {"node": "gpu-a", "gpu": "0", "namespace": "inference", "pod": "chat-0"}
    assert value(s, name, **chat0) == 24 * GiB  # two processes, summed
    assert value(s, name, pod="chat-1") == 10 * GiB
    assert value(s, "gpugraph_container_gpu_processes", **chat0) == 2
    assert value(s, "gpugraph_container_gpu_sm_utilization_ratio", **chat0) == pytest.approx(0.35)
    (labels,) = where(s, name, **chat0)
    assert dict(labels) == {
        **chat0,
        "gpu_uuid": "GPU-gpu-a-0",
        "mig_device": "",
        "container": "c0",
        "pod_uid": world.chat0.uid,
    }
    # The GPU's own series, and no pid label anywhere.
    assert value(s, "gpugraph_gpu_memory_used_bytes", node="gpu-a", gpu="0") == 34 * GiB
    assert value(s, "gpugraph_gpu_utilization_ratio", node="gpu-a", gpu="0") == 0.5
    assert value(s, "gpugraph_gpu_info", node="gpu-a", gpu="0", mig_enabled="false") == 1
    assert not any("pid" in dict(labels) for _, labels in s)


def test_memory_in_no_pod_is_counted_by_reason(world: World) -> None:
    s = world.scrape()
    name = "gpugraph_gpu_unattributed_memory_bytes"
    on_gpu1 = {"node": "gpu-a", "gpu": "1"}
    assert value(s, name, reason="host_process", **on_gpu1) == 7 * GiB
    assert value(s, name, reason="unresolved", **on_gpu1) == 1 * GiB
    assert value(s, name, reason="unknown_container", **on_gpu1) == 3 * GiB
    # Every reason is present on every GPU, zero where nothing is lost.
    assert set(where(s, name, node="gpu-a", gpu="0").values()) == {0.0}
    assert len(where(s, name)) == 4 * len(UNATTRIBUTED_REASONS)


@pytest.mark.parametrize(
    "failure",
    [
        {"field_errors": {"processes.graphics": "UNKNOWN"}},
        {"field_errors": {"mig_devices[0].processes.compute": "NO_PERMISSION"}},
        {"error": "GPU_IS_LOST"},
    ],
)
def test_memory_in_no_pod_is_no_series_where_the_process_list_failed(
    world: World, failure: dict[str, Any]
) -> None:
    host = process(40, 7 * GiB, name="python3")
    broken = gpu_sample("gpu-b", 1, [host], **failure)
    sm_only = gpu_sample("gpu-b", 0, [host], field_errors={"processes.sm_utilization": "UNKNOWN"})
    world.snapshots.put(snapshot("gpu-b", [sm_only, broken]))
    s = world.scrape()
    name = "gpugraph_gpu_unattributed_memory_bytes"
    # A list that could not be read is not "nothing lost": no series, not 0.
    assert not where(s, name, node="gpu-b", gpu="1")
    # Missing SM samples leave the list whole.
    assert value(s, name, node="gpu-b", gpu="0", reason="host_process") == 7 * GiB


def test_a_borrowed_container_id_does_not_move_memory_to_its_pod(world: World) -> None:
    """The pod UID of the cgroup path wins over its container ID, as in GraphQL."""
    borrowed = world.chat0.containers[0].container_id
    in_chat1 = process(60, 5 * GiB, container_id=borrowed, pod_uid=world.chat1.uid)
    in_gone = process(61, 6 * GiB, container_id=borrowed, pod_uid="uid-of-a-deleted-pod")
    world.snapshots.put(snapshot("gpu-a", [gpu_sample("gpu-a", 0, [in_chat1, in_gone])]))
    s = world.scrape()
    name = "gpugraph_container_gpu_memory_used_bytes"
    assert not where(s, name, pod="chat-0")
    # chat-1 does not own the container ID: the pod is known, its container is not.
    assert value(s, name, pod="chat-1", container="") == 5 * GiB
    unattributed = "gpugraph_gpu_unattributed_memory_bytes"
    assert value(s, unattributed, node="gpu-a", gpu="0", reason="unknown_container") == 6 * GiB


def test_gpus_beyond_the_request_are_unrequested(world: World) -> None:
    s = world.scrape()
    name = "gpugraph_pod_gpus_unrequested"
    assert value(s, name, namespace="research", pod="notebook", node="gpu-a") == 1
    assert value(s, name, namespace="ml", pod="greedy", node="gpu-b") == 1
    # A pod within its request has no series.
    assert not where(s, name, pod="chat-0")


def test_a_dead_agent_is_agent_up_0_and_no_series_for_its_node(world: World) -> None:
    world.snapshots.kill("gpu-b")
    s = world.scrape()
    assert value(s, "gpugraph_agent_up", node="gpu-b") == 0
    assert value(s, "gpugraph_agent_up", node="gpu-a") == 1
    assert value(s, "gpugraph_agent_snapshot_age_seconds", node="gpu-a") == 0.25
    # agent_up is the node's only series.
    assert [name for name, labels in s if ("node", "gpu-b") in labels] == ["gpugraph_agent_up"]
    assert not where(s, "gpugraph_gpu_memory_used_bytes", node="gpu-b")
    assert where(s, "gpugraph_gpu_memory_used_bytes", node="gpu-a")


@pytest.mark.parametrize("failure", ["bug", "slow"])
def test_an_agent_failing_any_way_costs_only_its_node(world: World, failure: str) -> None:
    if failure == "bug":
        world.snapshots.break_with("gpu-b", RuntimeError("boom"))
        exporter = world.exporter()
    else:
        world.snapshots.delay = 0.5
        exporter = GpuMetricsExporter(world.cluster, world.snapshots, timeout=0.05)
    s = parse(asyncio.run(exporter.render()))
    assert value(s, "gpugraph_agent_up", node="gpu-b") == 0
    assert not where(s, "gpugraph_container_gpu_memory_used_bytes", node="gpu-b")


def test_nodes_without_gpus_are_not_asked(world: World) -> None:
    s = world.scrape()
    assert not where(s, "gpugraph_agent_up", node="cpu-only")
    assert "cpu-only" not in world.snapshots.calls
    # A node labelled by GPU feature discovery counts before its capacity shows.
    labelled = NodeRecord(
        name="new-gpu",
        uid="u",
        internal_ip=None,
        labels={"nvidia.com/gpu.present": "true"},
        gpu_capacity=None,
        gpu_allocatable=None,
    )
    world.cluster.add_node(labelled)
    assert value(world.scrape(), "gpugraph_agent_up", node="new-gpu") == 0


def test_nothing_before_the_cache_has_listed_the_cluster(world: World) -> None:
    world.cluster = MemoryCluster(ready=False)
    world.cluster.add_node(node_record("gpu-a"))
    # Its pods are not listed yet: its processes must not count as memory in no pod.
    assert world.scrape() == {}
    assert world.snapshots.total_calls == 0


def test_a_field_the_gpu_did_not_report_is_no_series(world: World) -> None:
    s = world.scrape()
    assert where(s, "gpugraph_gpu_temperature_celsius", node="gpu-b", gpu="0")
    assert not where(s, "gpugraph_gpu_temperature_celsius", node="gpu-b", gpu="1")


def test_a_container_whose_memory_the_driver_did_not_report_has_no_memory_series(
    world: World,
) -> None:
    pod = world.greedy
    unknown = process(22, None, container_id=pod.containers[0].container_id, pod_uid=pod.uid)
    world.snapshots.put(snapshot("gpu-b", [gpu_sample("gpu-b", 0, [unknown])]))
    s = world.scrape()
    assert value(s, "gpugraph_container_gpu_processes", pod="greedy") == 1
    assert not where(s, "gpugraph_container_gpu_memory_used_bytes", pod="greedy")


def test_mig_devices_are_a_label(world: World) -> None:
    mig = process(
        30, 5 * GiB, container_id=world.greedy.containers[0].container_id, pod_uid=world.greedy.uid
    )
    mig.mig_device_uuid = "MIG-1234"
    world.snapshots.put(snapshot("gpu-b", [gpu_sample("gpu-b", 0, [mig], mig_enabled=True)]))
    s = world.scrape()
    assert value(s, "gpugraph_container_gpu_memory_used_bytes", mig_device="MIG-1234") == 5 * GiB
    assert value(s, "gpugraph_gpu_info", node="gpu-b", mig_enabled="true") == 1


def test_each_mig_device_a_pod_uses_counts_against_its_request(world: World) -> None:
    """Under the device plugin's single MIG strategy each MIG device is one nvidia.com/gpu."""
    pod = world.greedy  # requested one
    on_mig = []
    for pid, device in ((30, "MIG-a"), (31, "MIG-b")):
        p = process(pid, GiB, container_id=pod.containers[0].container_id, pod_uid=pod.uid)
        p.mig_device_uuid = device
        on_mig.append(p)
    world.snapshots.put(snapshot("gpu-b", [gpu_sample("gpu-b", 0, on_mig, mig_enabled=True)]))
    s = world.scrape()
    assert value(s, "gpugraph_pod_gpus_unrequested", pod="greedy") == 1


def test_a_containers_sm_utilization_is_a_ratio_of_at_most_1(world: World) -> None:
    pod = world.greedy
    busy = []
    for pid, sm in ((20, 80), (21, 60)):
        p = process(pid, GiB, container_id=pod.containers[0].container_id, pod_uid=pod.uid)
        p.sm_utilization = sm
        busy.append(p)
    world.snapshots.put(snapshot("gpu-b", [gpu_sample("gpu-b", 0, busy)]))
    s = world.scrape()
    # The driver's per-process samples can add up past 100 % within one period.
    assert value(s, "gpugraph_container_gpu_sm_utilization_ratio", pod="greedy") == 1.0


def test_dcgm_names_only_on_request(world: World) -> None:
    assert not where(world.scrape(), "DCGM_FI_DEV_FB_USED")
    s = world.scrape(dcgm_names=True)
    # The one pod on gpu-b's GPU 0 names it; the shared GPU names none.
    fb = where(s, "DCGM_FI_DEV_FB_USED", Hostname="gpu-b", gpu="0")
    assert list(fb.values()) == [1024.0]  # MiB
    assert dict(next(iter(fb)))["pod"] == "greedy"
    assert dict(next(iter(where(s, "DCGM_FI_DEV_FB_USED", Hostname="gpu-a", gpu="0"))))["pod"] == ""
    assert value(s, "DCGM_FI_DEV_GPU_UTIL", Hostname="gpu-a", gpu="0") == 50


def test_promtool_finds_nothing_to_lint(world: World) -> None:
    require_prometheus()
    world.snapshots.kill("gpu-b")
    text = asyncio.run(world.exporter().render()).decode()
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (checked.stdout + checked.stderr).strip()
    # dcgm-exporter's own label names (modelName, UUID) are its camelCase; nothing else.
    text = asyncio.run(world.exporter(dcgm_names=True).render()).decode()
    problems = promtool("check", "metrics", stdin=text).stderr.splitlines()
    assert problems and all(
        p.startswith("DCGM_FI_") and "label names should be written in 'snake_case'" in p
        for p in problems
    ), problems


def test_scrapes_of_the_same_snapshots_share_one_rendering(world: World) -> None:
    exporter = world.exporter()

    async def scrape_twice() -> tuple[bytes, bytes]:
        first, second = await asyncio.gather(exporter.render(), exporter.render())
        return first, second

    first, second = asyncio.run(scrape_twice())
    assert first is second
    # A new snapshot from one node is a new rendering.
    world.snapshots.put(snapshot("gpu-b", [gpu_sample("gpu-b", 0, [])]))
    third = asyncio.run(exporter.render())
    assert third is not first
    assert not where(parse(third), "gpugraph_gpu_info", node="gpu-b", gpu="1")


def test_a_scrape_counts_the_join_graphql_made_of_the_same_snapshot(world: World) -> None:
    """One walk of a snapshot: /metrics reshapes the objects GraphQL's resolvers read."""
    views = ViewCache()
    received = asyncio.run(world.snapshots.fetch("gpu-a"))
    # A query reads the node: its processes are joined to the pods cached now.
    shown = views.visible_gpus(VisibleCluster(world.cluster), "gpu-a", received.snapshot)
    (chat1,) = [p for g in shown for p in g.processes if p.pod and p.pod.name == "chat-1"]
    # The cache moves on; until the node's next snapshot both answers keep that join.
    world.cluster.remove_pod("inference", "chat-1")
    s = parse(asyncio.run(world.exporter(views=views).render()))
    name = "gpugraph_container_gpu_memory_used_bytes"
    assert value(s, name, pod="chat-1") == chat1.used_memory_bytes
    assert views.visible_gpus(VisibleCluster(world.cluster), "gpu-a", received.snapshot) is shown


class _Discovery:
    def address(self, node_name: str) -> str:
        return f"{node_name}:50051"


def test_scrapes_within_the_ttl_share_one_agent_call_per_node(world: World) -> None:
    calls: list[str] = []

    class Client:
        def __init__(self, target: str) -> None:
            self.node = target.split(":")[0]

        async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
            calls.append(self.node)
            return (await world.snapshots.fetch(self.node)).snapshot

        def close(self) -> None:
            pass

    async def scrape_three_times() -> None:
        pool = AgentPool(
            _Discovery(),
            ttl=60.0,
            client_factory=lambda target, token: Client(target),
        )
        exporter = GpuMetricsExporter(world.cluster, pool, timeout=1.0)
        try:
            await asyncio.gather(exporter.render(), exporter.render())
            await exporter.render()
        finally:
            await pool.close()

    asyncio.run(scrape_three_times())
    assert sorted(calls) == ["gpu-a", "gpu-b"]


def test_the_docs_per_replica_regex_keeps_the_servers_own_series_only(world: World) -> None:
    """docs/metrics.md: a PodMonitor keeping these names sees each replica's health only."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    (regex,) = re.findall(r'action: keep, regex: "([^"]+)"', doc)
    own = {name for name, _ in parse(Metrics().render())}
    gpu = {name for name, _ in world.scrape(dcgm_names=True)}
    assert own and gpu
    assert [name for name in own if not re.fullmatch(regex, name)] == []
    assert [name for name in gpu if re.fullmatch(regex, name)] == []
