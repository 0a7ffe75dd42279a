"""``gpugraph top``'s rows: what a down agent leaves unknown, and which down nodes a view names."""

from __future__ import annotations

import pytest

from api.top import model
from api.top.documents import document
from api.top.model import DownNode, GpuRow, PodRef, ProcessRow, Snapshot, down_node

TRAIN = PodRef("uid-train", "ml", "train", "node-a", 1)
STRANDED = PodRef("uid-stranded", "ml", "stranded", "node-b", 2)
NOTEBOOK = PodRef("uid-notebook", "research", "notebook", "node-c", None)


def gpu(node: str, index: int, *processes: ProcessRow) -> GpuRow:
    return GpuRow(node, index, f"GPU-{node}-{index}", "NVIDIA H200", 50, 1 << 30, 2 << 30, 60,
                  None, processes)  # fmt: skip


def snapshot() -> Snapshot:
    """node-a up with the training pod; node-b's agent down, a pod on it; node-c a notebook."""
    return Snapshot(
        gpus=[
            gpu("node-a", 0, ProcessRow(7, "python", TRAIN, "trainer", 1 << 29, 40)),
            gpu("node-c", 0, ProcessRow(9, "python", NOTEBOOK, "nb", 1 << 28, 5)),
        ],
        down=[DownNode("node-b", "connection refused")],
        pods=[TRAIN, STRANDED, NOTEBOOK],
    )


def test_a_pod_on_a_down_node_has_unknown_use_not_zero() -> None:
    doc = document("pods", model.apply(snapshot(), model.Filters()), "name")
    pods = {p["name"]: p for p in doc["pods"]}
    assert (
        pods["stranded"] | {"gpusUsed": None, "memoryBytes": None, "smPercent": None}
        == (pods["stranded"])
    )
    assert pods["stranded"]["unrequested"] is None
    # Known values stay numbers, and a requesting pod using nothing on an up node is 0.
    assert pods["train"]["memoryBytes"] == 1 << 29 and pods["train"]["gpusUsed"] == 1
    idle = Snapshot(gpus=[gpu("node-a", 0)], down=[], pods=[TRAIN])
    assert document("pods", idle, "name")["pods"][0]["memoryBytes"] == 0


def test_a_down_node_has_unknown_gpus_memory_and_pods_not_zero() -> None:
    doc = document("nodes", model.apply(snapshot(), model.Filters()), "name")
    nodes = {n["name"]: n for n in doc["nodes"]}
    down = nodes["node-b"]
    assert down["status"] == "down" and down["reason"] == "connection refused"
    unknown = ("gpus", "utilizationPercent", "memoryUsedBytes", "memoryTotalBytes",
               "maxTemperatureC", "pods", "processes")  # fmt: skip
    assert {key: down[key] for key in unknown} == dict.fromkeys(unknown)
    assert nodes["node-a"]["gpus"] == 1 and nodes["node-a"]["memoryUsedBytes"] == 1 << 30


def test_a_namespace_sums_its_pods_and_counts_those_whose_node_is_down() -> None:
    doc = document("namespaces", model.apply(snapshot(), model.Filters()), "name")
    assert doc["kind"] == "NamespaceList" and [d["node"] for d in doc["downNodes"]] == ["node-b"]
    rows = {n["namespace"]: n for n in doc["namespaces"]}
    # ml: the training pod's use, summed; the stranded pod requested two GPUs, which count,
    # and its use is in no sum: one dead agent does not blank the team's row.
    assert rows["ml"] == {
        "namespace": "ml", "pods": 2, "podsUnknown": 1, "gpusRequested": 3, "gpusUsed": 1,
        "memoryBytes": 1 << 29, "smPercent": 40, "flags": [],
    }  # fmt: skip
    # A pod's own flag (the notebook uses a GPU it never requested) is its namespace's.
    assert rows["research"]["flags"] == ["UNREQUESTED"] and rows["research"]["podsUnknown"] == 0
    # A namespace whose every pod is on a down node: its use is unknown, not zero.
    stranded = Snapshot(gpus=[], down=[DownNode("node-b", "refused")], pods=[STRANDED])
    (row,) = model.namespace_rows(model.apply(stranded, model.Filters()), "name")
    assert (row.pods, row.pods_unknown, row.gpus_requested) == (1, 1, 2)
    assert (row.gpus_used, row.memory_bytes, row.sm_percent) == (None, None, None)


