"""How the chart gets NVML into the agent's container on each kind of node (agent.nvml.mode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.support.chart import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    container,
    one,
    pod_spec,
    render,
)
from tests.support.chart import chart as chart

NVML_DOC = Path(__file__).resolve().parents[2] / "docs" / "nvml.md"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
MODES: list[str] = SCHEMA["properties"]["agent"]["properties"]["nvml"]["properties"]["mode"]["enum"]
DEVICES_DIR = "/var/run/nvidia-container-devices"


def agent_of(chart: helm.Chart, nvml: dict[str, Any], **agent: Any) -> dict[str, Any]:
    """The rendered agent DaemonSet's pod: its template metadata, spec and container."""
    docs = render(chart, {"agent": {"nvml": nvml, **agent}})
    for doc in docs:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    return {
        "metadata": one(docs, "DaemonSet")["spec"]["template"]["metadata"],
        "spec": pod_spec(docs, "DaemonSet"),
        "container": container(docs, "DaemonSet"),
    }


def env_of(agent: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in agent["container"]["env"]}


def mounts_of(agent: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Mount path -> the mount and its volume."""
    volumes = {v["name"]: v for v in agent["spec"]["volumes"]}
    return {
        m["mountPath"]: {**m, "volume": volumes[m["name"]]}
        for m in agent["container"]["volumeMounts"]
    }


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_lints_clean(mode: str) -> None:
    values = {"agent": {"nvml": {"mode": mode}}}
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.33.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_env_is_the_default_and_asks_the_nvidia_runtime_by_variable(chart: helm.Chart) -> None:
    agent = agent_of(chart, {})
    env = env_of(agent)
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
    assert "LD_LIBRARY_PATH" not in env
    assert not any(k.startswith("cdi.k8s.io/") for k in agent["metadata"].get("annotations", {}))
    assert set(mounts_of(agent)) == {
        "/host/proc",
        "/tmp",
        "/var/run/secrets/gpugraph",
        "/run/gpugraph/pod-resources",
        "/var/lib/gpugraph",  # the occupancy log (history), on by default
    }
    assert agent["container"]["securityContext"]["privileged"] is False


def test_volume_mounts_ask_by_a_mount_for_a_toolkit_that_ignores_the_variable(
    chart: helm.Chart,
) -> None:
    # accept-nvidia-visible-devices-envvar-when-unprivileged = false: the runtime reads
    # the device list from the mounts under DEVICES_DIR, as the device plugin's
    # volume-mounts strategy passes it.
    agent = agent_of(chart, {"mode": "volume-mounts"})
    assert env_of(agent)["NVIDIA_VISIBLE_DEVICES"] == DEVICES_DIR
    request = mounts_of(agent)[f"{DEVICES_DIR}/all"]
    assert request["readOnly"] is True
    assert request["volume"]["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}
    security = agent["container"]["securityContext"]
    assert security["privileged"] is False and security["capabilities"] == {"drop": ["ALL"]}


def test_cdi_asks_for_the_devices_by_annotation(chart: helm.Chart) -> None:
    agent = agent_of(
        chart,
        {"mode": "cdi", "cdi": {"devices": ["nvidia.com/gpu=all", "nvidia.com/gpu=0"]}},
        runtimeClassName="nvidia-cdi",
        podAnnotations={"team": "ml-platform"},
    )
    annotations = agent["metadata"]["annotations"]
    assert annotations["cdi.k8s.io/gpugraph-agent"] == "nvidia.com/gpu=all,nvidia.com/gpu=0"
    assert annotations["team"] == "ml-platform"
    assert agent["spec"]["runtimeClassName"] == "nvidia-cdi"
    # No legacy request beside it: the CDI devices are the one way in.
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(agent)
    assert agent["container"]["securityContext"]["privileged"] is False


def test_host_mounts_the_drivers_files_and_says_it_is_privileged(chart: helm.Chart) -> None:
    agent = agent_of(chart, {"mode": "host"})
    driver = mounts_of(agent)["/usr/local/nvidia"]
    assert driver["readOnly"] is True
    # GKE's driver installer's directory, by default.
    assert driver["volume"]["hostPath"] == {
        "path": "/home/kubernetes/bin/nvidia",
        "type": "Directory",
    }
    env = env_of(agent)
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    security = agent["container"]["securityContext"]
    assert security["privileged"] is True and security["allowPrivilegeEscalation"] is True
    other = agent_of(chart, {"mode": "host", "host": {"driverRoot": "/opt/nvidia/driver"}})
    assert mounts_of(other)["/usr/local/nvidia"]["volume"]["hostPath"]["path"] == (
        "/opt/nvidia/driver"
    )


@pytest.mark.parametrize(
    ("nvml", "pointer"),
    [
        ({"mode": "privileged"}, "/agent/nvml/mode"),
        ({"mode": "host", "host": {"driverRoot": "home/nvidia"}}, "/agent/nvml/host/driverRoot"),
        ({"mode": "cdi", "cdi": {"devices": ["gpu=all"]}}, "/agent/nvml/cdi/devices/0"),
        ({"mode": "cdi", "cdi": {"devices": []}}, "/agent/nvml/cdi/devices"),
    ],
)
def test_the_schema_refuses_settings_that_cannot_work(
    chart: helm.Chart, nvml: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as failure:
        chart.render({"agent": {"nvml": nvml}}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert pointer in str(failure.value)


def test_the_docs_give_each_mode_with_the_symptom_it_fixes() -> None:
    doc = NVML_DOC.read_text()
    section = doc.split("## The node side", 1)[1].split("\n## ", 1)[0]
    for mode in MODES:
        assert f"agent.nvml.mode={mode}" in section, mode
    # The line the agent prints when the runtime gave it no NVML.
    assert "cannot start NVML: the NVML library libnvidia-ml.so.1 was not found" in section


def test_the_kernel_log_is_off_by_default_and_kmsg_says_the_privilege_it_takes(
    chart: helm.Chart,
) -> None:
    plain = agent_of(chart, {"mode": "env"})
    assert "--kernel-log" not in plain["container"]["args"]
    assert "/run/gpugraph/kernel-log" not in mounts_of(plain)
    assert plain["container"]["securityContext"]["privileged"] is False

    kmsg = agent_of(chart, {"mode": "env"}, kernelLog={"enabled": True})
    args = kmsg["container"]["args"]
    assert args[args.index("--kernel-log") + 1] == "/run/gpugraph/kernel-log"
    mount = mounts_of(kmsg)["/run/gpugraph/kernel-log"]
    assert mount["readOnly"] is True
    assert mount["volume"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    security = kmsg["container"]["securityContext"]
    assert security["privileged"] is True
    assert "SYSLOG" in security["capabilities"]["add"]

    # A plain file needs no privilege: it is read as root, read-only.
    file = agent_of(
        chart, {"mode": "env"}, kernelLog={"enabled": True, "path": "/var/log/kern.log"}
    )
    assert mounts_of(file)["/run/gpugraph/kernel-log"]["volume"]["hostPath"] == {
        "path": "/var/log/kern.log",
        "type": "File",
    }
    assert file["container"]["securityContext"]["privileged"] is False
