"""The chart's alerts on GPU health events, run by promtool on the series the server and the
agents export: hardware or driver XIDs, double-bit ECC errors and lost GPUs fire, per GPU and
per pod hit; XIDs that point at the application do not."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from node_resolver.gpu_events.xid import XID_CATALOG, XidCause
from tests.support.chart import chart as chart
from tests.support.chart import one, render
from tests.support.prometheus import promtool, require_prometheus

GPU = 'gpugraph_gpu_events_total{node="n1",gpu_uuid="GPU-1",kind="%s",xid="%s"}'
POD = 'gpugraph_pod_gpu_events_total{namespace="%s",pod="%s",kind="%s",xid="%s"}'


def rule_spec(chart: helm.Chart) -> dict[str, Any]:
    spec: dict[str, Any] = one(render(chart, operator=True), "PrometheusRule")["spec"]
    return spec


def alert(spec: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r for g in spec["groups"] for r in g["rules"] if r.get("alert") == name]
    return found


def test_the_hardware_xids_are_the_catalogs(chart: helm.Chart) -> None:
    expr = alert(rule_spec(chart), "GpuHardwareFault")["expr"]
    (codes,) = set(re.findall(r'xid=~"\|?([0-9|]+)"', expr))
    hardware = {c for c, info in XID_CATALOG.items() if info.cause is XidCause.HARDWARE_DRIVER}
    assert {int(c) for c in codes.split("|")} == hardware


def _fired(name: str, labels: dict[str, str], description: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": "warning", **labels},
        "exp_annotations": {
            "summary": {
                "GpuHardwareFault": "A GPU reported a hardware or driver fault",
                "GpuFaultHitPod": "A pod was on a GPU that reported a hardware or driver fault",
            }[name],
            "description": description,
        },
    }


def test_hardware_xids_and_double_bit_errors_fire_per_gpu_and_per_pod_hit(
    chart: helm.Chart, tmp_path: Path
) -> None:
    require_prometheus()
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule_spec(chart)))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # XID 79 (fallen off the bus) at 5m, with two pods on the GPU: a new series each, as the
    # counters make them; a double-bit error on GPU-2 then, and another at 35m (a series that
    # grows). XID 13 (the application's) and single-bit errors at 5m fire nothing.
    series = [
        {"series": GPU % ("XID", "79"), "values": "_x4 1x60"},
        {"series": POD % ("ml", "trainer", "XID", "79"), "values": "_x4 1x60"},
        {"series": POD % ("research", "notebook", "XID", "79"), "values": "_x4 1x60"},
        {"series": GPU % ("XID", "13"), "values": "_x4 1x60"},
        {"series": POD % ("ml", "trainer", "XID", "13"), "values": "_x4 1x60"},
        {"series": GPU % ("ECC_SINGLE_BIT", ""), "values": "_x4 5x60"},
        {
            "series": GPU.replace("GPU-1", "GPU-2") % ("ECC_DOUBLE_BIT", ""),
            "values": "_x4 1x30 2x30",
        },
        # GPU-3 found lost at 5m, with the trainer on it.
        {"series": GPU.replace("GPU-1", "GPU-3") % ("GPU_LOST", ""), "values": "_x4 1x60"},
        {"series": POD % ("ml", "trainer", "GPU_LOST", ""), "values": "_x4 1x60"},
    ]
    hit = (
        "Pod {} was on a GPU when it reported XID 79 (a hardware or driver fault): its results "
        "may be lost or wrong. gpugraph's gpuEvents(namespace) shows the GPU and node."
    )
    gpu_79 = (
        "GPU GPU-1 on node n1 reported XID 79 (a hardware or driver fault). GpuFaultHitPod "
        "names each pod that was on it; gpugraph's gpuEvents names their processes and the "
        "one the driver blamed."
    )
    dbe = gpu_79.replace("GPU-1", "GPU-2").replace("XID 79", "a double-bit ECC error")
    gpu_1 = _fired(
        "GpuHardwareFault", {"node": "n1", "gpu_uuid": "GPU-1", "kind": "XID", "xid": "79"}, gpu_79
    )
    gpu_2 = _fired(
        "GpuHardwareFault",
        # An empty label is no label to Prometheus.
        {"node": "n1", "gpu_uuid": "GPU-2", "kind": "ECC_DOUBLE_BIT"},
        dbe,
    )
    lost = _fired(
        "GpuHardwareFault",
        {"node": "n1", "gpu_uuid": "GPU-3", "kind": "GPU_LOST"},
        gpu_79.replace("GPU-1", "GPU-3").replace("XID 79", "itself lost (NVML's GPU_IS_LOST)"),
    )
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "GpuHardwareFault", "exp_alerts": []},
                    {
                        "eval_time": "6m",
                        "alertname": "GpuHardwareFault",
                        "exp_alerts": [gpu_1, gpu_2, lost],
                    },
                    {
                        "eval_time": "6m",
                        "alertname": "GpuFaultHitPod",
                        "exp_alerts": [
                            _fired(
                                "GpuFaultHitPod",
                                {"namespace": ns, "pod": pod, "kind": "XID", "xid": "79"},
                                hit.format(f"{ns}/{pod}"),
                            )
                            for ns, pod in (("ml", "trainer"), ("research", "notebook"))
                        ]
                        + [
                            _fired(
                                "GpuFaultHitPod",
                                {"namespace": "ml", "pod": "trainer", "kind": "GPU_LOST"},
                                hit.format("ml/trainer").replace(
                                    "XID 79", "itself lost (NVML's GPU_IS_LOST)"
                                ),
                            )
                        ],
                    },
                    # Past the window, only the error counted at 35m still fires.
                    {"eval_time": "50m", "alertname": "GpuHardwareFault", "exp_alerts": [gpu_2]},
                    {"eval_time": "50m", "alertname": "GpuFaultHitPod", "exp_alerts": []},
                ],
            }
        ],
    }
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    tested = promtool("test", "rules", str(test_file))
    assert tested.returncode == 0, tested.stdout + tested.stderr
