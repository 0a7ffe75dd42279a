"""``gpugraph demo`` as a user runs it: a subprocess, queried over HTTP, stopped with Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.http.cluster_map import assets_present as map_assets_present
from api.http.graphiql import BUILD_COMMAND, assets_present
from tests.support.demo_process import (
    GPUS,
    NODES,
    ROOT,
    STOP_TIMEOUT,
    RunningDemo,
    gpugraph_command,
    ready_demo,
)
from tests.support.demo_process import demo as demo
from tests.support.kubectl import Kubectl, kubectl_binary, table
from tests.support.polling import eventually

ALLOCATION_NODES = ("gpu-mig-0", "gpu-ts-0", "gpu-dra-0")


def session_members(sid: int) -> list[int]:
    """PIDs of live processes in session ``sid`` (the demo runs as a session leader)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        # fields[0] is the state (field 3), so the session id (field 6) is fields[3].
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


CLUSTER = """
{
  nodes {
    name
    internalIp
    agent { reachable error }
    gpus {
      uuid
      index
      memoryUsedBytes
      utilizationGpu
      pods { namespace name gpuRequest }
      processes { pid name usedMemoryBytes podUid containerId pod { namespace name } }
    }
  }
  pods { namespace name gpuRequest nodeName gpus { uuid } }
}
"""


def test_banner_names_graphiql_and_three_queries(demo: RunningDemo) -> None:
    text = demo.text()
    assert f"{demo.url}/graphql" in text
    # Its count is of the nodes it lists: the allocation nodes' 2 GPUs each included.
    listed = re.findall(r"^  (gpu-\S+) +127\.0\.0\.\d+:\d+ +agent", text, flags=re.M)
    assert len(listed) == NODES + len(ALLOCATION_NODES)
    gpus = NODES * GPUS + 2 * len(ALLOCATION_NODES)
    assert f"gpugraph demo: {len(listed)} nodes, {gpus} fake NVIDIA H200 GPUs," in text
    # What is notable about the cluster, named so the user can look for it.
    assert re.search(r"^  agent down +gpu-node-3\b", text, flags=re.M)
    assert re.search(r"^  unrequested +pod research/notebook-alice\b", text, flags=re.M)
    assert re.search(r"^  no pod +PID 48213 on gpu-node-0\b", text, flags=re.M)
    assert len(re.findall(r"^--- example \d ---$", text, flags=re.M)) == 4
    page = httpx.get(f"{demo.url}/graphql", headers={"accept": "text/html"}, timeout=10)
    if assets_present():
        assert page.status_code == 200 and "graphiql" in page.text.lower()
    else:
        # Built without npm: the address the banner names says how to build what it lacks.
        assert page.status_code == 503 and BUILD_COMMAND in page.text


def test_kubectl_with_the_printed_kubeconfig_lists_the_demos_pods(
    demo: RunningDemo, tmp_path: Path
) -> None:
    found = re.search(r"^  kubectl +kubectl --kubeconfig (\S+) get pods -A$", demo.text(), re.M)
    assert found, demo.text()
    kubeconfig = Path(found[1])
    assert kubeconfig.is_relative_to(demo.tmpdir) and kubeconfig.is_file()
    kubectl = Kubectl(kubectl_binary(), kubeconfig, tmp_path / "kube-cache")
    listed = {(r["NAMESPACE"], r["NAME"]) for r in table(kubectl.run("get", "pods", "-A"))}
    pods = demo.query("{ pods { namespace name } }")["data"]["pods"]
    assert listed == {(p["namespace"], p["name"]) for p in pods} and len(listed) > 1


def test_example_queries_in_the_banner_answer_without_errors(demo: RunningDemo) -> None:
    blocks = re.findall(r"^--- example \d ---\n(.*?)\n\n", demo.text(), flags=re.M | re.S)
    assert len(blocks) == 4
    for query in blocks:
        body = demo.query(query)
        assert "errors" not in body, body
        assert all(value for value in body["data"].values()), body


