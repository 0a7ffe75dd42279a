"""tools/gpu_check.py over the fake libnvidia-ml.so.1: it reports clearly, and never crashes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.libnvml import (
    REPO_ROOT,
    FakeGpu,
    FakeNode,
    FakeProcess,
    build_library,
    library_env,
)

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
