"""A real Prometheus scrapes a running ``gpugraph demo`` and agrees with its GraphQL answers.

The demo runs as a user runs it, with a scan interval of an hour, so every
snapshot holds still and Prometheus and GraphQL see the same numbers. The
scrape configuration is the chart's ServiceMonitor endpoint, translated into
Prometheus's own configuration, with two "replicas" of the server as its
endpoints: its relabelings must make them one target.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest

from api.demo.scenario import ALLOCATION_NODES, build_cluster
from tests.support.chart import CHART, one, render
from tests.support.demo_process import RunningDemo, free_port, ready_demo
from tests.support.grafana import (
    constants,
    dashboard_problems,
    load_dashboard,
    panel_queries,
    variable_options,
    variable_query,
)
from tests.support.polling import eventually
from tests.support.prometheus import (
    Prometheus,
    promtool,
    require_prometheus,
    running_prometheus,
)

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
NODES = 4
# The demo's MIG, time-sliced and DRA nodes come on top of --nodes, all up.
ALL_NODES = NODES + len(ALLOCATION_NODES)
JOB = "gpugraph"
# The same two replicas without the chart's relabelings: what a per-pod scrape would do.
PER_POD_JOB = "per-pod"
# kube-state-metrics' series for the demo pods the docs' join examples name
# (no kube-state-metrics runs here; these are its names and labels).
KUBE_STATE_METRICS = "".join(
    f"{line}\n"
    for line in (
        "# TYPE kube_pod_info gauge",
        'kube_pod_info{namespace="research",pod="notebook-alice",uid="u1",'
        'created_by_kind="StatefulSet",created_by_name="notebook-alice"} 1',
        "# TYPE kube_pod_labels gauge",
        'kube_pod_labels{namespace="research",pod="notebook-alice",uid="u1",'
        'label_team="research"} 1',
        'kube_pod_labels{namespace="inference",pod="chat-api-0",uid="u2",label_team="inference"} 1',
        'kube_pod_labels{namespace="inference",pod="chat-api-1",uid="u3",label_team="inference"} 1',
    )
)


# dcgm-exporter's health series (no dcgm-exporter runs here; its names and labels): an
# XID error on the demo's shared GPU, none on another. gpugraph's series join on its UUID.
SHARED = build_cluster(nodes=NODES).shared_gpu
DCGM_EXPORTER = "".join(
    f"{line}\n"
    for line in (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        f'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="{SHARED[1]}",device="nvidia0",'
        f'modelName="NVIDIA H200",Hostname="{SHARED[0]}"}} 79',
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-elsewhere",device="nvidia1",'
        'modelName="NVIDIA H200",Hostname="other"} 0',
    )
)


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), key)


def scrape_configs(address: str) -> list[dict[str, Any]]:
    """The chart's ServiceMonitor endpoint as Prometheus configuration; the Service at ``address``.

    The endpoint's two server pods (``pod`` a and b) are what the operator's
    endpoint discovery would label them.
    """
    with helm.Chart.load(CHART) as chart:
        docs = render(chart, {"server": {"auth": {"mode": "none"}}}, operator=True)
    monitor = one(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    service_address = next(
        r["replacement"] for r in endpoint["relabelings"] if r.get("targetLabel") == "__address__"
    )
    relabelings = [
        {
            _snake(k): (v.replace(service_address, address) if k == "replacement" else v)
            for k, v in rule.items()
        }
        for rule in endpoint["relabelings"]
    ]
    replicas = [
        {
            "targets": [address],
            "labels": {"namespace": "gpu-system", "pod": f"gg-server-{n}", "container": "server"},
        }
        for n in ("a", "b")
    ]
    common = {
        "metrics_path": endpoint["path"],
        "honor_labels": endpoint["honorLabels"],
        "static_configs": replicas,
    }
    return [
        {"job_name": JOB, **common, "relabel_configs": relabelings},
        {"job_name": PER_POD_JOB, **common},
    ]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    require_prometheus()
    with ready_demo(
        tmp_path_factory.mktemp("demo"), "--nodes", str(NODES), "--interval", "3600"
    ) as running:
        yield running


class _KubeStateMetrics(BaseHTTPRequestHandler):
    """Answers every GET with KUBE_STATE_METRICS, as kube-state-metrics' /metrics would."""

    body = KUBE_STATE_METRICS

    def do_GET(self) -> None:
        body = self.body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape would bury a failing test's output


class _DcgmExporter(_KubeStateMetrics):
    """Answers every GET with DCGM_EXPORTER, as dcgm-exporter's /metrics would."""

    body = DCGM_EXPORTER


