"""Check the agent against a real NVIDIA driver: does it report a GPU process's PID and memory?

Run with ``make gpu-check`` (or ``python tools/gpu_check.py``) on a machine with
an NVIDIA GPU and driver. It starts a process that allocates GPU memory (through
the driver's own libcuda.so.1, or torch or cupy when installed), runs
``python -m node_resolver`` against the real NVML, asks it over gRPC for a
snapshot, and prints whether that PID is reported with its memory.
``--pid PID`` checks an existing process instead. Before that it probes the
calls drivers answer differently (MPS clients, both per-process utilization
calls, the event API with one wait), a line each (``tools/nvml_probes.py``).

Exit status: 0 the agent reports the PID with its memory; 1 it does not; 2 no
usable GPU or driver (nothing to check); 3 no GPU process could be started.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import platform
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvml_probes import probe_lines  # noqa: E402  (this script's own directory)

from graph_schema.types import format_cuda_version  # noqa: E402
from node_resolver.cli import LISTENING  # noqa: E402
from node_resolver.client import AgentClient  # noqa: E402
from node_resolver.models import NodeSample  # noqa: E402
from node_resolver.nvml import NvmlGpuSource, NvmlUnavailableError  # noqa: E402

MIB = 1 << 20
STARTUP_TIMEOUT = 30.0
# Seconds a worker may take to allocate (torch's first CUDA call can take tens).
WORKER_TIMEOUT = 120.0
READY = "ready"

# Each allocates ALLOC_MIB on GPU 0, says READY, and holds it until stdin closes.
WORKERS = {
    "libcuda.so.1": """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def check(ret, what):
    if ret != 0:
        sys.exit(f"{what} returned CUDA error {ret}")
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
check(cuda.cuInit(0), "cuInit")
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(ALLOC_MIB << 20)), "cuMemAlloc")
print("ready", flush=True)
sys.stdin.read()
""",
    "torch": """
