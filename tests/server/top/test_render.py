"""The tables ``gpugraph top`` draws: columns, screen width, blocks, and names that are no text."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from api.top import model
from api.top.model import DownNode, GpuRow, PodRef, ProcessRow, Snapshot
from api.top.render import BLOCK, Cell, clean, size, view
from api.top.render import draw as draw_view

ESCAPES = "\x1b]0;owned\x07\x1b[2J"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def gpu(node: str, index: int, *processes: ProcessRow, error: str | None = None) -> GpuRow:
    return GpuRow(node, index, f"GPU-{node}-{index}", "NVIDIA H200", 50, 1 << 30, 2 << 30, 60,
                  error, processes)  # fmt: skip


def process(pid: int, name: str = "python3", pod: str | None = "train") -> ProcessRow:
    ref = None if pod is None else PodRef(f"uid-{pod}", "ml", pod, "node-a", 1)
    return ProcessRow(pid, name, ref, "trainer", 1 << 29, 40)


def draw(snapshot: Snapshot, name: str = "gpus", *, width: int = 1000, color: bool = False) -> str:
    console = Console(
        file=io.StringIO(),
        width=width,
        color_system="truecolor" if color else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )
    draw_view(console, view(name, model.apply(snapshot, model.Filters()), "name"))
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    return out


def test_columns_line_up_under_their_headers_and_lines_end_without_blanks() -> None:
    snapshot = Snapshot([gpu("node-a", 0, process(7)), gpu("node-bb", 1)], [])
    lines = draw(snapshot).splitlines()
    header = lines[0]
    assert header.split() == ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "FLAGS", "PODS"]
    gpu_row, process_row, other_gpu = lines[1:4]
    assert gpu_row.index("NVIDIA H200") == header.index("MODEL")
    assert gpu_row.index("ml/train") == header.index("PODS")
    assert process_row.index("SM 40%") == header.index("UTIL")
    assert process_row.index("PID 7 ml/train [trainer]") == header.index("PODS")
    assert other_gpu.startswith("node-bb  1")
    assert all(line == line.rstrip() for line in lines)


# Unicode's bidirectional controls: each would show the rest of its line in another order.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_names_from_the_cluster_cannot_drive_the_terminal() -> None:
    snapshot = Snapshot(
        [gpu("node-a", 0, process(7, name=ESCAPES, pod=None), error=f"XID\n{ESCAPES}")],
        [DownNode("node-b", f"refused\r\n{ESCAPES}")],
    )
    for color in (False, True):
        # With colour on, the only escapes left are rich's own styles (SGR).
        out = SGR.sub("", draw(snapshot, color=color))
        assert "\x1b" not in out and "\x07" not in out and "]0;owned" in out
    # Newlines too: each row stays one line (header, GPU, process, the down node).
    _, gpu_row, process_row, down = draw(snapshot).splitlines()
    assert "GPU error: XID?" in gpu_row
    assert process_row.endswith("?]0;owned?[2J (no pod)")  # rich's Text drops the bell
    assert down == "node-b: agent down: refused???]0;owned??[2J"


@pytest.mark.parametrize("name", ["gpus", "pods", "nodes"])
def test_bidirectional_controls_in_names_cannot_reorder_the_line(name: str) -> None:
    pod = PodRef("uid-b", "ml", f"evil{BIDI}txt.exe", "node-a", 0)
    snapshot = Snapshot(
        [gpu(f"node{BIDI}", 0, ProcessRow(7, f"py{BIDI}", pod, f"c{BIDI}", 1, 1))],
        [DownNode(f"down{BIDI}", f"refused{BIDI}")],
    )
    for color in (False, True):
        out = draw(snapshot, name, color=color)
        assert not set(BIDI) & set(out), repr(out)
    assert f"evil{'?' * len(BIDI)}txt.exe" in draw(snapshot, "pods")


def test_a_line_wider_than_the_screen_ends_in_an_ellipsis() -> None:
    snapshot = Snapshot([gpu("node-a", 0, process(7, pod="a-pod-with-a-long-name"))], [])
    lines = draw(snapshot, width=40).splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert lines[0] == draw(snapshot).splitlines()[0][:39] + "…"


def test_a_large_table_comes_in_blocks_under_one_header() -> None:
    gpus = [gpu(f"node-{n:03d}", i, process(n * 8 + i)) for n in range(40) for i in range(8)]
    parts = view("gpus", model.apply(Snapshot(gpus, []), model.Filters()), "name")
    assert len(parts) == -(-(1 + 2 * len(gpus)) // BLOCK) > 1
    lines = draw(Snapshot(gpus, [])).splitlines()
    assert len(lines) == 1 + 2 * len(gpus)
    assert [line for line in lines if line.startswith("NODE")] == [lines[0]]
    # Every block lines up with the first: the widths are the whole table's.
    pods = {line.index("ml/train") for line in lines[1:] if not line.lstrip().startswith("└")}
    assert len(pods) == 1


def tricky() -> Snapshot:
    """Wide characters, a name with control codes, a flagged and an unknown allocation,
    a GPU error, a pod with no GPU use (its FLAGS cell empty), a GPU in MIG mode and a
    down node."""
    flagged = ProcessRow(8, "python3", PodRef("uid-x", "ml", "x", "node-a", 0), "c", 1 << 29, None,
                         allocation="NOT_ALLOCATED")  # fmt: skip
    unknown = ProcessRow(9, "python3", PodRef("uid-y", "ml", "y", "node-a", 1), "c", None, 5,
                         allocation="UNKNOWN")  # fmt: skip
    return Snapshot(
        [
            gpu("node-a", 0, process(7), flagged, unknown),
            GpuRow(
                "node-名前",
                1,
                "GPU-w",
                "\uff28\uff12\uff10\uff10",  # fullwidth: two cells a character
                None,
                None,
                None,
                None,
                None,
                (process(11, name="bad\x07\r name", pod=None),),
                True,
            ),
            gpu("node-b", 0, error="XID 79"),
        ],
        [DownNode("node-c", "refused")],
        pods=[PodRef("uid-idle", "ml", "idle", "node-a", 1)],
    )


def as_text(cell: Cell) -> Text:
    """The cell as the rich ``Text`` it was before ``Styled``."""
    if isinstance(cell, str):
        return Text(cell)
    text = Text()
    for run, style in cell.runs:
        text.append(run, style=style)
    return text


def reference(name: str, snapshot: Snapshot, *, wide: bool = False) -> list[str]:
    """The view through rich's own ``Table`` (fixed widths, no padding), blanks stripped."""
    from rich.table import Table

    from api.top.render import (
        gpu_table_rows,
        namespace_table_rows,
        node_table_rows,
        pod_table_rows,
        widths,
    )

    build = {
        "pods": pod_table_rows,
        "nodes": node_table_rows,
        "namespaces": namespace_table_rows,
    }.get(name, gpu_table_rows)
    columns, rows = build(model.apply(snapshot, model.Filters()), "name", wide=wide)
    rows = [[clean(cell) for cell in row] for row in rows]
    table = Table(box=None, pad_edge=False, show_edge=False, padding=0, show_header=True)
    for header, column_width in zip(columns, widths(columns, rows), strict=True):
        table.add_column(header, no_wrap=True, width=column_width)
    for row in rows:
        # Text, not str: a str cell is rich markup, and "[trainer]" would be a tag.
        table.add_row(*[as_text(c) for c in row])
    console = Console(file=io.StringIO(), width=1000, color_system=None)
    console.print(table)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["gpus", "pods", "nodes", "namespaces"])
