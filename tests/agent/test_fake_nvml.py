"""FakeGpuSource: the JSON file behind --nvml-fake."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from node_resolver.fake_nvml import FakeGpuSource, FakeNvmlError, write_fake_nvml
from node_resolver.models import GpuProcess, GpuSample, MigDevice, ProcessType
from tests.support.agents import gpu_json, nvml_json

ISSUE_EXAMPLE = """
{"driverVersion": "550.90.07", "cudaDriverVersion": 12040,
 "gpus": [{"index": 0, "uuid": "GPU-1", "name": "NVIDIA H200",
           "memoryTotalBytes": 150754820096, "memoryUsedBytes": 2147483648,
           "utilizationGpu": 87, "utilizationMemory": 40, "temperatureC": 55,
           "powerUsageWatts": 350.5, "powerLimitWatts": 700.0,
           "error": null,
           "processes": [{"pid": 4242, "usedMemoryBytes": 1073741824,
                          "type": "COMPUTE", "smUtilization": 50}]}]}
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "nvml.json"


def test_reads_the_documented_shape(path: Path) -> None:
    path.write_text(ISSUE_EXAMPLE)
    node = FakeGpuSource(path).sample()
    assert (node.driver_version, node.cuda_driver_version, node.error) == ("550.90.07", 12040, None)
    assert node.gpus == [
        GpuSample(
            index=0,
            uuid="GPU-1",
            name="NVIDIA H200",
            memory_total_bytes=150754820096,
            memory_used_bytes=2147483648,
            utilization_gpu=87,
            utilization_memory=40,
            temperature_c=55,
            power_usage_watts=350.5,
            power_limit_watts=700.0,
            processes=[
                GpuProcess(
                    pid=4242,
                    type=ProcessType.COMPUTE,
                    used_memory_bytes=1073741824,
                    sm_utilization=50,
                )
            ],
        )
    ]


def test_rereads_the_file_when_it_changes(path: Path) -> None:
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=10)]))
    source = FakeGpuSource(path)
    assert source.sample().gpus[0].utilization_gpu == 10
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=95), gpu_json(1)]))
    node = source.sample()
    assert [g.utilization_gpu for g in node.gpus] == [95, 87]
    assert source.reloads == 1
    # Unchanged file: no re-read.
    source.sample()
    assert source.reloads == 1


def test_an_in_place_rewrite_is_noticed_too(path: Path) -> None:
    path.write_text(json.dumps(nvml_json([gpu_json(0, temperatureC=40)])))
    source = FakeGpuSource(path)
    path.write_text(json.dumps(nvml_json([gpu_json(0, temperatureC=41)])))
    assert source.sample().gpus[0].temperature_c == 41


def test_unknown_keys_are_ignored(path: Path) -> None:
    gpu = gpu_json(0, fanSpeed=30, processes=[{"pid": 1, "colour": "green"}])
    write_fake_nvml(path, nvml_json([gpu], vendor="x", nested={"a": [1, 2]}))
    (parsed,) = FakeGpuSource(path).sample().gpus
    assert parsed.utilization_gpu == 87 and [p.pid for p in parsed.processes] == [1]


def test_missing_optional_keys_mean_not_available(path: Path) -> None:
    write_fake_nvml(path, {"gpus": [{"index": 3, "uuid": "GPU-3", "processes": [{"pid": 7}]}]})
    node = FakeGpuSource(path).sample()
    assert node.driver_version is None and node.cuda_driver_version is None
    assert node.gpus == [
        GpuSample(index=3, uuid="GPU-3", processes=[GpuProcess(pid=7, type=ProcessType.COMPUTE)])
    ]
    process = node.gpus[0].processes[0]
    assert process.used_memory_bytes is None and process.sm_utilization is None


def test_zero_is_kept_apart_from_missing(path: Path) -> None:
    write_fake_nvml(path, {"gpus": [{"index": 0, "uuid": "G", "utilizationGpu": 0}]})
    (gpu,) = FakeGpuSource(path).sample().gpus
    assert gpu.utilization_gpu == 0 and gpu.utilization_memory is None


