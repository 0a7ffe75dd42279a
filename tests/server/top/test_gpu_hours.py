"""``gpugraph top namespaces --since D``: each team's allocated, idle and used GPU-hours.

Against the demo cluster with ``--auth`` (the real server, real agents and their
occupancy logs, the stub API server checking tokens): a namespace's hours are its
pods' hours summed by the server, and a tenant's token sums only its own
namespace. Usage only grows while the demo runs, so a reading taken between two
others lies between them: no tolerance for the machine's pace (the later reading
reaches back an hour further, which the demo's past does not: another question than
the first, so the server's shared results cannot answer it). Then, with a fake
transport at the edge, an answer carrying every kind of partial error.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from api.cli import main
from tests.support.demo import LiveDemo, live_demo

HOURS = ("gpuHours", "memoryGibHours", "allocatedGpuHours", "idleGpuHours")
# Each row's hours are rounded to four decimals: a sum of a dozen rounded rows may be
# this far from the rounded total.
ROUNDING = 0.001
DOWN_NODE = "gpu-node-3"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LiveDemo]:
    with live_demo(auth=True, nodes=4, gpus_per_node=2, interval=0.5) as running:
        yield running


def top(capsys: pytest.CaptureFixture[str], demo: LiveDemo, *args: str, user: str = "admin") -> str:
    token = demo.token_of(user)
    code = main(["top", "--server", demo.url, "--token", token, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out + err


def usage(
    capsys: pytest.CaptureFixture[str],
    demo: LiveDemo,
    view: str,
    user: str = "admin",
    since: str = "24h",
) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        top(capsys, demo, view, "--since", since, "-o", "json", user=user)
    )
    return document


def by_namespace(document: Mapping[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {row["namespace"]: row for row in document["namespaces"]}


def cells(line: str) -> list[str]:
    """A table line's cells: the columns are two spaces apart or more, "(no pod)" has one."""
    return re.split(r" {2,}", line.strip())


def between(
    low: Mapping[str, Any],
    value: Mapping[str, float],
    high: Mapping[str, Any],
    keys: tuple[str, ...] = HOURS,
) -> bool:
    """Whether each of ``value``'s hours lies between the two readings taken around it."""
    return all(low[key] - ROUNDING <= value[key] <= high[key] + ROUNDING for key in keys)


