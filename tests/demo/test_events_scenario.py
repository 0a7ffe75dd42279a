"""The demo's GPU health events, as a user finds them: the banner's query, run as printed,
shows an XID 13 on the shared GPU blamed on one of its two pods, and a GPU lost on another
node with the pod that was on it; the server's /metrics counts both."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.support.demo_process import RunningDemo
from tests.support.demo_process import demo as demo
from tests.support.polling import eventually


def banner_query(demo: RunningDemo) -> str:
    (query,) = re.findall(r"^--- GPU events ---\n(.*?)\n\n", demo.text(), flags=re.M | re.S)
    return str(query)


def test_the_printed_query_shows_the_xid_with_its_culprit_and_the_lost_gpu(
    demo: RunningDemo,
) -> None:
    query = banner_query(demo)

    def both() -> list[dict[str, Any]] | None:
        edges = demo.query(query)["data"]["gpuEvents"]["edges"]
        events = [e["node"] for e in edges]
        return events if {e["kind"] for e in events} == {"XID", "GPU_LOST"} else None

    events = eventually(both, timeout=60, what="the demo's two events")
    by_kind = {e["kind"]: e for e in events}
    xid = by_kind["XID"]
    assert (xid["xid"], xid["node"]["name"]) == (13, "gpu-node-0")
    assert xid["description"].startswith("Graphics engine exception")
    assert sorted(p["podName"] for p in xid["processes"]) == ["chat-api-0", "chat-api-1"]
    assert (xid["culprit"]["podNamespace"], xid["culprit"]["podName"]) == (
        "inference",
        "chat-api-1",
    )
    lost = by_kind["GPU_LOST"]
    assert lost["node"]["name"] == "gpu-node-2"
    assert [p["podName"] for p in lost["processes"]] == ["llm-pretrain-worker-2"]
    metrics = httpx.get(f"{demo.url}/metrics", timeout=30).text
    assert re.search(r'gpugraph_pod_gpu_events_total\{kind="XID",namespace="inference",'
                     r'pod="chat-api-1",xid="13"\} 1\.0', metrics)  # fmt: skip
    assert 'kind="GPU_LOST",node="gpu-node-2"' in metrics
