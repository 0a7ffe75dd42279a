"""Rich renderables of each view: tables for a terminal, plain text elsewhere."""

from __future__ import annotations

from rich.cells import cell_len
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


Cell = str | Text
GAP = 2  # spaces between columns


def _table(columns: list[str], rows: list[list[Cell]]) -> Table:
    """A borderless table whose column widths come from the cells' plain text.

    rich measures every cell by rendering it unless a column's width is given;
    at thousands of rows that measuring is most of the time, and plain text
    has a cheaper measure (``cell_len``). Cells carry no padding for the same
    reason: the gap is part of each column's width.
    """
    table = Table(box=None, pad_edge=False, show_edge=False, padding=0, header_style="bold")
    for index, header in enumerate(columns):
        widest = max([cell_len(header), *(cell_len(_plain(row[index])) for row in rows)])
        last = index == len(columns) - 1
        table.add_column(header, no_wrap=True, width=widest if last else widest + GAP)
    for row in rows:
        table.add_row(*row)
    return table


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def down_lines(down: list[DownNode]) -> list[Text]:
    """A red line per down node, naming it and why."""
    return [Text(f"{d.node}: agent down: {d.reason}", style="red") for d in down]


Rows = tuple[list[str], list[list[Cell]]]


def gpu_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per GPU grouped by node, and a row per process under it."""
    columns = ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "PODS"]
    if wide:
        columns.insert(2, "UUID")
    rows: list[list[Cell]] = []
    previous = None
    for gpu in snapshot.gpus:
        node = gpu.node if gpu.node != previous else ""
        previous = gpu.node
        pods = Text(", ".join(gpu.pods) or "-")
        cells: list[Cell] = [
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
        rows.append(cells)
        for p in gpu.processes:
            if p.pod is None:
                who = Text(f"PID {p.pid} {p.name or ''} {NO_POD}".rstrip(), style="yellow")
            else:
                who = Text(f"PID {p.pid} {p.pod.key} [{p.container or '-'}]")
                if p.unrequested:
                    who.append(f" {UNREQUESTED}", style="bold red")
            process_cells: list[Cell] = [
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
            rows.append(process_cells)
    return columns, rows


def pod_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per pod requesting or using GPUs."""
    columns = ["NAMESPACE", "POD", "NODE", "GPUS(REQ/USED)", "MEMORY", "SM", "FLAG"]
    rows: list[list[Cell]] = [
        [
            row.namespace,
            row.name,
            row.node or "-",
            f"{row.gpus_requested}/{row.gpus_used}",
            size(row.memory_bytes),
            percent(row.sm_percent),
            Text(UNREQUESTED, style="bold red") if row.unrequested else "",
        ]
        for row in pod_rows(snapshot, sort_by)
    ]
    return columns, rows


def node_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per node; a down node's row says DOWN (why is said below the table)."""
    columns = ["NODE", "GPUS", "UTIL", "MEMORY", "MAX TEMP", "PODS", "PROCESSES"]
    rows: list[list[Cell]] = []
    for row in node_rows(snapshot, sort_by):
        name = Text(row.name, style="bold")
        if row.down_reason:
            # The reason is long; it goes on its own line below, not into a column.
            rows.append([name, Text("DOWN", style="red"), "", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                str(row.gpus),
                percent(row.utilization),
                f"{size(row.memory_used)}/{size(row.memory_total)}",
                "-" if row.max_temperature is None else f"{row.max_temperature}C",
                str(row.pods),
                str(row.processes),
            ]
        )
    return columns, rows


def view(
    name: str, snapshot: Snapshot, sort_by: str, *, wide: bool = False, height: int | None = None
) -> RenderableType:
    """The renderable of view ``name`` (gpus, pods or nodes), then the down nodes.

    With ``height`` (a live view's screen) only that many rows are drawn: rich
    renders every row it is given, and rows below the screen would only cost time.
    """
    build = {"pods": pod_table_rows, "nodes": node_table_rows}.get(name, gpu_table_rows)
    columns, rows = build(snapshot, sort_by, wide=wide)
    more: list[Text] = []
    if height is not None and len(rows) > height:
        hidden = len(rows) - max(height, 1)
        rows = rows[: max(height, 1)]
        more.append(Text(f"... {hidden} more rows: narrow with --node or -n", style="dim"))
    return Group(_table(columns, rows), *more, *down_lines(snapshot.down))
