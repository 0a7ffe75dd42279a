"""``gpugraph top --since 24h``: pods (nodes, namespaces) by GPU-hours over a past range.

Each row has the GPU-hours its processes used, and the GPU-hours the kubelet
had allocated it and the part of those left idle (``IDLE`` or ``UNUSED``, as
the agents judged them; docs/allocation.md), so a pod that held a GPU and ran
nothing on it shows, and ``top namespaces --since`` gives each team's bill.

The agents sum their own occupancy logs (``gpuUsage``); the server merges the
sums, by pod, node or namespace, over what the caller may see. Pods that
are gone still have their rows: the logs keep their names. A node whose log
could not be read is said as the live views say a down node (a line below the
table, ``downNodes`` and ``errors`` in ``-o json``): a sum without it would
under-count without a word.
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
from .model import DownNode, down_from_errors
from .transport import Transport

__all__ = ["USAGE", "Usage", "UsageRow", "run_since", "usage_of", "usage_rows"]

USAGE = """
query TopUsage($since: DateTime!, $groupBy: [UsageGroupBy!]) {
  gpuUsage(since: $since, groupBy: $groupBy) {
    namespace podName nodeName gpuSeconds memoryGibSeconds allocatedGpuSeconds
    idleAllocatedGpuSeconds
  }
}
"""
NO_POD = "(no pod)"


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One pod's (node's, namespace's) GPU time over the range; None where it is not known."""

    namespace: str | None
    name: str | None
    node: str | None
    gpu_hours: float | None
    memory_gib_hours: float | None
    # GPU-equivalent hours allocated, and the idle part of them.
    allocated_gpu_hours: float | None = None
    idle_gpu_hours: float | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """A ``TopUsage`` answer: its rows, and what it could not sum."""

    rows: list[UsageRow]
    # Nodes whose agent did not answer.
    down: list[DownNode]
    # The other partial errors: a node whose log is off or unusable, nodes the caller
    # cannot see that did not answer.
    errors: list[str]