@contextlib.contextmanager
def exporter(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``host:port`` of an HTTP server answering with ``handler``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def kube_state_metrics() -> Iterator[str]:
    """``host:port`` of an HTTP server answering KUBE_STATE_METRICS."""
    with exporter(_KubeStateMetrics) as address:
        yield address


@pytest.fixture(scope="module")
def dcgm_exporter() -> Iterator[str]:
    """``host:port`` of an HTTP server answering DCGM_EXPORTER."""
    with exporter(_DcgmExporter) as address:
        yield address


@pytest.fixture(scope="module")
def prometheus(
    demo: RunningDemo,
    kube_state_metrics: str,
    dcgm_exporter: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Prometheus]:
    address = demo.url.removeprefix("http://")
    jobs = [
        *scrape_configs(address),
        {"job_name": "kube-state-metrics", "static_configs": [{"targets": [kube_state_metrics]}]},
        {"job_name": "dcgm-exporter", "static_configs": [{"targets": [dcgm_exporter]}]},
    ]
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), free_port(), jobs) as prom:
        eventually(
            lambda: (
                len(prom.query(f'gpugraph_agent_up{{job="{JOB}"}}')) == ALL_NODES
                and len(prom.query(f'gpugraph_agent_up{{job="{PER_POD_JOB}"}}')) == 2 * ALL_NODES
                and prom.query("kube_pod_info")
                and prom.query("DCGM_FI_DEV_XID_ERRORS")
                # The demo deletes research/eval-canary once ready; its process lingers.
                and prom.query(
                    f'gpugraph_gpu_unattributed_memory_bytes{{job="{JOB}", '
                    'reason="unknown_container"} > 0'
                )
                # The demo's GPU health events: its XID, then the GPU it loses.
                and prom.query(f'gpugraph_gpu_events_total{{job="{JOB}", kind="GPU_LOST"}}')
            ),
            60,
            interval=0.5,
            what="every node's agent_up, the deleted pod's leftover and the lost GPU in Prometheus",
        )
        yield prom


def vector(prom: Prometheus, promql: str) -> dict[tuple[str, ...], float]:
    """An instant vector keyed by its label values (sorted by label name, __name__ left out)."""
    return {
        tuple(v for k, v in sorted(s["metric"].items()) if k != "__name__"): float(s["value"][1])
        for s in prom.query(promql)
    }


def test_memory_by_pod_equals_graphql(demo: RunningDemo, prometheus: Prometheus) -> None:
    body = demo.query("{ pods { namespace name gpuProcesses { usedMemoryBytes } } }")
    graphql: dict[tuple[str, str], int] = defaultdict(int)
    for pod in body["data"]["pods"]:
        for process in pod["gpuProcesses"] or []:
            graphql[(pod["namespace"], pod["name"])] += process["usedMemoryBytes"]
    summed = vector(
        prometheus,
        f'sum by (namespace, pod) (gpugraph_container_gpu_memory_used_bytes{{job="{JOB}"}})',
    )
    assert summed == {key: float(used) for key, used in graphql.items()}
    assert ("inference", "chat-api-0") in summed and ("inference", "chat-api-1") in summed


def test_two_replicas_are_one_target_and_do_not_double_a_sum(prometheus: Prometheus) -> None:
    jobs = defaultdict(list)
    for target in prometheus.targets():
        jobs[target["labels"]["job"]].append(target)
    assert len(jobs[JOB]) == 1 and len(jobs[PER_POD_JOB]) == 2
    (target,) = jobs[JOB]
    assert set(target["labels"]) == {"job", "instance"}
    once = vector(prometheus, f'sum(gpugraph_gpu_memory_total_bytes{{job="{JOB}"}})')
    twice = vector(prometheus, f'sum(gpugraph_gpu_memory_total_bytes{{job="{PER_POD_JOB}"}})')
    assert once[()] > 0 and twice[()] == 2 * once[()]
    # The series' own labels, not the server pod's, mark the GPU series.
    labels = prometheus.query(f'gpugraph_gpu_info{{job="{JOB}"}}')[0]["metric"]
    assert "pod" not in labels and "namespace" not in labels and "container" not in labels


def test_the_orphan_is_unattributed_host_memory(demo: RunningDemo, prometheus: Prometheus) -> None:
    body = demo.query(
        "{ gpuProcesses { usedMemoryBytes containerId gpu { uuid node { name } } pod { name } } }"
    )
    # Two cases hold memory outside any pod: the leftover host process (no container),
    # and the process of the pod deleted while it ran (a container no pod owns).
    orphans: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for p in body["data"]["gpuProcesses"]:
        if p["pod"] is None:
            reason = "host_process" if p["containerId"] is None else "unknown_container"
            key = (p["gpu"]["node"]["name"], p["gpu"]["uuid"])
            orphans[reason][key] = float(p["usedMemoryBytes"])
    assert {reason: len(gpus) for reason, gpus in orphans.items()} == {
        "host_process": 1,
        "unknown_container": 1,
    }
    for reason, expected in orphans.items():
        found = {
            (s["metric"]["node"], s["metric"]["gpu_uuid"]): float(s["value"][1])
            for s in prometheus.query(
                f'gpugraph_gpu_unattributed_memory_bytes{{job="{JOB}", reason="{reason}"}} > 0'
            )
        }
        assert found == expected, reason


