"""One walk of a snapshot: ``/gpu-pods`` and ``/metrics`` reshape the graph's objects.

``graph_schema/views.py`` (``ViewCache``) is the one place on the server that
walks a node snapshot's GPUs and processes, joins each process to its pod and
judges it against the node's allocations. ``/gpu-pods`` and the server's
``/metrics`` get those objects through the seam and only reshape them; a
module of theirs that walks a snapshot itself, or joins or judges a process,
is a second walk to keep in step (and to forget a new field in). This test
finds one from the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.project import ROOT

# The server's reshapers of ViewCache's objects.
RESHAPERS = ("api/http/gpu_pods.py", "api/gpu_metrics")
# A snapshot's own records below the node: reading them is walking the snapshot.
RECORDS = frozenset({"GpuSample", "GpuProcess", "MigDevice", "ContainerRef", "NodeSample"})
# The join of a process to its pod and its verdict: ViewCache's to do, once.
JOINING = frozenset(
    {
        "join_pod",
        "join_process",
        "NodeJoin",
        "PodJoiner",
        "judge_process",
        "allocation_table",
        "AllocationTable",
        "LazyTable",
        "build_gpu",
        "build_gpus",
    }
)
# What a node's sample says of the node itself (not its GPUs): fine to read.
NODE_FIELDS = frozenset({"driver_version", "cuda_driver_version", "error"})


def walks_a_snapshot(source: str) -> list[str]:
    """Each place in ``source`` that walks a snapshot, joins or judges itself, as 'line: what'."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "sample":
                parent = parents.get(node)
                if not (isinstance(parent, ast.Attribute) and parent.attr in NODE_FIELDS):
                    found.append(f"{node.lineno}: reads the snapshot's sample")
            elif node.attr in JOINING:
                found.append(f"{node.lineno}: uses .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in JOINING | RECORDS:
            found.append(f"{node.lineno}: uses {node.id}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.endswith("joins"):
                found.append(f"{node.lineno}: imports from {module}")
            for alias in node.names:
                if alias.name in JOINING | RECORDS:
                    found.append(f"{node.lineno}: imports {alias.name}")
    return found


def reshaper_files() -> list[Path]:
    """The modules that must only reshape."""
    files: list[Path] = []
    for name in RESHAPERS:
        path = ROOT / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def test_the_reshapers_are_where_they_were() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in reshaper_files()}
    assert {
        "api/http/gpu_pods.py",
        "api/gpu_metrics/attribution.py",
        "api/gpu_metrics/families.py",
        "api/gpu_metrics/exporter.py",
    } <= names


@pytest.mark.parametrize("path", reshaper_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_gpu_pods_and_metrics_walk_no_snapshot_themselves(path: Path) -> None:
    assert walks_a_snapshot(path.read_text()) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "for gpu in snapshot.sample.gpus: pass",
        "sample = result.snapshot.sample\nfor gpu in sample.gpus: pass",
        "from node_resolver.models import GpuSample, NodeSnapshot",
        "def f(process: GpuProcess) -> None: pass",
        "from graph_schema.joins import NodeJoin",
        "pod = join_pod(cluster, node, uid, cid)",
        "table = allocation_table(node, snapshot, cluster, rules)",
        "verdict = judge_process(table, pod, process, uuid)",
        "from graph_schema.allocation_join import LazyTable",
        "verdict = allocations.judge_process(table, pod, process, uuid)",
    ],
)
def test_the_check_finds_a_walk_of_its_own(snippet: str) -> None:
    assert walks_a_snapshot(snippet) != []


@pytest.mark.parametrize(
    "snippet",
    [
        "gpus = views.visible_gpus(view, node, snapshot)",
        "for gpu in gpus:\n    for p in gpu.processes: p.allocation()",
        "driver = result.snapshot.sample.driver_version or ''",
        "from node_resolver.models import NodeSnapshot",
    ],
)
def test_the_check_lets_the_objects_be_reshaped(snippet: str) -> None:
    assert walks_a_snapshot(snippet) == []
