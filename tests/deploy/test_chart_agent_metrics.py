"""The chart's per-node series: each agent's /metrics port, its token, the NetworkPolicy rule
and the PodMonitor that scrapes every agent (metrics.agents)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from node_resolver.address import METRICS_PORT
from node_resolver.cli import add_agent_arguments
from tests.support.chart import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    container,
    flag,
    one,
    pod_spec,
    render,
)
from tests.support.chart import chart as chart
from tests.support.prometheus import promtool, require_prometheus

# What an operator sets to scrape the agents instead of the server.
AGENTS = {"metrics": {"agents": {"enabled": True}, "gpuSeries": False}}


def agent_args(docs: list[dict[str, Any]]) -> argparse.Namespace:
    """The DaemonSet's arguments, read by the agent's own parser."""
    args = container(docs, "DaemonSet")["args"]
    assert args[0] == "agent"
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    return parser.parse_args(args[1:])


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [d["kind"] for d in docs]


def test_off_by_default_nothing_is_served_or_scraped(chart: helm.Chart) -> None:
    docs = render(chart, operator=True)
    assert "PodMonitor" not in kinds(docs)
    args = agent_args(docs)
    assert args.metrics_listen is None and args.metrics_token_file is None
    ports = container(docs, "DaemonSet")["ports"]
    assert [p["name"] for p in ports] == ["grpc"]
    (rule,) = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [50051]


def test_the_pod_monitor_scrapes_every_agent_with_the_token_they_require(
    chart: helm.Chart,
) -> None:
    docs = render(chart, AGENTS, operator=True)
    monitor = one(docs, "PodMonitor")
    daemonset = one(docs, "DaemonSet")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and all(pod_labels.get(k) == v for k, v in selector.items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    # The port it names is the agent container's, at the port the agent listens on.
    ports = {p["name"]: p["containerPort"] for p in container(docs, "DaemonSet")["ports"]}
    assert ports[endpoint["port"]] == METRICS_PORT
    args = agent_args(docs)
    assert args.metrics_listen == f"[::]:{METRICS_PORT}"
    # The token file the agent reads is the key of the Secret the PodMonitor sends.
    credentials = endpoint["authorization"]["credentials"]
    secret = next(
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == credentials["name"]
    )
    assert credentials["key"] in secret["data"]
    spec = pod_spec(docs, "DaemonSet")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container(docs, "DaemonSet")["volumeMounts"]}
    directory, _, key = args.metrics_token_file.rpartition("/")
    assert key == credentials["key"] and mounts[directory]["readOnly"] is True
    assert volumes[mounts[directory]["name"]]["secret"]["secretName"] == credentials["name"]
    # Not the agents' gRPC token: Prometheus gets no right to call them.
    assert credentials["name"] != flag(container(docs, "DaemonSet")["args"], "--token-file")
    assert args.metrics_token_file != args.token_file
    # The agent pod's own labels are dropped, so the series keep their namespace, pod, container.
    (drop,) = [r for r in endpoint["relabelings"] if r["action"] == "labeldrop"]
    assert set(drop["regex"].strip("()").split("|")) >= {"pod", "container", "namespace"}
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            for version in KUBE_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_the_network_policy_admits_the_scrape_from_the_peers_given(chart: helm.Chart) -> None:
    docs = render(chart, AGENTS)
    grpc_rule, metrics_rule = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for p in grpc_rule["ports"]] == [50051] and grpc_rule["from"]
    assert [p["port"] for p in metrics_rule["ports"]] == [METRICS_PORT]
    assert "from" not in metrics_rule  # any source; the token guards it
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    values = {"metrics": {"agents": {"enabled": True, "scrapeFrom": peers}, "gpuSeries": False}}
    _, metrics_rule = one(render(chart, values), "NetworkPolicy")["spec"]["ingress"]
    assert metrics_rule["from"] == peers


def test_without_auth_no_token_is_made_asked_or_sent(chart: helm.Chart) -> None:
    values = {"metrics": {"agents": {"enabled": True, "auth": False}, "gpuSeries": False}}
    docs = render(chart, values, operator=True)
    (endpoint,) = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert "authorization" not in endpoint
    assert agent_args(docs).metrics_token_file is None
    assert not [d for d in docs if "metrics-token" in d["metadata"]["name"]]


def test_a_token_secret_of_ones_own_is_used_not_made(chart: helm.Chart) -> None:
    own = {"name": "prom-agent-token", "key": "bearer"}
    values = {"metrics": {"agents": {"enabled": True, "tokenSecret": own}, "gpuSeries": False}}
    docs = render(chart, values, operator=True)
    (endpoint,) = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["authorization"]["credentials"] == own
    assert agent_args(docs).metrics_token_file.endswith("/bearer")
    assert not [
        d for d in docs if d["kind"] == "Secret" and "metrics-token" in d["metadata"]["name"]
    ]


def test_the_chart_refuses_to_scrape_the_same_series_twice(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError) as failure:
        chart.render(
            {"metrics": {"agents": {"enabled": True}}},
            name=RELEASE,
            namespace=NAMESPACE,
            is_install=True,
        )
    assert "metrics.gpuSeries=false" in str(failure.value)
    # Without the server's ServiceMonitor nothing scrapes the server's series twice.
    values = {"metrics": {"agents": {"enabled": True}, "serviceMonitor": {"enabled": False}}}
    assert "PodMonitor" in kinds(render(chart, values, operator=True))


def test_no_pod_monitor_where_the_operator_api_is_not_served(chart: helm.Chart) -> None:
    docs = render(chart, AGENTS)
    assert "PodMonitor" not in kinds(docs)
    assert agent_args(docs).metrics_listen == f"[::]:{METRICS_PORT}"


def test_enabled_lints_clean() -> None:
    report = helm.lint(CHART, AGENTS, strict=True, namespace=NAMESPACE, kube_version="v1.33.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_an_agent_that_does_not_answer_its_scrape_fires_agent_down(
    chart: helm.Chart, tmp_path: Path
) -> None:
    """With the server's GPU series off, ``up`` of the agents' own targets says who is down."""
    require_prometheus()
    docs = render(chart, AGENTS, operator=True)
    (endpoint,) = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    relabel = {r.get("targetLabel"): r for r in endpoint["relabelings"]}
    assert relabel["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    job = relabel["job"]["replacement"]
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(one(docs, "PrometheusRule")["spec"]))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    up = f'up{{job="{job}",instance="10.0.0.%d:9402",node="%s"}}'
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": up % (1, "n1"), "values": "1x20"},
                    {"series": up % (2, "n2"), "values": "1 1 0x20"},
                    # Another job's targets are not gpugraph's agents.
                    {"series": 'up{job="other",node="n3"}', "values": "0x20"},
                ],
                "alert_rule_test": [
                    {"eval_time": "6m", "alertname": "GpugraphAgentDown", "exp_alerts": []},
                    {
                        "eval_time": "8m",
                        "alertname": "GpugraphAgentDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "node": "n2"},
                                "exp_annotations": {
                                    "summary": "A gpugraph agent does not answer",
                                    "description": "The gpugraph agent on node n2 does not "
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