@pytest.mark.parametrize("wide", [False, True])
def test_the_lines_are_rich_tables_without_trailing_blanks(name: str, wide: bool) -> None:
    console = Console(file=io.StringIO(), width=1000, color_system=None)
    draw_view(console, view(name, model.apply(tricky(), model.Filters()), "name", wide=wide))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[: len(lines) - 1] == reference(name, tricky(), wide=wide)
    assert lines[-1] == "node-c: agent down: refused"
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("width", [1000, 30])
def test_without_colour_the_lines_are_what_rich_prints(width: int) -> None:
    # draw() writes the lines straight where styles draw nothing; rich printing the
    # same renderables writes the same bytes.
    parts = view("gpus", model.apply(tricky(), model.Filters()), "name")
    straight = Console(file=io.StringIO(), width=width, color_system=None)
    draw_view(straight, parts)
    printed = Console(file=io.StringIO(), width=width, color_system=None)
    for part in parts:
        printed.print(part)
    assert straight.file.getvalue() == printed.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["gpus", "pods", "nodes", "namespaces"])
def test_on_a_colour_terminal_the_same_text_is_styled(name: str) -> None:
    plain, coloured = draw(tricky(), name), draw(tricky(), name, color=True)
    assert SGR.sub("", coloured) == plain
    lines = coloured.splitlines()
    by_pod = name in ("pods", "namespaces")
    assert lines[0].startswith("\x1b[1mNAMESPACE" if by_pod else "\x1b[1mNODE")
    if name == "gpus":
        assert "\x1b[1mnode-a\x1b[0m" in lines[1]
        assert "\x1b[1;31mUNREQUESTED\x1b[0m \x1b[1;35mNOT-ALLOCATED\x1b[0m" in lines[3]
        assert lines[3].endswith("PID 8 ml/x [c]")
        assert "\x1b[2mALLOC-UNKNOWN\x1b[0m" in lines[4]
        # A row of plain cells is one run of text, no escapes.
        assert "\x1b" not in lines[2]
        assert "\x1b[31mGPU error: XID 79\x1b[0m" in coloured
    assert lines[-1] == "\x1b[31mnode-c: agent down: refused\x1b[0m"


def test_a_namespace_row_says_how_many_of_its_pods_are_on_a_down_node() -> None:
    stranded = PodRef("uid-stranded", "ml", "stranded", "node-c", 2)
    snapshot = Snapshot([gpu("node-a", 0, process(7))], [DownNode("node-c", "refused")],
                        pods=[stranded])  # fmt: skip
    lines = draw(snapshot, "namespaces").splitlines()
    # Both pods and their three GPUs count; the sums are the known pod's, said to be.
    assert lines[1].split() == ["ml", "2", "(1", "down)", "3/1", "512.0Mi", "40%"]
    assert lines[2] == "node-c: agent down: refused"
    assert "\x1b[33m2 (1 down)\x1b[0m" in draw(snapshot, "namespaces", color=True)


def loop_size(value: int) -> str:
    """Bytes in binary units as ``size`` wrote them before it lost its loop."""
    amount = float(value)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if amount < 1024 or unit == "Ti":
            return f"{amount:.0f}" if not unit else f"{amount:.1f}{unit}"
        amount /= 1024
    raise AssertionError("unreachable")


@given(st.integers(min_value=0, max_value=1 << 62))
def test_sizes_are_the_unit_by_unit_figures(value: int) -> None:
    assert size(value) == loop_size(value)


@pytest.mark.parametrize("power", [10, 20, 30, 40])
def test_sizes_at_each_units_edge(power: int) -> None:
    for value in ((1 << power) - 1, 1 << power, (1 << power) + 1, 1023 << power):
        assert size(value) == loop_size(value)
    assert size(None) == "-"
