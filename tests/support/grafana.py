"""The chart's Grafana dashboard: its structure as Grafana loads it, and its queries.

No Grafana runs here; the checks are the ones Grafana's dashboard loader and
panels rely on (unique panel ids, a 24-column grid, targets with refIds,
variables defined before use), so a broken dashboard fails here rather than
as an empty panel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = [
    "DASHBOARD",
    "constants",
    "dashboard_problems",
    "interpolate",
    "load_dashboard",
    "panel_queries",
    "variable_options",
    "variable_query",
]

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "charts" / "gpugraph" / "dashboards" / "gpugraph.json"
)
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "gauge", "barchart", "text", "row"}
GRID_COLUMNS = 24
_VARIABLE = re.compile(r"\$\{?(\w+)")
# Grafana's own variables, set per panel, and what a test runs the queries with.
GLOBALS = {"__range": "1h", "__interval": "1m", "__rate_interval": "4m"}


def load_dashboard(text: str | None = None) -> dict[str, Any]:
    """The dashboard JSON (the chart's file, or ``text``)."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text() if text is None else text)
    return loaded


def dashboard_problems(dashboard: dict[str, Any]) -> list[str]:
    """Everything that would stop Grafana from loading the dashboard or its panels."""
    problems = []
    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(dashboard.get(key), kind):
            problems.append(f"{key} missing or not {kind.__name__}")
    if len(str(dashboard.get("uid", ""))) > 40:
        problems.append("uid longer than 40 characters")
    variables = dashboard.get("templating", {}).get("list", [])
    defined = {v.get("name") for v in variables}
    for variable in variables:
        if not variable.get("name") or not variable.get("type"):
            problems.append(f"variable without name or type: {variable}")
    ids = [p.get("id") for p in dashboard.get("panels", [])]
    if len(ids) != len(set(ids)) or not all(isinstance(i, int) for i in ids):
        problems.append(f"panel ids not unique integers: {ids}")
    problems += _overlaps(dashboard.get("panels", []))
    for panel in dashboard.get("panels", []):
        where = f"panel {panel.get('id')} ({panel.get('title')})"
        if panel.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: unknown type {panel.get('type')!r}")
        if not panel.get("title"):
            problems.append(f"{where}: no title")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            problems.append(f"{where}: gridPos needs integer h, w, x, y")
        elif grid["x"] + grid["w"] > GRID_COLUMNS:
            problems.append(f"{where}: wider than the {GRID_COLUMNS}-column grid")
        targets = panel.get("targets", [])
        if panel.get("type") != "row" and not targets:
            problems.append(f"{where}: no targets")
        ref_ids = [t.get("refId") for t in targets]
        if len(ref_ids) != len(set(ref_ids)) or not all(ref_ids):
            problems.append(f"{where}: refIds missing or repeated: {ref_ids}")
        for target in targets:
            if not target.get("expr"):
                problems.append(f"{where}: target {target.get('refId')} has no expr")
            used = set(_VARIABLE.findall(json.dumps(target))) - {"__all", *GLOBALS}
            for name in used - defined:
                problems.append(f"{where}: uses undefined variable ${name}")
    return problems


def _overlaps(panels: list[dict[str, Any]]) -> list[str]:
    """Panels whose grid rectangles overlap (Grafana would push one down, out of order)."""
    cells: dict[tuple[int, int], Any] = {}
    problems = []
    for panel in panels:
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            continue
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                other = cells.setdefault((x, y), panel.get("id"))
                if other != panel.get("id"):
                    problems.append(f"panels {other} and {panel.get('id')} overlap")
                    break
            else:
                continue
            break
    return problems


def constants(dashboard: dict[str, Any]) -> dict[str, str]:
    """The dashboard's constant variables (hidden, set where it is installed) and their values."""
    return {
        v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "constant"
    }


def interpolate(text: str, values: dict[str, str]) -> str:
    """``text`` with the variables of ``values`` (and Grafana's own) set, as Grafana does."""
    for name, value in {**values, **GLOBALS}.items():
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return text


def panel_queries(dashboard: dict[str, Any], values: dict[str, str]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, with the dashboard variables set to ``values``
    (its constants to their own)."""
    values = {**constants(dashboard), **values}
    return [
        (panel["title"], interpolate(target["expr"], values))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


_LABEL_VALUES = re.compile(r"label_values\((\w+), (\w+)\)")
_QUERY_RESULT = re.compile(r"query_result\((.*)\)", re.DOTALL)


def variable_query(variable: dict[str, Any], values: dict[str, str]) -> str:
    """The PromQL a query variable runs: ``label_values``' metric or ``query_result``'s query."""
    text = interpolate(variable["query"]["query"], values)
    found = _LABEL_VALUES.fullmatch(text) or _QUERY_RESULT.fullmatch(text)
    assert found, f"variable {variable['name']}: a query Grafana's Prometheus source lists? {text}"
    return found[1]


def variable_options(variable: dict[str, Any], series: list[dict[str, Any]]) -> set[str]:
    """What a query variable lists, given the series its ``variable_query`` returned."""
    found = _LABEL_VALUES.fullmatch(variable["query"]["query"])
    if found:
        return {s["metric"][found[2]] for s in series if found[2] in s["metric"]}
    # query_result: each series as Grafana writes it, through the variable's regex.
    regex = re.compile(variable["regex"].strip("/"))
    lines = ["{" + ",".join(f'{k}="{v}"' for k, v in s["metric"].items()) + "}" for s in series]
    return {m[1] for line in lines if (m := regex.search(line))}
