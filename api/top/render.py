"""Rich renderables of each view: tables for a terminal, plain text elsewhere."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from .marks import Mark
from .model import (
    DownNode,
    ProcessRow,
    Snapshot,
    namespace_rows,
    node_rows,
    pod_rows,
    process_marks,
)
from .text import printable

NO_POD = "(no pod)"
# A value the server could not know (the node's agent is down), as kubectl top shows one.
UNKNOWN = "<unknown>"


@functools.lru_cache(maxsize=1 << 16)
def size(value: int | None) -> str:
    """Bytes in binary units, e.g. ``30.0Gi``."""
    # A call per process of a large table (cached: most values repeat). Dividing by a
    # power of two is exact, so these are the figures of dividing by 1024 unit by unit.
    if value is None:
        return "-"
    amount = float(value)
    if amount < _KI:
        return f"{amount:.0f}"
    if amount < _MI:
        return f"{amount / _KI:.1f}Ki"
    if amount < _GI:
        return f"{amount / _MI:.1f}Mi"
    if amount < _TI:
        return f"{amount / _GI:.1f}Gi"
    return f"{amount / _TI:.1f}Ti"


_KI, _MI, _GI, _TI = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def percent(value: int | None) -> str:
    """``35%``, or ``-`` when unknown."""
    return "-" if value is None else f"{value}%"


def known(value: int | None, show: Callable[[int], str] = str) -> Cell:
    """``value`` as ``show`` writes it, or the UNKNOWN marker."""
    return Styled((UNKNOWN, "yellow")) if value is None else show(value)


def _stripped(text: str) -> str:
    """``text`` without the control codes rich's ``Text`` drops (bell, backspace, CR...)."""
    return text if text.isprintable() else strip_control_codes(text)


class Styled:
    """A cell in runs of text, each with a rich style name or none.

    What the tables used rich's ``Text`` for, at a fraction of its cost: building
    and rendering a ``Text`` is about 15 µs, and the GPU table of a 1,000-node
    cluster has 40,000 such cells. Its text loses the control codes ``Text``
    drops, as it did when it was one.
    """

    __slots__ = ("plain", "runs", "width")

    def __init__(self, *runs: tuple[str, str | None]) -> None:
        plain = "".join([text for text, _ in runs])
        if not plain.isprintable():
            runs = tuple((strip_control_codes(text), style) for text, style in runs)
            plain = "".join([text for text, _ in runs])
        self.runs = runs
        self.plain = plain
        # Run by run: a run like a flag is measured once (rich caches it), not as part
        # of each cell's text.
        self.width = len(plain) if plain.isascii() else sum([_width(text) for text, _ in runs])

    def __bool__(self) -> bool:
        return bool(self.plain)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Styled) and other.runs == self.runs

    def __hash__(self) -> int:
        return hash(self.runs)

    def __repr__(self) -> str:
        return f"Styled{self.runs!r}"


Cell = str | Styled
GAP = 2  # spaces between columns
# Rows per renderable: printing block by block puts the first rows on screen at
# once instead of after the whole table is drawn.
BLOCK = 500


def clean(cell: Cell) -> Cell:
    """``cell`` made ``printable``, its styles kept."""
    if isinstance(cell, str):
        return printable(cell)
    if cell.plain.isprintable():
        return cell
    return Styled(*((printable(text), style) for text, style in cell.runs))


def _cleaned(column: Sequence[Cell]) -> Sequence[Cell]:
    """The column's cells made ``printable``: as it is when all are."""
    if "".join(_plains(column)).isprintable():
        return column
    return [clean(cell) for cell in column]


def _width(text: str) -> int:
    """Terminal cells of ``text``: its length when ASCII, else rich's measure."""
    return len(text) if text.isascii() else cell_len(text)


def _plains(cells: Iterable[Cell]) -> list[str]:
    return [c if c.__class__ is str else c.plain for c in cells]  # type: ignore[union-attr]


def _cell_width(cell: Cell) -> int:
    return _width(cell) if isinstance(cell, str) else cell.width


def _column_width(cells: Sequence[Cell]) -> int:
    """The widest of ``cells``: each distinct text measured once (most columns repeat a few)."""
    plains = _plains(cells)
    if "".join(plains).isascii():
        return max(map(len, plains), default=0)
    # Styled cells by their own width, measured run by run; the rest by their text.
    styled = [cell for cell in cells if isinstance(cell, Styled)]
    texts = set(plains)
    texts.difference_update([cell.plain for cell in styled])
    return max(max([cell.width for cell in styled], default=0), max(map(_width, texts), default=0))