@pytest.mark.parametrize("sort_by", ["memory", "sm"])
def test_unknown_values_sort_last(sort_by: str) -> None:
    applied = model.apply(snapshot(), model.Filters())
    assert [r.name for r in model.pod_rows(applied, sort_by)][-1] == "stranded"
    assert [r.name for r in model.node_rows(applied, sort_by)][-1] == "node-b"
    alone = PodRef("uid-alone", "alone", "alone", "node-b", 1)
    with_alone = snapshot()
    with_alone.pods = [*(with_alone.pods or ()), alone]
    rows = model.namespace_rows(model.apply(with_alone, model.Filters()), sort_by)
    assert [r.namespace for r in rows][-1] == "alone"


def test_a_namespace_names_only_the_down_nodes_of_its_pods() -> None:
    research = model.apply(snapshot(), model.Filters(namespace="research"))
    assert research.down == []
    ml = model.apply(snapshot(), model.Filters(namespace="ml"))
    assert [d.node for d in ml.down] == ["node-b"]


@pytest.mark.parametrize(
    "message",
    [
        "agent on node 'node-b' unavailable: connection refused",
        "connection refused",
    ],
)
def test_the_reason_does_not_repeat_that_the_agent_is_down(message: str) -> None:
    assert down_node("node-b", message) == DownNode("node-b", "connection refused")


def test_a_tick_names_the_down_node_with_the_bare_reason() -> None:
    body = {
        "data": {"gpuUpdates": []},
        "errors": [
            {"message": "agent on node 'node-b' unavailable: deadline exceeded"},
            {"message": "GPU sampling failed on node 'node-c': NVML_ERROR_UNKNOWN"},
        ],
    }
    assert model.snapshot_from_tick(body).down == [
        DownNode("node-b", "deadline exceeded"),
        DownNode("node-c", "GPU sampling failed: NVML_ERROR_UNKNOWN"),
    ]


def test_a_process_pod_is_on_its_gpus_node_which_the_query_does_not_ask_again() -> None:
    from api.top.queries import GPU_FIELDS

    # The fragment asks each process's pod for no nodeName: the GPU's node says it.
    assert "nodeName" not in GPU_FIELDS
    pod = {"uid": "uid-idle", "namespace": "ml", "name": "idle", "gpuRequest": 0}
    process = {"pid": 7, "name": "python", "usedMemoryBytes": 1 << 20, "pod": pod}
    gpu = {"uuid": "GPU-a-0", "index": 0, "node": {"name": "node-a"}, "processes": [process]}
    body = {"data": {"gpus": [gpu], "nodes": [], "pods": []}}
    applied = model.apply(model.snapshot_from_query(body), model.Filters())
    # A pod using a GPU it did not request is in top pods, on the node of that GPU.
    assert [(r.name, r.node, r.unrequested) for r in model.pod_rows(applied, "name")] == [
        ("idle", "node-a", True)
    ]


def test_apply_flags_unrequested_use_and_keeps_the_rows_it_does_not_change() -> None:
    # node-b's GPU holds a second GPU of the training pod, which requested one; the
    # notebook requested none; the pod on node-d requested two and uses one.
    second = gpu("node-b", 0, ProcessRow(8, "python", TRAIN, "trainer", 1 << 29, 40))
    modest = PodRef("uid-modest", "ml", "modest", "node-d", 2)
    fits = gpu("node-d", 0, ProcessRow(10, "python", modest, "main", 1 << 29, 40))
    original = Snapshot(gpus=[*snapshot().gpus, second, fits], down=[], pods=None)
    applied = model.apply(original, model.Filters())
    flagged = {(g.node, p.pid): p.unrequested for g in applied.gpus for p in g.processes}
    assert flagged == {
        ("node-a", 7): True,
        ("node-b", 8): True,
        ("node-c", 9): True,
        ("node-d", 10): False,
    }
    # The rows the filters and flags leave as they were are the same objects, not copies.
    assert applied.gpus[3] is fits
    assert all(p.unrequested is False for g in original.gpus for p in g.processes)
    # Applying again (a watch's tick on the first query's pods) changes nothing.
    again = model.apply(applied, model.Filters())
    assert [g.processes for g in again.gpus] == [g.processes for g in applied.gpus]


def test_an_agent_message_naming_where_it_was_asked_keeps_the_address() -> None:
    message = "agent on node 'node-b' unreachable at 10.0.0.7:50051: UNAVAILABLE: refused"
    down, other = model.down_from_errors([{"message": message}])
    assert (down, other) == (
        [DownNode("node-b", "unreachable at 10.0.0.7:50051: UNAVAILABLE: refused")],
        [],
    )