def test_the_down_node_is_agent_up_0(demo: RunningDemo, prometheus: Prometheus) -> None:
    nodes = demo.query("{ nodes { name agent { reachable } } }")["data"]["nodes"]
    down = {n["name"] for n in nodes if not n["agent"]["reachable"]}
    assert len(down) == 1
    up = {
        s["metric"]["node"]: float(s["value"][1])
        for s in prometheus.query(f'gpugraph_agent_up{{job="{JOB}"}}')
    }
    assert {node for node, v in up.items() if v == 0} == down
    assert sum(up.values()) == ALL_NODES - 1
    # No other GPU series for that node (the server's own agent-call counters have it).
    (node,) = down
    gpu_series = f'{{job="{JOB}", node="{node}", __name__=~"gpugraph_(gpu|container|pod)_.*"}}'
    assert prometheus.query(gpu_series) == []
    assert prometheus.query(f'gpugraph_gpu_info{{job="{JOB}", node!="{node}"}}')


def test_the_notebook_uses_an_unrequested_gpu(prometheus: Prometheus) -> None:
    found = [
        (s["metric"]["namespace"], s["metric"]["pod"], float(s["value"][1]))
        for s in prometheus.query(f'gpugraph_pod_gpus_unrequested{{job="{JOB}"}} > 0')
    ]
    assert found == [("research", "notebook-alice", 1.0)]


def test_the_exposition_passes_promtool(demo: RunningDemo) -> None:
    text = httpx.get(f"{demo.url}/metrics", timeout=30).text
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (checked.stdout + checked.stderr).strip()


def test_every_dashboard_panel_returns_data(prometheus: Prometheus) -> None:
    dashboard = load_dashboard()
    assert dashboard_problems(dashboard) == []
    # Grafana's "All" is the variables' allValue; the variables' own queries list real values.
    queried = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    everything = {v["name"]: v.get("allValue", ".*") for v in queried}
    for title, promql in panel_queries(dashboard, everything):
        assert prometheus.query(promql), f"{title}: {promql} returned nothing"
    for variable in queried:
        series = prometheus.query(variable_query(variable, constants(dashboard)))
        assert variable_options(variable, series), f"variable {variable['name']} lists nothing"
    # One namespace and one node picked: every query is still valid PromQL.
    picked = {"namespace": "research", "node": "gpu-node-1"}
    for _title, promql in panel_queries(dashboard, picked):
        prometheus.query(promql)
    # Each variable narrows every panel whose series carry its label: set to a
    # value that matches nothing, it leaves them empty (or a count's 0).
    carried_by = {"node": ("gpugraph_",), "namespace": ("gpugraph_container_", "gpugraph_pod_")}
    for name, metrics in carried_by.items():
        for title, promql in panel_queries(dashboard, {**everything, name: f"no-such-{name}"}):
            if any(metric in promql for metric in metrics):
                narrowed = [(s["metric"], s["value"][1]) for s in prometheus.query(promql)]
                assert narrowed in ([], [({}, "0")]), f"{title} ignores ${name}: {promql}"


def documented_promql() -> list[str]:
    """The queries of docs/metrics.md's PromQL examples, each after its comment."""
    block = METRICS_DOC.read_text().split("**PromQL examples.**", 1)[1]
    block = block.split("```promql\n", 1)[1].split("```", 1)[0]
    queries: list[str] = []
    for chunk in block.split("\n\n"):
        lines = [line for line in chunk.splitlines() if not line.startswith("#")]
        queries.append(" ".join(line.strip() for line in lines))
    return queries


