"""Benchmark: fill the Kubernetes cache from a large pod list, against the client's models.

The stub API server runs in its own process (so it does not share the GIL
with the client) and serves ``--pods`` realistic pods (~4.5 KB of JSON each,
managedFields included) over ``--nodes`` nodes. The bench then:

1. times a ClusterWatcher filling a ClusterCache over HTTP (paginated list,
   500 per page) until it is ready, and the resident memory it added;
2. fetches the raw JSON of ``--compare-pods`` pods once and, from those same
   bytes, times and sizes (a) orjson plus slim records plus the cache's
   indexes, as the watcher does it, with the garbage collector paused per
   page and without, and (b) ``ApiClient().deserialize`` into ``V1PodList``;
3. times one measurement of the whole cluster's sizes for the cost estimate
   (``SizeGauge``, from the cache's own counts) beside counting every cached
   pod one by one, as the gauge did before (``PodSizes.of``), after every
   node's pods were listed once, as joining each node's snapshot lists them.

Memory figures: "RSS" is the process's resident set growth (``VmRSS``), and
"peak" its high-water mark (``VmHWM``, reset before each step through
/proc/self/clear_refs); "traced" is what tracemalloc counts as still
allocated by the step, which excludes allocator fragmentation.

Run: ``python bench/cache_bench.py`` (full size) or
``python bench/cache_bench.py --pods 2000 --compare-pods 500`` (CI).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import urllib3
from kubernetes.client import ApiClient

from api.demo.cluster import kubeconfig_for
from api.kube.cache import ClusterCache
from api.kube.parse import pod_record
from api.kube.watcher import ClusterWatcher
from api.lifecycle.gc_tuning import gc_paused
from graph_schema.admission import SizeGauge
from graph_schema.records import PodRecord, PodSizes
from graph_schema.scope import EVERYTHING
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster

TARGET_FILL_S = 10.0
TARGET_BYTES_PER_POD = 1024
TARGET_SPEEDUP = 10.0


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_bytes() -> int:
    """Resident set size now."""
    return _status_kb("VmRSS") * 1024


def reset_peak() -> None:
    """Reset the resident-set high-water mark (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_bytes() -> int:
    """Resident-set high-water mark since the last reset."""
    return _status_kb("VmHWM") * 1024


def start_stub(pods: int, nodes: int) -> tuple[subprocess.Popen[str], str]:
    """The stub API server in a child process, and its URL."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "api.demo.cluster.apiserver",
            "--pods",
            str(pods),
            "--nodes",
            str(nodes),
        ],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"stub API server did not start: {line!r}")
    return proc, line.split()[-1]


def fill(url: str, expected: int) -> tuple[float, int, ClusterCache]:
    """Seconds for a ClusterWatcher to fill a cache, and the RSS it added."""
    gc.collect()
    before = rss_bytes()
    cache = ClusterCache()
    watcher = ClusterWatcher(cache, kubeconfig_for(url))
    started = time.perf_counter()
    watcher.start()
    if not cache.wait_ready(600):
        raise RuntimeError("cache never became ready")
    elapsed = time.perf_counter() - started
    watcher.stop()
    if cache.pod_count != expected:
        raise RuntimeError(f"cache holds {cache.pod_count} pods, expected {expected}")
    gc.collect()
    return elapsed, rss_bytes() - before, cache


def fetch_pages(url: str, pods: int, page_size: int = 500) -> list[bytes]:
    """The raw bodies of a paginated pod list, limited to ``pods`` pods."""
    http = urllib3.PoolManager()
    pages: list[bytes] = []
    token = ""
    fetched = 0
    while fetched < pods:
        limit = min(page_size, pods - fetched)
        query = f"limit={limit}" + (f"&continue={token}" if token else "")
        body = http.request("GET", f"{url}/api/v1/pods?{query}").data
        pages.append(body)
        doc = orjson.loads(body)
        fetched += len(doc["items"])
        token = doc["metadata"].get("continue", "")
        if not token:
            break
    return pages


def as_single_list(pages: list[bytes]) -> bytes:
    """One PodList body holding every item of ``pages``."""
    items = [item for page in pages for item in orjson.loads(page)["items"]]
    return orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }
    )


def slim_path(pages: list[bytes], pause_gc: bool) -> ClusterCache:
    """What the watcher does with list pages: orjson, slim records, then the indexed swap."""
    records: list[PodRecord] = []
    for page in pages:
        if pause_gc:
            with gc_paused():
                records.extend(pod_record(item) for item in orjson.loads(page)["items"])
        else:
            records.extend(pod_record(item) for item in orjson.loads(page)["items"])
    cache = ClusterCache()
    cache.replace_pods(records)
    return cache


def model_path(body: str) -> Any:
    """The official client's way: one PodList body into V1PodList models."""
    return ApiClient().deserialize(body, "V1PodList", "application/json")


def measure(step: Callable[[], Any]) -> tuple[float, int, int, Any]:
    """Seconds, peak RSS growth and retained RSS growth of ``step``, and its result."""
    gc.collect()
    before = rss_bytes()
    reset_peak()
    started = time.perf_counter()
    result = step()
    elapsed = time.perf_counter() - started
    peak = peak_bytes() - before
    gc.collect()
    return elapsed, peak, rss_bytes() - before, result


def traced(step: Callable[[], Any]) -> int:
    """Bytes still allocated (tracemalloc) by ``step``'s result."""
    gc.collect()
    tracemalloc.start()
    result = step()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del result
    return size


def size_measurements(cache: ClusterCache, rounds: int = 20) -> tuple[float, float]:
    """Seconds of CPU per measurement of the whole cluster's sizes: the gauge's, and
    counting every pod of the sorted listing, each median of ``rounds``."""
    gauge = SizeGauge(ViewCache(), ttl=0.0)
    for node in cache.nodes():
        cache.pods(node_name=node.name)
    view = VisibleCluster(cache, EVERYTHING)

    def counted() -> None:
        PodSizes.of(cache.pods())

    def cpu(step: Callable[[], Any]) -> float:
        times = []
        for _ in range(rounds):
            started = time.process_time()
            step()
            times.append(time.process_time() - started)
        return sorted(times)[rounds // 2]

    measured, expected = gauge.sizes(view), PodSizes.of(cache.pods())
    if (measured.pods, measured.pods_per_node, measured.containers_per_pod) != (
        expected.pods,
        expected.pods_per_node,
        expected.containers_per_pod,
    ):
        raise RuntimeError("the gauge's sizes differ from the pods counted")
    return cpu(lambda: gauge.sizes(view)), cpu(counted)


def verdict(met: bool, judged: bool) -> str:
    """How a figure compares with its target."""
    if not judged:
        return "(not judged at this size)"
    return "ok" if met else "MISSED"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pods", type=int, default=100_000, help="pods in the cluster (default 100000)"
    )
    parser.add_argument(
        "--nodes", type=int, default=1000, help="nodes in the cluster (default 1000)"
    )
    parser.add_argument(
        "--compare-pods",
        type=int,
        default=10_000,
        help="pods in the model comparison (default 10000)",
    )
    args = parser.parse_args(argv)
    compare = min(args.compare_pods, args.pods)

    print(
        f"cache bench: {args.pods} pods on {args.nodes} nodes; model comparison at {compare} pods"
    )
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}"
    )
    started = time.perf_counter()
    proc, url = start_stub(args.pods, args.nodes)
    print(f"stub API server ready in {time.perf_counter() - started:.1f}s at {url}")
    try:
        fill_s, fill_rss, cache = fill(url, args.pods)
        gauge_s, counted_s = size_measurements(cache)
        del cache
        gc.collect()
        pages = fetch_pages(url, compare)
    finally:
        proc.terminate()
        proc.wait(10)
    json_bytes = sum(len(p) for p in pages)
    body = as_single_list(pages).decode()

    slim_s, slim_peak, slim_rss, result = measure(lambda: slim_path(pages, pause_gc=True))
    del result
    slim_traced = traced(lambda: slim_path(pages, pause_gc=True))
    gc_on_s, _, _, result = measure(lambda: slim_path(pages, pause_gc=False))
    del result
    model_s, model_peak, model_rss, result = measure(lambda: model_path(body))
    if len(result.items) != compare:
        raise RuntimeError("model path lost pods")
    del result

    per_pod = fill_rss / args.pods
    rows = [
        (
            "fill over HTTP (ClusterWatcher)",
            f"{args.pods}",
            f"{fill_s:.2f}",
            f"{args.pods / fill_s:,.0f}",
            "-",
            f"{per_pod:,.0f} (RSS)",
        ),
        (
            "orjson + slim records + indexes",
            f"{compare}",
            f"{slim_s:.2f}",
            f"{compare / slim_s:,.0f}",
            f"{slim_peak / 2**20:,.0f}",
            f"{slim_rss / compare:,.0f} (RSS) / {slim_traced / compare:,.0f} (traced)",
        ),
        (
            "  same, garbage collector left on",
            f"{compare}",
            f"{gc_on_s:.2f}",
            f"{compare / gc_on_s:,.0f}",
            "-",
            "-",
        ),
        (
            "ApiClient().deserialize V1PodList",
            f"{compare}",
            f"{model_s:.2f}",
            f"{compare / model_s:,.0f}",
            f"{model_peak / 2**20:,.0f}",
            f"{model_rss / compare:,.0f} (RSS)",
        ),
    ]
    headers = ("path", "pods", "seconds", "pods/s", "peak MB", "bytes/pod retained")
    widths = [max(len(str(r[i])) for r in (headers, *rows)) for i in range(len(headers))]
    print()
    print(
        f"compared list: {json_bytes / 2**20:.1f} MB of JSON, {json_bytes / compare:,.0f} bytes/pod"
    )
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    speedup = model_s / slim_s
    print()
    print(
        f"slim path vs V1PodList: {speedup:.1f}x faster, "
        f"{model_peak / max(slim_peak, 1):.1f}x less peak memory"
    )
    print(f"garbage collector paused vs left on: {gc_on_s / slim_s:.1f}x faster")
    print(
        f"the cost estimate's sizes of all {args.pods} pods: {gauge_s * 1000:.2f} ms "
        f"from the cache's counts, {counted_s * 1000:.1f} ms counting every pod "
        f"({counted_s / max(gauge_s, 1e-9):,.0f}x)"
    )
    fill_at_100k = fill_s * 100_000 / args.pods
    print()
    full_size = args.pods >= 100_000 and compare >= 10_000
    print(
        "targets:" if full_size else "targets (judged only at --pods 100000 --compare-pods 10000):"
    )
    print(
        f"  fill 100k pods <= {TARGET_FILL_S:.0f}s: {fill_at_100k:.1f}s"
        f"{'' if args.pods == 100_000 else ' (scaled linearly)'} "
        f"{verdict(fill_at_100k <= TARGET_FILL_S, full_size)}"
    )
    print(
        f"  <= {TARGET_BYTES_PER_POD} bytes/pod (RSS of the full fill): {per_pod:,.0f} "
        f"{verdict(per_pod <= TARGET_BYTES_PER_POD, full_size)}"
    )
    print(
        f"  >= {TARGET_SPEEDUP:.0f}x faster than V1PodList: {speedup:.1f}x "
        f"{verdict(speedup >= TARGET_SPEEDUP, full_size)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
