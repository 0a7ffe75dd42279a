"""``gpugraph top`` against the embedded demo cluster: the real server and real agents."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from api.cli import main
from tests.support.demo_process import ROOT, RunningDemo, gpugraph_command

PODS = "{ pods { namespace name nodeName gpuRequest gpus { uuid } } }"


def top(capsys: pytest.CaptureFixture[str], demo: RunningDemo, *args: str) -> str:
    assert main(["top", "--server", demo.url, *args]) == 0
    out: str = capsys.readouterr().out
    return out


def lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


def test_gpus_view_shows_the_shared_gpu_the_orphan_the_unrequested_pod_and_the_down_node(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    out = top(capsys, demo)
    # One GPU row names both inference pods; each has its own process row.
    shared = [line for line in out.splitlines() if "chat-api-0" in line and "chat-api-1" in line]
    assert len(shared) == 1 and "gpu-node-0" in shared[0]
    for pod in ("inference/chat-api-0", "inference/chat-api-1"):
        process = [line for line in lines_with(out, "PID ") if pod in line]
        assert len(process) == 1 and "[triton]" in process[0]
    # PID 6100's pod was deleted while it ran (the demo's history scenario): no pod either.
    orphan = [line for line in lines_with(out, "(no pod)") if "PID 6100 " not in line]
    assert len(orphan) == 1 and "python3" in orphan[0]
    unrequested = lines_with(out, "UNREQUESTED")
    assert len(unrequested) == 1 and "research/notebook-alice" in unrequested[0]
    down = lines_with(out, "agent down")
    assert len(down) == 1 and down[0].startswith("gpu-node-3:")
    # Not a terminal: no colour or other escapes for grep and scripts.
    assert "\x1b" not in out


def test_pods_json_parses_and_matches_graphql(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(top(capsys, demo, "pods", "-o", "json"))
    assert document["kind"] == "PodList"
    pods: list[dict[str, Any]] = demo.query(PODS)["data"]["pods"]
    expected = {
        (p["namespace"], p["name"]): (
            p["nodeName"],
            p["gpuRequest"] or 0,
            len(p["gpus"] or ()),
            not p["gpuRequest"] and bool(p["gpus"]),
        )
        for p in pods
        if p["gpuRequest"] or p["gpus"]
    }
    got = {
        (p["namespace"], p["name"]): (
            p["node"],
            p["gpusRequested"],
            p["gpusUsed"],
            p["unrequested"],
        )
        for p in document["pods"]
    }
    assert got == expected
    assert [d["node"] for d in document["downNodes"]] == ["gpu-node-3"]


def test_nodes_view_has_a_row_per_node_and_names_the_down_one(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    out = top(capsys, demo, "nodes")
    rows = {
        line.split()[0]: line
        for line in out.splitlines()[1:]
        if line.startswith("gpu-") and "agent down" not in line
    }
    assert sorted(rows) == ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert rows["gpu-node-3"].split()[1] == "DOWN"
    assert all(rows[f"gpu-node-{i}"].split()[1] == "4" for i in range(3))
    assert lines_with(out, "agent down")[0].startswith("gpu-node-3:")


@pytest.mark.parametrize("server", ["http://127.0.0.1:1", "not-a-url"])
def test_a_bad_server_is_one_line_and_exit_1(server: str) -> None:
    result = subprocess.run(
        [*gpugraph_command(), "top", "--server", server],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpugraph top: error:"), result.stderr


# The documented -o json/yaml contract (README, "The JSON and YAML shapes"): within
# gpugraph.top/v1 fields are only added, so these sets may grow but never lose a key.
CONTRACT = {
    "gpus": (
        "GpuList",
        {"gpus", "downNodes"},
        {
            "node", "index", "uuid", "model", "utilizationPercent", "memoryUsedBytes",
            "memoryTotalBytes", "temperatureC", "error", "pods", "processes",
        },
    ),
    "pods": (
        "PodList",
        {"pods", "downNodes"},
        {
            "namespace", "name", "node", "gpusRequested", "gpusUsed", "memoryBytes",
            "smPercent", "unrequested",
        },
    ),
    "nodes": (
        "NodeList",
        {"nodes"},
        {
            "name", "status", "reason", "gpus", "utilizationPercent", "memoryUsedBytes",
            "memoryTotalBytes", "maxTemperatureC", "pods", "processes",
        },
    ),
}  # fmt: skip
PROCESS_KEYS = {"pid", "name", "pod", "container", "memoryBytes", "smPercent", "unrequested"}


@pytest.mark.parametrize("view", sorted(CONTRACT))
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_keep_the_documented_shape(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str], view: str, output: str
) -> None:
    import yaml

    text = top(capsys, demo, view, "-o", output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    kind, lists, entry = CONTRACT[view]
    assert document["apiVersion"] == "gpugraph.top/v1" and document["kind"] == kind
    assert set(document) == {"apiVersion", "kind", *lists}
    items = document[next(iter(lists - {"downNodes"}))]
    assert items and all(set(item) == entry for item in items)
    if view == "gpus":
        processes = [p for gpu in items for p in gpu["processes"]]
        assert processes and all(set(p) == PROCESS_KEYS for p in processes)
    for down in document.get("downNodes", []):
        assert set(down) == {"node", "reason"}


def test_since_lists_pods_by_gpu_hours_even_those_that_are_gone(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(top(capsys, demo, "--since", "24h", "-o", "json"))
    assert document["kind"] == "PodUsageList"
    hours = {(p["namespace"], p["name"]): p["gpuHours"] for p in document["pods"]}
    # Backfilled: ran from three hours ago until one hour ago, and is gone.
    assert hours[("research", "lr-sweep-7")] == pytest.approx(2.0, abs=0.01)
    # The leftover host process: five hours, in no pod.
    assert hours[(None, None)] >= 5.0
    # Deleted while running: still named.
    assert ("research", "eval-canary") in hours
    assert list(hours.values()) == sorted(hours.values(), reverse=True)
    table = top(capsys, demo, "--since", "24h")
    assert table.splitlines()[0].split() == ["NAMESPACE", "POD", "GPU-HOURS", "GIB-HOURS"]
    assert lines_with(table, "lr-sweep-7")[0].split()[2] == "2.00"
    nodes = json.loads(top(capsys, demo, "nodes", "--since", "1d", "-o", "json"))
    assert nodes["kind"] == "NodeUsageList" and nodes["nodes"][0]["node"] == "gpu-node-0"


def test_since_refuses_a_bad_duration_and_watch(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", "--server", demo.url, "--since", "yesterday"]) == 1
    assert "--since" in capsys.readouterr().err
    assert main(["top", "--server", demo.url, "--since", "1h", "--watch"]) == 1
    assert "no --watch" in capsys.readouterr().err
