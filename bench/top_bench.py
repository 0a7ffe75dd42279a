"""How long ``gpugraph top`` takes: the whole command, its start-up, and where the time goes.

Measured side by side in one run:

1. start-up: ``python -c pass`` (the interpreter alone), ``gpugraph --help``,
   ``gpugraph top --help``, and ``gpugraph top`` against a closed port (every
   import of a ``--server`` run, no server), and with a kubeconfig whose API
   server is closed (the Kubernetes client's kubeconfig loader too);
2. ``gpugraph top`` (GPUs), ``top nodes`` and ``top pods -o json``, the real
   command in a subprocess with output to a pipe, against ``gpugraph demo`` at
   its default size (4 nodes x 8 GPUs), with ``--server`` and through the
   kubeconfig (the API server's service proxy and the WebSocket);
3. the same against a real ``gpugraph serve`` over N simulated nodes
   (``bench/fleet.py``: 8 GPUs x 4 processes each, one real agent per node in
   ``bench/agent_host.py``), and the split of one in-process run: the GraphQL
   round trip, building the rows, and drawing them: as ``gpugraph top`` does
   (``render.Grid``) and, side by side, through rich's ``Table``.

Target (issue 14): ``gpugraph top`` <= 1 s at the demo's size, start-up well
under a second. Run ``python bench/top_bench.py`` (full size: N = 1,000) or
``--small`` (CI: N = 10).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster_bench import start_cluster  # noqa: E402
from map_bench import serve  # noqa: E402

from api.demo.cluster import write_kubeconfig  # noqa: E402
from api.top import model  # noqa: E402
from api.top.connection import Endpoint  # noqa: E402
from api.top.queries import SNAPSHOT  # noqa: E402
from api.top.render import Cell, gpu_table_rows, view, widths  # noqa: E402
from api.top.transport import HttpTransport  # noqa: E402
from tests.support.demo_process import free_port  # noqa: E402


def gpugraph() -> list[str]:
    script = Path(sys.executable).parent / "gpugraph"
    return [str(script)] if script.exists() else [sys.executable, "-m", "api.cli"]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUGRAPH_", "KUBECONFIG"))}


def run_times(
    command: Sequence[str], repeat: int, *, ok: Sequence[int] = (0,), cwd: Path = ROOT
) -> list[float]:
    """Wall seconds of each of ``repeat`` runs of ``command`` (output to a pipe)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode not in ok:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr!r}")
    return times


def row(label: str, times: list[float]) -> str:
    median, best = statistics.median(times), min(times)
    return f"| {label} | {median * 1000:,.0f} ms | {best * 1000:,.0f} ms | {len(times)} |"


HEADER = "| what | median | best | runs |\n|---|---|---|---|"


def startup(repeat: int, tmp: str) -> Iterator[str]:
    """Benchmark 1: start-up without a server to talk to."""
    closed = f"http://127.0.0.1:{free_port()}"
    kubeconfig = write_kubeconfig(os.path.join(tmp, "closed"), closed)
    yield row("`python -c pass`", run_times([sys.executable, "-c", "pass"], repeat))
    yield row("`gpugraph --help`", run_times([*gpugraph(), "--help"], repeat))
    yield row("`gpugraph top --help`", run_times([*gpugraph(), "top", "--help"], repeat))
    yield row(
        "`gpugraph top --server` (closed port)",
        run_times([*gpugraph(), "top", "--server", closed], repeat, ok=(1,)),
    )
    yield row(
        "`gpugraph top --kubeconfig` (closed API server)",
        run_times([*gpugraph(), "top", "--kubeconfig", kubeconfig], repeat, ok=(1,)),
    )


def commands(
    target: Sequence[str], repeat: int, label: str, baseline: Path | None = None
) -> Iterator[str]:
    """Benchmark 2/3's rows: each view, the real command.

    With ``baseline`` (another checkout, e.g. the last release) its command runs
    too, alternating run by run with this one's, so both see the same load, and
    each going first every other time: the server keeps its agents' snapshots
    for a second, so the one that follows may find them fresh.
    """
    top = [*gpugraph(), "top"]
    # ``python -m`` from the baseline's root imports its own ``api`` package.
    before = [sys.executable, "-m", "api.cli", "top"]
    views = {
        "`top`": [],
        "`top nodes`": ["nodes"],
        "`top pods -o json`": ["pods", "-o", "json"],
        "`top -o yaml`": ["-o", "yaml"],
    }
    for name, args in views.items():
        now: list[float] = []
        then: list[float] = []
        for turn in range(repeat):
            if baseline is not None and turn % 2:
                then += run_times([*before, *args, *target], 1, cwd=baseline)
            now += run_times([*top, *args, *target], 1)
            if baseline is not None and not turn % 2:
                then += run_times([*before, *args, *target], 1, cwd=baseline)
        yield row(f"{label}: {name}", now)
        if baseline is not None:
            yield row(f"{label}: {name}, baseline", then)
            ratio = statistics.median(then) / statistics.median(now)
            yield f"| {label}: {name}, baseline / this (medians) | {ratio:.1f}x | | |"