def since_of(text: str, clock: Callable[[], float] = time.time) -> str:
    """``--since 24h`` as the ISO time that long ago; TopError for a bad duration."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise TopError(f"--since: {exc}") from None
    try:
        moment = datetime.datetime.fromtimestamp(clock() - seconds, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        raise TopError(f"--since: {text} reaches back before the year 1") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours_first(row: UsageRow) -> tuple[bool, float, str, str]:
    # Most GPU-hours first; the unknown ones (a down node's row) last.
    return (row.gpu_hours is None, -(row.gpu_hours or 0), row.namespace or "", row.name or "")


def usage_of(body: Mapping[str, Any]) -> Usage:
    """A ``TopUsage`` answer's rows, most GPU-hours first, and its partial errors; TopError
    when it has no rows at all."""
    try:
        errors = body.get("errors") or []
        rows = (body.get("data") or {}).get("gpuUsage")
        if rows is None:
            message = errors[0].get("message") if errors else "no gpuUsage in the answer"
            raise TopError(f"server error: {message}")
        found = [
            UsageRow(
                namespace=row["namespace"],
                name=row["podName"],
                node=row["nodeName"],
                gpu_hours=float(row["gpuSeconds"]) / 3600,
                memory_gib_hours=float(row["memoryGibSeconds"]) / 3600,
                allocated_gpu_hours=float(row["allocatedGpuSeconds"]) / 3600,
                idle_gpu_hours=float(row["idleAllocatedGpuSeconds"]) / 3600,
            )
            for row in rows
        ]
        down, other = down_from_errors(errors)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TopError(f"the server's gpuUsage answer is not the expected shape ({exc})") from None
    return Usage(sorted(found, key=_hours_first), down, other)


def usage_rows(body: Mapping[str, Any]) -> list[UsageRow]:
    """The rows of a ``TopUsage`` answer, most GPU-hours first; TopError for its errors."""
    return usage_of(body).rows


# Per view: what gpuUsage groups by, the document's kind and list, and the table's name
# columns. ``top --since`` (the GPU view's name) lists pods, as ``top pods --since`` does.
GROUPINGS = {
    "nodes": ("NODE", "NodeUsageList", "nodes"),
    "namespaces": ("NAMESPACE", "NamespaceUsageList", "namespaces"),
}
BY_POD = ("POD", "PodUsageList", "pods")


def _names(group: str, r: UsageRow) -> dict[str, Any]:
    if group == "NODE":
        return {"node": r.node}
    if group == "NAMESPACE":
        return {"namespace": r.namespace}
    return {"namespace": r.namespace, "name": r.name}


def _document(usage: Usage, since: str, view: str) -> dict[str, Any]:
    group, kind, key = GROUPINGS.get(view, BY_POD)
    return {
        "apiVersion": VERSION,
        "kind": kind,
        "since": since,
        key: [
            _names(group, r)
            | {
                "gpuHours": _rounded(r.gpu_hours),
                "memoryGibHours": _rounded(r.memory_gib_hours),
                "allocatedGpuHours": _rounded(r.allocated_gpu_hours),
                "idleGpuHours": _rounded(r.idle_gpu_hours),
            }
            for r in usage.rows
        ],
        "downNodes": [{"node": d.node, "reason": d.reason} for d in usage.down],
        "errors": usage.errors,
    }


def _rounded(hours: float | None) -> float | None:
    return None if hours is None else round(hours, 4)


def run_since(
    args: argparse.Namespace,
    transport: Transport,
    console: Callable[[], Any],
    write: Callable[[str], Any],
) -> int:
    """``top [pods|nodes|namespaces] --since D``: a table (or -o json/yaml) of GPU-hours."""
    if args.watch or args.selector or args.node:
        raise TopError("--since sums the past: it has no --watch, -l or --node")
    if args.sort_by is not None:
        raise TopError("--since lists the most GPU-hours first: it has no --sort-by")
    group, _, noun = GROUPINGS.get(args.view, BY_POD)
    by_node = group == "NODE"
    since = since_of(args.since)
    # Grouped by the server, so a namespace's sums are over the pods the caller may see.
    body = transport.execute(USAGE, {"since": since, "groupBy": [group]})
    usage = usage_of(body)
    rows = usage.rows
    if args.namespace:
        rows = [r for r in rows if r.namespace == args.namespace]
        if not rows and not usage.down and not usage.errors:
            # As the live views: a filter that selects nothing fails, unless a node
            # that could not be read might have held what it asks for.
            raise TopError(
                f"no {noun} of -n {args.namespace} held or used a GPU in the last {args.since}"
            )
    if by_node:
        # A down node is a row too, as in the live top nodes: its hours are not known.
        listed = {r.node for r in rows}
        rows += [
            UsageRow(None, None, d.node, None, None) for d in usage.down if d.node not in listed
        ]
    usage = Usage(rows, usage.down, usage.errors)
    if args.output in ("json", "yaml"):
        doc = _document(usage, since, args.view)
        if args.output == "yaml":
            import yaml

            write(str(yaml.safe_dump(doc, sort_keys=False)))
        else:
            write(json.dumps(doc, indent=2) + "\n")
        return 0
    from rich.text import Text

    from .render import UNKNOWN, Cell, Grid, Styled, clean, down_lines, widths
    from .text import printable

    def hours(value: float | None, digits: int) -> Cell:
        return Styled((UNKNOWN, "yellow")) if value is None else f"{value:.{digits}f}"

    def amounts(r: UsageRow) -> list[Cell]:
        return [
            hours(r.allocated_gpu_hours, 2),
            hours(r.idle_gpu_hours, 2),
            hours(r.gpu_hours, 2),
            hours(r.memory_gib_hours, 1),
        ]

    amount_columns = ["ALLOC-HOURS", "IDLE-HOURS", "GPU-HOURS", "GIB-HOURS"]
    if by_node:
        columns = ["NODE", *amount_columns]
        cells = [[r.node or "-", *amounts(r)] for r in rows]
    elif group == "NAMESPACE":
        # Processes in no pod have no namespace: their row is theirs, as in the pod view.
        columns = ["NAMESPACE", *amount_columns]
        cells = [[r.namespace or NO_POD, *amounts(r)] for r in rows]
    else:
        columns = ["NAMESPACE", "POD", *amount_columns]
        cells = [[r.namespace or "-", r.name or NO_POD, *amounts(r)] for r in rows]
    table: list[list[Cell]] = [list(columns), *[[clean(c) for c in row] for row in cells]]
    out = console()
    out.print(Grid(widths(columns, table[1:]), table, header=True))
    if not rows and not usage.down:
        # Said, so that a header alone is not read as a cut-off answer.
        out.print(f"no GPU held or used in the last {args.since}")
    for line in down_lines(usage.down):
        out.print(line)
    for message in usage.errors:
        out.print(Text(printable(message), style="red"))
    return 0
