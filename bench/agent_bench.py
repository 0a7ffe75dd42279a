"""Benchmark the node agent's PID resolution and call latency on a real containerd.

For each K in ``--sizes`` it runs K busybox containers under a private containerd
(kubelet-style cgroupfs paths, namespace k8s.io) and a fake-NVML file listing
``--gpu-processes`` host PIDs from those containers on 8 GPUs. It then reports:

- snapshot collection time (one sampler scan: read the GPU file, resolve every PID)
  with the cgroup resolver and with the containerd resolver, cold (a new resolver and
  an empty cgroup-path cache per scan, so every containerd scan lists all K tasks and
  their PIDs over gRPC, as it does whenever a new process appears) and warm (the steady
  state, in which the containerd resolver's PID map needs no refresh);
- the containerd/cgroup ratio of both; the cold one is the headline figure;
- GetSnapshot latency p50/p99 with ``--callers`` concurrent gRPC clients against the
  real agent subprocess, for each resolver.

``--verdicts`` (no root, no compiler) times the allocation verdicts instead:
a scan of 8 GPUs x ``--nvml-processes`` processes whose kubelet answer lists
``--allocations`` containers, each given a time-sliced replica, with the
allocation judge on against off (interleaved blocks; the judge alone too);
the occupancy log's flush with the allocation records; and the log's growth
over 24 simulated hours of allocation churn (pods of 10 to 120 minutes,
half busy, a quarter idle holding memory, a quarter with no process), with
and without allocation records, on real SQLite.

First, without containerd: one NVML scan's cost through the real nvidia-ml-py
and the fake libnvidia-ml.so.1 (tests/support/libnvml, built with the system C
compiler) at 8 GPUs x ``--nvml-processes`` processes, per driver variant, side
by side with the fake-NVML file's scan (``--nvml-only`` stops there).

The rest needs root, containerd, runc and a static busybox. Prints figures; asserts nothing.

    sudo .venv/bin/python bench/agent_bench.py --sizes 10,50,100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parent.parent
# Run as a script from anywhere: the harness lives in the repository's tests package.
sys.path.insert(0, str(REPO))

from node_resolver.allocation_use import AllocationJudge  # noqa: E402
from node_resolver.cgroup import clear_cache  # noqa: E402
from node_resolver.containerd import SETTLE_SECONDS  # noqa: E402
from node_resolver.fake_nvml import FakeGpuSource  # noqa: E402
from node_resolver.generated import agent_pb2, agent_pb2_grpc  # noqa: E402
from node_resolver.history.log import HistoryLog, HistorySettings  # noqa: E402
from node_resolver.models import (  # noqa: E402
    ContainerRef,
    GpuProcess,
    GpuSample,
    NodeSample,
    NodeSnapshot,
)
from node_resolver.pids import PidResolver, ResolvedProcess, build_resolver  # noqa: E402
from node_resolver.pod_names import PodName, PodNames  # noqa: E402
from node_resolver.pod_resources import (  # noqa: E402
    KubeletContainer,
    KubeletDevices,
    PodResourcesPoller,
)
from node_resolver.sampler import Sampler  # noqa: E402
from tests.support.agents import start_agent_process  # noqa: E402
from tests.support.containerd import Container, LocalContainerd, missing_prerequisite  # noqa: E402
from tests.support.libnvml import (  # noqa: E402
    LISTING_VARIANTS,
    FakeGpu,
    FakeNode,
    FakeProcess,
    Variant,
    build_library,
    compiler,
    library_env,
)

GPUS = 8


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def gpu_pids(containerd: LocalContainerd, containers: list[Container], count: int) -> list[int]:
    """``count`` container PIDs, one per container, adding processes when there are too few."""
    pids = [c.pids[0] for c in containers[:count]]
    index = 0
    while len(pids) < count:
        pids.append(containerd.exec(containers[index % len(containers)]))
        index += 1
    return pids


def write_nvml(path: Path, pids: list[int]) -> None:
    """A fake-NVML file spreading ``pids`` over GPUS GPUs."""
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
            "name": "NVIDIA H200",
            "memoryTotalBytes": 150754820096,
            "memoryUsedBytes": 0,
            "utilizationGpu": 50,
            "processes": [
                {"pid": pid, "usedMemoryBytes": 1 << 30, "type": "COMPUTE", "smUtilization": 10}
                for pid in pids[i::GPUS]
            ],
        }
        for i in range(GPUS)
    ]
    path.write_text(json.dumps({"driverVersion": "550.90.07", "gpus": gpus}))


def timed_scan(sampler: Sampler) -> tuple[NodeSnapshot, float]:
    """One scan and its duration in seconds."""
    started = time.perf_counter()
    snapshot = sampler.scan()
    return snapshot, time.perf_counter() - started


def time_scans(nvml: Path, make: Callable[[], PidResolver], scans: int, *, cold: bool) -> float:
    """Median seconds per sampler scan; ``cold`` starts every scan from a new resolver."""
    source = FakeGpuSource(nvml)
    durations = []
    warm = make()
    try:
        sampler = Sampler(source, warm, node_name="bench")
        snapshot = sampler.scan()  # warm-up: the file is parsed, a warm PID map is built
        for _ in range(scans):
            if not cold:
                snapshot, seconds = timed_scan(sampler)
            else:
                clear_cache()  # the cgroup resolver's parsed paths
                resolver = make()
                try:
                    snapshot, seconds = timed_scan(Sampler(source, resolver, node_name="bench"))
                finally:
                    resolver.close()
            durations.append(seconds)
        placed = sum(p.container is not None for g in snapshot.sample.gpus for p in g.processes)
        total = sum(len(g.processes) for g in snapshot.sample.gpus)
        if placed != total:
            print(f"  warning: only {placed}/{total} processes placed", file=sys.stderr)
    finally:
        warm.close()
        source.close()
    return statistics.median(durations)


async def call_latencies(address: str, callers: int, calls: int, want: int) -> list[float]:
    """Per-call seconds of ``callers`` concurrent clients making ``calls`` calls each."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(callers)]
    stubs = [agent_pb2_grpc.NodeAgentStub(channel) for channel in channels]
    request = agent_pb2.GetSnapshotRequest()
    deadline = time.monotonic() + 60
    while True:  # wait for a snapshot that has every GPU process
        try:
            reply = await stubs[0].GetSnapshot(request, timeout=10)
            if sum(len(g.processes) for g in reply.gpus) >= want:
                break
        except grpc.aio.AioRpcError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("agent never reported every GPU process")
        await asyncio.sleep(0.1)

    latencies: list[float] = []

    async def caller(stub: agent_pb2_grpc.NodeAgentStub) -> None:
        for _ in range(calls):
            started = time.perf_counter()
            await stub.GetSnapshot(request, timeout=10)
            latencies.append(time.perf_counter() - started)

    try:
        await asyncio.gather(*(caller(stub) for stub in stubs))
    finally:
        await asyncio.gather(*(channel.close(None) for channel in channels))
    return latencies


