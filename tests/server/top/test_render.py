"""The tables ``gpugraph top`` draws: columns, screen width, blocks, and names that are no text."""

from __future__ import annotations

import io
import re

from rich.console import Console

from api.top import model
from api.top.model import DownNode, GpuRow, PodRef, ProcessRow, Snapshot
from api.top.render import BLOCK, view

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
    for part in view(name, model.apply(snapshot, model.Filters()), "name"):
        console.print(part)
    out: str = console.file.getvalue()  # type: ignore[attr-defined]
    return out


def test_columns_line_up_under_their_headers_and_lines_end_without_blanks() -> None:
    snapshot = Snapshot([gpu("node-a", 0, process(7)), gpu("node-bb", 1)], [])
    lines = draw(snapshot).splitlines()
    header = lines[0]
    assert header.split() == ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "PODS"]
    gpu_row, process_row, other_gpu = lines[1:4]
    assert gpu_row.index("NVIDIA H200") == header.index("MODEL")
    assert gpu_row.index("ml/train") == header.index("PODS")
    assert process_row.index("SM 40%") == header.index("UTIL")
    assert process_row.index("PID 7 ml/train [trainer]") == header.index("PODS")
    assert other_gpu.startswith("node-bb  1")
    assert all(line == line.rstrip() for line in lines)


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
