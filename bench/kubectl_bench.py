"""Benchmark: the real kubectl against the stub API server, Table output beside plain JSON.

For each pod count, the stub serves that many realistic pods (managedFields
included) and the bench times, median of ``--repeat`` runs:

1. ``kubectl get pods -A`` (server-side printing: the stub turns every
   500-pod page into a ``meta.k8s.io/v1`` Table) and ``kubectl get pods -A
   -o json`` (plain pages), end to end including kubectl's own work;
2. the stub alone serving one 500-pod page both ways, over HTTP, so the cost
   of building Tables shows apart from kubectl's.

Run: ``python bench/kubectl_bench.py`` (full size) or
``python bench/kubectl_bench.py --pods 1000 --repeat 3`` (CI). Needs kubectl
1.28 or newer on PATH (``.ci/run`` provides one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from api.demo.cluster import StubApiServer, demo_cluster, write_kubeconfig

PAGE = 500
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def median_seconds(run: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``run``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def kubectl_run(command: list[str]) -> Callable[[], object]:
    """A callable running ``command``, failing loudly if kubectl does."""

    def run() -> object:
        done = subprocess.run(command, capture_output=True, timeout=600, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()}")
        return done

    return run


def bench(pods: int, repeat: int, kubectl: str, workdir: Path) -> list[str]:
    """One row per way of listing ``pods`` pods."""
    pod_objs, node_objs = demo_cluster(pods, max(1, pods // 100))
    with StubApiServer() as server:
        server.load(pods=pod_objs, nodes=node_objs)
        kubeconfig = write_kubeconfig(str(workdir / f"kubeconfig-{pods}"), server.url)
        base = [kubectl, "--kubeconfig", kubeconfig, "--cache-dir", str(workdir / "cache")]
        kubectl_run([*base, "get", "nodes"])()  # discovery, cached from here on
        table = median_seconds(kubectl_run([*base, "get", "pods", "-A"]), repeat)
        plain = median_seconds(kubectl_run([*base, "get", "pods", "-A", "-o", "json"]), repeat)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            params = {"limit": str(PAGE)}

            def page(accept: str) -> Callable[[], object]:
                return lambda: client.get(
                    "/api/v1/pods", params=params, headers={"Accept": accept}
                ).raise_for_status()

            page_table = median_seconds(page(TABLE_ACCEPT), repeat)
            page_plain = median_seconds(page("application/json"), repeat)
    return [
        f"| {pods} | kubectl get pods -A (Table) | {table:9.3f} | {table / plain:5.2f}x |",
        f"| {pods} | kubectl get pods -A -o json | {plain:9.3f} | 1.00x |",
        f"| {pods} | stub, one {PAGE}-pod page as Table | {page_table:9.3f} | "
        f"{page_table / page_plain:5.2f}x |",
        f"| {pods} | stub, one {PAGE}-pod page as PodList | {page_plain:9.3f} | 1.00x |",
    ]


def main() -> int:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="2000,10000", help="comma-separated pod counts")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    args = parser.parse_args()
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        # CI (GPUGRAPH_REQUIRE_ALL=1) has one from .ci/run; elsewhere this bench is optional.
        print("kubectl_bench: kubectl is not on PATH; nothing measured", file=sys.stderr)
        return 1 if os.environ.get("GPUGRAPH_REQUIRE_ALL") == "1" else 0
    version = json.loads(
        subprocess.run(
            [kubectl, "version", "--client", "-o", "json"], capture_output=True, check=True
        ).stdout
    )["clientVersion"]["gitVersion"]
    print(f"# kubectl against the stub API server ({platform.python_version()}, kubectl {version})")
    print()
    print("| pods | what | seconds (median) | vs plain JSON |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="kubectl-bench-") as tmp:
        for pods in (int(p) for p in args.pods.split(",")):
            for row in bench(pods, args.repeat, kubectl, Path(tmp)):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
