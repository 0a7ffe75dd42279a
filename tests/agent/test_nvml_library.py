"""``NvmlGpuSource()`` with the real nvidia-ml-py over the fake libnvidia-ml.so.1.

Nothing here replaces pynvml: it is imported as installed (the version pinned in
constraints.txt), dlopens the C library by its usual name, and the production
code reads its answers. Each test runs the source in a subprocess, so that the
dynamic loader finds the variant the test asks for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.fake_proc import kubelet_cgroup
from node_resolver.models import ProcessType
from tests.support.agents import (
    CONTAINER_ID,
    POD_UID,
    FakeProc,
    agent_command,
    sample_of,
    start_agent_process,
    write_proc_tree,
)
from tests.support.libnvml import (
    DRIVER_NOT_LOADED,
    GPU_IS_LOST,
    INSUFFICIENT_RESOURCES,
    LIB_RM_VERSION_MISMATCH,
    LISTING_VARIANTS,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNode,
    FakeProcess,
    ProbeResult,
    Variant,
    build_library,
    library_env,
    probe,
)

NOW = 1_800_000_000.0
NOW_US = int(NOW * 1_000_000)
GIB = 1 << 30

# PID 100 is in both lists; 300's memory is "not available".
MIXED = [
    FakeProcess(100, 2 * GIB, compute=True, graphics=True),
    FakeProcess(200, 5),
    FakeProcess(300, None, compute=False, graphics=True),
]


def run(
    tmp_path: Path,
    node: FakeNode,
    variant: Variant = Variant.CURRENT,
    **options: Any,
) -> ProbeResult:
    config = node.write(tmp_path / "nvml.conf")
    return probe(build_library(variant), config, **options)


def one_gpu(result: ProbeResult) -> dict[str, Any]:
    assert result.error is None, result.error
    (scan,) = result.scans
    (gpu,) = scan["gpus"]
    return dict(gpu)


def processes(gpu: dict[str, Any]) -> dict[int, tuple[str, int | None]]:
    return {p["pid"]: (p["type"], p["used_memory_bytes"]) for p in gpu["processes"]}


EXPECTED_MIXED = {100: ("BOTH", 2 * GIB), 200: ("COMPUTE", 5), 300: ("GRAPHICS", None)}


def test_every_metric_comes_through_with_its_unit_and_type(tmp_path: Path) -> None:
    node = FakeNode([FakeGpu("GPU-a", processes=MIXED)], driver="550.90.07", cuda=12040)
    result = run(tmp_path, node)
    (scan,) = result.scans
    assert (scan["driver_version"], scan["cuda_driver_version"], scan["error"]) == (
        "550.90.07",
        12040,
        None,
    )
    gpu = one_gpu(result)
    assert (gpu["uuid"], gpu["name"]) == ("GPU-a", "NVIDIA H200")
    assert (gpu["memory_total_bytes"], gpu["memory_used_bytes"]) == (150754820096, 2147483648)
    assert (gpu["utilization_gpu"], gpu["utilization_memory"], gpu["temperature_c"]) == (87, 40, 55)
    # NVML's milliwatts become watts.
    assert (gpu["power_usage_watts"], gpu["power_limit_watts"]) == (350.5, 700.0)
    assert gpu["mig_enabled"] is None and gpu["field_errors"] == {"mig_enabled": "NOT_SUPPORTED"}
    assert processes(gpu) == EXPECTED_MIXED


@pytest.mark.parametrize("variant", LISTING_VARIANTS)
def test_every_driver_variant_reads_the_same_processes(tmp_path: Path, variant: Variant) -> None:
    gpu = one_gpu(run(tmp_path, FakeNode([FakeGpu("GPU-a", processes=MIXED)]), variant))
    assert gpu["error"] is None and processes(gpu) == EXPECTED_MIXED
    assert set(gpu["field_errors"]) == {"mig_enabled"}


def test_early_r535_entries_are_read_with_their_own_size(tmp_path: Path) -> None:
    # Several entries per list, so a wrong stride would shift every entry after the first.
    many = [FakeProcess(1000 + i, (i + 1) * GIB, graphics=i % 2 == 0) for i in range(6)]
    node = FakeNode([FakeGpu("GPU-a", processes=many)], driver="535.54.03")
    result = run(tmp_path, node, Variant.R535)
    gpu = one_gpu(result)
    assert processes(gpu) == {
        1000 + i: ("BOTH" if i % 2 == 0 else "COMPUTE", (i + 1) * GIB) for i in range(6)
    }
    assert "32-byte process entries" in result.stderr


@pytest.mark.parametrize(
    ("variant", "layout"), [(Variant.CURRENT, ("_v3", 32)), (Variant.R535, ("_v3", 24))]
)
def test_entries_of_another_size_than_the_drivers_are_refused_not_reported(
    tmp_path: Path, variant: Variant, layout: tuple[str, int]
) -> None:
    # A driver whose symbols misstate its entry size: its lists are field errors, never
    # invented PIDs. A single entry reads right at either size, so the MIG device's is kept.
    many = [FakeProcess(1000 + i, (i + 1) * GIB, graphics=i % 2 == 0) for i in range(4)]
    whole = FakeGpu("GPU-a", processes=many)
    mig = FakeGpu("GPU-m", mig_mode=1, mig=[FakeMig("MIG-a", gi=3, processes=[FakeProcess(7)])])
    result = run(tmp_path, FakeNode([whole, mig]), variant, layout=layout)
    first, second = result.scans[0]["gpus"]
    assert first["error"] is None and first["processes"] == []
    assert first["field_errors"] == {
        "mig_enabled": "NOT_SUPPORTED",
        "processes.compute": "PROCESS_LIST_LAYOUT_MISMATCH",
        "processes.graphics": "PROCESS_LIST_LAYOUT_MISMATCH",
    }
    assert [(p["pid"], p["used_memory_bytes"]) for p in second["processes"]] == [(7, GIB)]
    assert f"read as {layout[1]} bytes name different GPU instances" in result.stderr


def test_the_old_driver_reads_v1_memory_and_v2_process_lists(tmp_path: Path) -> None:
    gpu_sim = FakeGpu("GPU-a", used=2 * GIB, reserved=GIB, processes=MIXED)
    current = one_gpu(run(tmp_path, FakeNode([gpu_sim]), Variant.CURRENT))
    old = one_gpu(run(tmp_path, FakeNode([gpu_sim]), Variant.OLD))
    # v2 leaves the driver's reserved memory out of "used"; v1 (all an old driver has) counts it.
    assert (current["memory_used_bytes"], old["memory_used_bytes"]) == (2 * GIB, 3 * GIB)
    assert processes(old) == EXPECTED_MIXED
    assert "memory_used_bytes" not in old["field_errors"]


def test_a_driver_without_v2_process_lists_costs_only_the_lists(tmp_path: Path) -> None:
    # nvidia-ml-py reads no v1 lists: they come back as field errors, never as an idle GPU.
    gpu = one_gpu(run(tmp_path, FakeNode([FakeGpu("GPU-a", processes=MIXED)]), Variant.R430))
    assert gpu["error"] is None and gpu["processes"] == []
    assert (gpu["memory_used_bytes"], gpu["utilization_gpu"]) == (2 * GIB, 87)
    assert gpu["field_errors"] == {
        "mig_enabled": "NOT_SUPPORTED",
        "processes.compute": "FUNCTION_NOT_FOUND",
        "processes.graphics": "FUNCTION_NOT_FOUND",
    }


# CURRENT reads R550's nvmlDeviceGetProcessesUtilizationInfo; the others lack it and read
# the legacy nvmlDeviceGetProcessUtilization.
@pytest.mark.parametrize("variant", LISTING_VARIANTS)
def test_sm_utilization_is_the_latest_sample_inside_the_window(
    tmp_path: Path, variant: Variant
) -> None:
    samples = UTILIZATION_SAMPLES
    node = FakeNode([FakeGpu("GPU-a", processes=MIXED, samples=samples)])
    gpu = one_gpu(run(tmp_path, node, variant, now=NOW, window=2.0))
    assert {p["pid"]: p["sm_utilization"] for p in gpu["processes"]} == {
        100: 35,
        200: 70,
        300: None,
    }
    # Only samples older than the window: an idle GPU, not an error.
    old_only = FakeNode([FakeGpu("GPU-a", processes=MIXED, samples=samples[:1])])
    idle = one_gpu(run(tmp_path, old_only, variant, now=NOW, window=2.0))
    assert all(p["sm_utilization"] is None for p in idle["processes"])
    assert "processes.sm_utilization" not in idle["field_errors"]


# -- MPS clients and per-process utilization on current drivers --------------------------

# An MPS server (compute only) and its clients: one only in the MPS list, one in the compute
# list too (nvidia-smi's M+C, with the larger memory figure kept), one with graphics as well.
MPS_NODE = [
    FakeProcess(50, 300 << 20),
    FakeProcess(60, GIB, compute=False, mps=True),
    FakeProcess(61, 2 * GIB, mps=True),
    FakeProcess(62, None, compute=False, graphics=True, mps=True),
    FakeProcess(100, 2 * GIB, compute=True, graphics=True),
]
EXPECTED_MPS = {
    50: ("COMPUTE", 300 << 20),
    60: ("MPS", GIB),
    61: ("MPS", 2 * GIB),
    62: ("MPS_GRAPHICS", None),
    100: ("BOTH", 2 * GIB),
}


@pytest.mark.parametrize("variant", LISTING_VARIANTS)
def test_mps_clients_are_listed_beside_compute_and_graphics_with_their_type(
    tmp_path: Path, variant: Variant
) -> None:
    whole = FakeGpu("GPU-a", processes=MPS_NODE)
    mig = FakeGpu(
        "GPU-m",
        mig_mode=1,
        mig=[FakeMig("MIG-a", gi=1, processes=[FakeProcess(70, GIB, compute=False, mps=True)])],
    )
    first, second = run(tmp_path, FakeNode([whole, mig]), variant).scans[0]["gpus"]
    assert processes(first) == EXPECTED_MPS
    assert set(first["field_errors"]) == {"mig_enabled"}
    assert [(p["pid"], p["type"], p["mig_device_uuid"]) for p in second["processes"]] == [
        (70, "MPS", "MIG-a")
    ]


def test_the_mps_list_fails_as_a_list_where_it_can_and_is_empty_where_mps_cannot_run(
    tmp_path: Path,
) -> None:
    denied = FakeGpu("GPU-denied", processes=MPS_NODE)
    denied.errors = {"nvmlDeviceGetMPSComputeRunningProcesses": NO_PERMISSION}
    no_mps = FakeGpu("GPU-nomps", processes=[FakeProcess(50)])
    no_mps.errors = {"nvmlDeviceGetMPSComputeRunningProcesses": NOT_SUPPORTED}
    first, second = run(tmp_path, FakeNode([denied, no_mps])).scans[0]["gpus"]
    # A client may be missing: the list is incomplete, not idle.
    assert first["field_errors"] == {
        "mig_enabled": "NOT_SUPPORTED",
        "processes.mps": "NO_PERMISSION",
    }
    assert processes(first) == {
        50: ("COMPUTE", 300 << 20),
        61: ("COMPUTE", 2 * GIB),
        62: ("GRAPHICS", None),
        100: ("BOTH", 2 * GIB),
    }
    # A device where MPS cannot run has no client to miss.
    assert second["field_errors"] == {"mig_enabled": "NOT_SUPPORTED"}
    assert processes(second) == {50: ("COMPUTE", GIB)}


UTILIZATION_SAMPLES = [
    (100, NOW_US - 2_000_010, 99),  # before the 2 s window
    (100, NOW_US - 900_000, 20),
    (100, NOW_US - 100_000, 35),
    (200, NOW_US - 500_000, 70),
]


def sm_of(gpu: dict[str, Any]) -> dict[int, int | None]:
    return {p["pid"]: p["sm_utilization"] for p in gpu["processes"]}


@pytest.mark.parametrize("blackwell", [False, True])
def test_r550s_call_reads_per_process_utilization_where_the_legacy_one_is_not_supported(
    tmp_path: Path, blackwell: bool
) -> None:
    # On Blackwell, R570 drivers answer the legacy call NOT_SUPPORTED.
    sim = FakeGpu("GPU-b", processes=MIXED, samples=UTILIZATION_SAMPLES, blackwell=blackwell)
    gpu = one_gpu(run(tmp_path, FakeNode([sim]), now=NOW, window=2.0))
    assert sm_of(gpu) == {100: 35, 200: 70, 300: None}
    assert set(gpu["field_errors"]) == {"mig_enabled"}


def test_the_legacy_utilization_call_answers_where_r550s_does_not(tmp_path: Path) -> None:
    sim = FakeGpu("GPU-a", processes=MIXED, samples=UTILIZATION_SAMPLES)
    sim.errors = {"nvmlDeviceGetProcessesUtilizationInfo": NOT_SUPPORTED}
    both_refuse = FakeGpu("GPU-b", processes=MIXED, samples=UTILIZATION_SAMPLES, blackwell=True)
    both_refuse.errors = {"nvmlDeviceGetProcessesUtilizationInfo": UNKNOWN}
    # Two scans: a GPU whose new call is not supported is read the legacy way from then on.
    result = run(tmp_path, FakeNode([sim, both_refuse]), now=NOW, window=2.0, scans=2)
    for scan in result.scans:
        first, second = scan["gpus"]
        assert sm_of(first) == {100: 35, 200: 70, 300: None}
        assert set(first["field_errors"]) == {"mig_enabled"}
        # Neither call answers: the failure is said, and the processes are still listed.
        assert sm_of(second) == {100: None, 200: None, 300: None}
        assert second["field_errors"]["processes.sm_utilization"] == "UNKNOWN"


def test_mig_devices_and_their_processes(tmp_path: Path) -> None:
    gpu_sim = FakeGpu(
        "GPU-mig",
        mig_mode=1,
        # The parent's own list is not read in MIG mode.
        processes=[FakeProcess(999)],
        samples=[(100, NOW_US, 50)],
        mig=[
            FakeMig("MIG-a", gi=1, processes=[FakeProcess(100, GIB)]),
            None,
            FakeMig("MIG-c", gi=2, processes=[FakeProcess(200, 2 * GIB), FakeProcess(201, None)]),
        ],
    )
    gpu = one_gpu(run(tmp_path, FakeNode([gpu_sim]), now=NOW))
    assert gpu["error"] is None and gpu["mig_enabled"] is True
    assert [(d["index"], d["uuid"], d["gpu_instance_id"]) for d in gpu["mig_devices"]] == [
        (0, "MIG-a", 1),
        (2, "MIG-c", 2),
    ]
    assert gpu["mig_devices"][0]["memory_total_bytes"] == 20 * GIB
    assert {p["pid"]: (p["mig_device_uuid"], p["used_memory_bytes"]) for p in gpu["processes"]} == {
        100: ("MIG-a", GIB),
        200: ("MIG-c", 2 * GIB),
        201: ("MIG-c", None),
    }
    # What real NVML does on every MIG GPU: no utilization, reported as such.
    assert gpu["utilization_gpu"] is None
    assert gpu["field_errors"] == {
        "utilization_gpu": "NOT_SUPPORTED",
        "utilization_memory": "NOT_SUPPORTED",
    }
    assert all(p["sm_utilization"] is None for p in gpu["processes"])


def test_injected_errors_cost_their_field_mig_slot_or_gpu(tmp_path: Path) -> None:
    flaky = FakeGpu("GPU-flaky", processes=[FakeProcess(100)])
    flaky.errors = {
        "nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
        "nvmlDeviceGetComputeRunningProcesses": NO_PERMISSION,
    }
    mig_c = FakeMig("MIG-c", gi=2, processes=[FakeProcess(200)])
    mig_c.errors = {"nvmlDeviceGetMigDeviceHandleByIndex": INSUFFICIENT_RESOURCES}
    mig = FakeGpu("GPU-mig", mig_mode=1, mig=[FakeMig("MIG-a", 1, processes=[FakeProcess(300)])])
    mig.mig.append(mig_c)
    lost = FakeGpu("GPU-lost", lost=True, processes=[FakeProcess(400)])
    result = run(tmp_path, FakeNode([flaky, mig, lost]))
    first, second, third = result.scans[0]["gpus"]
    assert first["error"] is None and first["power_usage_watts"] is None
    assert first["power_limit_watts"] == 700.0 and first["processes"] == []
    assert first["field_errors"] == {
        "power_usage_watts": "NOT_SUPPORTED",
        "processes.compute": "NO_PERMISSION",
        "mig_enabled": "NOT_SUPPORTED",
    }
    assert [p["pid"] for p in second["processes"]] == [300]
    assert second["field_errors"]["mig_devices[1]"] == "INSUFFICIENT_RESOURCES"
    assert second["field_errors"]["processes"] == "INSUFFICIENT_RESOURCES"
    assert third["error"] == "GPU_IS_LOST" and third["processes"] == []


def test_mig_enumeration_and_mig_device_failures(tmp_path: Path) -> None:
    denied = FakeGpu("GPU-denied", mig_mode=1, mig=[FakeMig("MIG-x", 1)])
    denied.errors = {"nvmlDeviceGetMaxMigDeviceCount": NO_PERMISSION}
    first = FakeMig("MIG-a", 1, processes=[FakeProcess(100)])
    first.errors = {
        "nvmlDeviceGetMemoryInfo_v2": NOT_SUPPORTED,
        "nvmlDeviceGetMemoryInfo": NOT_SUPPORTED,
    }
    third = FakeMig("MIG-c", 2, processes=[FakeProcess(200)])
    third.errors = {"nvmlDeviceGetComputeRunningProcesses": UNKNOWN}
    partly = FakeGpu("GPU-partly", mig_mode=1, mig=[first, None, third])
    off = FakeGpu("GPU-off", mig_mode=0, processes=[FakeProcess(300)], mig=[FakeMig("MIG-y", 1)])
    gpus = run(tmp_path, FakeNode([denied, partly, off])).scans[0]["gpus"]
    # No processes here means "could not read them", not an idle GPU.
    assert gpus[0]["processes"] == [] and gpus[0]["mig_devices"] == []
    assert gpus[0]["field_errors"] == {
        "utilization_gpu": "NOT_SUPPORTED",
        "utilization_memory": "NOT_SUPPORTED",
        "mig_devices": "NO_PERMISSION",
        "processes": "NO_PERMISSION",
    }
    assert [d["uuid"] for d in gpus[1]["mig_devices"]] == ["MIG-a", "MIG-c"]
    assert [p["pid"] for p in gpus[1]["processes"]] == [100]
    assert gpus[1]["field_errors"] == {
        "utilization_gpu": "NOT_SUPPORTED",
        "utilization_memory": "NOT_SUPPORTED",
        "mig_devices[0].memory": "NOT_SUPPORTED",
        "mig_devices[2].processes.compute": "UNKNOWN",
    }
    # MIG-capable but off: the whole GPU is read, utilization included.
    assert gpus[2]["mig_enabled"] is False and gpus[2]["mig_devices"] == []
    assert gpus[2]["utilization_gpu"] == 87 and gpus[2]["field_errors"] == {}
    assert [(p["pid"], p["mig_device_uuid"]) for p in gpus[2]["processes"]] == [(300, None)]


def test_a_gpu_lost_halfway_through_its_fields_keeps_no_partial_metrics(tmp_path: Path) -> None:
    gpu_sim = FakeGpu("GPU-a", processes=[FakeProcess(100)])
    gpu_sim.errors = {"nvmlDeviceGetPowerUsage": GPU_IS_LOST}
    gpu = one_gpu(run(tmp_path, FakeNode([gpu_sim])))
    assert gpu["error"] == "GPU_IS_LOST" and gpu["uuid"] == "GPU-a"
    assert gpu["temperature_c"] is None and gpu["processes"] == [] and gpu["field_errors"] == {}


def test_changes_between_scans_a_new_process_and_a_lost_gpu(tmp_path: Path) -> None:
    before = FakeNode([FakeGpu("GPU-a", processes=[FakeProcess(100)]), FakeGpu("GPU-b")])
    during = FakeNode(
        [FakeGpu("GPU-a", processes=[FakeProcess(100), FakeProcess(101)]), FakeGpu("GPU-b")]
    )
    after = FakeNode([FakeGpu("GPU-a", lost=True), FakeGpu("GPU-b")])
    after.gpus[1].errors = {"nvmlDeviceGetName": GPU_IS_LOST}
    result = run(tmp_path, before, scans=3, between=[during, after])
    first, second, third = ([g for g in scan["gpus"]] for scan in result.scans)
    assert [p["pid"] for p in first[0]["processes"]] == [100]
    assert [p["pid"] for p in second[0]["processes"]] == [100, 101]
    # Lost GPUs keep their identity from the last good scan.
    assert [(g["uuid"], g["name"], g["error"]) for g in third] == [
        ("GPU-a", "NVIDIA H200", "GPU_IS_LOST"),
        ("GPU-b", "NVIDIA H200", "GPU_IS_LOST"),
    ]


def test_a_failing_device_count_is_a_node_error(tmp_path: Path) -> None:
    node = FakeNode([FakeGpu("GPU-a")], errors={"nvmlDeviceGetCount_v2": UNKNOWN})
    (scan,) = run(tmp_path, node).scans
    assert scan["error"] == "UNKNOWN" and scan["gpus"] == []
    assert scan["driver_version"] == "550.90.07"


def test_a_config_the_library_cannot_hold_fails_loudly(tmp_path: Path) -> None:
    # 257 processes on one GPU are over the library's MAX_PROCS: none may be dropped silently.
    crowded = FakeGpu("GPU-a", processes=[FakeProcess(1000 + i) for i in range(257)])
    result = run(tmp_path, FakeNode([crowded]))
    assert result.error == "cannot start NVML: UNKNOWN (Unknown Error)"
    assert "nvml.conf line 260 is malformed or over a limit: proc 0 -1 c 1256 " in result.stderr


# -- startup failures -------------------------------------------------------------


def start_failure(tmp_path: Path, library_dir: Path, node: FakeNode | None = None) -> str:
    """The agent CLI's one error line when NVML cannot start, after checking its exit."""
    config = (node or FakeNode()).write(tmp_path / "nvml.conf")
    result = subprocess.run(
        agent_command("--node-name", "n1", "--listen", "127.0.0.1:0"),
        env=library_env(library_dir, config),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    # The NvmlGpuSource() probe says the same as the agent.
    error = probe(library_dir, config).error
    assert error is not None and error in lines[0]
    return lines[0]


def test_a_missing_library_says_how_to_mount_it(tmp_path: Path) -> None:
    empty = tmp_path / "lib"
    empty.mkdir()
    line = start_failure(tmp_path, empty)
    assert "libnvidia-ml.so.1 was not found" in line
    assert "NVIDIA_VISIBLE_DEVICES=all" in line and "runtimeClassName: nvidia" in line
    # Where the variable cannot work, it names the chart's setting that does.
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged=false" in line
    assert "agent.nvml.mode (docs/nvml.md)" in line


def test_a_library_that_cannot_be_loaded_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "lib"
    broken.mkdir()
    (broken / "libnvidia-ml.so.1").write_bytes(b"not an ELF file\n" * 8)
    line = start_failure(tmp_path, broken)
    assert "libnvidia-ml.so.1 was found but cannot be loaded" in line
    assert "invalid ELF header" in line


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (DRIVER_NOT_LOADED, "the NVIDIA kernel driver is not loaded on this node"),
        (NO_PERMISSION, "no permission to open the NVIDIA device files"),
        (
            LIB_RM_VERSION_MISMATCH,
            "libnvidia-ml.so.1 and the loaded NVIDIA kernel module come from different driver",
        ),
    ],
)
def test_init_failures_each_have_their_own_message(
    tmp_path: Path, code: int, expected: str
) -> None:
    line = start_failure(tmp_path, build_library(), FakeNode(init_error=code))
    assert f"cannot start NVML: {expected}" in line