class Grid:
    """A borderless table of fixed column widths, drawn line by line.

    rich's ``Table`` lays out and renders every cell on its own, about 25 µs a
    cell even with fixed widths: the GPU table of a 1,000-node cluster (280,000
    cells) took 10 s. Here the widths are measured once and each line is
    joined column by column from the cells' plain text; a line wider than the
    screen is cut with an ellipsis. Where styles draw nothing (no colour: a
    pipe, a file) the lines are the output; on a colour terminal a line with
    styled cells becomes a few rich Segments, and rich styles them.
    """

    def __init__(
        self, widths: Sequence[int], rows: Sequence[Sequence[Cell]], *, header: bool = False
    ) -> None:
        self.widths = widths
        self.rows = rows
        # The first row is the header, drawn bold.
        self.header = header

    def lines(self, width: int) -> list[str]:
        """Each row as plain text: cells padded to their columns, no trailing blanks,
        a line wider than ``width`` cut to it with an ellipsis."""
        if not self.rows:
            return []
        columns = list(zip(*self.rows, strict=True))
        texts = [_plains(column) for column in columns]
        last = len(columns) - 1
        padded = [_padded(texts[index], self.widths[index]) for index in range(last)]
        lines = list(map("".join, zip(*padded, texts[last], strict=True)))
        offset = sum(self.widths[:last])
        for number, cell in enumerate(columns[last]):
            if cell:
                length = offset + _cell_width(cell)
            else:
                # Trailing empty cells: the line ends with the last cell that is not.
                lines[number], length = _trimmed([text[number] for text in texts], self.widths)
            if length > width:
                lines[number] = _cut(lines[number], width)
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        newline = Segment.line()
        lines = self.lines(width)
        if console.color_system is None:
            # Styles draw nothing without colour: the plain lines are the very output.
            for line in lines:
                yield Segment(line)
                yield newline
            return
        bold = console.get_style("bold")
        for number, (row, line) in enumerate(zip(self.rows, lines, strict=True)):
            style = bold if self.header and number == 0 else None
            if style is None and all(c.__class__ is str for c in row):
                yield Segment(line)
            else:
                yield from self._segments(console, row, style, width)
            yield newline

    def _segments(
        self, console: Console, row: Sequence[Cell], style: Style | None, width: int
    ) -> list[Segment]:
        """The row's Segments, each cell padded to its column, no trailing blanks.

        Unstyled cells and their padding join into one Segment: rich's work after
        this grows with the number of Segments, not their length.
        """
        line: list[Segment] = []
        run: list[str] = []
        last = max((index for index, cell in enumerate(row) if cell), default=-1)
        length = 0
        for index in range(last + 1):
            cell = row[index]
            if isinstance(cell, Styled):
                for text, name in cell.runs:
                    if name is None or not text:
                        run.append(text)
                        continue
                    if run:
                        line.append(Segment("".join(run), style))
                        run = []
                    line.append(Segment(text, console.get_style(name)))
                plain = cell.plain
            else:
                plain = cell
                run.append(plain)
            if index == last:
                length += _width(plain)
            else:
                run.append(" " * (self.widths[index] - _width(plain)))
                length += self.widths[index]
        if run:
            line.append(Segment("".join(run), style))
        if length > width:
            line = [*Segment.adjust_line_length(line, width - 1), Segment("…", style)]
        return line


def _padded(column: Sequence[str], width: int) -> list[str]:
    """The column's cells padded with blanks to ``width`` terminal cells."""
    # Each distinct text padded once: but for names, a column repeats a few texts.
    padded = {
        cell: cell.ljust(width) if cell.isascii() else cell + " " * (width - cell_len(cell))
        for cell in set(column)
    }
    return list(map(padded.__getitem__, column))


def _trimmed(cells: Sequence[str], widths: Sequence[int]) -> tuple[str, int]:
    """One line of ``cells`` up to the last that is not empty, that one unpadded; its width."""
    last = max((index for index, cell in enumerate(cells) if cell), default=-1)
    if last < 0:
        return "", 0
    parts = [cell + " " * (widths[index] - _width(cell)) for index, cell in enumerate(cells[:last])]
    return "".join(parts) + cells[last], sum(widths[:last]) + _width(cells[last])


