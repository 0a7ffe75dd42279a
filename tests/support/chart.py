"""The Helm chart under test: where it is, the release it is rendered as, and lookups in it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from helm_python import _native

__all__ = [
    "CHART",
    "KUBE_VERSIONS",
    "MONITORING",
    "NAMESPACE",
    "RELEASE",
    "chart",
    "container",
    "flag",
    "one",
    "pod_spec",
    "render",
]

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpugraph"
RELEASE = "gg"
NAMESPACE = "gpu-system"
# Oldest version the chart declares (grpc probes are GA from 1.27) and the newest schemas known.
KUBE_VERSIONS = ("1.27", kubernetes_validate.latest_version())
# The Prometheus Operator's API, which the chart's ServiceMonitor and PrometheusRule need.
MONITORING = "monitoring.coreos.com/v1"


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    """The chart, loaded once per test module."""
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(
    chart: helm.Chart, values: dict[str, Any] | None = None, *, operator: bool = False
) -> list[dict[str, Any]]:
    """Every manifest of an install, on a cluster with (``operator``) or without the
    Prometheus Operator's API."""
    options: dict[str, Any] = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True}
    if operator:
        # helm-python's Chart.render does not expose libhelm_c's api_versions
        # option (`helm template --api-versions`) yet; the engine underneath takes it.
        options["api_versions"] = [MONITORING]
        out = json.loads(
            _native.call_string(
                "helm_render",
                chart._raw(),
                json.dumps(values) if values else None,
                json.dumps(options),
            )
        )
    else:
        out = chart.render(values or {}, **options)
    return [
        doc
        for path, text in out.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one manifest of ``kind``."""
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The pod template spec of the one workload of ``kind``."""
    spec: dict[str, Any] = one(docs, kind)["spec"]["template"]["spec"]
    return spec


def container(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one container of the one workload of ``kind``."""
    containers = pod_spec(docs, kind)["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def flag(args: list[str], name: str) -> str:
    """The value following ``name`` in an argument list."""
    assert args.count(name) == 1, f"{name} should appear exactly once in {args}"
    return args[args.index(name) + 1]