import sys, torch
block = torch.empty(ALLOC_MIB << 20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
""",
    "cupy": """
import sys, cupy
block = cupy.empty(ALLOC_MIB << 20, dtype=cupy.uint8)
print("ready", flush=True)
sys.stdin.read()
""",
}


def say(message: str) -> None:
    """One line of the check's report."""
    print(f"gpu-check: {message}", flush=True)


def version_of(package: str) -> str:
    """``package``'s installed version, or "not installed" (the check also runs from a clone)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def software_summary() -> str:
    """What runs the check, so that a report says which gpugraph and which nvidia-ml-py it tried."""
    return (
        f"gpugraph {version_of('gpugraph')}, nvidia-ml-py {version_of('nvidia-ml-py')}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()} "
        f"{platform.machine()}"
    )


def driver_summary() -> str | None:
    """The driver and GPUs NVML sees, or None (after saying why) without a usable driver."""
    try:
        source = NvmlGpuSource()
    except NvmlUnavailableError as exc:
        say(f"no usable NVIDIA driver here, nothing to check: {exc}")
        return None
    try:
        sample = source.sample()
    finally:
        source.close()
    if sample.error or not sample.gpus:
        say(f"NVML started (driver {sample.driver_version}) but lists no GPU: {sample.error}")
        return None
    names = ", ".join(f"{gpu.index}: {gpu.name} {gpu.uuid}" for gpu in sample.gpus)
    cuda = format_cuda_version(sample.cuda_driver_version)
    return f"driver {sample.driver_version}, CUDA {cuda}; GPUs {names}"


def start_worker(alloc_mib: int) -> tuple[subprocess.Popen[str], str] | None:
    """A process holding ``alloc_mib`` MiB on GPU 0, and what started it; None if none could."""
    for name, code in WORKERS.items():
        process = subprocess.Popen(
            [sys.executable, "-c", code.replace("ALLOC_MIB", str(alloc_mib))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stderr is not None
        # A driver in a bad state can hang CUDA's initialisation: give up on it, not forever.
        answered, _, _ = select.select([process.stdout], [], [], WORKER_TIMEOUT)
        line = process.stdout.readline().strip() if answered else ""
        if line == READY:
            return process, name
        process.kill()
        if not answered:
            say(f"cannot allocate GPU memory with {name}: no answer in {WORKER_TIMEOUT:.0f} s")
            continue
        reason = process.stderr.read().strip().splitlines()
        say(f"cannot allocate GPU memory with {name}: {reason[-1] if reason else 'no output'}")
    return None


def start_agent(log_path: Path, interval: float) -> tuple[subprocess.Popen[bytes], str] | None:
    """``python -m node_resolver`` on real NVML, and its gRPC address; None if it did not start."""
    command = [sys.executable, "-m", "node_resolver", "--node-name", "gpu-check"]
    command += ["--listen", "127.0.0.1:0", "--interval", str(interval)]
    with open(log_path, "wb") as log:
        agent = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if LISTENING in line:
                return agent, line.split(LISTENING, 1)[1].split()[0]
        if agent.poll() is not None:
            break
        time.sleep(0.1)
    stop(agent)
    say(f"the agent did not start:\n{log_path.read_text(errors='replace')}")
    return None


def stop(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Terminate ``process`` and wait for it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def snapshot(address: str) -> NodeSample:
    """The agent's latest sample, over gRPC."""
    async with AgentClient(address) as client:
        return (await client.get_snapshot(timeout=10)).sample


def report(sample: NodeSample, pid: int, alloc_mib: int | None) -> bool:
    """Print what the agent says about ``pid``; True when it reports it with memory."""
    found = [(gpu, p) for gpu in sample.gpus for p in gpu.processes if p.pid == pid]
    if not found:
        listed = sorted(p.pid for gpu in sample.gpus for p in gpu.processes)
        errors = {gpu.uuid: gpu.error or gpu.field_errors for gpu in sample.gpus}
        say(f"FAIL: the agent does not report PID {pid}; it lists PIDs {listed}; errors {errors}")
        return False
    ok = True
    for gpu, process in found:
        memory = process.used_memory_bytes
        shown = "memory not available" if memory is None else f"{memory / MIB:.0f} MiB"
        say(f"PID {pid} on GPU {gpu.index} ({gpu.uuid}): {process.type.value}, {shown}")
        if memory is None or (alloc_mib is not None and memory < alloc_mib * MIB):
            ok = False
    expected = f" (at least the {alloc_mib} MiB it allocated)" if alloc_mib else ""
    say(("PASS" if ok else "FAIL") + f": the agent reports PID {pid} with its memory{expected}")
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run the check; the exit status is in the module docstring."""
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, help="check this running process instead of one of ours")
    parser.add_argument("--alloc-mib", type=int, default=256, help="GPU memory to allocate")
    parser.add_argument("--interval", type=float, default=0.5, help="the agent's scan interval")
    parser.add_argument(
        "--event-wait", type=float, default=1.0, help="seconds to wait for an NVML event"
    )
    args = parser.parse_args(argv)

    say(software_summary())
    summary = driver_summary()
    if summary is None:
        return 2
    say(summary)
    # What this driver answers where drivers differ; informational, the verdict is the PID's.
    for line in probe_lines(args.event_wait):
        say(line)
    worker: subprocess.Popen[str] | None = None
    alloc_mib: int | None = None
    pid = args.pid
    if pid is None:
        started = start_worker(args.alloc_mib)
        if started is None:
            say("cannot start a GPU process (libcuda.so.1, torch and cupy all failed); use --pid")
            return 3
        worker, how = started
        pid, alloc_mib = worker.pid, args.alloc_mib
        say(f"started PID {pid} holding {alloc_mib} MiB on GPU 0 through {how}")
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
            started_agent = start_agent(Path(workdir) / "agent.log", args.interval)
            if started_agent is None:
                return 1
            agent, address = started_agent
            try:
                # Two scan intervals, so that the sample postdates the worker's allocation.
                time.sleep(2 * args.interval + 0.5)
                return 0 if report(asyncio.run(snapshot(address)), pid, alloc_mib) else 1
            finally:
                stop(agent)
    finally:
        if worker is not None:
            stop(worker)


if __name__ == "__main__":
    sys.exit(main())
