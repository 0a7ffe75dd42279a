"""``gpugraph top`` against a hostile or broken server: stalls, floods and text that lies.

Each test serves a tiny ASGI app with uvicorn on loopback (``hostile_server``),
one that misbehaves in one way, and runs the real command against it in a process of
its own: whatever the server does, top ends with one line on stderr and exit
code 1, within its deadline (``--request-timeout``) and its answer limit
(``--max-answer``). The stalling servers never finish their answer, so only a
deadline over the whole exchange can end them.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from api.top.connection import Endpoint
from api.top.errors import TopError
from api.top.queries import SNAPSHOT
from api.top.transport import HttpTransport
from tests.server.top.hostile_server import (
    SNAPSHOT_ANSWER,
    Flood,
    Hostile,
    answer,
    drip,
    huge_tick,
    no_ack,
    serving,
    silent,
)
from tests.support.demo_process import ROOT, gpugraph_command

# Far longer than any deadline the tests set: the command is stuck if it runs this long.
STUCK = 60
DEADLINE = "1"
# Unicode's bidirectional controls, every one.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def top(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``gpugraph top``, to its end (or failing the test once it is plainly stuck)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRAPH_")}
    return subprocess.run(
        [*gpugraph_command(), "top", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=STUCK,
    )


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed run printed on stderr."""
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpugraph top: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("stall", [silent, drip], ids=["silent", "drip"])
def test_a_stalled_answer_ends_at_the_deadline(stall: Any) -> None:
    with serving(Hostile(http=stall)) as url:
        line = failed(top("--server", url, "--request-timeout", DEADLINE))
    assert f"no answer from {url}/graphql within 1 s" in line and "--request-timeout" in line


def test_a_stalled_kubernetes_api_server_ends_at_the_deadline(tmp_path: Any) -> None:
    # Without --service, top asks the API server for the Service first: that request too.
    with serving(Hostile(http=drip)) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "c", "cluster": {"server": url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                }
            )
        )
        line = failed(top("--kubeconfig", str(kubeconfig), "--request-timeout", DEADLINE))
    assert f"no answer from {url}/api/v1/namespaces/gpugraph/services" in line


def test_watch_ends_when_the_websocket_is_never_acknowledged() -> None:
    app = Hostile(http=answer(SNAPSHOT_ANSWER), websocket=no_ack)
    with serving(app) as url:
        result = top("--server", url, "--watch", "--request-timeout", DEADLINE)
    line = failed(result)
    assert "no WebSocket handshake from ws://" in line and "within 1 s" in line
    # The first frame came from the query, before the socket.
    assert result.stdout.startswith("update 1 at ")


def test_a_query_over_the_proxys_websocket_ends_at_the_deadline() -> None:
    # Through the kubeconfig every query goes over the WebSocket.
    with serving(Hostile(websocket=no_ack)) as url:
        endpoint = Endpoint(f"{url}/graphql", proxied=True, deadline=0.5)
        with pytest.raises(TopError, match=r"within 0\.5 s"):
            HttpTransport(endpoint).execute(SNAPSHOT, {})


@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "content-length"])
def test_an_answer_over_the_limit_is_not_read_past_it(declared: bool) -> None:
    flood = Flood(total=256 << 20, declared=declared)
    with serving(Hostile(http=flood)) as url:
        line = failed(top("--server", url, "--max-answer", "1"))
        assert flood.done.wait(STUCK)
    assert f"the answer of {url}/graphql is larger than 1 MiB: stopped reading it" in line
    # What the connection's buffers hold at most, not the whole answer.
    assert flood.sent < 32 << 20


def test_a_watch_update_over_the_limit_is_refused() -> None:
    app = Hostile(http=answer(SNAPSHOT_ANSWER), websocket=huge_tick(2 << 20))
    with serving(app) as url:
        line = failed(top("--server", url, "--watch", "--max-answer", "1"))
    assert "is larger than 1 MiB: stopped reading it" in line


def test_bidirectional_controls_from_the_server_print_as_question_marks() -> None:
    evil = f"evil{BIDI}txt.exe"
    process = {
        "pid": 7,
        "name": evil,
        "usedMemoryBytes": 1,
        "smUtilization": 1,
        "allocation": "ALLOCATED",
        "pod": {"uid": "u", "namespace": "ml", "name": evil, "gpuRequest": 1},
        "container": {"name": evil},
    }
    gpu = {
        "uuid": "GPU-1",
        "index": 0,
        "name": evil,
        "utilizationGpu": 1,
        "memoryUsedBytes": 1,
        "memoryTotalBytes": 2,
        "temperatureC": 30,
        "error": None,
        "migEnabled": False,
        "node": {"name": f"node{BIDI}"},
        "processes": [process],
    }
    body = {
        "data": {"gpus": [gpu], "nodes": [{"name": "n", "agent": {"reachable": True}}]},
        "errors": [{"message": f"agent on node 'down' unavailable: {evil}"}],
    }
    with serving(Hostile(http=answer(body))) as url:
        for view in ("gpus", "pods", "nodes"):
            result = top(view, "--server", url)
            assert result.returncode == 0, result.stderr
            assert not set(BIDI) & set(result.stdout), repr(result.stdout)
            assert f"evil{'?' * len(BIDI)}txt.exe" in result.stdout or view == "nodes"
    with serving(Hostile(http=answer({"errors": [{"message": evil}]}))) as url:
        line = failed(top("--server", url))
    assert line == f"gpugraph top: error: server error: evil{'?' * len(BIDI)}txt.exe"


def test_since_carries_every_partial_error_of_the_answer() -> None:
    body: dict[str, Any] = {
        "data": {
            "gpuUsage": [
                {
                    "namespace": None,
                    "podName": None,
                    "nodeName": "node-a",
                    "gpuSeconds": 7200,
                    "memoryGibSeconds": 3600,
                    "allocatedGpuSeconds": 10800,
                    "idleAllocatedGpuSeconds": 3600,
                }
            ]
        },
        "errors": [
            {"message": "agent on node 'node-b' unavailable: GetUsage: UNAVAILABLE: refused"},
            {"message": "history is off on node 'node-c' (its agent has no --history-dir)"},
            {"message": "usage unavailable from 2 node(s) this caller cannot see"},
        ],
    }
    with serving(Hostile(http=answer(body))) as url:
        table = top("nodes", "--since", "1d", "--server", url)
        document = top("nodes", "--since", "1d", "--server", url, "-o", "json")
    assert table.returncode == 0, table.stderr
    rows, said = table.stdout.splitlines()[1:3], table.stdout.splitlines()[3:]
    assert [row.split() for row in rows] == [
        ["node-a", "3.00", "1.00", "2.00", "1.0"],
        ["node-b", *["<unknown>"] * 4],
    ]
    assert said == [
        "node-b: agent down: GetUsage: UNAVAILABLE: refused",
        "history is off on node 'node-c' (its agent has no --history-dir)",
        "usage unavailable from 2 node(s) this caller cannot see",
    ]
    parsed = json.loads(document.stdout)
    assert parsed["downNodes"] == [{"node": "node-b", "reason": "GetUsage: UNAVAILABLE: refused"}]
    assert parsed["errors"] == [e["message"] for e in body["errors"][1:]]