def test_cluster_has_nodes_and_the_down_node_is_reported(demo: RunningDemo) -> None:
    body = demo.query(CLUSTER)
    nodes = body["data"]["nodes"]
    assert len(nodes) >= 4
    up = [n for n in nodes if n["agent"]["reachable"]]
    down = [n for n in nodes if not n["agent"]["reachable"]]
    # The MIG, time-sliced and DRA nodes come on top of --nodes, two GPUs each.
    assert len(up) == NODES - 1 + len(ALLOCATION_NODES) and len(down) == 1
    dead = down[0]
    assert dead["gpus"] is None
    assert dead["name"] in dead["agent"]["error"]
    # The GraphQL error points at that node's gpus and names it; the rest still answered.
    index = nodes.index(dead)
    errors = [e for e in body["errors"] if e["path"] == ["nodes", index, "gpus"]]
    assert errors and dead["name"] in errors[0]["message"]
    for node in up:
        assert len(node["gpus"]) == (2 if node["name"] in ALLOCATION_NODES else GPUS)
        assert node["internalIp"].startswith("127.")


def all_gpus(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPUs of the --nodes nodes (not the MIG, time-sliced and DRA ones)."""
    return [
        gpu
        for node in body["data"]["nodes"]
        if node["name"] not in ALLOCATION_NODES
        for gpu in node["gpus"] or []
    ]


def test_two_inference_pods_share_one_gpu(demo: RunningDemo) -> None:
    gpus = all_gpus(demo.query(CLUSTER))
    shared = [g for g in gpus if len(g["pods"]) >= 2]
    assert len(shared) == 1
    gpu = shared[0]
    names = sorted(p["name"] for p in gpu["pods"])
    assert names == ["chat-api-0", "chat-api-1"]
    by_pod = {p["pod"]["name"]: p for p in gpu["processes"]}
    assert sorted(by_pod) == names
    # Each pod has its own process with its own memory on the one GPU.
    assert by_pod["chat-api-0"]["pid"] != by_pod["chat-api-1"]["pid"]
    assert all(p["usedMemoryBytes"] > 1 << 30 for p in by_pod.values())
    assert gpu["memoryUsedBytes"] >= sum(p["usedMemoryBytes"] for p in by_pod.values())


def test_orphan_host_process_has_no_pod(demo: RunningDemo) -> None:
    gpus = all_gpus(demo.query(CLUSTER))
    # A process whose pod was deleted while it ran (history's scenario) has a pod UID.
    orphans = [p for g in gpus for p in g["processes"] if p["pod"] is None and not p["podUid"]]
    assert len(orphans) == 1
    orphan = orphans[0]
    assert orphan["podUid"] is None and orphan["containerId"] is None
    assert orphan["usedMemoryBytes"] > 1 << 30
    assert orphan["name"] == "python3"


def test_training_pods_span_several_gpus_and_a_pod_uses_an_unrequested_gpu(
    demo: RunningDemo,
) -> None:
    pods = demo.query(CLUSTER)["data"]["pods"]
    training = [p for p in pods if p["name"].startswith("llm-pretrain-worker-")]
    assert len(training) == NODES
    reachable = [p for p in training if p["gpus"] is not None]
    assert reachable and all(len(p["gpus"]) >= 2 for p in reachable)
    assert all(p["gpuRequest"] == len(p["gpus"]) for p in reachable)
    unrequested = [p for p in pods if p["gpuRequest"] is None and p["gpus"]]
    assert [(p["namespace"], p["name"]) for p in unrequested] == [("research", "notebook-alice")]


def test_numbers_move(demo: RunningDemo) -> None:
    query = "{ gpuProcesses { pid usedMemoryBytes smUtilization gpu { uuid } } }"

    def reading() -> dict[tuple[str, int], tuple[int, int]]:
        body = demo.query(query)
        return {
            (p["gpu"]["uuid"], p["pid"]): (p["usedMemoryBytes"], p["smUtilization"])
            for p in body["data"]["gpuProcesses"]
        }

    first = reading()
    assert first
    deadline = time.monotonic() + 20
    while reading() == first:
        assert time.monotonic() < deadline, "the fake GPUs never changed"
        time.sleep(0.3)


def test_ctrl_c_stops_cleanly(tmp_path: Path) -> None:
    with ready_demo(tmp_path, "--nodes", "3", "--gpus-per-node", "2") as running:
        assert any(running.tmpdir.iterdir()), "the demo should keep its files in TMPDIR"
        assert httpx.get(f"{running.url}/readyz", timeout=10).status_code == 200
        # Touches the node that is down on purpose, which the default output keeps quiet about.
        nodes = running.query("{ nodes { name gpus { index } } }")["data"]["nodes"]
        assert [n["gpus"] for n in nodes].count(None) == 1
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(STOP_TIMEOUT) == 0, running.text()
        output = running.all_output()
        warnings = [line for line in output.splitlines() if "WARNING" in line]
        if not (assets_present() and map_assets_present()):
            # Built without npm: the demo says at start which pages' assets are missing.
            warnings = [line for line in warnings if "assets missing from" not in line]
        assert warnings == [], output
        assert output.rstrip().endswith("gpugraph demo stopped; temporary files removed")
        # Nothing left behind: no process of its session, no temp files.
        deadline = time.monotonic() + 10
        while session_members(running.process.pid):
            assert time.monotonic() < deadline, session_members(running.process.pid)
            time.sleep(0.1)
        assert list(running.tmpdir.iterdir()) == []
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{running.url}/readyz", timeout=2)


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    with ready_demo(tmp_path, "--nodes", "3", "--gpus-per-node", "2") as running:
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(STOP_TIMEOUT) == 0, running.text()
        assert list(running.tmpdir.iterdir()) == []


def run_demo(*args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``gpugraph demo ARGS`` to its end (for runs that fail early), output captured."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    return subprocess.run(
        [*gpugraph_command(), "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--nodes", "2", "must be 3 to 64, got 2"),
        # A size typed wrong held the terminal for minutes, deaf to Ctrl-C, writing /proc trees.
        ("--gpus-per-node", "100000", "must be 2 to 16, got 100000"),
    ],
)
def test_bad_flags_are_refused_clearly(flag: str, value: str, says: str) -> None:
    result = run_demo(flag, value)
    assert result.returncode == 2
    assert flag in result.stderr and says in result.stderr


def test_a_taken_listen_address_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_demo("--listen", f"127.0.0.1:{port}", tmpdir=tmp_path)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "stopped" not in result.stdout, "nothing had started"
    assert list(tmp_path.iterdir()) == []


def test_log_level_is_accepted_in_any_case() -> None:
    from api.cli import build_parser

    args = build_parser("demo").parse_args(["demo", "--log-level", "DEBUG"])
    assert args.log_level == "debug"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:8123"),
        ("::", "http://[::1]:8123"),
        ("::1", "http://[::1]:8123"),
    ],
)
def test_urls_point_at_an_address_the_server_listens_on(host: str, url: str) -> None:
    from api.demo.runner import Demo, DemoConfig

    demo = Demo(DemoConfig(nodes=3, gpus_per_node=2, listen_host=host))
    demo.listen_port = 8123
    assert demo.base_url == url


async def test_stop_runs_every_step_even_when_one_fails(tmp_path: Path) -> None:
    from api.demo.runner import Demo, DemoConfig

    class BrokenApiServer:
        def stop(self) -> None:
            raise OSError("stub API server would not stop")

    async def crashed() -> None:
        raise RuntimeError("the ticker crashed")

    demo = Demo(DemoConfig(nodes=3, gpus_per_node=2))
    demo._ticker = asyncio.create_task(crashed())
    await asyncio.sleep(0)  # let it crash
    assert demo._ticker.done()
    demo.api = BrokenApiServer()  # type: ignore[assignment]
    demo.tmp = tmp_path / "demo"
    demo.tmp.mkdir()
    with pytest.raises(OSError, match="would not stop"):
        await demo.stop()
    # The failing step neither stopped the others nor is retried by a second stop().
    assert not (tmp_path / "demo").exists()
    assert demo.api is None and demo._ticker is None and demo.tmp is None
    await demo.stop()


README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()


def configuration_section(title: str) -> str:
    """The part of docs/configuration.md under ``title``, up to the next heading."""
    start = CONFIGURATION.index(title)
    end = CONFIGURATION.find("\n#", start + len(title))
    return CONFIGURATION[start : end if end >= 0 else None]


def test_readme_opens_with_exactly_the_two_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, flags=re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


@pytest.mark.parametrize("command", ["agent", "serve", "top", "demo"])
def test_the_configuration_reference_documents_every_flag(command: str) -> None:
    from api.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = subparsers.choices[command]
    section = configuration_section(f"## `gpugraph {command}`")
    for action in sub._actions:
        for option in action.option_strings:
            if option in ("-h", "--help"):
                continue
            assert f"`{option}" in section, f"docs/configuration.md lacks {command} {option}"


def test_readme_shows_the_demos_example_queries() -> None:
    from api.demo.queries import example_queries
    from api.demo.scenario import build_cluster

    for query in example_queries(build_cluster()):
        body = query.split("\n", 1)[1]  # without the leading comment line
        assert body in README


def test_the_docs_show_the_kubeconfig_line_and_kubectls_view_of_the_demo() -> None:
    from api.demo.scenario import build_cluster

    section = configuration_section("### Looking at the demo's cluster with kubectl")
    line = re.search(r"^  kubectl +kubectl --kubeconfig (\S+) get pods -A$", section, re.M)
    assert line is not None and line[1].endswith("/kubeconfig")
    output = re.search(r"^\$ kubectl --kubeconfig \S+ get pods -A\n(.*?)```", section, re.M | re.S)
    assert output is not None
    shown = [(r["NAMESPACE"], r["NAME"]) for r in table(output[1])]
    pods = build_cluster().pods
    assert shown == sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods)


def test_demo_with_auth_prints_two_tokens_and_the_research_one_sees_only_research(
    tmp_path: Path,
) -> None:
    from api.demo.queries import example_queries
    from api.demo.scenario import build_cluster

    with ready_demo(tmp_path, "--nodes", "3", "--gpus-per-node", "2", "--auth") as running:
        text = running.text()
        admin = re.search(r"^  admin +(\S+)$", text, re.M)
        research = re.search(r"^  research +(\S+)$", text, re.M)
        assert admin and research, text
        open_answer = httpx.post(
            f"{running.url}/graphql", json={"query": "{ pods { name } }"}, timeout=10
        )
        assert open_answer.status_code == 401

        def ask(token: str, query: str) -> dict[str, Any]:
            response = httpx.post(
                f"{running.url}/graphql",
                json={"query": query},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        queries = [q.split("\n", 1)[1] for q in example_queries(build_cluster(3, 2))]
        queries.append("{ pods { namespace } gpuProcesses { pod { namespace } cmdline } }")
        admin_seen: set[str] = set()
        for query in queries:
            mine = ask(research[1], query)
            assert namespaces_in(mine) <= {"research"}, (query, mine)
            admin_seen |= namespaces_in(ask(admin[1], query))
        assert {"research", "ml-training", "inference"} <= admin_seen
        # The research user sees no host process and no command line.
        processes = ask(research[1], queries[-1])["data"]["gpuProcesses"]
        assert processes and all(p["pod"] and p["cmdline"] is None for p in processes)
        # Its bill counts lr-sweep-7's two hours on the first node, where no research pod runs
        # now (so research does not see it), and nothing of another namespace's.
        seen = {n["name"] for n in ask(research[1], "{ nodes { name } }")["data"]["nodes"]}
        bill = ask(
            research[1],
            '{ gpuUsage(since: "2000-01-01T00:00:00Z", groupBy: [POD, NODE]) '
            "{ namespace podName nodeName gpuSeconds } }",
        )["data"]["gpuUsage"]
        (finished,) = [r for r in bill if r["podName"] == "lr-sweep-7"]
        assert finished["nodeName"] not in seen
        assert finished["gpuSeconds"] == pytest.approx(7200, abs=1)
        assert {r["namespace"] for r in bill} == {"research"}


def namespaces_in(value: Any) -> set[str]:
    """Every ``namespace`` value anywhere in a JSON answer."""
    if isinstance(value, dict):
        found = {v for k, v in value.items() if k == "namespace" and isinstance(v, str)}
        return found.union(*(namespaces_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(namespaces_in(v) for v in value))
    return set()


def test_the_history_query_in_the_banner_names_the_finished_and_the_deleted_pods(
    demo: RunningDemo,
) -> None:
    text = demo.text()
    start = text.index("--- history ---\n") + len("--- history ---\n")
    query = text[start : text.index("\n\n", start)]
    body = demo.query(query.split("\n", 1)[1])
    assert "errors" not in body, body
    records = body["data"]["gpu"]["history"]
    by_pod = {(r["podNamespace"], r["podName"]): r for r in records}
    finished = by_pod[("research", "lr-sweep-7")]
    assert finished["pod"] is None and finished["end"] is not None
    assert finished["gpuSeconds"] == pytest.approx(7200, abs=1)
    deleted = demo.query(
        '{ gpuHistory(since: "2000-01-01T00:00:00Z", podName: "eval-canary") '
        "{ edges { node { podNamespace pod { name } end node { name } } } } }"
    )["data"]["gpuHistory"]["edges"]
    assert [e["node"] for e in deleted] == [
        {"podNamespace": "research", "pod": None, "end": None, "node": {"name": "gpu-node-1"}}
    ]
    leftover = by_pod[(None, None)]
    assert leftover["processName"] == "python3" and leftover["gpuSeconds"] >= 5 * 3600


def test_the_fourth_example_shows_the_pod_on_a_gpu_it_was_not_given(demo: RunningDemo) -> None:
    blocks = re.findall(r"^--- example \d ---\n(.*?)\n\n", demo.text(), flags=re.M | re.S)
    assert "inference/chat-api-1 runs on a GPU the kubelet did not give it" in blocks[3]

    def judged() -> dict[str, Any] | None:
        pod = demo.query(blocks[3])["data"]["pod"]
        return pod if pod["gpuProcesses"][0]["allocation"] != "UNKNOWN" else None

    pod = eventually(judged, what="the kubelet's first answer")
    (process,) = pod["gpuProcesses"]
    assert (process["allocation"], process["allocationRule"]) == ("NOT_ALLOCATED", "POD_RESOURCES")
    assert process["gpu"]["index"] == 0
    assert [a["deviceId"] for a in pod["gpuAllocations"]] != [process["gpu"]["uuid"]]
    assert pod["gpuRequest"] == 1


def test_mig_time_sliced_and_dra_pods_are_allocated_and_requested(demo: RunningDemo) -> None:
    query = """{ nodes { name allocationSource gpus { processes {
        allocation pod { namespace name gpuRequest } } } } }"""

    def verdicts() -> dict[str, tuple[str, Any]] | None:
        nodes = demo.query(query)["data"]["nodes"]
        found = {
            p["pod"]["name"]: (p["allocation"], p["pod"]["gpuRequest"])
            for n in nodes
            if n["name"] in ("gpu-mig-0", "gpu-ts-0", "gpu-dra-0")
            for g in n["gpus"] or ()
            for p in g["processes"]
        }
        return found if "UNKNOWN" not in {v[0] for v in found.values()} else None

    found = eventually(verdicts, what="allocation data from every kubelet")
    assert found == {
        name: ("ALLOCATED", 1)
        for name in ("mig-notebook-0", "mig-notebook-1", "embed-0", "embed-1", "embed-2",
                     "embed-3", "finetune-0", "eval-0")
    }  # fmt: skip


def test_the_printed_idle_query_lists_the_unused_notebook_and_the_idle_replica(
    demo: RunningDemo,
) -> None:
    from api.demo.idle_scenario import IDLE_QUERY

    assert IDLE_QUERY in demo.text()

    def listed() -> list[tuple[str, str, str]] | None:
        found = [
            (a["pod"]["namespace"] + "/" + a["pod"]["name"], a["use"], a["nodeName"])
            for a in demo.query(IDLE_QUERY)["data"]["idleGpuAllocations"]
        ]
        # The replica's process is judged once the server has told its agent the pod names.
        return found if len(found) == 2 else None

    found = eventually(listed, what="both idle allocations")
    # Longest idle first: the notebook's two hours, then the replica's 45 minutes.
    assert found == [
        ("research/notebook-bob", "UNUSED", "gpu-mig-0"),
        ("inference/embed-3", "IDLE", "gpu-ts-0"),
    ]
    idle = demo.query(IDLE_QUERY)["data"]["idleGpuAllocations"]
    assert idle[0]["idleSeconds"] >= 2 * 3600 and 45 * 60 <= idle[1]["idleSeconds"] < 2 * 3600


def test_kubectl_gets_the_demos_claims_and_slices(demo: RunningDemo, tmp_path: Path) -> None:
    found = re.search(r"^  kubectl +kubectl --kubeconfig (\S+) get pods -A$", demo.text(), re.M)
    assert found, demo.text()
    kubectl = Kubectl(kubectl_binary(), Path(found[1]), tmp_path / "kube-cache")
    output = kubectl.run("get", "resourceclaims,resourceslices", "-A")
    assert "resourceclaim.resource.k8s.io/finetune-0-gpu-7x2kq" in output
    assert "resourceclaim.resource.k8s.io/eval-0-gpu-7x2kq" in output
    assert "resourceslice.resource.k8s.io/gpu-dra-0-gpu.nvidia.com" in output
