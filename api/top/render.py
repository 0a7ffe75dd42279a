"""Rich renderables of each view: tables for a terminal, plain text elsewhere."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .model import DownNode, Snapshot, node_rows, pod_rows

UNREQUESTED = "UNREQUESTED"
NO_POD = "(no pod)"


def size(value: int | None) -> str:
    """Bytes in binary units, e.g. ``30.0Gi``."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if amount < 1024 or unit == "Ti":
            return f"{amount:.0f}" if not unit else f"{amount:.1f}{unit}"
        amount /= 1024
    return str(value)  # pragma: no cover - the loop always returns


def percent(value: int | None) -> str:
    """``35%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value}%"


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def _down_lines(down: list[DownNode]) -> list[Text]:
    return [Text(f"{d.node}: agent down: {d.reason}", style="red") for d in down]


def gpus_view(snapshot: Snapshot, *, wide: bool = False) -> RenderableType:
    """A row per GPU grouped by node, a row per process under it, then the down nodes."""
    columns = ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "PODS"]
    if wide:
        columns.insert(2, "UUID")
    table = _table(*columns)
    previous = None
    for gpu in snapshot.gpus:
        node = gpu.node if gpu.node != previous else ""
        previous = gpu.node
        pods = Text(", ".join(gpu.pods) or "-")
        cells: list[str | Text] = [
            Text(node, style="bold"),
            str(gpu.index),
            gpu.model or "-",
            percent(gpu.utilization),
            f"{size(gpu.memory_used)}/{size(gpu.memory_total)}",
            "-" if gpu.temperature is None else f"{gpu.temperature}C",
            pods,
        ]
        if gpu.error:
            cells[-1] = Text(f"GPU error: {gpu.error}", style="red")
        if wide:
            cells.insert(2, gpu.uuid)
        table.add_row(*cells)
        for p in gpu.processes:
            if p.pod is None:
                who = Text(f"PID {p.pid} {p.name or ''} {NO_POD}".rstrip(), style="yellow")
            else:
                who = Text(f"PID {p.pid} {p.pod.key} [{p.container or '-'}]")
                if p.unrequested:
                    who.append(f" {UNREQUESTED}", style="bold red")
            process_cells: list[str | Text] = [
                "",
                "",
                "  └",
                "SM " + percent(p.sm_percent),
                size(p.memory_bytes),
                "",
                who,
            ]
            if wide:
                process_cells.insert(2, "")
            table.add_row(*process_cells)
    return Group(table, *_down_lines(snapshot.down))


def pods_view(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> RenderableType:
    """A row per pod requesting or using GPUs."""
    table = _table("NAMESPACE", "POD", "NODE", "GPUS(REQ/USED)", "MEMORY", "SM", "FLAG")
    for row in pod_rows(snapshot, sort_by):
        flag = Text(UNREQUESTED, style="bold red") if row.unrequested else Text("")
        table.add_row(
            row.namespace,
            row.name,
            row.node or "-",
            f"{row.gpus_requested}/{row.gpus_used}",
            size(row.memory_bytes),
            percent(row.sm_percent),
            flag,
        )
    return Group(table, *_down_lines(snapshot.down))


def nodes_view(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> RenderableType:
    """A row per node; a down node's row says why."""
    table = _table("NODE", "GPUS", "UTIL", "MEMORY", "MAX TEMP", "PODS", "PROCESSES")
    for row in node_rows(snapshot, sort_by):
        if row.down_reason:
            # The reason is long; it goes on its own line below, not into a column.
            table.add_row(Text(row.name, style="bold"), Text("DOWN", style="red"))
            continue
        table.add_row(
            Text(row.name, style="bold"),
            str(row.gpus),
            percent(row.utilization),
            f"{size(row.memory_used)}/{size(row.memory_total)}",
            "-" if row.max_temperature is None else f"{row.max_temperature}C",
            str(row.pods),
            str(row.processes),
        )
    return Group(table, *_down_lines(snapshot.down))


def view(name: str, snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> RenderableType:
    """The renderable of view ``name`` (gpus, pods or nodes)."""
    if name == "pods":
        return pods_view(snapshot, sort_by, wide=wide)
    if name == "nodes":
        return nodes_view(snapshot, sort_by, wide=wide)
    return gpus_view(snapshot, wide=wide)