def test_invalid_json_at_startup_names_file_line_and_column(path: Path) -> None:
    path.write_text('{"gpus": [\n  {"index": 0,, "uuid": "x"}\n]}\n')
    with pytest.raises(FakeNvmlError, match=rf"{path}:2:15: invalid JSON"):
        FakeGpuSource(path)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ([], "top level: expected an object"),
        ({}, "gpus: required"),
        ({"gpus": [{"uuid": "x"}]}, r"gpus\[0\]\.index: required"),
        ({"gpus": [{"index": 0, "uuid": "x", "memoryUsedBytes": "1GB"}]}, "memoryUsedBytes"),
        ({"gpus": [{"index": 0, "uuid": "x", "utilizationGpu": True}]}, "utilizationGpu"),
        ({"gpus": [{"index": 0, "uuid": "x", "processes": [{"pid": -1}]}]}, r"processes\[0\]\.pid"),
        ({"gpus": [{"index": 0, "uuid": "x", "processes": [{"pid": 1, "type": "X"}]}]}, "type"),
        ({"gpus": [{"index": 0, "uuid": "a"}, {"index": 0, "uuid": "b"}]}, "duplicate"),
    ],
)
def test_wrong_shapes_at_startup_name_the_bad_value(path: Path, data: object, where: str) -> None:
    path.write_text(json.dumps(data))
    with pytest.raises(FakeNvmlError, match=where) as caught:
        FakeGpuSource(path)
    assert str(path) in str(caught.value)


def one_gpu(**fields: object) -> dict[str, object]:
    return {"gpus": [{"index": 0, "uuid": "x", **fields}]}


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (one_gpu(utilizationGpu=101), "utilizationGpu"),
        (one_gpu(utilizationMemory=2**32), "utilizationMemory"),
        (one_gpu(memoryUsedBytes=2**64), "memoryUsedBytes"),
        (one_gpu(temperatureC=-(2**40)), "temperatureC"),
        ({"gpus": [{"index": 2**31, "uuid": "x"}]}, r"gpus\[0\]\.index"),
        ({"cudaDriverVersion": 2**31, "gpus": []}, "cudaDriverVersion"),
        (one_gpu(processes=[{"pid": 2**32}]), r"processes\[0\]\.pid"),
        (one_gpu(processes=[{"pid": 1, "smUtilization": 200}]), "smUtilization"),
        (one_gpu(migDevices=[{"index": 0, "uuid": "m", "gpuInstanceId": -1}]), "gpuInstanceId"),
    ],
)
def test_numbers_outside_what_the_agent_can_send_are_rejected(
    path: Path, data: object, where: str
) -> None:
    path.write_text(json.dumps(data))
    with pytest.raises(FakeNvmlError, match=f"{where}: expected an integer from"):
        FakeGpuSource(path)


def test_an_out_of_range_edit_keeps_the_last_good_data(path: Path) -> None:
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=12)]))
    source = FakeGpuSource(path)
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=2**32)]))
    assert source.sample().gpus[0].utilization_gpu == 12
    assert source.reloads == 0


def test_a_pid_listed_twice_on_one_device_is_merged_as_nvml_does(path: Path) -> None:
    processes: list[dict[str, Any]] = [
        {"pid": 1, "type": "COMPUTE", "usedMemoryBytes": 5, "smUtilization": 30},
        {"pid": 1, "type": "GRAPHICS", "usedMemoryBytes": 7},
        {"pid": 2, "migDeviceUuid": "MIG-a"},
        {"pid": 2, "migDeviceUuid": "MIG-b"},
        {"pid": 3},
        {"pid": 3},
    ]
    write_fake_nvml(path, nvml_json([gpu_json(0, processes)]))
    (gpu,) = FakeGpuSource(path).sample().gpus
    assert gpu.processes == [
        GpuProcess(pid=1, type=ProcessType.BOTH, used_memory_bytes=7, sm_utilization=30),
        # The same PID on two MIG devices is two entries, one per device.
        GpuProcess(pid=2, mig_device_uuid="MIG-a"),
        GpuProcess(pid=2, mig_device_uuid="MIG-b"),
        GpuProcess(pid=3),
    ]


def test_missing_file_at_startup_is_an_error(path: Path) -> None:
    with pytest.raises(FakeNvmlError, match="cannot read"):
        FakeGpuSource(path)


def test_a_bad_edit_keeps_the_last_good_data(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=12)]))
    source = FakeGpuSource(path)
    path.write_text('{"gpus": [')
    with caplog.at_level(logging.WARNING, logger="node_resolver.fake_nvml"):
        assert source.sample().gpus[0].utilization_gpu == 12
        assert source.sample().gpus[0].utilization_gpu == 12
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning per bad version, not one per scan"
    assert "invalid JSON" in warnings[0] and "last good" in warnings[0]
    # Deleting the file is a bad edit too.
    path.unlink()
    assert source.sample().gpus[0].utilization_gpu == 12
    # A good edit is picked up again.
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=13)]))
    assert source.sample().gpus[0].utilization_gpu == 13


