"""What ``helm install`` prints: the map, the Pod Security label, a token, and top."""

from __future__ import annotations

import shlex
from typing import Any

import helm_python as helm

from api.cli import build_parser
from tests.support.chart import NAMESPACE, RELEASE, one, render
from tests.support.chart import chart as chart


def notes(chart: helm.Chart, values: dict[str, Any] | None = None) -> str:
    out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    text: str = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    return text


def commands(text: str, program: str) -> list[list[str]]:
    """Every command line of ``program`` in ``text``, split as a shell would."""
    return [
        shlex.split(line.strip())
        for line in text.splitlines()
        if line.strip().startswith(f"{program} ")
    ]


def test_the_notes_open_the_map_at_the_root(chart: helm.Chart) -> None:
    text = notes(chart)
    service = one(render(chart), "Service")
    (forward,) = [c for c in commands(text, "kubectl") if "port-forward" in c]
    assert forward[forward.index("port-forward") + 1] == f"svc/{service['metadata']['name']}"
    assert forward[-1] == f"8000:{service['spec']['ports'][0]['port']}"
    assert "then browse http://127.0.0.1:8000/\n" in text
    assert "Open the GPU map at / (GraphiQL at /graphql)" in text


def test_the_notes_give_the_pod_security_label_the_agent_needs(chart: helm.Chart) -> None:
    label = [c for c in commands(notes(chart), "kubectl") if c[1] == "label"]
    assert label == [
        [
            "kubectl",
            "label",
            "namespace",
            NAMESPACE,
            "pod-security.kubernetes.io/enforce=privileged",
        ]
    ]


def test_the_notes_bind_the_charts_own_roles_and_make_a_token(chart: helm.Chart) -> None:
    docs = render(chart)
    kinds = {d["metadata"]["name"]: d["kind"] for d in docs}
    lines = commands(notes(chart), "kubectl")
    bound = {
        arg.partition("=")[0]: arg.partition("=")[2]
        for line in lines
        for arg in line
        if arg.startswith(("--clusterrole=", "--role="))
    }
    assert kinds[bound["--clusterrole"]] == "ClusterRole"
    assert bound["--clusterrole"].endswith("-viewer")
    assert kinds[bound["--role"]] == "Role"
    assert ["kubectl", "-n", NAMESPACE, "create", "token", "alice"] in lines
    assert f"bind {RELEASE}-gpugraph-namespace-viewer with a RoleBinding" in notes(chart)


def test_the_notes_top_line_is_a_command_top_accepts(chart: helm.Chart) -> None:
    (line,) = commands(notes(chart), "kubectl gpugraph")
    assert line[:3] == ["kubectl", "gpugraph", "top"]
    args = build_parser("top").parse_args(line[2:])
    assert args.gpugraph_namespace == NAMESPACE
    assert args.token == f"$(kubectl -n {NAMESPACE} create token alice)"


def test_an_open_server_says_so_and_asks_for_no_token(chart: helm.Chart) -> None:
    text = notes(chart, {"server": {"auth": {"mode": "none"}}})
    assert "anyone who reaches the Service sees every namespace" in text
    assert "create token" not in text and "--token" not in text