# -- the agent CLI without --nvml-fake, over gRPC ---------------------------------------


@pytest.mark.parametrize("variant", LISTING_VARIANTS)
def test_the_agent_serves_what_the_library_reports(tmp_path: Path, variant: Variant) -> None:
    proc = write_proc_tree(
        tmp_path / "proc",
        {
            4242: FakeProc(
                comm="trainer", cgroup=kubelet_cgroup(POD_UID, CONTAINER_ID, driver="systemd")
            ),
            100: FakeProc(comm="Xorg"),
        },
    )
    gpus = [
        FakeGpu("GPU-a", processes=[FakeProcess(4242, 3 * GIB), FakeProcess(100, GIB, True, True)]),
        FakeGpu("GPU-b", lost=True),
    ]
    config = FakeNode(gpus, driver="535.54.03").write(tmp_path / "nvml.conf")
    library = build_library(variant)
    with start_agent_process(
        None,
        log_path=tmp_path / "agent.log",
        proc_root=proc,
        pid_resolver="cgroup",
        env=library_env(library, config),
    ) as agent:
        sample = sample_of(agent.address)
        assert sample.driver_version == "535.54.03"
        first, second = sample.gpus
        assert {p.pid: (p.name, p.type, p.used_memory_bytes) for p in first.processes} == {
            4242: ("trainer", ProcessType.COMPUTE, 3 * GIB),
            100: ("Xorg", ProcessType.BOTH, GIB),
        }
        trainer = next(p for p in first.processes if p.pid == 4242)
        assert trainer.container is not None and trainer.container.pod_uid == POD_UID
        assert (second.index, second.error) == (1, "GPU_IS_LOST")
        assert agent.stop() == 0
    assert "Traceback" not in agent.logs()


@pytest.mark.parametrize(("require_all", "outcome"), [("1", "Failed"), ("0", "Skipped")])
def test_without_a_compiler_the_tests_skip_or_under_require_all_fail(
    tmp_path: Path, require_all: str, outcome: str
) -> None:
    script = (
        "from tests.support.libnvml import build_library\n"
        "try:\n"
        "    build_library()\n"
        "except BaseException as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    env = library_env(tmp_path, tmp_path / "nvml.conf", PATH=str(tmp_path))
    env["GPUGRAPH_REQUIRE_ALL"] = require_all
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.startswith(outcome), result.stdout + result.stderr
    assert "no C compiler (cc or gcc)" in result.stdout