def measure_latency(
    workdir: Path, nvml: Path, resolver: str, socket: Path, args: argparse.Namespace
) -> tuple[float, float]:
    """p50 and p99 call latency in seconds against a real agent."""
    with start_agent_process(
        nvml,
        log_path=workdir / f"agent-{resolver}.log",
        node_name="bench",
        pid_resolver=resolver,
        interval=1.0,
        extra_args=["--containerd-socket", str(socket)],
    ) as agent:
        latencies = asyncio.run(
            call_latencies(agent.address, args.callers, args.calls, args.gpu_processes)
        )
    return percentile(latencies, 50), percentile(latencies, 99)


def nvml_node(processes: int) -> FakeNode:
    """8 GPUs with ``processes`` processes each, every other one also graphics, each sampled."""
    now_us = int(time.time() * 1_000_000)
    gpus = []
    for index in range(GPUS):
        pids = range(100_000 + index * processes, 100_000 + (index + 1) * processes)
        gpus.append(
            FakeGpu(
                f"GPU-{index:08d}-0000-0000-0000-000000000000",
                processes=[FakeProcess(pid, 1 << 30, graphics=pid % 2 == 0) for pid in pids],
                samples=[(pid, now_us + 10_000_000, 10) for pid in pids],
            )
        )
    return FakeNode(gpus)


