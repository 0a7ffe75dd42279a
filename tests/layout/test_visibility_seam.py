"""Who-sees-what is decided in one module: nothing else in the graph or HTTP reads a Scope.

Resolvers, loaders and endpoints read the cluster through the caller's
``VisibleCluster`` (``graph_schema/visibility.py``), which is already
filtered. A module that asks a ``Scope`` itself (``scope.sees_namespace``,
``scope.all_pods``, ...) is filtering by hand, and a new path written that
way would be one more place to forget; this test finds it from the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.project import ROOT

# Where filtering by hand is looked for.
CHECKED = ("graph_schema", "api/http", "api/gpu_metrics")
# The seam itself, and where the Scope's rules are declared.
SEAM = ("graph_schema/visibility.py", "graph_schema/scope.py")
# Scope's fields: reading them is deciding visibility.
SCOPE_FIELDS = frozenset(
    {"all_pods", "all_nodes", "exec_all", "pod_namespaces", "exec_namespaces", "unrestricted"}
)
# The Scope's predicates: fine on the view, filtering by hand on a scope.
SCOPE_PREDICATES = frozenset({"sees_namespace", "sees_cmdline"})
# The unfiltered cache behind the view: only for joins, in the modules that join.
RAW = frozenset({"raw", "raw_cluster"})
JOINERS = ("graph_schema/context.py", "graph_schema/views.py")
# The old hand-filtering helpers, by name: none may come back outside the seam.
HELPERS = frozenset(
    {"visible_pods", "visible_node_names", "scope_gpu", "scoped_gpus", "filter_nodes"}
)


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return None


def hand_filtering(source: str, *, joins: bool = False) -> list[str]:
    """Each place in ``source`` that decides visibility itself, as 'line: what'.

    ``joins``: the module joins processes to pods, so it may read the raw cache.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            receiver = (_name_of(node.value) or "").lower()
            if node.attr in SCOPE_FIELDS:
                found.append(f"{node.lineno}: reads .{node.attr}")
            elif node.attr in SCOPE_PREDICATES and "scope" in receiver:
                found.append(f"{node.lineno}: asks {receiver}.{node.attr}")
            elif node.attr in HELPERS:
                found.append(f"{node.lineno}: uses .{node.attr}")
            elif node.attr in RAW and not joins:
                found.append(f"{node.lineno}: reads the unfiltered .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in HELPERS:
            found.append(f"{node.lineno}: uses {node.id}")
        elif isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in HELPERS:
            found.append(f"{node.lineno}: imports {node.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("scoped"):
            found.append(f"{node.lineno}: imports from {node.module}")
    return found


def checked_files() -> list[Path]:
    """Every module under the checked folders but the seam."""
    seam = {ROOT / s for s in SEAM}
    return [
        path
        for folder in CHECKED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in seam
    ]


def test_the_checked_folders_hold_the_modules_that_serve_callers() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in checked_files()}
    assert {
        "graph_schema/query.py",
        "graph_schema/types.py",
        "api/http/gpu_pods.py",
        "api/gpu_metrics/exporter.py",
    } <= names
    assert not names & set(SEAM)
    assert set(JOINERS) <= names


@pytest.mark.parametrize("path", checked_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_outside_the_seam_filters_by_hand(path: Path) -> None:
    joins = path.relative_to(ROOT).as_posix() in JOINERS
    assert hand_filtering(path.read_text(), joins=joins) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "if not ctx.scope.sees_namespace(ns): pass",
        "scope.sees_cmdline(None)",
        "if self._scope.sees_namespace(ns): pass",
        "wide = ctx.scope.all_pods",
        "if scope.all_nodes: pass",
        "x = caller.scope.pod_namespaces",
        "records = visible_pods(scope, records)",
        "gpus = ctx.scoped_gpus(name, shared)",
        "from graph_schema.scoped import scope_gpu",
        "from .scoped import filter_nodes",
        "records = ctx.raw_cluster.pods()",
        "pod = view.raw.pod(namespace, name)",
    ],
)
def test_the_check_finds_filtering_by_hand(snippet: str) -> None:
    assert hand_filtering(snippet) != []


@pytest.mark.parametrize(
    "snippet",
    [
        "record = ctx.cluster.pod(namespace, name)",
        "if view.sees_namespace(pod.namespace): pass",
        "shown, hidden = view.split_owned(items, lambda r: r.namespace)",
        "key = (context.scope, query)",
    ],
)
def test_the_check_lets_the_view_be_used(snippet: str) -> None:
    assert hand_filtering(snippet) == []


def test_a_module_that_joins_may_read_the_raw_cache() -> None:
    assert hand_filtering("pod = join_pod(view.raw, uid, cid)", joins=True) == []
