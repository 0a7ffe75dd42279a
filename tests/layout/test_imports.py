"""Layers run one way: no import cycles, and the serving path never loads the demo cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.layout.imports import ROOT, cycles, import_graph, reachable

DEMO = "api.demo"
# The entry modules of ``gpugraph serve`` and ``gpugraph agent``.
SERVING = ("api.serve", "api.app", "node_resolver.cli", "node_resolver.__main__")


def test_production_modules_import_one_another_without_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


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
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"
