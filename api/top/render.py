"""Rich renderables of each view: tables for a terminal, plain text elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from .model import DownNode, Snapshot, node_rows, pod_rows
from .text import printable

UNREQUESTED = "UNREQUESTED"
# A process on a GPU its container was not given, and one whose node has no allocation data.
NOT_ALLOCATED = "✗ NOT ALLOCATED"
ALLOCATION_UNKNOWN = "?"
NO_POD = "(no pod)"
# A value the server could not know (the node's agent is down), as kubectl top shows one.
UNKNOWN = "<unknown>"


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


def known(value: int | None, show: Callable[[int], str] = str) -> Cell:
    """``value`` as ``show`` writes it, or the UNKNOWN marker."""
    return Text(UNKNOWN, style="yellow") if value is None else show(value)


Cell = str | Text
GAP = 2  # spaces between columns
# Rows per renderable: printing block by block puts the first rows on screen at
# once instead of after the whole table is drawn.
BLOCK = 500


def clean(cell: Cell) -> Cell:
    """``cell`` made ``printable``, its styles kept."""
    if isinstance(cell, str):
        return printable(cell)
    original = cell.plain
    plain = printable(original)
    if plain is original:
        return cell
    cell = cell.copy()
    cell.plain = plain
    return cell


class Grid:
    """A borderless table of fixed column widths, drawn straight as rich Segments.

    rich's ``Table`` lays out and renders every cell on its own, about 25 µs a
    cell even with fixed widths: the GPU table of a 1,000-node cluster (280,000
    cells) took 10 s. Here the widths are measured once, from the cells' plain
    text, and a row is a few Segments; rich still styles them, measures wide
    characters and decides on colour. A line wider than the screen is cut with
    an ellipsis.
    """

    def __init__(
        self, widths: Sequence[int], rows: Sequence[Sequence[Cell]], *, header: bool = False
    ) -> None:
        self.widths = widths
        self.rows = rows
        # The first row is the header, drawn bold.
        self.header = header

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        bold = console.get_style("bold")
        width = options.max_width
        newline = Segment.line()
        for number, row in enumerate(self.rows):
            style = bold if self.header and number == 0 else None
            line, length = self._line(console, row, style)
            if length > width:
                line = [*Segment.adjust_line_length(line, width - 1), Segment("…", style)]
            yield from line
            yield newline

    def _line(
        self, console: Console, row: Sequence[Cell], style: Style | None
    ) -> tuple[list[Segment], int]:
        """The row's Segments, each cell padded to its column, no trailing blanks; its width.

        Unstyled cells and their padding join into one Segment: rich's work after
        this grows with the number of Segments, not their length.
        """
        line: list[Segment] = []
        run: list[str] = []
        last = max((index for index, cell in enumerate(row) if cell), default=-1)
        length = 0
        for index in range(last + 1):
            cell = row[index]
            if isinstance(cell, Text) and cell and (cell.style or cell.spans):
                if run:
                    line.append(Segment("".join(run), style))
                    run = []
                # Text.render leaves out the Text's own style, which its owner applies.
                segments = cell.render(console)
                if cell.style:
                    segments = Segment.apply_style(segments, console.get_style(cell.style))
                line.extend(segments)
                plain = cell.plain
            else:
                plain = _plain(cell)
                run.append(plain)
            if index == last:
                length += cell_len(plain)
            else:
                run.append(" " * (self.widths[index] - cell_len(plain)))
                length += self.widths[index]
        if run:
            line.append(Segment("".join(run), style))
        return line, length


def widths(columns: Sequence[str], rows: Sequence[Sequence[Cell]]) -> list[int]:
    """Each column's width: its widest cell (or header), and the gap but for the last."""
    result = []
    for index, header in enumerate(columns):
        widest = max([cell_len(header), *(cell_len(_plain(row[index])) for row in rows)])
        result.append(widest if index == len(columns) - 1 else widest + GAP)
    return result


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def down_lines(down: list[DownNode]) -> list[Text]:
    """A red line per down node, naming it and why."""
    return [Text(printable(f"{d.node}: agent down: {d.reason}"), style="red") for d in down]


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
                if p.allocation == "NOT_ALLOCATED":
                    who.append(f" {NOT_ALLOCATED}", style="bold magenta")
                elif p.allocation == "UNKNOWN":
                    who.append(f" {ALLOCATION_UNKNOWN}", style="dim")
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
            f"{row.gpus_requested}/{UNKNOWN if row.gpus_used is None else row.gpus_used}",
            known(row.memory_bytes, size),
            known(row.sm_percent, percent),
            Text(UNREQUESTED, style="bold red") if row.unrequested else "",
        ]
        for row in pod_rows(snapshot, sort_by)
    ]
    return columns, rows


def node_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per node; a down node's row says DOWN and unknown (why is said below the table)."""
    columns = ["NODE", "GPUS", "UTIL", "MEMORY", "MAX TEMP", "PODS", "PROCESSES"]
    rows: list[list[Cell]] = []
    for row in node_rows(snapshot, sort_by):
        name = Text(row.name, style="bold")
        if row.down_reason:
            # The reason is long; it goes on its own line below, not into a column.
            unknown = known(None)
            rows.append([name, Text("DOWN", style="red"), *[unknown] * (len(columns) - 2)])
            continue
        rows.append(
            [
                name,
                known(row.gpus),
                percent(row.utilization),
                f"{size(row.memory_used)}/{size(row.memory_total)}",
                "-" if row.max_temperature is None else f"{row.max_temperature}C",
                known(row.pods),
                known(row.processes),
            ]
        )
    return columns, rows


def view(
    name: str, snapshot: Snapshot, sort_by: str, *, wide: bool = False, height: int | None = None
) -> list[RenderableType]:
    """View ``name`` (gpus, pods or nodes) as renderables: blocks of rows, then the down nodes.

    With ``height`` (a live view's screen) only that many rows are drawn: rows
    below the screen would only cost time.
    """
    build = {"pods": pod_table_rows, "nodes": node_table_rows}.get(name, gpu_table_rows)
    columns, rows = build(snapshot, sort_by, wide=wide)
    more: list[Text] = []
    if height is not None and len(rows) > height:
        hidden = len(rows) - max(height, 1)
        rows = rows[: max(height, 1)]
        more.append(Text(f"... {hidden} more rows: narrow with --node or -n", style="dim"))
    rows = [[clean(cell) for cell in row] for row in rows]
    sizes = widths(columns, rows)
    lines: list[Sequence[Cell]] = [columns, *rows]
    blocks: list[RenderableType] = [
        Grid(sizes, lines[start : start + BLOCK], header=start == 0)
        for start in range(0, len(lines), BLOCK)
    ]
    return [*blocks, *more, *down_lines(snapshot.down)]