def test_the_documented_promql_examples_run(prometheus: Prometheus) -> None:
    queries = documented_promql()
    assert len(queries) >= 6
    results = [prometheus.query(q) for q in queries]
    shared, orphaned, owners, by_team, down, xid = results[:6]
    # The demo's shared GPUs (once per job): the two inference pods on one GPU, two
    # time-sliced replicas on each of two GPUs, two MIG devices of one GPU.
    assert {s["metric"]["pod"] for s in shared} == {
        "chat-api-0",
        "chat-api-1",
        "embed-0",
        "embed-1",
        "embed-2",
        "embed-3",
        "mig-notebook-0",
        "mig-notebook-1",
    }
    # The leftover host process, and the process of the pod deleted while it ran.
    assert {(s["metric"]["node"], s["metric"]["reason"]) for s in orphaned} == {
        ("gpu-node-0", "host_process"),
        ("gpu-node-1", "unknown_container"),
    }
    # The joins with kube-state-metrics' series.
    assert {(s["metric"]["pod"], s["metric"]["created_by_kind"]) for s in owners} == {
        ("notebook-alice", "StatefulSet")
    }
    pods = vector(
        prometheus,
        f'sum by (namespace, pod) (gpugraph_container_gpu_memory_used_bytes{{job="{JOB}"}})',
    )
    # Both jobs scrape the same server, so each sum counts the memory twice.
    assert {s["metric"]["label_team"]: float(s["value"][1]) for s in by_team} == {
        "inference": 2 * (pods[("inference", "chat-api-0")] + pods[("inference", "chat-api-1")]),
        "research": 2 * pods[("research", "notebook-alice")],
    }
    assert {s["metric"]["node"] for s in down} == {"gpu-node-3"}
    # The join with dcgm-exporter on the GPU's UUID: the pods on the GPU with an XID error.
    assert {(s["metric"]["gpu_uuid"], s["metric"]["pod"], s["value"][1]) for s in xid} == {
        (SHARED[1], "chat-api-0", "79"),
        (SHARED[1], "chat-api-1", "79"),
    }


def test_every_alert_finds_the_demos_case(prometheus: Prometheus) -> None:
    with helm.Chart.load(CHART) as chart:
        rule = one(render(chart, operator=True), "PrometheusRule")
    alerts = rule["spec"]["groups"][0]["rules"]
    # Whom each alert names (both jobs scrape the same server, so a case shows once per job).
    names = {
        "GpuMemoryOutsideAnyPod": ("node", "gpu"),
        "GpuUsedWithoutRequest": ("namespace", "pod"),
        "GpugraphAgentDown": ("node",),
        "GpuUsedWithoutAllocation": ("namespace", "pod", "container"),
        "GpuAllocationIdle": ("namespace", "pod", "container"),
        "GpuHardwareFault": ("node", "kind"),
        "GpuFaultHitPod": ("namespace", "pod", "kind"),
    }
    found = {
        a["alert"]: {
            tuple(s["metric"][label] for label in names[a["alert"]])
            for s in prometheus.query(a["expr"])
        }
        for a in alerts
    }
    assert found == {
        # The leftover host process; the process of the pod deleted while it ran.
        "GpuMemoryOutsideAnyPod": {("gpu-node-0", "1"), ("gpu-node-1", "0")},
        # Not the MIG, time-sliced or DRA pods: they request what they use.
        "GpuUsedWithoutRequest": {("research", "notebook-alice")},
        "GpugraphAgentDown": {("gpu-node-3",)},
        # Given GPU 1 by its kubelet, it runs on GPU 0.
        "GpuUsedWithoutAllocation": {("inference", "chat-api-1", "triton")},
        # Idle two hours; the idle replica's 45 minutes are under the hour (and its first
        # scan, before the server named its pods, could not judge it).
        "GpuAllocationIdle": {("research", "notebook-bob", "notebook")},
        # The GPU gpu-node-2 loses, and the worker on it; not chat-api-1's XID 13, which the
        # catalog puts down to the application.
        "GpuHardwareFault": {("gpu-node-2", "GPU_LOST")},
        "GpuFaultHitPod": {("ml-training", "llm-pretrain-worker-2", "GPU_LOST")},
    }


def test_under_auth_prometheus_needs_a_token_allowed_get_metrics(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``gpugraph demo --auth``: admin may get /metrics, the research user may not."""
    require_prometheus()
    with ready_demo(tmp_path_factory.mktemp("auth-demo"), "--nodes", "3", "--auth") as running:
        tokens = dict(re.findall(r"^  (admin|research) +(\S+)$", running.text(), flags=re.M))
        assert set(tokens) == {"admin", "research"}, running.text()
        address = running.url.removeprefix("http://")
        (job, _) = scrape_configs(address)
        jobs = [
            {**job, "job_name": who, "authorization": {"type": "Bearer", "credentials": token}}
            for who, token in tokens.items()
        ]
        with running_prometheus(tmp_path_factory.mktemp("auth-prom"), free_port(), jobs) as prom:

            def health() -> dict[str, tuple[str, str]]:
                return {t["labels"]["job"]: (t["health"], t["lastError"]) for t in prom.targets()}

            def settled() -> bool:
                # One look at the targets: two looks could see one target, then
                # a second not scraped yet.
                states = health()
                admin, research = states.get("admin"), states.get("research")
                return admin == ("up", "") and research is not None and "403" in research[1]

            # A first scrape may still time out (the interval is 1 s) before it
            # settles; one that lets research in never does.
            eventually(
                settled, 60, interval=0.5, what="admin's target up, research's refused (403)"
            )
            eventually(
                lambda: prom.query('gpugraph_agent_up{job="admin"}'), 30, what="admin's series"
            )
            assert prom.query('gpugraph_agent_up{job="research"}') == []
