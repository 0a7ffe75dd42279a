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
    # The GPU's row and its process's row, each flagged.
    unrequested = lines_with(out, "UNREQUESTED")
    assert len(unrequested) == 2 and all("research/notebook-alice" in u for u in unrequested)
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
    # A pod on the down node: GraphQL's gpus is null (not known), and so is top's.
    expected = {
        (p["namespace"], p["name"]): (
            p["nodeName"],
            p["gpuRequest"] or 0,
            None if p["gpus"] is None else len(p["gpus"]),
            None if p["gpus"] is None else not p["gpuRequest"] and bool(p["gpus"]),
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
        if line.startswith("gpu-node-") and "agent down" not in line
    }
    assert sorted(rows) == ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert rows["gpu-node-3"].split()[1] == "DOWN"
    assert all(rows[f"gpu-node-{i}"].split()[1] == "4" for i in range(3))
    assert lines_with(out, "agent down")[0].startswith("gpu-node-3:")


def test_namespaces_view_sums_each_namespaces_pods_and_counts_those_on_the_down_node(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = json.loads(top(capsys, demo, "pods", "-o", "json"))["pods"]
    document = json.loads(top(capsys, demo, "namespaces", "-o", "json"))
    rows = {n["namespace"]: n for n in document["namespaces"]}
    assert sorted(rows) == sorted({p["namespace"] for p in pods})
    for namespace, row in rows.items():
        mine = [p for p in pods if p["namespace"] == namespace]
        known = [p for p in mine if p["gpusUsed"] is not None]
        assert (row["pods"], row["podsUnknown"], row["gpusRequested"], row["gpusUsed"]) == (
            len(mine),
            len(mine) - len(known),
            sum(p["gpusRequested"] for p in mine),
            sum(p["gpusUsed"] for p in known),
        ), namespace
        assert set(row["flags"]) == {f for p in known for f in p["flags"]}
    # The pod on the down node counts in ml-training's pods and requests, not in its use,
    # and the table says so beside the count; the down node is its line below.
    assert rows["ml-training"]["podsUnknown"] == 1
    assert [d["node"] for d in document["downNodes"]] == ["gpu-node-3"]
    table = top(capsys, demo, "namespaces")
    assert table.splitlines()[0].split() == [
        "NAMESPACE", "PODS", "GPUS(REQ/USED)", "MEMORY", "SM", "FLAGS"
    ]  # fmt: skip
    (training,) = lines_with(table, "ml-training")
    assert f"{rows['ml-training']['pods']} (1 down)" in training
    assert lines_with(table, "agent down")[0].startswith("gpu-node-3:")
    # -n keeps one namespace, and the down node only where its pods run.
    research = top(capsys, demo, "namespaces", "-n", "research").splitlines()
    assert [line.split()[0] for line in research[1:]] == ["research"]


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


# The documented -o json/yaml contract (docs/top.md, "The JSON and YAML shapes"): within
# gpugraph.top/v1 fields are only added, so these sets may grow but never lose a key.
CONTRACT = {
    "gpus": (
        "GpuList",
        {"gpus", "downNodes", "errors"},
        {
            "node", "index", "uuid", "model", "utilizationPercent", "memoryUsedBytes",
            "memoryTotalBytes", "temperatureC", "error", "flags", "pods", "processes",
        },
    ),
    "pods": (
        "PodList",
        {"pods", "downNodes", "errors"},
        {
            "namespace", "name", "node", "gpusRequested", "gpusUsed", "memoryBytes",
            "smPercent", "unrequested", "flags",
        },
    ),
    "nodes": (
        "NodeList",
        {"nodes", "errors"},
        {
            "name", "status", "reason", "gpus", "utilizationPercent", "memoryUsedBytes",
            "memoryTotalBytes", "maxTemperatureC", "pods", "processes", "flags",
        },
    ),
    "namespaces": (
        "NamespaceList",
        {"namespaces", "downNodes", "errors"},
        {
            "namespace", "pods", "podsUnknown", "gpusRequested", "gpusUsed", "memoryBytes",
            "smPercent", "flags",
        },
    ),
}  # fmt: skip
PROCESS_KEYS = {
    "pid",
    "name",
    "pod",
    "container",
    "memoryBytes",
    "smPercent",
    "unrequested",
    "allocation",
    "flags",
}


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
    items = document[next(iter(lists - {"downNodes", "errors"}))]
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
    assert table.splitlines()[0].split() == [
        "NAMESPACE", "POD", "ALLOC-HOURS", "IDLE-HOURS", "GPU-HOURS", "GIB-HOURS"
    ]  # fmt: skip
    assert lines_with(table, "lr-sweep-7")[0].split()[4] == "2.00"
    # The notebook that holds a GPU and runs nothing: two hours allocated, all of them idle,
    # none used (the demo's agent wrote its past; docs/allocation.md).
    pods = {(p["namespace"], p["name"]): p for p in document["pods"]}
    bob = pods[("research", "notebook-bob")]
    assert bob["gpuHours"] == 0 and bob["allocatedGpuHours"] == pytest.approx(2.0, abs=0.02)
    assert bob["idleGpuHours"] == pytest.approx(2.0, abs=0.02)
    (row,) = lines_with(table, "notebook-bob")
    assert row.split()[2:5] == ["2.00", "2.00", "0.00"]
    nodes = json.loads(top(capsys, demo, "nodes", "--since", "1d", "-o", "json"))
    assert nodes["kind"] == "NodeUsageList" and nodes["nodes"][0]["node"] == "gpu-node-0"


def test_since_refuses_a_bad_duration_watch_and_another_order(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", "--server", demo.url, "--since", "yesterday"]) == 1
    assert "--since" in capsys.readouterr().err
    # An empty one is no duration either, not the live view.
    for view in (["pods"], ["--events"]):
        assert main(["top", *view, "--server", demo.url, "--since", ""]) == 1
        assert "--since: empty duration" in capsys.readouterr().err
    assert main(["top", "--server", demo.url, "--since", "1h", "--watch"]) == 1
    assert "no --watch" in capsys.readouterr().err
    # Most GPU-hours first is what it is for: another order is refused, not ignored.
    assert main(["top", "pods", "--server", demo.url, "--since", "1h", "--sort-by", "name"]) == 1
    assert "no --sort-by" in capsys.readouterr().err


def test_a_pod_and_a_node_whose_agent_is_down_are_unknown_not_zero(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    down = demo.query("{ pods { name nodeName gpus { uuid } } }")["data"]["pods"]
    stranded = {p["name"] for p in down if p["nodeName"] == "gpu-node-3"}
    assert stranded and all(p["gpus"] is None for p in down if p["name"] in stranded)
    pods = json.loads(top(capsys, demo, "pods", "-o", "json"))["pods"]
    for pod in (p for p in pods if p["name"] in stranded):
        assert (pod["gpusUsed"], pod["memoryBytes"], pod["smPercent"]) == (None, None, None)
    assert all(p["memoryBytes"] is not None for p in pods if p["name"] not in stranded)
    nodes = {n["name"]: n for n in json.loads(top(capsys, demo, "nodes", "-o", "json"))["nodes"]}
    assert nodes["gpu-node-3"]["gpus"] is None and nodes["gpu-node-3"]["memoryUsedBytes"] is None
    assert nodes["gpu-node-3"]["pods"] is None and nodes["gpu-node-0"]["gpus"] == 4
    # The tables say so in words, where they said 0.
    table = [line.split() for line in top(capsys, demo, "pods").splitlines()]
    for row in (r for r in table if r[1] in stranded):
        assert row[3].endswith("/<unknown>") and row[4:6] == ["<unknown>", "<unknown>"], row
    node_row = lines_with(top(capsys, demo, "nodes"), "gpu-node-3")[0].split()
    # FLAGS included: what is on a down node's GPUs is not known either.
    assert node_row[1:] == ["DOWN", *["<unknown>"] * 6]


def test_the_down_line_says_once_that_the_agent_is_down(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = lines_with(top(capsys, demo), "agent down")
    assert line.startswith("gpu-node-3: agent down: ")
    assert "gpu-node-3" not in line.removeprefix("gpu-node-3:") and "unavailable" not in line


def test_a_namespace_shows_only_the_down_nodes_of_its_pods(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    # research's one pod is on gpu-node-1; a training worker is on the down gpu-node-3.
    for view in ("pods", "gpus"):
        research = top(capsys, demo, view, "-n", "research")
        assert "research/notebook-alice" in research or "notebook-alice" in research
        assert lines_with(research, "agent down") == []
        training = top(capsys, demo, view, "-n", "ml-training")
        assert [line.split(":")[0] for line in lines_with(training, "agent down")] == ["gpu-node-3"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # The server answers NOT_FOUND (an unknown node, or one the caller may not see).
        (["--node", "nope"], "no GPUs match --node nope"),
        (["nodes", "--node", "nope"], "no nodes match --node nope"),
        (["pods", "-n", "nope"], "no pods match -n nope"),
        (["-n", "research", "--node", "gpu-node-0"], "no GPUs match --node gpu-node-0 -n research"),
        (["pods", "-o", "json", "-l", "app=nope"], "no pods match -l app=nope"),
    ],
)
def test_a_filter_that_matches_nothing_says_so_and_fails(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert main(["top", "--server", demo.url, *args]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"gpugraph top: error: {said}\n"


def test_the_down_node_alone_is_a_match(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    out = top(capsys, demo, "--node", "gpu-node-3")
    assert lines_with(out, "agent down")[0].startswith("gpu-node-3:")


def test_an_unknown_flag_prints_tops_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["top", "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gpugraph top ") and "[-w]" in err
    assert err.rstrip().endswith("gpugraph top: error: unrecognized arguments: --bogus")


@pytest.mark.parametrize("value", ["-1", "0", "0.2", "nan", "inf", "soon"])
def test_an_interval_below_the_servers_shortest_tick_is_refused(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["top", "--watch", f"--interval={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gpugraph top ") and "argument --interval:" in err


@pytest.mark.parametrize("flag", ["--max-answer", "--request-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e308"])
def test_a_size_or_deadline_that_would_overflow_is_refused_at_the_prompt(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    # 1e308 MiB overflowed into a traceback where it became bytes.
    with pytest.raises(SystemExit) as exited:
        main(["top", "--server", "http://127.0.0.1:1", flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err


def test_the_shortest_interval_is_the_servers() -> None:
    from api.top.flags import MIN_INTERVAL, interval
    from graph_schema.limits import MIN_INTERVAL_SECONDS

    assert MIN_INTERVAL == MIN_INTERVAL_SECONDS
    assert interval(str(MIN_INTERVAL)) == MIN_INTERVAL


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_as_it_was_after_a_snapshot(enabled: bool) -> None:
    import gc

    from api.top.command import no_cycle_collection

    before = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(RuntimeError), no_cycle_collection():
            assert not gc.isenabled()
            raise RuntimeError("an error while drawing")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if before else gc.disable)()


def test_since_names_the_down_node_in_every_mode(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server's gpuUsage names the node it could not ask; top says so too.
    asked = demo.query('{ gpuUsage(since: "2000-01-01T00:00:00Z") { gpuSeconds } }')
    assert any("gpu-node-3" in e["message"] for e in asked["errors"])
    table = top(capsys, demo, "nodes", "--since", "7d")
    row = [line.split() for line in table.splitlines() if line.startswith("gpu-node-3 ")]
    assert row == [["gpu-node-3", *["<unknown>"] * 4]], table
    assert lines_with(table, "agent down")[0].startswith("gpu-node-3: agent down: ")
    nodes = json.loads(top(capsys, demo, "nodes", "--since", "7d", "-o", "json"))
    assert [d["node"] for d in nodes["downNodes"]] == ["gpu-node-3"] and nodes["errors"] == []
    down = [n for n in nodes["nodes"] if n["node"] == "gpu-node-3"]
    unknown = {"gpuHours": None, "memoryGibHours": None, "allocatedGpuHours": None,
               "idleGpuHours": None}  # fmt: skip
    assert down == [{"node": "gpu-node-3", **unknown}]
    pods = json.loads(top(capsys, demo, "--since", "7d", "-o", "json"))
    assert [d["node"] for d in pods["downNodes"]] == ["gpu-node-3"]
    assert lines_with(top(capsys, demo, "pods", "--since", "7d"), "agent down")


def flag_words(cells: list[str]) -> set[str]:
    from api.top.marks import MARKS

    return set(cells) & {mark.word for mark in MARKS}


def judged(demo: RunningDemo) -> bool:
    """Whether every kubelet's allocation data is in (the demo reads them once started)."""
    gpus = demo.query("{ gpus { processes { allocation pod { name } } } }")["data"]["gpus"]
    verdicts = {p["pod"]["name"]: p["allocation"] for g in gpus for p in g["processes"] if p["pod"]}
    return verdicts.get("chat-api-1") == "NOT_ALLOCATED" and verdicts.get("mig-notebook-0") == (
        "ALLOCATED"
    )


def recorded(demo: RunningDemo) -> bool:
    """Whether the demo's XID and lost GPU are in its agents' logs."""
    query = '{ gpuEvents(since: "2000-01-01T00:00:00Z") { edges { node { kind } } } }'
    edges = demo.query(query)["data"]["gpuEvents"]["edges"]
    return {e["node"]["kind"] for e in edges} == {"XID", "GPU_LOST"}


def test_one_set_of_flags_the_same_in_every_view_and_document(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.polling import eventually

    eventually(lambda: judged(demo), 30, interval=0.2, what="the kubelets' allocation data")
    eventually(lambda: recorded(demo), 30, interval=0.2, what="the demo's GPU events")
    # The demo's pod on a GPU it was not given, its unrequested one (whose container the
    # kubelet does not list), its MIG pods, and a pod with nothing to flag of its own.
    expected = {
        "inference/chat-api-1": {"NOT-ALLOCATED"},
        "research/notebook-alice": {"UNREQUESTED", "ALLOC-UNKNOWN"},
        "research/mig-notebook-0": {"MIG"},
        "inference/chat-api-0": set(),
    }
    # The two replicas were on the GPU the XID hit: EVENTS is their pods', not their processes'.
    hit = {"inference/chat-api-0", "inference/chat-api-1"}
    gpus = top(capsys, demo)
    pods = top(capsys, demo, "pods")
    for key, flags in expected.items():
        (process,) = [line for line in lines_with(gpus, "PID ") if f" {key} [" in line]
        assert flag_words(process.split()) == flags, process
        namespace, name = key.split("/")
        (row,) = [line for line in pods.splitlines() if line.split()[:2] == [namespace, name]]
        assert flag_words(row.split()) == flags | ({"EVENTS"} if key in hit else set()), row
    expected = {
        key: flags | ({"EVENTS"} if key in hit else set()) for key, flags in expected.items()
    }
    document = json.loads(top(capsys, demo, "pods", "-o", "json"))
    in_json = {f"{p['namespace']}/{p['name']}": p["flags"] for p in document["pods"]}
    # A pod on the down node: its flags are not known.
    assert [p["name"] for p in document["pods"] if p["flags"] is None] == ["llm-pretrain-worker-3"]
    in_json = {key: set(flags) for key, flags in in_json.items() if flags is not None}
    assert {key: in_json[key] for key in expected} == expected
    # The notebook holding a whole GPU with no process on it: listed, and flagged IDLE.
    assert in_json["research/notebook-bob"] == {"IDLE"}
    (row,) = [
        line for line in pods.splitlines() if line.split()[:2] == ["research", "notebook-bob"]
    ]
    assert flag_words(row.split()) == {"IDLE"}, row
    # A GPU's and a node's flags are those of the processes on them (and MIG, IDLE where a
    # pod holds it idle, and EVENTS where it had a health event).
    for gpu in json.loads(top(capsys, demo, "-o", "json"))["gpus"]:
        under = {flag for p in gpu["processes"] for flag in p["flags"]}
        own = {"MIG", "IDLE", "EVENTS"}
        assert set(gpu["flags"]) - under <= own and under <= set(gpu["flags"]), gpu
    table = top(capsys, demo, "nodes")
    nodes = {line.split()[0]: flag_words(line.split()) for line in table.splitlines()}
    assert nodes["gpu-node-0"] == {"EVENTS", "NOT-ALLOCATED"}
    assert nodes["gpu-mig-0"] == {"IDLE", "MIG"}
    assert nodes["gpu-node-1"] == {"UNREQUESTED", "ALLOC-UNKNOWN"}


def test_the_flags_legend_is_in_top_help_and_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    from api.top.marks import MARKS

    with pytest.raises(SystemExit):
        main(["top", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    docs = " ".join((ROOT / "docs" / "top.md").read_text().split())
    for mark in MARKS:
        assert f"{mark.word} {mark.meaning}" in helped
        assert f"`{mark.word}` | {mark.meaning}" in docs, mark.word