def test_error_gpu_has_identity_and_error_only(path: Path) -> None:
    lost = gpu_json(1, error="GPU_IS_LOST", processes=[{"pid": 5}])
    write_fake_nvml(path, nvml_json([gpu_json(0, processes=[{"pid": 4}]), lost]))
    ok, failed = FakeGpuSource(path).sample().gpus
    assert ok.error is None and [p.pid for p in ok.processes] == [4]
    assert failed == GpuSample(index=1, uuid=lost["uuid"], name="NVIDIA H200", error="GPU_IS_LOST")


def test_mig_and_field_errors(path: Path) -> None:
    gpu = gpu_json(
        0,
        migEnabled=True,
        migDevices=[
            {"index": 0, "uuid": "MIG-a", "memoryTotalBytes": 10, "gpuInstanceId": 1,
             "computeInstanceId": 0},
            {"index": 1, "uuid": "MIG-b"},
        ],
        processes=[
            {"pid": 1, "migDeviceUuid": "MIG-a", "type": "BOTH"},
            {"pid": 2, "migDeviceUuid": "MIG-b", "type": "GRAPHICS"},
        ],
        fieldErrors={"powerUsageWatts": "NOT_SUPPORTED", "temperature_c": "NO_PERMISSION"},
    )  # fmt: skip
    write_fake_nvml(path, nvml_json([gpu]))
    (parsed,) = FakeGpuSource(path).sample().gpus
    assert parsed.mig_enabled is True
    assert parsed.mig_devices == [
        MigDevice(index=0, uuid="MIG-a", memory_total_bytes=10, gpu_instance_id=1,
                  compute_instance_id=0),
        MigDevice(index=1, uuid="MIG-b"),
    ]  # fmt: skip
    assert [(p.pid, p.type, p.mig_device_uuid) for p in parsed.processes] == [
        (1, ProcessType.BOTH, "MIG-a"),
        (2, ProcessType.GRAPHICS, "MIG-b"),
    ]
    # A field with an error reads as not available, as NVML leaves it.
    assert parsed.power_usage_watts is None and parsed.temperature_c is None
    assert parsed.field_errors == {
        "power_usage_watts": "NOT_SUPPORTED",
        "temperature_c": "NO_PERMISSION",
    }


def test_each_sample_hands_out_fresh_records(path: Path) -> None:
    write_fake_nvml(path, nvml_json([gpu_json(0, processes=[{"pid": 1}])]))
    source = FakeGpuSource(path)
    first = source.sample()
    first.gpus[0].processes[0].name = "changed by a caller"
    first.gpus[0].processes.clear()
    assert source.sample().gpus[0].processes == [GpuProcess(pid=1)]


def test_write_fake_nvml_replaces_atomically(path: Path) -> None:
    write_fake_nvml(path, nvml_json([]))
    inode = path.stat().st_ino
    write_fake_nvml(path, nvml_json([gpu_json(0)]))
    # A new file renamed over the old one, and no temporary file left behind.
    assert path.stat().st_ino != inode
    assert os.listdir(path.parent) == [path.name]
    assert json.loads(path.read_text())["gpus"][0]["index"] == 0


def test_a_200k_deep_file_is_a_bad_edit_not_a_crash(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_fake_nvml(path, nvml_json([gpu_json(0, utilizationGpu=12)]))
    source = FakeGpuSource(path)
    path.write_text('{"gpus": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with caplog.at_level(logging.WARNING, logger="node_resolver.fake_nvml"):
        for _ in range(3):
            assert source.sample().gpus[0].utilization_gpu == 12
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "nested too deeply" in warnings[0] and "last good" in warnings[0]
    assert all(r.exc_info is None for r in caplog.records), "no traceback for a bad file"


def test_a_deep_value_in_a_known_key_is_named_briefly(path: Path) -> None:
    # A long (deeply nested) bad value is cut short in the message.
    text = json.dumps(nvml_json([gpu_json(0, utilizationGpu="DEEP")]))
    path.write_text(text.replace('"DEEP"', "[" * 600 + "1" + "]" * 600))
    with pytest.raises(FakeNvmlError, match=r"utilizationGpu: expected int, got .{1,80}$"):
        FakeGpuSource(path)
