"""The server's CPU per request, in process, this tree beside another (issue 32's bound).

Part 3 of ``scale_bench.py`` measures the same requests over HTTP, with 100
clients; on a shared machine its per-request CPU swings by half between two
runs of the same tree, more than the 10% a change may cost, and even in
process one run of a tree can cost half as much again as the next. So here
every tree's server runs at once, each in a process of its own
(``request_cost_host.py``) against the same fleet as part 3 (4 nodes x 8
GPUs, real agents), its app called over ASGI; the runner asks each server in
turn for one batch of ``--batch`` requests in flight and reads what that
batch cost the server's process. A slow spell of the machine then falls on
every tree's batches alike, and each batch of a tree is compared with the
baseline's batch of the same turn.

The requests are part 3's: the dashboard-sized query (one document, a
label selector of its own per request, so nothing is shared) and the empty
answer (the pipeline's fixed cost per operation). For each tree the run
prints the median and first quartile of its batches' CPU per request, and
the median of its turn-by-turn ratios to the baseline.

``--trees`` names the code each server runs, as in ``fresh_read_bench.py``:
``.`` for this checkout as it is, or a git revision (its files from ``git
archive``); the first is the baseline. Run ``python
bench/request_cost_bench.py --trees REV,.`` with REV the commit before a
change; ``--small`` is CI's size.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fresh_read_bench import tree_at  # noqa: E402
from scale_bench import EMPTY_QUERY, VARIABLES_QUERY, start_fleet  # noqa: E402

from api.demo.cluster import write_kubeconfig  # noqa: E402

# Part 3's requests: the query, and each request's own label selector.
REQUESTS = {
    "dashboard-sized": (VARIABLES_QUERY, "app!=x{n}"),
    "empty answer": (EMPTY_QUERY, "app=x{n}"),
}


def start_host(
    tree: Path, kubeconfig: str, port: int, request: str, args: argparse.Namespace
) -> subprocess.Popen[str]:
    """One tree's server in its own process, warmed up and waiting for batches."""
    query, selector = REQUESTS[request]
    command = [sys.executable, str(ROOT / "bench" / "request_cost_host.py"), "--tree", str(tree)]
    command += ["--kubeconfig", kubeconfig, "--agent-port", str(port)]
    command += ["--query", query, "--selector", selector, "--batch", str(args.batch)]
    if args.server_cpu is not None:
        command += ["--cpu", str(args.server_cpu)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_line(host: subprocess.Popen[str], tree: Path) -> str:
    """The host's next line; SystemExit if it stopped (its error is on stderr)."""
    assert host.stdout is not None
    line = host.stdout.readline()
    if not line:
        raise SystemExit(f"{tree}: the server's host stopped (exit {host.wait()})")
    return line.strip()


def turns(
    trees: dict[str, Path], kubeconfig: str, port: int, request: str, args: argparse.Namespace
) -> dict[str, list[float]]:
    """Every tree's server up at once; ``args.batches`` turns of one batch each, in an
    order that alternates; each batch's CPU per request, by tree, in turn order."""
    hosts = {
        label: start_host(tree, kubeconfig, port, request, args) for label, tree in trees.items()
    }
    costs: dict[str, list[float]] = {label: [] for label in trees}
    try:
        for label, host in hosts.items():
            if read_line(host, trees[label]) != "ready":
                raise SystemExit(f"{trees[label]}: the server's host did not start")
        for turn in range(args.batches):
            order = list(hosts.items())
            if turn % 2:
                order.reverse()
            for label, host in order:
                assert host.stdin is not None
                host.stdin.write("batch\n")
                host.stdin.flush()
                costs[label].append(float(read_line(host, trees[label])))
    finally:
        for host in hosts.values():
            if host.stdin is not None:
                host.stdin.close()
        for host in hosts.values():
            try:
                host.wait(timeout=60)
            except subprocess.TimeoutExpired:
                host.kill()
    return costs


def main() -> None:
    """Run the turns for each request and print, per tree, the costs and the ratios."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trees",
        default=".",
        help="the servers, comma-separated, the baseline first: '.' (this checkout) or git "
        "revisions",
    )
    parser.add_argument("--batch", type=int, default=100, help="requests in flight at once")
    parser.add_argument("--batches", type=int, default=300, help="timed batches per server")
    parser.add_argument(
        "--server-cpu",
        type=int,
        default=None,
        help="pin the servers to this CPU (the fleet and this process go elsewhere)",
    )
    parser.add_argument("--small", action="store_true", help="CI size: 10 batches")
    args = parser.parse_args()
    if args.small:
        args.batches = 10
    revisions = [t for t in args.trees.split(",") if t]
    if args.server_cpu is not None:
        others = os.sched_getaffinity(0) - {args.server_cpu}
        if others:
            os.sched_setaffinity(0, others)  # the fleet's agents inherit this
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f};"
        f" {args.batches} batches of {args.batch} requests per server"
    )
    tmp = Path(tempfile.mkdtemp(prefix="gpugraph-request-cost-"))
    try:
        trees = {
            name: ROOT if name == "." else tree_at(name, tmp / f"tree-{i}")
            for i, name in enumerate(revisions)
        }
        fleet = start_fleet(4, 32)
        try:
            kubeconfig = write_kubeconfig(str(tmp / "kubeconfig"), fleet.stub.url)
            for request in REQUESTS:
                costs = turns(trees, kubeconfig, fleet.port, request, args)
                report(request, costs, os.getloadavg()[0])
        finally:
            fleet.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(request: str, costs: dict[str, list[float]], load: float) -> None:
    """One request's figures: each tree's batches, and its ratio to the first tree's."""
    print(f"\n{request} (load {load:.1f}), server CPU per request:")
    baseline = next(iter(costs.values()))
    for label, batches in costs.items():
        quartiles = statistics.quantiles(batches, n=4)
        line = f"  {label:10} median {quartiles[1]:.3f} ms  p25 {quartiles[0]:.3f} ms"
        if batches is not baseline:
            ratios = [mine / base for mine, base in zip(batches, baseline, strict=True)]
            line += f"  turn by turn {statistics.median(ratios):.3f}x the baseline (median)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