def time_nvml_scans(workdir: Path, processes: int, scans: int) -> list[tuple[str, float, float]]:
    """(what, median seconds, p99 seconds) of one scan, per NVML driver variant and the file.

    One more row reads the current driver's process lists through pynvml's own calls.
    """
    node = nvml_node(processes)
    config = node.write(workdir / "nvml.conf")
    rows = []
    cases = [(variant, "") for variant in LISTING_VARIANTS]
    cases.append((Variant.CURRENT, "pynvml-lists"))
    for variant, mode in cases:
        result = subprocess.run(
            [sys.executable, str(REPO / "bench" / "nvml_scan.py"), str(scans), *mode.split()],
            env=library_env(build_library(variant), config),
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        out = json.loads(result.stdout)
        assert out["processes"] == GPUS * processes, out["processes"]
        seconds = out["seconds"]
        what = f"pynvml + C library, {variant.value.lower()} driver"
        if mode:
            what += ", pynvml's process lists"
        rows.append((what, *spread(seconds)))
    # The same node as a fake-NVML file: what the tests and the demo read instead.
    fake = workdir / "nvml.json"
    write_nvml(fake, [p.pid for gpu in node.gpus for p in gpu.processes])
    source = FakeGpuSource(fake)
    durations = []
    for _ in range(scans):
        started = time.perf_counter()
        source.sample()
        durations.append(time.perf_counter() - started)
    rows.append(("fake-NVML JSON file (--nvml-fake)", *spread(durations)))
    return rows


def spread(seconds: list[float]) -> tuple[float, float]:
    """(median, p99) of ``seconds``."""
    return statistics.median(seconds), percentile(seconds, 99)


def print_nvml(rows: list[tuple[str, float, float]], processes: int, scans: int) -> None:
    """The NVML scan table, with each row's ratio to the current driver's."""
    ms = 1000.0
    print(
        f"\none NVML scan, {GPUS} GPUs x {processes} processes ({GPUS * processes} in all), "
        f"{scans} scans each; target <= 5 ms through the real pynvml\n"
    )
    header = f"{'source':<58} | {'p50 ms':>7} {'p99 ms':>7} | {'p50 / current':>13}"
    print(header)
    print("-" * len(header))
    base = rows[0][1]
    for what, median, p99 in rows:
        print(f"{what:<58} | {median * ms:>7.3f} {p99 * ms:>7.3f} | {median / base:>13.2f}")


# -- allocation verdicts ------------------------------------------------------------


def _uuid(index: int) -> str:
    return f"GPU-{index:08d}-0000-0000-0000-000000000000"


class VerdictNode:
    """A node of GPUS GPUs whose containers each hold one time-sliced replica; every
    process is in a named pod. ``place`` puts a pod (its processes and their SM) in a slot."""

    def __init__(self, slots_per_gpu: int) -> None:
        self.slots_per_gpu = slots_per_gpu
        # (gpu, replica) -> (pod name, [(pid, sm)])
        self.slots: dict[tuple[int, int], tuple[str, list[tuple[int, int]]]] = {}
        self.resolved: dict[int, ResolvedProcess] = {}
        self.names = PodNames(max_pods=100_000, max_bytes=1 << 30)
        self._containers: tuple[KubeletContainer, ...] = ()

    def place(self, gpu: int, replica: int, pod: str, processes: list[tuple[int, int]]) -> None:
        old = self.slots.get((gpu, replica))
        if old is not None:
            for pid, _ in old[1]:
                self.resolved.pop(pid, None)
        cid = (pod.encode().hex() * 64)[:64]
        for pid, _ in processes:
            self.resolved[pid] = ResolvedProcess(
                pid, pid, "python", None, ContainerRef(cid, "containerd", f"uid-{pod}")
            )
        self.names.put([PodName(f"uid-{pod}", "ml", pod, {cid: "main"})])
        self.slots[(gpu, replica)] = (pod, processes)
        self._containers = tuple(
            KubeletContainer(
                "ml", name, "main", (KubeletDevices("nvidia.com/gpu", (f"{_uuid(g)}::{r}",)),)
            )
            for (g, r), (name, _) in sorted(self.slots.items())
        )

    def containers(self) -> tuple[KubeletContainer, ...]:
        return self._containers

    def replicas(self) -> dict[str, int]:
        return {_uuid(g): self.slots_per_gpu for g in range(GPUS)}

    def sample(self) -> NodeSample:
        """A fresh sample, as NVML builds one anew every scan."""
        gpus = [GpuSample(index=g, uuid=_uuid(g), memory_total_bytes=80 << 30) for g in range(GPUS)]
        for (g, _), (_, processes) in self.slots.items():
            gpus[g].processes.extend(
                GpuProcess(pid=pid, used_memory_bytes=1 << 30, sm_utilization=sm)
                for pid, sm in processes
            )
        return NodeSample(driver_version="550.90.07", gpus=gpus)

    def close(self) -> None:
        pass


class _StaticResolver:
    def __init__(self, table: dict[int, ResolvedProcess]) -> None:
        self.table = table

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        return {pid: self.table[pid] for pid in pids if pid in self.table}

    def close(self) -> None:
        pass


def verdict_sampler(
    node: VerdictNode,
    *,
    judged: bool,
    clock: Callable[[], float] = time.time,
    on_scan: Callable[[NodeSnapshot], None] | None = None,
) -> tuple[Sampler, AllocationJudge | None]:
    """A sampler over ``node`` whose kubelet answer is polled by hand (``pod_resources.poll``)."""
    poller = PodResourcesPoller(node.containers, list_replicas=node.replicas, clock=clock)
    judge = (
        AllocationJudge(node_name="n", boot_id="b", pod_names=node.names, interval=1.0)
        if judged
        else None
    )
    sampler = Sampler(
        node,
        _StaticResolver(node.resolved),
        node_name="n",
        clock=clock,
        pod_resources=poller,
        judge=judge,
        on_scan=on_scan,
    )
    poller.poll()
    return sampler, judge


def time_verdicts(per_gpu_processes: int, allocations: int, rounds: int) -> dict[str, float]:
    """Per-scan medians (seconds): without the judge, with it, and the judge alone."""
    per_gpu = allocations // GPUS
    node = VerdictNode(per_gpu)
    pid = 10_000
    for g in range(GPUS):
        for r in range(per_gpu):
            share = per_gpu_processes // per_gpu
            # A quarter of the pods idle at 0% SM, the rest busy.
            sm = 0 if r % 4 == 0 else 35
            node.place(g, r, f"p{g}-{r}", [(pid + i, sm) for i in range(share)])
            pid += share
    off, _ = verdict_sampler(node, judged=False)
    on, judge = verdict_sampler(node, judged=True)
    assert judge is not None
    times: dict[str, list[float]] = {"off": [], "on": [], "judge": []}
    for sampler in (off, on):  # warm caches (names, holder index, the allocations' mapping)
        for _ in range(20):
            sampler.scan()
    for _ in range(rounds):
        for name, sampler in (("off", off), ("on", on)):
            for _ in range(25):
                started = time.perf_counter()
                sampler.scan()
                times[name].append(time.perf_counter() - started)
        latest = on.latest()
        assert latest is not None
        sample, given = latest.sample, latest.allocations
        for _ in range(25):
            started = time.perf_counter()
            judge.judge(sample, given, time.time())
            times["judge"].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def time_allocation_flush(allocations: int, flushes: int) -> tuple[float, float]:
    """Median seconds of one log flush of ``allocations`` open allocations, without and with
    their records (the flush runs every 5 s in its own thread)."""
    out = []
    for judged in (False, True):
        node = VerdictNode(allocations // GPUS)
        for g in range(GPUS):
            for r in range(allocations // GPUS):
                node.place(g, r, f"p{g}-{r}", [])
        with tempfile.TemporaryDirectory(prefix="verdict-flush-") as tmp:
            sampler, judge = verdict_sampler(node, judged=judged)
            history = HistoryLog(
                HistorySettings(Path(tmp), 86400.0),
                boot_id="b",
                pod_names=node.names,
                allocations=judge,
            )
            history.start()
            spent = []
            for _ in range(flushes):
                sampler.scan()
                started = time.perf_counter()
                history.flush()
                spent.append(time.perf_counter() - started)
            history.stop()
        out.append(statistics.median(spent))
    return out[0], out[1]


def churn_growth(
    allocations: int, per_gpu_processes: int, judged: bool, seed: int = 7
) -> dict[str, int]:
    """The log after 24 simulated hours of pods coming and going, a scan every 10 s."""
    rng = random.Random(seed)
    per_gpu = allocations // GPUS
    share = max(1, per_gpu_processes // per_gpu)
    node = VerdictNode(per_gpu)
    clock = [1_800_000_000.0]
    ends: dict[tuple[int, int], float] = {}
    serial = [0]
    pid = [100_000]

    def new_pod(slot: tuple[int, int]) -> None:
        serial[0] += 1
        kind = rng.random()
        sm = 40 if kind < 0.5 else 0
        count = 0 if kind >= 0.75 else share
        procs = [(pid[0] + i, sm) for i in range(count)]
        pid[0] += count
        node.place(slot[0], slot[1], f"pod-{serial[0]}", procs)
        ends[slot] = clock[0] + rng.uniform(600, 7200)

    for g in range(GPUS):
        for r in range(per_gpu):
            new_pod((g, r))
    with tempfile.TemporaryDirectory(prefix="verdict-churn-") as tmp:
        # The log folds each scan in, as the agent's does; it needs the judge first.
        observers: list[Callable[[NodeSnapshot], None]] = []
        sampler, judge = verdict_sampler(
            node, judged=judged, clock=lambda: clock[0], on_scan=lambda s: observers[0](s)
        )
        history = HistoryLog(
            HistorySettings(Path(tmp), 30 * 86400.0),
            boot_id="b",
            pod_names=node.names,
            clock=lambda: clock[0],
            allocations=judge,
        )
        observers.append(history.observe)
        history.start()
        assert sampler.pod_resources is not None
        for step in range(24 * 360):
            clock[0] += 10.0
            for slot, end in list(ends.items()):
                if end <= clock[0]:
                    new_pod(slot)
            sampler.pod_resources.poll()
            sampler.scan()
            if step % 30 == 29:
                history.flush()
        history.stop()
        db = sqlite3.connect(Path(tmp) / "history.sqlite")
        counts = {
            table: int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("occupancy", "allocations", "allocation_idle", "pods")
        }
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.close()
    return counts | {"used_bytes": (pages - free) * size, "pods_started": serial[0]}


def print_verdicts(args: argparse.Namespace) -> None:
    ms = 1000.0
    medians = time_verdicts(args.nvml_processes, args.allocations, args.verdict_rounds)
    print(
        f"\nallocation verdicts: {GPUS} GPUs x {args.nvml_processes} processes, "
        f"{args.allocations} allocations (time-sliced replicas), median per scan"
    )
    print(f"  scan without judge  {medians['off'] * ms:8.3f} ms")
    print(f"  scan with judge     {medians['on'] * ms:8.3f} ms")
    print(f"  added per scan      {(medians['on'] - medians['off']) * ms:8.3f} ms")
    print(f"  the judge alone     {medians['judge'] * ms:8.3f} ms")
    without, with_ = time_allocation_flush(args.allocations, 50)
    print(f"  log flush (5 s)     {without * ms:8.3f} ms -> {with_ * ms:.3f} ms with allocations")
    print("\nthe occupancy log after 24 simulated hours of allocation churn:")
    for judged in (False, True):
        grown = churn_growth(args.allocations, args.nvml_processes, judged)
        label = "with allocations" if judged else "processes only  "
        print(
            f"  {label}: {grown['used_bytes'] / 1e6:7.2f} MB in tables; "
            f"{grown['occupancy']} process records, {grown['allocations']} allocation records, "
            f"{grown['allocation_idle']} idle episodes, {grown['pods']} pod names "
            f"({grown['pods_started']} pods started)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10,50,100", help="container counts K (default 10,50,100)"
    )
    parser.add_argument("--gpu-processes", type=int, default=32, help="PIDs on GPUs (default 32)")
    parser.add_argument("--callers", type=int, default=50, help="concurrent gRPC callers")
    parser.add_argument("--calls", type=int, default=20, help="calls per caller (default 20)")
    parser.add_argument("--scans", type=int, default=30, help="timed scans per case (default 30)")
    parser.add_argument(
        "--nvml-processes", type=int, default=64, help="processes per GPU for the NVML scan"
    )
    parser.add_argument("--nvml-scans", type=int, default=200, help="timed NVML scans per case")
    parser.add_argument("--nvml-only", action="store_true", help="only the NVML scan, no root")
    parser.add_argument(
        "--verdicts", action="store_true", help="only the allocation verdicts and their log"
    )
    parser.add_argument("--allocations", type=int, default=64, help="allocations (default 64)")
    parser.add_argument("--verdict-rounds", type=int, default=40, help="rounds of 25 scans each")
    args = parser.parse_args(argv)
    if args.verdicts:
        print_verdicts(args)
        return 0
    sizes = sorted({int(size) for size in args.sizes.split(",")})
    if compiler() is None:
        print("cannot time NVML scans: no C compiler (cc or gcc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="agent-bench-nvml-") as tmp:
        nvml_rows = time_nvml_scans(Path(tmp), args.nvml_processes, args.nvml_scans)
    print_nvml(nvml_rows, args.nvml_processes, args.nvml_scans)
    if args.nvml_only:
        return 0
    reason = missing_prerequisite()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2

    rows = []
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        workdir = Path(tmp)
        with LocalContainerd(workdir / "containerd") as containerd:
            socket = str(containerd.socket)
            containers: list[Container] = []
            for size in sizes:
                print(f"K={size}: starting containers...", file=sys.stderr)
                containers += containerd.run_many(size - len(containers))
                nvml = workdir / f"nvml-{size}.json"
                write_nvml(nvml, gpu_pids(containerd, containers, args.gpu_processes))
                # Let the newest processes age past the containerd map's settle window, so the
                # warm figures show the steady state rather than start-up refreshes.
                time.sleep(SETTLE_SECONDS + 0.5)

                def cgroup() -> PidResolver:
                    return build_resolver("cgroup")

                def containerd_resolver() -> PidResolver:
                    return build_resolver("containerd", containerd_socket=socket)

                print(f"K={size}: timing scans...", file=sys.stderr)
                warm_cg = time_scans(nvml, cgroup, args.scans, cold=False)
                warm_cd = time_scans(nvml, containerd_resolver, args.scans, cold=False)
                cold_cg = time_scans(nvml, cgroup, args.scans, cold=True)
                cold_cd = time_scans(nvml, containerd_resolver, args.scans, cold=True)
                print(f"K={size}: measuring call latency...", file=sys.stderr)
                lat_cg = measure_latency(workdir, nvml, "cgroup", containerd.socket, args)
                lat_cd = measure_latency(workdir, nvml, "containerd", containerd.socket, args)
                rows.append((size, warm_cg, warm_cd, cold_cg, cold_cd, lat_cg, lat_cd))

    ms = 1000.0
    print(
        f"\nagent snapshot collection ({args.gpu_processes} GPU processes on {GPUS} GPUs; "
        f"median of {args.scans} scans) and GetSnapshot latency "
        f"({args.callers} concurrent callers x {args.calls} calls)\n"
    )
    header = (
        f"{'K':>4} | {'cold cgroup ms':>14} {'cold ctrd ms':>12} {'RATIO':>6} | "
        f"{'warm cgroup':>11} {'warm ctrd':>9} {'ratio':>6} | "
        f"{'p50/p99 ms (cgroup)':>19} | {'p50/p99 ms (containerd)':>23}"
    )
    print(header)
    print("-" * len(header))
    for size, warm_cg, warm_cd, cold_cg, cold_cd, lat_cg, lat_cd in rows:
        print(
            f"{size:>4} | {cold_cg * ms:>14.3f} {cold_cd * ms:>12.3f} {cold_cd / cold_cg:>6.2f} | "
            f"{warm_cg * ms:>11.3f} {warm_cd * ms:>9.3f} {warm_cd / warm_cg:>6.2f} | "
            f"{f'{lat_cg[0] * ms:.2f}/{lat_cg[1] * ms:.2f}':>19} | "
            f"{f'{lat_cd[0] * ms:.2f}/{lat_cd[1] * ms:.2f}':>23}"
        )
    print(
        "\nRATIO (the headline): containerd/cgroup collection time, cold: a new resolver and"
        "\nan empty cgroup-path cache per scan, so containerd lists all K tasks and their PIDs,"
        "\nas it does whenever a process it cannot vouch for appears."
        "\nwarm: steady state (the containerd PID map already covers every process)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
