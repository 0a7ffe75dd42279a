"""The chart's Prometheus and Grafana objects: ServiceMonitor, PrometheusRule, dashboard.

The ServiceMonitor and PrometheusRule are rendered only where the cluster
serves ``monitoring.coreos.com/v1``, as ``helm install`` decides from the API
server's discovery; here Helm's engine is given that API version, as
``helm template --api-versions`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

from tests.support.chart import (
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    container,
    flag,
    one,
    render,
)
from tests.support.chart import chart as chart
from tests.support.grafana import (
    constants,
    dashboard_problems,
    load_dashboard,
    panel_queries,
    variable_query,
)
from tests.support.prometheus import promtool, require_prometheus


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def test_operator_objects_only_where_its_api_is_served(chart: helm.Chart) -> None:
    without = kinds(render(chart))
    assert "ServiceMonitor" not in without and "PrometheusRule" not in without
    with_operator = render(chart, operator=True)
    assert {"ServiceMonitor", "PrometheusRule"} <= set(kinds(with_operator))
    switched_off = render(
        chart,
        {"metrics": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}},
        operator=True,
    )
    assert kinds(switched_off) == without


def test_core_objects_validate_against_kubernetes_schemas(chart: helm.Chart) -> None:
    for doc in render(chart, operator=True):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked below for the fields the operator reads
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_service_monitor_scrapes_the_service_once_for_every_replica(chart: helm.Chart) -> None:
    docs = render(chart, operator=True)
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    address = f"{service['metadata']['name']}.{NAMESPACE}.svc:{service['spec']['ports'][0]['port']}"
    relabel = {r.get("targetLabel"): r for r in endpoint["relabelings"]}
    # Every replica's endpoint becomes the one target: the Service.
    assert relabel["__address__"] == {
        "action": "replace",
        "targetLabel": "__address__",
        "replacement": address,
    }
    assert relabel["instance"]["replacement"] == address
    dropped = [r["regex"] for r in endpoint["relabelings"] if r["action"] == "labeldrop"]
    assert dropped == ["(pod|container|endpoint|namespace)"]


def test_prometheus_gets_a_token_allowed_exactly_get_metrics(chart: helm.Chart) -> None:
    docs = render(chart, operator=True)
    credentials = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]
    assert credentials["type"] == "Bearer"
    secret = named(docs, "Secret", credentials["credentials"]["name"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert credentials["credentials"]["key"] == "token"
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    named(docs, "ServiceAccount", account)
    bindings = [
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in d["subjects"]
    ]
    assert len(bindings) == 1
    role = named(docs, "ClusterRole", bindings[0]["roleRef"]["name"])
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_a_token_of_ones_own_or_no_auth_needs_no_reader(chart: helm.Chart) -> None:
    base = kinds(render(chart))
    docs = render(
        chart,
        {"metrics": {"serviceMonitor": {"tokenSecret": {"name": "prom-token"}}}},
        operator=True,
    )
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["authorization"]["credentials"] == {"name": "prom-token", "key": "token"}
    assert kinds(docs) == sorted([*base, "ServiceMonitor", "PrometheusRule"])
    docs = render(chart, {"server": {"auth": {"mode": "none"}}}, operator=True)
    assert "authorization" not in one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert "Secret" not in kinds(docs) or all(
        d["type"] != "kubernetes.io/service-account-token" for d in docs if d["kind"] == "Secret"
    )


def rules_file(chart: helm.Chart, tmp_path: Path, values: dict[str, Any] | None = None) -> Path:
    rule = one(render(chart, values, operator=True), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


def test_prometheus_rule_passes_promtool(chart: helm.Chart, tmp_path: Path) -> None:
    require_prometheus()
    checked = promtool("check", "rules", str(rules_file(chart, tmp_path)))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_alerts_fire_on_the_cases_they_name(chart: helm.Chart, tmp_path: Path) -> None:
    """promtool's rule unit tests: each alert fires after its ``for``, and not before."""
    require_prometheus()
    rules = rules_file(chart, tmp_path)
    orphan = (
        'gpugraph_gpu_unattributed_memory_bytes{node="n1",gpu="1",gpu_uuid="GPU-1",reason="%s"}'
    )
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": orphan % "host_process", "values": "0 0 25769803776x20"},
                    # A PID the agent could not read is not known to be in no pod.
                    {"series": orphan.replace("n1", "n2") % "unresolved", "values": "1e9x22"},
                    {
                        "series": 'gpugraph_pod_gpus_unrequested{namespace="research",'
                        'pod="notebook",node="n1"}',
                        "values": "1x20",
                    },
                    {"series": 'gpugraph_agent_up{node="n3"}', "values": "1 1 0x20"},
                    {
                        "series": 'gpugraph_container_gpu_unallocated{namespace="ml",pod="stray",'
                        'container="main",node="n1",gpu_uuid="GPU-5"}',
                        # Appears at 2m: pending for 5m, firing from 7m.
                        "values": "_ _ 1x20",
                    },
                    {"series": 'gpugraph_agent_up{node="n1"}', "values": "1x22"},
                ],
                "alert_rule_test": [
                    # The orphan appears at 2m: pending for 10m, firing from 12m.
                    {"eval_time": "11m", "alertname": "GpuMemoryOutsideAnyPod", "exp_alerts": []},
                    {
                        "eval_time": "13m",
                        "alertname": "GpuMemoryOutsideAnyPod",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "node": "n1",
                                    "gpu": "1",
                                    "gpu_uuid": "GPU-1",
                                },
                                "exp_annotations": {
                                    "summary": "GPU memory held outside any pod",
                                    "description": "24GiB of GPU 1 (GPU-1) on node n1 belong to "
                                    "no pod: a leftover process, or a pod that is gone. Ask "
                                    "gpugraph for the node's processes with pod null.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "4m", "alertname": "GpuUsedWithoutRequest", "exp_alerts": []},
                    {
                        "eval_time": "6m",
                        "alertname": "GpuUsedWithoutRequest",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "namespace": "research",
                                    "pod": "notebook",
                                    "node": "n1",
                                },
                                "exp_annotations": {
                                    "summary": "A pod uses GPUs it did not request",
                                    "description": "Pod research/notebook on node n1 uses 1 "
                                    "GPU(s) beyond its GPU request.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "6m", "alertname": "GpuUsedWithoutAllocation", "exp_alerts": []},
                    {
                        "eval_time": "8m",
                        "alertname": "GpuUsedWithoutAllocation",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "namespace": "ml",
                                    "pod": "stray",
                                    "container": "main",
                                    "node": "n1",
                                    "gpu_uuid": "GPU-5",
                                },
                                "exp_annotations": {
                                    "summary": "A container runs on a GPU it was not given",
                                    "description": "Container main of pod ml/stray on node n1 "
                                    "runs on GPU GPU-5, which the kubelet did not allocate to it "
                                    "(a CUDA_VISIBLE_DEVICES override, a privileged container, "
                                    "or a device-plugin fault). See docs/allocation.md.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "6m", "alertname": "GpugraphAgentDown", "exp_alerts": []},
                    {
                        "eval_time": "8m",
                        "alertname": "GpugraphAgentDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "node": "n3"},
                                "exp_annotations": {
                                    "summary": "A gpugraph agent does not answer",
                                    "description": "The gpugraph agent on node n3 does not "
                                    "answer: its GPUs have no series and GraphQL shows its gpus "
                                    "as null.",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    tested = promtool("test", "rules", str(test_file))
    assert tested.returncode == 0, tested.stdout + tested.stderr


# The agents scraped by the chart's PodMonitor, under a name without "gpugraph".
AGENTS_SCRAPED = {
    "fullnameOverride": "gpu-observer",
    "metrics": {"gpuSeries": False, "agents": {"enabled": True}},
}


def installed_dashboard(chart: helm.Chart, values: dict[str, Any]) -> dict[str, Any]:
    """The dashboard of the chart's ConfigMap, as the Grafana sidecar loads it."""
    (text,) = one(render(chart, values, operator=True), "ConfigMap")["data"].values()
    return load_dashboard(text)


def test_the_dashboards_agents_down_panels_count_both_ways_of_scraping(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """The server's gpugraph_agent_up, or (agents scraped by the chart's PodMonitor, no GPU
    series on the server) the agents' own ``up``: both say an agent is down, and the node
    drop-down lists the down nodes either way."""
    require_prometheus()
    dashboard = installed_dashboard(chart, AGENTS_SCRAPED)
    queries = dict(panel_queries(dashboard, {"node": ".*", "namespace": ".*"}))
    (node,) = [v for v in dashboard["templating"]["list"] if v["name"] == "node"]
    rules = tmp_path / "none.yml"
    rules.write_text("groups: []\n")
    up = 'up{job="gpu-observer-agent",node="%s",instance="%s:9402"}'
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": up % ("n1", "10.0.0.1"), "values": "0x5"},
                    {"series": up % ("n2", "10.0.0.2"), "values": "1x5"},
                    # Another job's agent down is not gpugraph's.
                    {"series": 'up{job="other-agent",node="n4"}', "values": "0x5"},
                    {"series": 'gpugraph_agent_up{node="n3"}', "values": "0x5"},
                    {"series": 'gpugraph_gpu_info{node="n5",gpu_uuid="GPU-5"}', "values": "1x5"},
                ],
                "promql_expr_test": [
                    {
                        "expr": variable_query(node, constants(dashboard)),
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": '{node="n1"}', "value": 0},
                            {"labels": '{node="n2"}', "value": 1},
                            {"labels": '{node="n3"}', "value": 0},
                            {"labels": '{node="n5"}', "value": 1},
                        ],
                    },
                    {
                        "expr": queries["Agents down"],
                        "eval_time": "5m",
                        "exp_samples": [{"labels": "{}", "value": 2}],
                    },
                    {
                        "expr": queries["Nodes whose agent is down"],
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": '{node="n1"}', "value": 0},
                            {"labels": 'gpugraph_agent_up{node="n3"}', "value": 0},
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "dashboard_test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    tested = promtool("test", "rules", str(test_file))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _idle_alert_test(rules: Path, minutes: int) -> dict[str, Any]:
    """promtool's test of GpuAllocationIdle: a notebook idle from 0 s, scraped from the server
    and from its agent (one alert), and a busy pod whose gauge stays 0."""
    labels = 'namespace="research",pod="notebook",container="main",node="n1",gpu_uuid="GPU-2"'
    idle = 'gpugraph_container_gpu_allocation_idle_seconds{%s,job="%s"}'
    # The gauge counts seconds: 60 more each minute.
    climbing = "0+60x200"
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": idle % (labels, "gpugraph"), "values": climbing},
                    {"series": idle % (labels, "gpugraph-agent"), "values": climbing},
                    {
                        "series": idle % (labels.replace("notebook", "busy"), "gpugraph"),
                        "values": "0x200",
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": f"{minutes - 1}m",
                        "alertname": "GpuAllocationIdle",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": f"{minutes}m",
                        "alertname": "GpuAllocationIdle",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "namespace": "research",
                                    "pod": "notebook",
                                    "container": "main",
                                    "node": "n1",
                                    "gpu_uuid": "GPU-2",
                                },
                                "exp_annotations": {
                                    "summary": "A container holds a GPU it does not use",
                                    "description": "Container main of pod research/notebook on "
                                    "node n1 has held GPU GPU-2 without running on it for "
                                    f"{minutes // 60}h {minutes % 60}m 0s (IDLE or UNUSED). "
                                    "gpugraph's idleGpuAllocations lists every such "
                                    "allocation; see docs/allocation.md.",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }


def test_the_idle_allocation_alert_fires_at_the_charts_setting(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """GpuAllocationIdle fires once an allocation's idle gauge reaches the setting (60 minutes
    by default), once per allocation however many scrapes carry its series."""
    require_prometheus()
    for minutes, values in ((60, None), (90, {"metrics": {"prometheusRule": {
            "allocationIdleMinutes": 90}}})):  # fmt: skip
        rules = rules_file(chart, tmp_path, values)
        test_file = tmp_path / f"idle_{minutes}_test.yml"
        test_file.write_text(yaml.safe_dump(_idle_alert_test(rules, minutes)))
        tested = promtool("test", "rules", str(test_file))
        assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_dashboards_agent_job_is_the_one_the_pod_monitor_sets(chart: helm.Chart) -> None:
    # A fullnameOverride without "gpugraph" would hide every agent from the file's guess.
    monitor = one(render(chart, AGENTS_SCRAPED, operator=True), "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (job,) = [r["replacement"] for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert job == "gpu-observer-agent"
    assert constants(installed_dashboard(chart, AGENTS_SCRAPED)) == {"agent_job": job}


def test_dashboard_config_map_is_the_dashboard_for_the_grafana_sidecar(chart: helm.Chart) -> None:
    docs = render(chart)
    config_map = one(docs, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = config_map["data"].values()
    dashboard = load_dashboard(text)
    # The file, with the agents' job that the PodMonitor gives them.
    assert constants(dashboard) == {"agent_job": f"{RELEASE}-gpugraph-agent"}
    assert {**dashboard, "templating": None} == {**load_dashboard(), "templating": None}
    assert dashboard_problems(dashboard) == []
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"namespace", "node"} <= variables
    titles = " | ".join(p["title"] for p in dashboard["panels"]).lower()
    for subject in (
        "memory by pod",
        "sm utilization by pod",
        "unattributed",
        "did not request",
        "agent is down",
    ):
        assert subject in titles
    moved = render(
        chart,
        {
            "metrics": {
                "dashboard": {"namespace": "monitoring", "annotations": {"grafana_folder": "GPUs"}}
            }
        },
    )
    config_map = one(moved, "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert "ConfigMap" not in kinds(render(chart, {"metrics": {"dashboard": {"enabled": False}}}))


def test_dcgm_names_reach_the_server(chart: helm.Chart) -> None:
    args = container(render(chart), "Deployment")["args"]
    assert "--metrics-dcgm-names" not in args
    args = container(render(chart, {"metrics": {"dcgmNames": True}}), "Deployment")["args"]
    assert "--metrics-dcgm-names" in args
    assert flag(args, "--auth") == "kubernetes"
