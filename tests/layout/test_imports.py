"""Layers run one way, without cycles; the serving path never loads the demo cluster."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.layout.imports import (
    ROOT,
    cycles,
    import_graph,
    module_files,
    reachable,
    upward_imports,
)

DEMO = "api.demo"
# The simulated cluster, and the (docstring-only) packages above it that importing it runs.
CLUSTER = "api.demo.cluster"
CLUSTER_PARENTS = {"api", "api.demo"}
SHARED_WITH_CLUSTER = "graph_schema.selectors"
# ``gpugraph`` names each subcommand's module, ``demo``'s included, and loads
# it only when that subcommand runs: the one import up the layers.
SUBCOMMANDS = {("api.cli", "api.demo.command")}
# The entry modules of ``gpugraph serve`` and ``gpugraph agent``.
SERVING = ("api.serve", "api.app", "node_resolver.cli", "node_resolver.__main__")


def run_python(code: str) -> str:
    """``code`` run by a fresh interpreter from the repository root; its stdout."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_production_modules_import_one_another_without_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_layer_imports_a_higher_one() -> None:
    # node_resolver < graph_schema < api < api.demo, as docs/architecture.md draws them.
    assert [edge for edge in upward_imports(import_graph()) if edge not in SUBCOMMANDS] == []


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {
        "node_resolver.cli": {"graph_schema.selectors", "node_resolver.models"},
        "graph_schema.views": {"node_resolver.models", "api.kube.cache"},
        "api.serve": {"graph_schema.schema", "api.demo.runner"},
        "api.demo.runner": {"api.serve", "node_resolver.agent"},
    }
    assert upward_imports(graph) == [
        ("api.serve", "api.demo.runner"),
        ("graph_schema.views", "api.kube.cache"),
        ("node_resolver.cli", "graph_schema.selectors"),
    ]


def test_the_simulated_cluster_imports_nothing_from_the_server() -> None:
    graph = import_graph()
    cluster = [m for m in graph if m == CLUSTER or m.startswith(CLUSTER + ".")]
    assert cluster
    # The one thing it shares: Kubernetes' label-selector grammar, so that the
    # stub API server and the graph read a selector alike.
    shared = reachable(graph, SHARED_WITH_CLUSTER)
    allowed = CLUSTER_PARENTS | shared
    outside = {
        m: sorted(
            t
            for t in reachable(graph, m)
            if t not in allowed and not (t == CLUSTER or t.startswith(CLUSTER + "."))
        )
        for m in cluster
    }
    assert not any(m == "api" or m.startswith("api.") for m in shared)
    assert {m: found for m, found in outside.items() if found} == {}


@pytest.mark.parametrize("entry", SERVING)
def test_the_serving_path_imports_nothing_from_the_demo(entry: str) -> None:
    graph = import_graph()
    assert entry in graph
    loaded = reachable(graph, entry)
    assert sorted(m for m in loaded if m == DEMO or m.startswith(DEMO + ".")) == []


@pytest.mark.parametrize("command", ["serve", "agent"])
def test_the_gpugraph_command_loads_no_demo_module_for(command: str) -> None:
    # `gpugraph` enters through api.cli, which loads `demo` only when asked for it.
    code = (
        "import sys\n"
        "from api.cli import build_parser\n"
        f"build_parser({command!r})\n"
        "import api.serve, node_resolver.cli\n"
        f"print(sorted(m for m in sys.modules if m == {DEMO!r} or m.startswith({DEMO + '.'!r})))\n"
    )
    assert run_python(code) == "[]"


def test_importing_the_graph_loads_none_of_the_agents_machinery() -> None:
    # The server reads the agent's records (node_resolver.models, and the occupancy
    # log's plain records) and nothing else of it: no gRPC, protobuf, NVML or
    # containerd code.
    code = (
        "import sys\n"
        "import graph_schema.schema\n"
        "prefixes = ('node_resolver', 'grpc', 'google.protobuf', 'pynvml', 'containerd')\n"
        "print(sorted(m for m in sys.modules if m.startswith(prefixes)))\n"
    )
    assert run_python(code) == (
        "['node_resolver', 'node_resolver.history', 'node_resolver.history.records', "
        "'node_resolver.models']"
    )


def test_importing_a_top_level_package_loads_none_of_its_modules() -> None:
    packages = ("node_resolver", "graph_schema", "api")
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"import {', '.join(packages)}\n"
        "print(sorted(m for m in set(sys.modules) - before))\n"
    )
    assert run_python(code) == repr(sorted(packages))


def test_every_package_init_is_a_docstring_or_plain_re_exports() -> None:
    # As starlette (a docstring) or httpx (``from .module import name`` and
    # ``__all__``) write them: no logic, no lazy loading, nothing from outside.
    loose: dict[str, list[str]] = {}
    for module, path in module_files().items():
        if path.name != "__init__.py":
            continue
        body = ast.parse(path.read_text()).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        wrong = [
            ast.unparse(node).splitlines()[0]
            for node in body
            if not (
                (isinstance(node, ast.ImportFrom) and node.module == "__future__")
                or (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module)
                or (
                    isinstance(node, ast.Assign)
                    and [ast.unparse(t) for t in node.targets] == ["__all__"]
                )
            )
        ]
        if wrong:
            loose[module] = wrong
    # ``gpugraph top`` still declares its flags in its ``__init__``; that moves
    # to a module of its own, and then this entry goes.
    top = loose.pop("api.top", None)
    assert top, "api.top's __init__ is plain now: drop its exception here"
    assert loose == {}