def _cut(line: str, width: int) -> str:
    """``line`` cut to ``width`` terminal cells, its last an ellipsis."""
    if line.isascii():
        return line[: width - 1] + "…"
    kept = Segment.adjust_line_length([Segment(line)], width - 1)
    return "".join(segment.text for segment in kept) + "…"


def widths(
    columns: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    cells: Sequence[Sequence[Cell]] | None = None,
) -> list[int]:
    """Each column's width: its widest cell (or header), and the gap but for the last.

    The cells come as ``rows``, or column by column as ``cells``.
    """
    result = []
    if cells is None:
        cells = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    elif not cells:
        cells = [() for _ in columns]
    for index, header in enumerate(columns):
        widest = max(_width(header), _column_width(cells[index]))
        result.append(widest if index == len(columns) - 1 else widest + GAP)
    return result


def draw(console: Console, parts: Iterable[RenderableType]) -> None:
    """Print a view's ``parts``; a table as its plain lines where styles draw nothing.

    Without colour (a pipe, a file) rich would only split, measure and join the
    lines again: for the 40,000 lines of a 1,000-node GPU table that was most of
    the drawing's time. The bytes are the same.
    """
    for part in parts:
        if isinstance(part, Grid) and console.color_system is None:
            lines = part.lines(console.width)
            if lines:
                console.file.write("\n".join(lines) + "\n")
        else:
            console.print(part)


def down_lines(down: list[DownNode]) -> list[Text]:
    """A red line per down node, naming it and why."""
    return [Text(printable(f"{d.node}: agent down: {d.reason}"), style="red") for d in down]


# Lines a view gives what it could not read: a cluster whose agents all keep no log
# would otherwise put a line per node under every table.
MAX_ERROR_LINES = 5


def error_lines(errors: Sequence[str]) -> list[Text]:
    """A red line per thing the view could not read (the EVENTS flags of a node whose log is
    off, say), at most MAX_ERROR_LINES and a count of the rest."""
    lines = [Text(printable(message), style="red") for message in errors[:MAX_ERROR_LINES]]
    if len(errors) > MAX_ERROR_LINES:
        rest = len(errors) - MAX_ERROR_LINES
        lines.append(Text(f"... and {rest} more (-o json lists every one in errors)", style="red"))
    return lines


Rows = tuple[list[str], list[list[Cell]]]


def gpu_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per GPU grouped by node, and a row per process under it."""
    # FLAGS before PODS: a GPU's list of pods is the long cell that a screen cuts.
    columns = ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "FLAGS", "PODS"]
    if wide:
        columns.insert(2, "UUID")
    rows: list[list[Cell]] = []
    append = rows.append
    previous = None
    for gpu in snapshot.gpus:
        node: Cell = Styled((gpu.node, "bold")) if gpu.node != previous else ""
        previous = gpu.node
        pods: Cell = (
            Styled((f"GPU error: {gpu.error}", "red"))
            if gpu.error
            else _stripped(", ".join(gpu.pods) or "-")
        )
        cells: list[Cell] = [
            node,
            str(gpu.index),
            gpu.model or "-",
            percent(gpu.utilization),
            f"{size(gpu.memory_used)}/{size(gpu.memory_total)}",
            "-" if gpu.temperature is None else f"{gpu.temperature}C",
            flags(gpu.marks),
            pods,
        ]
        if wide:
            cells.insert(2, gpu.uuid)
        append(cells)
        mig = gpu.mig
        for p in gpu.processes:
            marks = flags(process_marks(p, mig))
            append(
                ["", "", "", "  └", _sm(p.sm_percent), size(p.memory_bytes), "", marks, _who(p)]
                if wide
                else ["", "", "  └", _sm(p.sm_percent), size(p.memory_bytes), "", marks, _who(p)]
            )
    return columns, rows


def _sm(value: int | None) -> str:
    return "SM -" if value is None else f"SM {value}%"


def _who(p: ProcessRow) -> Cell:
    """A process's PODS cell: its PID, and its pod and container."""
    pod = p.pod
    if pod is None:
        return Styled((f"PID {p.pid} {p.name or ''} {NO_POD}".rstrip(), "yellow"))
    who = f"PID {p.pid} {pod.namespace}/{pod.name} [{p.container or '-'}]"
    return who if who.isprintable() else strip_control_codes(who)


