"""Benchmark the node agent's PID resolution and call latency on a real containerd.

For each K in ``--sizes`` it runs K busybox containers under a private containerd
(kubelet-style cgroupfs paths, namespace k8s.io) and a fake-NVML file listing
``--gpu-processes`` host PIDs from those containers on 8 GPUs. It then reports:

- snapshot collection time (one sampler scan: read the GPU file, resolve every PID)
  with the cgroup resolver and with the containerd resolver, warm (the steady state,
  in which the containerd resolver's PID map needs no refresh) and cold (a new
  resolver per scan, so every scan lists all K tasks and their PIDs over gRPC);
- the containerd/cgroup ratio of both;
- GetSnapshot latency p50/p99 with ``--callers`` concurrent gRPC clients against the
  real agent subprocess, for each resolver.

Needs root, containerd, runc and a static busybox. Prints figures; asserts nothing.

    sudo .venv/bin/python bench/agent_bench.py --sizes 10,50,100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parent.parent
# Run as a script from anywhere: the harness lives in the repository's tests package.
sys.path.insert(0, str(REPO))

from node_resolver.fake_nvml import FakeGpuSource  # noqa: E402
from node_resolver.generated import agent_pb2, agent_pb2_grpc  # noqa: E402
from node_resolver.pids import PidResolver, build_resolver  # noqa: E402
from node_resolver.sampler import Sampler  # noqa: E402
from tests.support.containerd import Container, LocalContainerd, missing_prerequisite  # noqa: E402

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


def time_scans(nvml: Path, make: Callable[[], PidResolver], scans: int, *, cold: bool) -> float:
    """Median seconds per sampler scan; ``cold`` builds a new resolver for every scan."""
    source = FakeGpuSource(nvml)
    durations = []
    resolvers = [make()]
    try:
        sampler = Sampler(source, resolvers[0], node_name="bench")
        sampler.scan()  # warm-up: the file is parsed, a warm PID map is built
        for _ in range(scans):
            if cold:
                resolvers.append(make())
                sampler = Sampler(source, resolvers[-1], node_name="bench")
            started = time.perf_counter()
            snapshot = sampler.scan()
            durations.append(time.perf_counter() - started)
        placed = sum(p.container is not None for g in snapshot.sample.gpus for p in g.processes)
        total = sum(len(g.processes) for g in snapshot.sample.gpus)
        if placed != total:
            print(f"  warning: only {placed}/{total} processes placed", file=sys.stderr)
    finally:
        for resolver in resolvers:
            _close(resolver)
        source.close()
    return statistics.median(durations)


def _close(resolver: PidResolver) -> None:
    close = getattr(resolver, "close", None)
    if callable(close):
        close()


def start_agent(workdir: Path, nvml: Path, resolver: str, socket: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m node_resolver`` on a free loopback port; returns the process."""
    log = (workdir / f"agent-{resolver}.log").open("wb")
    try:
        return subprocess.Popen(
            [
                sys.executable, "-m", "node_resolver", "--node-name", "bench",
                "--listen", "127.0.0.1:0", "--nvml-fake", str(nvml),
                "--pid-resolver", resolver, "--containerd-socket", str(socket),
                "--interval", "1",
            ],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        log.close()


def agent_address(workdir: Path, resolver: str, process: subprocess.Popen[bytes]) -> str:
    """Wait for the agent's "listening on" log line and return its address."""
    log = workdir / f"agent-{resolver}.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        match = re.search(r"listening on (\S+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        time.sleep(0.05)
    raise RuntimeError(f"agent did not start:\n{log.read_text(errors='replace')}")


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
    process = start_agent(workdir, nvml, resolver, socket)
    try:
        address = agent_address(workdir, resolver, process)
        latencies = asyncio.run(
            call_latencies(address, args.callers, args.calls, args.gpu_processes)
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return percentile(latencies, 50), percentile(latencies, 99)


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
    args = parser.parse_args(argv)
    sizes = sorted({int(size) for size in args.sizes.split(",")})
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
                time.sleep(2.5)

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
        f"{'K':>4} | {'cgroup ms':>9} {'containerd ms':>13} {'ratio':>6} | "
        f"{'cold cgroup':>11} {'cold ctrd':>9} {'ratio':>6} | "
        f"{'p50/p99 ms (cgroup)':>19} | {'p50/p99 ms (containerd)':>23}"
    )
    print(header)
    print("-" * len(header))
    for size, warm_cg, warm_cd, cold_cg, cold_cd, lat_cg, lat_cd in rows:
        print(
            f"{size:>4} | {warm_cg * ms:>9.3f} {warm_cd * ms:>13.3f} {warm_cd / warm_cg:>6.2f} | "
            f"{cold_cg * ms:>11.3f} {cold_cd * ms:>9.3f} {cold_cd / cold_cg:>6.2f} | "
            f"{f'{lat_cg[0] * ms:.2f}/{lat_cg[1] * ms:.2f}':>19} | "
            f"{f'{lat_cd[0] * ms:.2f}/{lat_cd[1] * ms:.2f}':>23}"
        )
    print(
        "\nwarm: steady state (the containerd PID map already covers every process);"
        "\ncold: a new resolver per scan (containerd lists all K tasks and their PIDs)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