def test_a_namespace_has_the_hours_of_its_pods_summed(
    cluster: LiveDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    before = usage(capsys, cluster, "namespaces")
    pods = usage(capsys, cluster, "pods")
    after = usage(capsys, cluster, "namespaces", since="25h")
    assert before["kind"] == "NamespaceUsageList" and set(before) == {
        "apiVersion", "kind", "since", "namespaces", "downNodes", "errors"
    }  # fmt: skip
    assert all(set(row) == {"namespace", *HOURS} for row in before["namespaces"])
    first, last = by_namespace(before), by_namespace(after)
    # Processes in no pod (the demo's leftover host process) are a row of their own.
    assert set(first) == set(last) == {p["namespace"] for p in pods["pods"]}
    assert None in first and {"inference", "ml-training", "research"} <= set(first)
    for namespace, row in first.items():
        mine = [p for p in pods["pods"] if p["namespace"] == namespace]
        summed = {key: sum(p[key] for p in mine) for key in HOURS}
        assert between(row, summed, last[namespace]), (namespace, row, summed)
    # research's notebook holds a GPU it never runs on: two hours allocated, all idle
    # (the demo's agent wrote its past); the down node is said, not summed as zero.
    assert first["research"]["idleGpuHours"] >= 2.0 - 0.02
    assert first["research"]["allocatedGpuHours"] >= first["research"]["idleGpuHours"]
    assert [d["node"] for d in before["downNodes"]] == [DOWN_NODE] and before["errors"] == []


def test_the_table_has_a_row_per_namespace_most_gpu_hours_first(
    cluster: LiveDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = top(capsys, cluster, "namespaces", "--since", "24h").splitlines()
    assert lines[0].split() == ["NAMESPACE", "ALLOC-HOURS", "IDLE-HOURS", "GPU-HOURS",
                                "GIB-HOURS"]  # fmt: skip
    rows = [cells(line) for line in lines[1:] if ": " not in line]
    assert {r[0] for r in rows} == {"(no pod)", "inference", "ml-training", "research"}
    # The host process held its GPU five hours.
    assert float(dict((r[0], r[3]) for r in rows)["(no pod)"]) >= 5.0
    gpu_hours = [float(r[3]) for r in rows]
    assert gpu_hours == sorted(gpu_hours, reverse=True)
    assert lines[1 + len(rows)].startswith(f"{DOWN_NODE}: agent down: ")
    # -n keeps one namespace's row.
    narrowed = top(capsys, cluster, "namespaces", "--since", "24h", "-n", "research")
    assert [cells(line)[0] for line in narrowed.splitlines()[1:] if ": " not in line] == [
        "research"
    ]


def readings(
    capsys: pytest.CaptureFixture[str], cluster: LiveDemo
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """research's hours as the admin reads them, as research's own token does, and as the
    admin does again."""
    before = by_namespace(usage(capsys, cluster, "namespaces"))["research"]
    tenant = usage(capsys, cluster, "namespaces", user="research-user")
    after = by_namespace(usage(capsys, cluster, "namespaces", since="25h"))["research"]
    # Not the host process's row, nor another team's: the server's filter, not top's.
    assert [row["namespace"] for row in tenant["namespaces"]] == ["research"]
    return before, tenant["namespaces"][0], after


def test_a_tenant_sums_only_its_own_namespace(
    cluster: LiveDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    before, tenant, after = readings(capsys, cluster)
    # The allocations of research's pods on the nodes it runs on now, all of them.
    assert between(before, tenant, after, ("allocatedGpuHours", "idleGpuHours"))
    table = top(capsys, cluster, "namespaces", "--since", "24h", user="research-user")
    assert "inference" not in table and "(no pod)" not in table


# -- at the edge: a fake transport -----------------------------------------------------


class FakeTransport:
    """Answers ``gpuUsage`` with ``body``, and keeps what it was asked."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.asked: list[Mapping[str, Any]] = []

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        self.asked.append(variables)
        return self.body

    async def subscribe(
        self, query: str, variables: Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        raise AssertionError("--since subscribes to nothing")
        yield {}


def row(namespace: str | None, gpu: float, allocated: float, idle: float) -> dict[str, Any]:
    return {
        "namespace": namespace, "podName": None, "nodeName": None, "gpuSeconds": gpu,
        "memoryGibSeconds": gpu * 10, "allocatedGpuSeconds": allocated,
        "idleAllocatedGpuSeconds": idle,
    }  # fmt: skip


PARTIAL: dict[str, Any] = {
    "data": {
        "gpuUsage": [
            row("ml", 7200, 10800, 3600),
            row(None, 3600, 0, 0),
            row("research", 1800, 7200, 7200),
        ]
    },
    "errors": [
        {"message": "agent on node 'node-b' unavailable: GetUsage: UNAVAILABLE: refused"},
        {"message": "history is off on node 'node-c' (its agent has no --history-dir)"},
        {"message": "usage unavailable from 2 node(s) this caller cannot see"},
    ],
}


def run_top(transport: FakeTransport, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from api.cli import build_parser
    from api.top.command import run

    code = run(build_parser().parse_args(["top", *args]), transport)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out + err


def test_every_partial_error_is_said_below_the_table_and_kept_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    transport = FakeTransport(PARTIAL)
    lines = run_top(transport, capsys, "namespaces", "--since", "1d").splitlines()
    # The server sums by namespace: it is asked to, for the tenant filter to apply.
    assert [a["groupBy"] for a in transport.asked] == [["NAMESPACE"]]
    assert [cells(line) for line in lines[1:4]] == [
        ["ml", "3.00", "1.00", "2.00", "20.0"],
        ["(no pod)", "0.00", "0.00", "1.00", "10.0"],
        ["research", "2.00", "2.00", "0.50", "5.0"],
    ]
    # A down node has no namespace to be a row of: it is its line, as in top pods --since.
    assert lines[4:] == [
        "node-b: agent down: GetUsage: UNAVAILABLE: refused",
        "history is off on node 'node-c' (its agent has no --history-dir)",
        "usage unavailable from 2 node(s) this caller cannot see",
    ]
    document = json.loads(run_top(transport, capsys, "namespaces", "--since", "1d", "-o", "json"))
    assert document["downNodes"] == [{"node": "node-b", "reason": "GetUsage: UNAVAILABLE: refused"}]
    assert document["errors"] == [e["message"] for e in PARTIAL["errors"][1:]]
    assert document["namespaces"][1] == {"namespace": None, "gpuHours": 1.0,
                                         "memoryGibHours": 10.0, "allocatedGpuHours": 0.0,
                                         "idleGpuHours": 0.0}  # fmt: skip
    narrowed = run_top(transport, capsys, "namespaces", "--since", "1d", "-n", "research")
    assert [cells(line)[0] for line in narrowed.splitlines()[1:2]] == ["research"]
    assert "node-b: agent down" in narrowed


@pytest.mark.parametrize("flag", [["--watch"], ["-l", "app=x"], ["--node", "node-a"]])
def test_namespaces_since_refuses_what_sums_of_the_past_cannot_do(
    capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    from api.cli import build_parser
    from api.top.command import run

    transport = FakeTransport(PARTIAL)
    assert run(build_parser().parse_args(["top", "namespaces", "--since", "1d", *flag]),
               transport) == 1  # fmt: skip
    assert "--since sums the past" in capsys.readouterr().err and transport.asked == []


def test_a_namespace_with_no_hours_fails_as_the_live_views_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from api.cli import build_parser
    from api.top.command import run

    every_node_read = FakeTransport({"data": {"gpuUsage": [row("ml", 7200, 10800, 3600)]}})
    args = build_parser().parse_args(["top", "pods", "--since", "1d", "-n", "nope"])
    assert run(args, every_node_read) == 1
    assert "no pods of -n nope held or used a GPU in the last 1d" in capsys.readouterr().err
    # A node whose log was not read might have held them: the table and its line, as before.
    lines = run_top(FakeTransport(PARTIAL), capsys, "pods", "--since", "1d", "-n", "nope")
    assert lines.splitlines()[1:] == ["node-b: agent down: GetUsage: UNAVAILABLE: refused",
                                      *[e["message"] for e in PARTIAL["errors"][1:]]]  # fmt: skip


def test_an_empty_range_says_so_below_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_top(
        FakeTransport({"data": {"gpuUsage": []}}), capsys, "namespaces", "--since", "2h"
    )
    assert lines.splitlines()[1:] == ["no GPU held or used in the last 2h"]
