"""tools/gpu_check.py over the fake libnvidia-ml.so.1: it reports clearly, and never crashes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.libnvml import (
    NO_PERMISSION,
    NOT_SUPPORTED,
    REPO_ROOT,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNode,
    FakeProcess,
    Variant,
    build_library,
    library_env,
)
from tests.support.libnvml.events import XID, FakeEvents

SCRIPT = REPO_ROOT / "tools" / "gpu_check.py"


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A live PID for the fake driver to report (the agent drops PIDs that have exited)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


def gpu_check(library_dir: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--interval", "0.1", *args],
        env=library_env(library_dir, config),
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_without_a_driver_it_says_there_is_nothing_to_check(tmp_path: Path) -> None:
    empty = tmp_path / "lib"
    empty.mkdir()
    result = gpu_check(empty, tmp_path / "absent.conf")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu-check: no usable NVIDIA driver here" in result.stdout
    assert "libnvidia-ml.so.1 was not found" in result.stdout
    assert "Traceback" not in result.stderr


def test_it_passes_when_the_agent_reports_the_pid_with_its_memory(
    tmp_path: Path, sleeper: int
) -> None:
    gpu = FakeGpu("GPU-check", processes=[FakeProcess(sleeper, 300 << 20)])
    config = FakeNode([gpu], driver="550.90.07").write(tmp_path / "nvml.conf")
    result = gpu_check(build_library(), config, "--pid", str(sleeper))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "driver 550.90.07" in result.stdout
    assert f"PID {sleeper} on GPU 0 (GPU-check): COMPUTE, 300 MiB" in result.stdout
    assert f"PASS: the agent reports PID {sleeper} with its memory" in result.stdout


def test_it_fails_when_the_pid_is_missing_or_has_no_memory(tmp_path: Path, sleeper: int) -> None:
    gpu = FakeGpu("GPU-check", processes=[FakeProcess(sleeper, None)])
    config = FakeNode([gpu]).write(tmp_path / "nvml.conf")
    no_memory = gpu_check(build_library(), config, "--pid", str(sleeper))
    assert no_memory.returncode == 1 and "memory not available" in no_memory.stdout
    assert "FAIL" in no_memory.stdout
    FakeNode([FakeGpu("GPU-check")]).write(config)
    missing = gpu_check(build_library(), config, "--pid", str(sleeper))
    assert missing.returncode == 1
    assert f"FAIL: the agent does not report PID {sleeper}" in missing.stdout


def test_without_cuda_it_cannot_start_a_gpu_process_and_says_so(tmp_path: Path) -> None:
    # The fake library has no libcuda.so.1 beside it, and this machine has no torch or cupy.
    config = FakeNode([FakeGpu("GPU-check")]).write(tmp_path / "nvml.conf")
    result = gpu_check(build_library(), config)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "cannot allocate GPU memory with libcuda.so.1" in result.stdout
    assert "cannot start a GPU process" in result.stdout and "Traceback" not in result.stderr


def test_docs_nvml_md_shows_the_lines_it_prints(tmp_path: Path, sleeper: int) -> None:
    # The documented run: the fake library's GPU, and --pid of a process it reports.
    text = (REPO_ROOT / "docs" / "nvml.md").read_text()
    shown = re.search(r"the lines are:\n\n```text\n(.*?)```", text, re.S)
    assert shown is not None
    gpu = FakeGpu(
        "GPU-5e1c6c2a-35ab-52a8-94e7-0bd4a1d1ec0e", processes=[FakeProcess(sleeper, 300 << 20)]
    )
    config = FakeNode([gpu], driver="550.90.07").write(tmp_path / "nvml.conf")
    result = gpu_check(build_library(), config, "--pid", str(sleeper))
    assert result.returncode == 0, result.stdout + result.stderr

    def alike(lines: str) -> list[str]:
        # A PID and what ran the check differ from run to run; the shape of the line does not.
        versions = r"gpugraph \S+, nvidia-ml-py \S+, Python \S+, \S+ \S+ \S+$"
        lines = re.sub(r"PID \d+", "PID P", lines)
        return [re.sub(versions, "VERSIONS", line) for line in lines.splitlines()]

    assert alike(result.stdout) == alike(shown[1])
    assert alike(shown[1])[0] == "gpu-check: VERSIONS"


# -- the probes of the calls drivers answer differently -----------------------------------


def probes(stdout: str) -> list[str]:
    """The probe lines: those between the driver's line and the PID's."""
    lines = stdout.splitlines()
    driver = next(i for i, line in enumerate(lines) if line.startswith("gpu-check: driver "))
    end = next(i for i, line in enumerate(lines) if " on GPU " in line or "FAIL" in line)
    return [line.removeprefix("gpu-check: ") for line in lines[driver + 1 : end]]


def test_it_probes_mps_clients_and_blackwells_utilization_call(
    tmp_path: Path, sleeper: int
) -> None:
    processes = [FakeProcess(sleeper, 300 << 20), FakeProcess(77, 1 << 30, compute=False, mps=True)]
    gpu = FakeGpu("GPU-bw", processes=processes, blackwell=True, samples=[(77, 2**62, 30)])
    config = FakeNode([gpu], driver="570.86.15").write(tmp_path / "nvml.conf")
    result = gpu_check(build_library(), config, "--pid", str(sleeper), "--event-wait", "0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert probes(result.stdout) == [
        "GPU 0 MPS clients: 1 through nvmlDeviceGetMPSComputeRunningProcesses_v3 (PIDs 77)",
        "GPU 0 nvmlDeviceGetProcessesUtilizationInfo: answered, 1 samples in the last 2 s",
        "GPU 0 nvmlDeviceGetProcessUtilization: NOT_SUPPORTED",
        "GPU 0 per-process SM utilization: the agent reads it through "
        "nvmlDeviceGetProcessesUtilizationInfo",
        "GPU 0 events: supported types 0xb (ECC_SINGLE_BIT, ECC_DOUBLE_BIT, XID); registered",
        "events: waited 0.1 s: no event (TIMEOUT), as on a healthy GPU",
    ]


def test_on_a_driver_before_r550_it_says_the_agent_reads_the_legacy_call(
    tmp_path: Path, sleeper: int
) -> None:
    gpu = FakeGpu("GPU-old", processes=[FakeProcess(sleeper, 300 << 20)])
    config = FakeNode([gpu], driver="535.54.03").write(tmp_path / "nvml.conf")
    result = gpu_check(
        build_library(Variant.R535), config, "--pid", str(sleeper), "--event-wait", "0.1"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert probes(result.stdout)[:4] == [
        "GPU 0 MPS clients: 0 through nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "GPU 0 nvmlDeviceGetProcessesUtilizationInfo: FUNCTION_NOT_FOUND; "
        "the agent asks the legacy call",
        "GPU 0 nvmlDeviceGetProcessUtilization: answered, no samples in the last 2 s (idle)",
        "GPU 0 per-process SM utilization: the agent reads it through "
        "nvmlDeviceGetProcessUtilization",
    ]


def test_refusals_are_probe_lines_and_leave_the_verdict_alone(tmp_path: Path, sleeper: int) -> None:
    gpu = FakeGpu("GPU-no", processes=[FakeProcess(sleeper, 300 << 20)], blackwell=True)
    gpu.errors = {
        "nvmlDeviceGetMPSComputeRunningProcesses": NO_PERMISSION,
        "nvmlDeviceGetProcessesUtilizationInfo": UNKNOWN,
        "nvmlDeviceGetSupportedEventTypes": NOT_SUPPORTED,
    }
    mig = FakeGpu("GPU-mig", mig_mode=1, mig=[FakeMig("MIG-a", gi=1)])
    mig.errors = {"nvmlDeviceGetMPSComputeRunningProcesses": NOT_SUPPORTED}
    config = FakeNode([gpu, mig]).write(tmp_path / "nvml.conf")
    result = gpu_check(build_library(), config, "--pid", str(sleeper), "--event-wait", "0.1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert probes(result.stdout) == [
        "GPU 0 MPS clients: nvmlDeviceGetMPSComputeRunningProcesses_v3 answered NO_PERMISSION; "
        "the agent marks the process list incomplete",
        "GPU 0 nvmlDeviceGetProcessesUtilizationInfo: UNKNOWN",
        "GPU 0 nvmlDeviceGetProcessUtilization: NOT_SUPPORTED",
        "GPU 0 per-process SM utilization: WARN: neither call answers",
        "GPU 1 MPS clients: nvmlDeviceGetMPSComputeRunningProcesses_v3 answered NOT_SUPPORTED; "
        "the agent lists none, without an error",
        "GPU 1 nvmlDeviceGetProcessesUtilizationInfo: NOT_SUPPORTED; "
        "the agent asks the legacy call",
        "GPU 1 nvmlDeviceGetProcessUtilization: NOT_SUPPORTED",
        "GPU 1 per-process SM utilization: a MIG-enabled GPU has none: neither call answers",
        "GPU 0 events: nvmlDeviceGetSupportedEventTypes answered NOT_SUPPORTED",
        "GPU 1 events: supported types 0xb (ECC_SINGLE_BIT, ECC_DOUBLE_BIT, XID); registered",
        "events: waited 0.1 s: no event (TIMEOUT), as on a healthy GPU",
    ]
    assert "Traceback" not in result.stderr


def test_an_event_during_its_one_wait_is_named(tmp_path: Path, sleeper: int) -> None:
    gpu = FakeGpu("GPU-x", processes=[FakeProcess(sleeper, 300 << 20)])
    config = FakeNode([gpu]).write(tmp_path / "nvml.conf")
    events = FakeEvents(tmp_path / "events")
    args = ["--interval", "0.1", "--pid", str(sleeper), "--event-wait", "60"]
    check = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=library_env(build_library(), config, **events.env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert check.stdout is not None
    try:
        # The wait lasts a minute unless the event ends it: emitted once the GPU is registered.
        for line in check.stdout:
            if line.startswith("gpu-check: GPU 0 events:"):
                assert line.rstrip().endswith("registered"), line
                events.emit(0, XID, 13)
                break
        rest = check.stdout.read()
        assert check.wait(60) == 0, rest + (check.stderr.read() if check.stderr else "")
    finally:
        check.kill()
    assert "gpu-check: events: waited 60 s: an event came: XID, data 13\n" in rest