def table_renderer(columns: list[str], rows: list[list[Cell]]) -> Table:
    """The GPU view as rich's ``Table`` draws it (fixed widths, no padding): the renderer
    ``render.Grid`` replaced, kept here to measure the two side by side."""
    table = Table(box=None, pad_edge=False, show_edge=False, padding=0, header_style="bold")
    sizes = widths(columns, rows)
    for header, width in zip(columns, sizes, strict=True):
        table.add_column(header, no_wrap=True, width=width)
    for cells in rows:
        table.add_row(*cells)
    return table


def split(url: str, repeat: int) -> Iterator[str]:
    """Where one in-process ``gpugraph top`` spends its time, at this size."""
    transport = HttpTransport(Endpoint(url + "/graphql"))
    variables = {"node": None, "namespace": None, "selector": None, "withPods": False}
    fetch, build, render, table = [], [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        body = transport.execute(SNAPSHOT, variables)
        fetched = time.perf_counter()
        snapshot = model.apply(model.snapshot_from_query(body), model.Filters())
        built = time.perf_counter()
        console = Console(file=io.StringIO(), width=1000, color_system=None)
        for part in view("gpus", snapshot, "name"):
            console.print(part)
        rendered = time.perf_counter()
        console = Console(file=io.StringIO(), width=1000, color_system=None)
        console.print(table_renderer(*gpu_table_rows(snapshot, "name")))
        fetch.append(fetched - start)
        build.append(built - fetched)
        render.append(rendered - built)
        table.append(time.perf_counter() - rendered)
    gpus = len(snapshot.gpus)
    processes = sum(len(g.processes) for g in snapshot.gpus)
    yield f"\n{gpus:,} GPUs, {processes:,} processes:\n"
    yield HEADER
    yield row("GraphQL round trip (POST, server, JSON)", fetch)
    yield row("rows from the answer", build)
    yield row("the table as `gpugraph top` draws it (render.Grid)", render)
    yield row("the same rows through rich's `Table`, for comparison", table)
    ratio = statistics.median(table) / statistics.median(render)
    yield f"\nrich `Table` / `Grid`, medians: {ratio:.1f}x"


@contextmanager
def demo() -> Iterator[tuple[str, str]]:
    """``gpugraph demo`` at its default size: its URL and kubeconfig."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="gpugraph-top-bench-")
    process = subprocess.Popen(
        [*gpugraph(), "demo", "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**environment(), "TMPDIR": tmp},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    text = ""
    try:
        for line in process.stdout:
            text += line
            if line.startswith("Press Ctrl-C"):
                break
        found = re.search(r"gpugraph top --kubeconfig (\S+)", text)
        if not found:
            raise SystemExit(f"the demo did not start:\n{text}")
        yield f"http://127.0.0.1:{port}", found[1]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def fleet(nodes: int, pods: int, tmp: str) -> Iterator[str]:
    """A real ``gpugraph serve`` (auth none) over ``nodes`` simulated nodes: its URL."""
    cluster = start_cluster(nodes, pods)
    kubeconfig = write_kubeconfig(os.path.join(tmp, "fleet"), cluster.stub.url)
    server, url = serve(kubeconfig, cluster.port)
    try:
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        cluster.stop()


def emit(lines: Iterable[str]) -> None:
    """Print each line as it is measured: a full run takes minutes."""
    for line in lines:
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes for benchmark 3")
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=10, help="runs of each command")
    parser.add_argument("--small", action="store_true", help="CI size: 10 nodes, 3 runs")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="benchmark 3 also runs the command of this checkout (e.g. git archive of a tag)",
    )
    args = parser.parse_args()
    if args.small:
        args.nodes, args.pods, args.repeat = 10, 300, 3
    python = platform.python_version()
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {python}")
    tmp = tempfile.mkdtemp(prefix="gpugraph-top-bench-")
    try:
        emit(["\n1. Start-up\n", HEADER])
        emit(startup(args.repeat, tmp))
        with demo() as (url, kubeconfig):
            emit(["\n2. gpugraph demo (4 nodes x 8 GPUs)\n", HEADER])
            emit(commands(["--server", url], args.repeat, "--server"))
            emit(commands(["--kubeconfig", kubeconfig], args.repeat, "kubeconfig"))
            emit(split(url, args.repeat))
        with fleet(args.nodes, args.pods, tmp) as url:
            emit([f"\n3. {args.nodes:,} nodes x 8 GPUs, {args.pods:,} pods\n", HEADER])
            emit(commands(["--server", url], args.repeat, "--server", args.baseline))
            emit(split(url, args.repeat))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
