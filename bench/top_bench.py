"""How long ``gpugraph top`` takes: the whole command, its start-up, and where the time goes.

Measured side by side in one run:

1. start-up: ``python -c pass`` (the interpreter alone), ``gpugraph --help``,
   ``gpugraph top --help``, and ``gpugraph top`` against a closed port (every
   import of a ``--server`` run, no server), and with a kubeconfig whose API
   server is closed (the Kubernetes client's kubeconfig loader too);
2. ``gpugraph top`` (GPUs), ``top nodes`` and ``top pods -o json``, the real
   command in a subprocess with output to a pipe, against ``gpugraph demo`` at
   its default size (7 nodes, 30 GPUs, one agent down), with ``--server`` and through the
   kubeconfig (the API server's service proxy and the WebSocket);
3. the same against a real ``gpugraph serve`` over N simulated nodes
   (``bench/fleet.py``: 8 GPUs x 4 processes each, one real agent per node in
   ``bench/agent_host.py``), and the split of one in-process run: the GraphQL
   round trip, parsing the answer, building the rows, and drawing them as
   ``gpugraph top`` does; with ``--baseline DIR`` the baseline's query, parser,
   rows and drawing too, alternating run by run in the same process.

Target (issue 14): ``gpugraph top`` <= 1 s at the demo's size, start-up well
under a second. Run ``python bench/top_bench.py`` (full size: N = 1,000) or
``--small`` (CI: N = 10).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import json
import os
import platform
import re
import shlex
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
from types import ModuleType
from typing import Any

import httpx
import orjson
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster_bench import start_cluster  # noqa: E402
from map_bench import serve  # noqa: E402

from api.demo.cluster import write_kubeconfig  # noqa: E402
from api.top import model  # noqa: E402
from api.top.command import PIPE_WIDTH, no_cycle_collection  # noqa: E402
from api.top.queries import SNAPSHOT  # noqa: E402
from api.top.render import draw, view  # noqa: E402
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


def load_baseline(root: Path) -> tuple[ModuleType, ModuleType, ModuleType]:
    """The ``api.top`` model, render and queries of another checkout, imported in this
    process under another package name (``api.top`` imports only within itself)."""
    spec = importlib.util.spec_from_file_location(
        "baseline_api", root / "api" / "__init__.py", submodule_search_locations=[str(root / "api")]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["baseline_api"] = package
    spec.loader.exec_module(package)
    return (
        importlib.import_module("baseline_api.top.model"),
        importlib.import_module("baseline_api.top.render"),
        importlib.import_module("baseline_api.top.queries"),
    )


def quiet_console() -> Console:
    """A console as ``gpugraph top`` opens one for a pipe, writing to memory."""
    return Console(file=io.StringIO(), width=PIPE_WIDTH, highlight=False, markup=False,
                   emoji=False, soft_wrap=False, color_system=None)  # fmt: skip


def post(client: httpx.Client, url: str, query: str, variables: dict[str, Any]) -> bytes:
    """The raw answer of one query (what the transport parses)."""
    response = client.post(url, json={"query": query, "variables": variables})
    response.raise_for_status()
    return response.content


def this_top(raw: bytes) -> tuple[float, float, float, str]:
    """Parse, rows, drawing (seconds) and the text, as this checkout's command does them."""
    with no_cycle_collection():
        start = time.perf_counter()
        body = orjson.loads(raw)
        parsed = time.perf_counter()
        snapshot = model.apply(model.snapshot_from_query(body), model.Filters())
        built = time.perf_counter()
        console = quiet_console()
        draw(console, view("gpus", snapshot, "name"))
        done = time.perf_counter()
    return parsed - start, built - parsed, done - built, console.file.getvalue()  # type: ignore[attr-defined]


def baseline_top(raw: bytes, modules: tuple[ModuleType, ...]) -> tuple[float, float, float, str]:
    """The same as the baseline's command did them (httpx's ``response.json()``: json)."""
    old_model, old_render = modules[0], modules[1]
    start = time.perf_counter()
    body = json.loads(raw)
    parsed = time.perf_counter()
    snapshot = old_model.apply(old_model.snapshot_from_query(body), old_model.Filters())
    built = time.perf_counter()
    console = quiet_console()
    for part in old_render.view("gpus", snapshot, "name"):
        console.print(part)
    done = time.perf_counter()
    return parsed - start, built - parsed, done - built, console.file.getvalue()  # type: ignore[attr-defined]


