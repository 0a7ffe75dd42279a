"""``gpugraph top --since 24h``: pods by GPU-hours over a past range, from ``gpuUsage``.

The agents sum their own occupancy logs; the server merges the sums. Pods that
are gone still have their rows: the logs keep their names.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from node_resolver.history.durations import parse_duration

from .documents import VERSION
from .errors import TopError
from .transport import Transport

__all__ = ["USAGE", "UsageRow", "run_since", "usage_rows"]

USAGE = """
query TopUsage($since: DateTime!, $groupBy: [UsageGroupBy!]) {
  gpuUsage(since: $since, groupBy: $groupBy) {
    namespace podName nodeName gpuSeconds memoryGibSeconds
  }
}
"""
NO_POD = "(no pod)"


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One pod's (or node's) GPU time over the range."""

    namespace: str | None
    name: str | None
    node: str | None
    gpu_hours: float
    memory_gib_hours: float


def since_of(text: str, clock: Callable[[], float] = time.time) -> str:
    """``--since 24h`` as the ISO time that long ago; TopError for a bad duration."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise TopError(f"--since: {exc}") from None
    moment = datetime.datetime.fromtimestamp(clock() - seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def usage_rows(body: Mapping[str, Any]) -> list[UsageRow]:
    """The rows of a ``TopUsage`` answer, most GPU-hours first; TopError for its errors."""
    errors = body.get("errors") or []
    data = body.get("data") or {}
    rows = data.get("gpuUsage")
    if rows is None:
        message = errors[0].get("message") if errors else "no gpuUsage in the answer"
        raise TopError(f"server error: {message}")
    try:
        found = [
            UsageRow(
                namespace=row["namespace"],
                name=row["podName"],
                node=row["nodeName"],
                gpu_hours=float(row["gpuSeconds"]) / 3600,
                memory_gib_hours=float(row["memoryGibSeconds"]) / 3600,
            )
            for row in rows
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise TopError(f"the server's gpuUsage answer is not the expected shape ({exc})") from None
    return sorted(found, key=lambda r: (-r.gpu_hours, r.namespace or "", r.name or ""))


def _document(rows: list[UsageRow], since: str, by_node: bool) -> dict[str, Any]:
    key = "nodes" if by_node else "pods"
    return {
        "apiVersion": VERSION,
        "kind": "NodeUsageList" if by_node else "PodUsageList",
        "since": since,
        key: [
            ({"node": r.node} if by_node else {"namespace": r.namespace, "name": r.name})
            | {"gpuHours": round(r.gpu_hours, 4), "memoryGibHours": round(r.memory_gib_hours, 4)}
            for r in rows
        ],
    }


def run_since(
    args: argparse.Namespace,
    transport: Transport,
    console: Callable[[], Any],
    write: Callable[[str], Any],
) -> int:
    """``top [pods|nodes] --since D``: a table (or -o json/yaml) of GPU-hours since D ago."""
    if args.watch or args.selector or args.node:
        raise TopError("--since sums the past: it has no --watch, -l or --node")
    by_node = args.view == "nodes"
    since = since_of(args.since)
    body = transport.execute(USAGE, {"since": since, "groupBy": ["NODE"] if by_node else ["POD"]})
    rows = usage_rows(body)
    if args.namespace:
        rows = [r for r in rows if r.namespace == args.namespace]
    if args.output in ("json", "yaml"):
        doc = _document(rows, since, by_node)
        if args.output == "yaml":
            import yaml

            write(str(yaml.safe_dump(doc, sort_keys=False)))
        else:
            write(json.dumps(doc, indent=2) + "\n")
        return 0
    from .render import Cell, Grid, clean, widths

    if by_node:
        columns = ["NODE", "GPU-HOURS", "GIB-HOURS"]
        cells = [[r.node or "-", f"{r.gpu_hours:.2f}", f"{r.memory_gib_hours:.1f}"] for r in rows]
    else:
        columns = ["NAMESPACE", "POD", "GPU-HOURS", "GIB-HOURS"]
        cells = [
            [
                r.namespace or "-",
                r.name or NO_POD,
                f"{r.gpu_hours:.2f}",
                f"{r.memory_gib_hours:.1f}",
            ]
            for r in rows
        ]
    table: list[list[Cell]] = [list(columns), *[[clean(c) for c in row] for row in cells]]
    console().print(Grid(widths(columns, table[1:]), table, header=True))
    return 0
