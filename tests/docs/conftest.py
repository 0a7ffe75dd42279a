"""The demos the documents' tests run against, each started once: `make demo`'s, and `--auth`'s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.demo.scenario import build_cluster
from tests.support.demo import LiveDemo, live_demo
from tests.support.polling import eventually

DOWN_NODE = build_cluster().down_node
EVENT_KINDS = '{ gpuEvents(since: "2000-01-01T00:00:00Z") { edges { node { kind } } } }'


@pytest.fixture(scope="package")
def demo() -> Iterator[LiveDemo]:
    """The default demo (as `make demo` runs it), once its agents and kubelets have answered."""
    with live_demo() as running:
        _wait_settled(running)
        yield running


@pytest.fixture(scope="package")
def auth_demo() -> Iterator[LiveDemo]:
    """`gpugraph demo --auth`, for the examples that show what one token sees."""
    with live_demo(auth=True) as running:
        _wait_settled(running, running.token_of("admin"))
        yield running


def _wait_settled(demo: LiveDemo, token: str | None = None) -> None:
    # Every allocation verdict depends on a kubelet's first answer, and the down
    # node's error on the server's first call to it: wait for both to be in.
    eventually(
        lambda: _settled(demo, token), timeout=60, interval=0.1, what="the demo's first answers"
    )


def _settled(demo: LiveDemo, token: str | None) -> bool:
    """Whether every agent has answered with its kubelet's allocations, both idle allocations
    are judged, the XID and the GPU lost are in the agents' logs, and the down one failed."""
    body = demo.query("{ nodes { name allocationSource agent { reachable } } }", token)
    assert body.get("data") is not None, body
    nodes = {node["name"]: node for node in body["data"]["nodes"]}
    up = [node for name, node in nodes.items() if name != DOWN_NODE]
    answered = all(node["allocationSource"] == "POD_RESOURCES" for node in up)
    # The idle replica is judged once the server has told its agent the pods' names.
    idle = demo.query("{ idleGpuAllocations { deviceId } }", token).get("data") or {}
    judged = len(idle.get("idleGpuAllocations") or ()) == 2
    # The documents' EVENTS flags and top --events show both of the demo's GPU events.
    events = demo.query(EVENT_KINDS, token).get("data") or {}
    edges = (events.get("gpuEvents") or {}).get("edges") or ()
    recorded = {edge["node"]["kind"] for edge in edges} == {"XID", "GPU_LOST"}
    return answered and judged and recorded and nodes[DOWN_NODE]["agent"]["reachable"] is False