@functools.lru_cache(maxsize=256)
def flags(marks: tuple[Mark, ...] | None) -> Cell:
    """A FLAGS cell: each flag's word in its colour, or UNKNOWN where the flags are not known."""
    if marks is None:
        return known(None)
    if not marks:
        return ""
    runs: list[tuple[str, str | None]] = []
    for mark in marks:
        if runs:
            runs.append((" ", None))
        runs.append((mark.word, mark.style))
    return Styled(*runs)


def pod_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per pod requesting or using GPUs."""
    columns = ["NAMESPACE", "POD", "NODE", "GPUS(REQ/USED)", "MEMORY", "SM", "FLAGS"]
    rows: list[list[Cell]] = [
        [
            row.namespace,
            row.name,
            row.node or "-",
            f"{row.gpus_requested}/{UNKNOWN if row.gpus_used is None else row.gpus_used}",
            known(row.memory_bytes, size),
            known(row.sm_percent, percent),
            flags(row.marks),
        ]
        for row in pod_rows(snapshot, sort_by)
    ]
    return columns, rows


def namespace_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per namespace, its pods summed; pods on a down node are counted as ``N down``."""
    columns = ["NAMESPACE", "PODS", "GPUS(REQ/USED)", "MEMORY", "SM", "FLAGS"]
    rows: list[list[Cell]] = []
    for row in namespace_rows(snapshot, sort_by):
        pods: Cell = str(row.pods)
        if row.pods_unknown:
            # Their use is in no sum of the row: said here, their nodes below the table.
            pods = Styled((f"{row.pods} ({row.pods_unknown} down)", "yellow"))
        used = UNKNOWN if row.gpus_used is None else row.gpus_used
        rows.append(
            [
                row.namespace,
                pods,
                f"{row.gpus_requested}/{used}",
                known(row.memory_bytes, size),
                known(row.sm_percent, percent),
                flags(row.marks),
            ]
        )
    return columns, rows


def node_table_rows(snapshot: Snapshot, sort_by: str, *, wide: bool = False) -> Rows:
    """A row per node; a down node's row says DOWN and unknown (why is said below the table)."""
    columns = ["NODE", "GPUS", "UTIL", "MEMORY", "MAX TEMP", "PODS", "PROCESSES", "FLAGS"]
    rows: list[list[Cell]] = []
    for row in node_rows(snapshot, sort_by):
        name = Styled((row.name, "bold"))
        if row.down_reason:
            # The reason is long; it goes on its own line below, not into a column.
            unknown = known(None)
            rows.append([name, Styled(("DOWN", "red")), *[unknown] * (len(columns) - 2)])
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
                flags(row.marks),
            ]
        )
    return columns, rows


def view(
    name: str, snapshot: Snapshot, sort_by: str, *, wide: bool = False, height: int | None = None
) -> list[RenderableType]:
    """View ``name`` (gpus, pods, nodes or namespaces) as renderables: blocks of rows, then
    the down nodes.

    With ``height`` (a live view's screen) only that many rows are drawn: rows
    below the screen would only cost time.
    """
    build = {
        "pods": pod_table_rows,
        "nodes": node_table_rows,
        "namespaces": namespace_table_rows,
    }.get(name, gpu_table_rows)
    columns, rows = build(snapshot, sort_by, wide=wide)
    more: list[Text] = []
    if height is not None and len(rows) > height:
        hidden = len(rows) - max(height, 1)
        rows = rows[: max(height, 1)]
        more.append(Text(f"... {hidden} more rows: narrow with --node or -n", style="dim"))
    # Column by column: most columns are printable as a whole, checked at once.
    cells = [_cleaned(column) for column in zip(*rows, strict=True)]
    sizes = widths(columns, [], cells)
    lines: list[Sequence[Cell]] = [columns, *zip(*cells, strict=True)]
    blocks: list[RenderableType] = [
        Grid(sizes, lines[start : start + BLOCK], header=start == 0)
        for start in range(0, len(lines), BLOCK)
    ]
    return [*blocks, *more, *down_lines(snapshot.down), *error_lines(snapshot.events.errors)]