def split(url: str, repeat: int, baseline: Path | None = None) -> Iterator[str]:
    """Where one in-process ``gpugraph top`` spends its time, at this size; with a
    baseline, its figures beside this checkout's, alternating run by run."""
    modules = load_baseline(baseline) if baseline is not None else None
    variables: dict[str, Any] = {"node": None, "namespace": None, "selector": None,
                                 "withPods": False}  # fmt: skip
    sides = {"this": SNAPSHOT} | ({"baseline": modules[2].SNAPSHOT} if modules else {})
    times: dict[str, dict[str, list[float]]] = {
        side: {"fetch": [], "parse": [], "rows": [], "draw": []} for side in sides
    }
    size: dict[str, int] = {}
    texts: dict[str, str] = {}
    with httpx.Client(timeout=120) as client:
        for turn in range(repeat):
            order = list(sides) if turn % 2 == 0 else list(reversed(sides))
            # The queries back to back, each first every other turn: the server keeps its
            # agents' snapshots for a second, so the one that follows may find them fresh
            # (and none waits for the other's drawing to let them go stale).
            raws = {}
            for side in order:
                start = time.perf_counter()
                raws[side] = post(client, url + "/graphql", sides[side], variables)
                times[side]["fetch"].append(time.perf_counter() - start)
                size[side] = len(raws[side])
            for side in order:
                raw = raws[side]
                if side == "this":
                    parse, rows, drawing, texts[side] = this_top(raw)
                else:
                    assert modules is not None
                    parse, rows, drawing, texts[side] = baseline_top(raw, modules)
                times[side]["parse"].append(parse)
                times[side]["rows"].append(rows)
                times[side]["draw"].append(drawing)
    lines = texts["this"].count("\n")
    yield f"\n{lines:,} table lines (GPUs and their processes):\n"
    yield HEADER
    labels = {
        "fetch": "GraphQL round trip (POST, server, bytes)",
        "parse": "parsing the answer",
        "rows": "rows from the answer",
        "draw": "the table drawn (`render.view`, printed)",
    }
    for key, label in labels.items():
        for side in sides:
            suffix = "" if side == "this" else ", baseline"
            yield row(f"{label}{suffix}", times[side][key])
    for side in sides:
        after = [
            sum(t) for t in zip(*(times[side][k] for k in ("parse", "rows", "draw")), strict=True)
        ]
        suffix = "" if side == "this" else ", baseline"
        yield row(f"parse + rows + drawing{suffix}", after)
    yield ""
    for side in sides:
        yield f"answer of {side}'s query: {size[side]:,} bytes"
    if modules is not None:
        for key in ("parse", "rows", "draw"):
            ratio = statistics.median(times["baseline"][key]) / statistics.median(
                times["this"][key]
            )
            yield f"baseline / this, {key}, medians: {ratio:.1f}x"
        # The same table, but for the bytes of the smaller query (the same text).
        yield f"same text as the baseline's: {texts['this'] == texts['baseline']}"


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
def fleet(nodes: int, pods: int, tmp: str, flags: Sequence[str] = ()) -> Iterator[str]:
    """A real ``gpugraph serve`` (auth none, ``flags``) over ``nodes`` simulated nodes: its URL."""
    cluster = start_cluster(nodes, pods)
    kubeconfig = write_kubeconfig(os.path.join(tmp, "fleet"), cluster.stub.url)
    server, url = serve(kubeconfig, cluster.port, *flags)
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
        help="benchmark 3 also runs the command of this checkout (e.g. git archive of a tag), "
        "and its query, rows and drawing in the split",
    )
    parser.add_argument(
        "--serve-flags",
        default="",
        help="flags for benchmark 3's server, e.g. '--snapshot-ttl 5 --snapshot-keep-warm 60'",
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
            emit(["\n2. gpugraph demo (7 nodes, 30 GPUs)\n", HEADER])
            emit(commands(["--server", url], args.repeat, "--server"))
            emit(commands(["--kubeconfig", kubeconfig], args.repeat, "kubeconfig"))
            emit(split(url, args.repeat))
        with fleet(args.nodes, args.pods, tmp, shlex.split(args.serve_flags)) as url:
            emit([f"\n3. {args.nodes:,} nodes x 8 GPUs, {args.pods:,} pods\n", HEADER])
            emit(commands(["--server", url], args.repeat, "--server", args.baseline))
            emit(split(url, args.repeat, args.baseline))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
