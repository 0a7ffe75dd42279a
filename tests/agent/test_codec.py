"""The gRPC codec: every field survives the wire, and None stays apart from 0."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_resolver.codec import (
    ENCODE_FAILED,
    snapshot_from_proto,
    snapshot_from_wire,
    snapshot_to_proto,
)
from node_resolver.generated import agent_pb2
from node_resolver.models import (
    ContainerRef,
    GpuProcess,
    GpuSample,
    MigDevice,
    NodeSample,
    NodeSnapshot,
    ProcessType,
    process_row,
)


def over_the_wire(snapshot: NodeSnapshot, now: float) -> NodeSnapshot:
    data = snapshot_to_proto(snapshot, now=now).SerializeToString()
    return snapshot_from_proto(agent_pb2.Snapshot.FromString(data))


def full_snapshot() -> NodeSnapshot:
    return NodeSnapshot(
        node_name="gpu-node-7",
        sampled_at=1_700_000_000.25,
        sample=NodeSample(
            driver_version="550.90.07",
            cuda_driver_version=12040,
            error="PID resolution failed: OSError: x",
            gpus=[
                GpuSample(
                    index=0,
                    uuid="GPU-0",
                    name="NVIDIA H200",
                    memory_total_bytes=150754820096,
                    memory_used_bytes=2147483648,
                    utilization_gpu=87,
                    utilization_memory=40,
                    temperature_c=-5,
                    power_usage_watts=350.5,
                    power_limit_watts=700.0,
                    mig_enabled=True,
                    mig_devices=[
                        MigDevice(1, "MIG-1", 10 << 30, 1 << 30, 3, 0),
                        MigDevice(2, "MIG-2"),
                    ],
                    processes=[
                        GpuProcess(
                            pid=4242,
                            type=ProcessType.BOTH,
                            used_memory_bytes=1 << 30,
                            sm_utilization=50,
                            mig_device_uuid="MIG-1",
                            name="python3",
                            cmdline="python3 train.py",
                            container=ContainerRef("c" * 64, "containerd", "pod-uid-1"),
                        ),
                        GpuProcess(pid=1, type=ProcessType.GRAPHICS, name="Xorg"),
                        GpuProcess(pid=2, container=ContainerRef("d" * 64, "docker", None)),
                    ],
                    field_errors={"processes.sm_utilization": "NOT_SUPPORTED"},
                ),
                GpuSample(index=1, uuid="GPU-1", name="NVIDIA H200", error="GPU_IS_LOST"),
            ],
        ),
    )


def test_round_trip_preserves_every_field_and_sets_the_age() -> None:
    original = full_snapshot()
    decoded = over_the_wire(original, now=original.sampled_at + 1.5)
    assert decoded.age_seconds == 1.5
    decoded.age_seconds = original.age_seconds
    assert decoded == original


def test_unset_stays_none_and_zero_stays_zero() -> None:
    zeros = GpuSample(
        index=0,
        uuid="GPU-z",
        name="",
        memory_total_bytes=0,
        memory_used_bytes=0,
        utilization_gpu=0,
        utilization_memory=0,
        temperature_c=0,
        power_usage_watts=0.0,
        power_limit_watts=0.0,
        mig_enabled=False,
        processes=[GpuProcess(pid=3, used_memory_bytes=0, sm_utilization=0, name="", cmdline="")],
    )
    nones = GpuSample(index=1, uuid="GPU-n", processes=[GpuProcess(pid=4)])
    snapshot = NodeSnapshot("n", NodeSample(cuda_driver_version=0, gpus=[zeros, nones]), 0.0)
    decoded = over_the_wire(snapshot, now=0.0)
    assert decoded.sample.gpus == [zeros, nones]
    assert decoded.sample.cuda_driver_version == 0 and decoded.sample.driver_version is None
    assert decoded.sample.error is None


def test_age_is_never_negative() -> None:
    snapshot = NodeSnapshot("n", NodeSample(), sampled_at=100.0)
    assert snapshot_to_proto(snapshot, now=99.0).age_seconds == 0.0


def test_the_wire_names_the_process_type_and_container() -> None:
    pb = snapshot_to_proto(full_snapshot(), now=0.0)
    process = pb.gpus[0].processes[0]
    assert process.type == agent_pb2.PROCESS_TYPE_BOTH
    assert (process.container_id, process.pod_uid, process.runtime) == (
        "c" * 64,
        "pod-uid-1",
        "containerd",
    )
    assert not pb.gpus[0].processes[1].container_id


@pytest.mark.parametrize("kind", list(ProcessType))
def test_every_process_type_survives_the_wire(kind: ProcessType) -> None:
    # MPS clients among them: an agent that read NVML's MPS list says so.
    gpu = GpuSample(index=0, uuid="GPU-0", processes=[GpuProcess(pid=7, type=kind)])
    snapshot = NodeSnapshot("n", NodeSample(gpus=[gpu]), 0.0)
    assert over_the_wire(snapshot, now=0.0).sample.gpus[0].processes[0].type is kind


def test_an_unspecified_type_from_another_agent_reads_as_compute() -> None:
    pb = agent_pb2.Snapshot(node_name="n", gpus=[agent_pb2.Gpu(processes=[agent_pb2.Process()])])
    decoded = snapshot_from_proto(pb)
    assert decoded.sample.gpus[0].processes[0].type is ProcessType.COMPUTE


@pytest.mark.parametrize(
    "bad",
    [
        GpuSample(index=1, uuid="GPU-bad", utilization_gpu=2**32),
        GpuSample(index=2**31, uuid="GPU-bad", memory_used_bytes=2**64),
        GpuSample(index=1, uuid="GPU-bad", processes=[GpuProcess(pid=1, sm_utilization=-1)]),
    ],
)
def test_a_gpu_the_wire_cannot_carry_is_sent_as_failed_and_logged(
    bad: GpuSample, caplog: pytest.LogCaptureFixture
) -> None:
    good = GpuSample(index=0, uuid="GPU-good", utilization_gpu=50)
    snapshot = NodeSnapshot("n", NodeSample(gpus=[good, bad]), sampled_at=1.0)
    with caplog.at_level(logging.ERROR, logger="node_resolver.codec"):
        decoded = over_the_wire(snapshot, now=1.0)
    assert decoded.sample.gpus[0] == good
    failed = decoded.sample.gpus[1]
    assert (failed.uuid, failed.error, failed.utilization_gpu) == ("GPU-bad", ENCODE_FAILED, None)
    assert "GPU-bad" in caplog.text


optional_u64 = st.none() | st.integers(0, 2**64 - 1)
optional_u32 = st.none() | st.integers(0, 2**32 - 1)
optional_text = st.none() | st.text(max_size=20)
optional_float = st.none() | st.floats(allow_nan=False)
containers = st.none() | st.builds(
    ContainerRef,
    container_id=st.text(min_size=1, max_size=64),
    runtime=st.sampled_from(["", "containerd", "cri-o", "docker", "podman"]),
    pod_uid=st.none() | st.text(min_size=1, max_size=36),
)
processes = st.builds(
    GpuProcess,
    pid=st.integers(0, 2**32 - 1),
    type=st.sampled_from(ProcessType),
    used_memory_bytes=optional_u64,
    sm_utilization=optional_u32,
    mig_device_uuid=st.none() | st.text(min_size=1, max_size=10),
    name=optional_text,
    cmdline=optional_text,
    container=containers,
)
gpus = st.builds(
    GpuSample,
    index=st.integers(0, 2**31 - 1),
    uuid=st.text(max_size=20),
    name=optional_text,
    memory_total_bytes=optional_u64,
    memory_used_bytes=optional_u64,
    utilization_gpu=optional_u32,
    utilization_memory=optional_u32,
    temperature_c=st.none() | st.integers(-(2**31), 2**31 - 1),
    power_usage_watts=optional_float,
    power_limit_watts=optional_float,
    mig_enabled=st.none() | st.booleans(),
    mig_devices=st.lists(
        st.builds(
            MigDevice,
            index=st.integers(0, 2**31 - 1),
            uuid=st.text(max_size=10),
            memory_total_bytes=optional_u64,
            memory_used_bytes=optional_u64,
            gpu_instance_id=optional_u32,
            compute_instance_id=optional_u32,
        ),
        max_size=3,
    ),
    processes=st.lists(processes, max_size=4),
    error=st.none() | st.text(min_size=1, max_size=20),
    field_errors=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)


@given(
    gpus=st.lists(gpus, max_size=3),
    driver=optional_text,
    cuda=st.none() | st.integers(-(2**31), 2**31 - 1),
    error=st.none() | st.text(min_size=1, max_size=20),
)
def test_any_snapshot_round_trips(
    gpus: list[GpuSample], driver: str | None, cuda: int | None, error: str | None
) -> None:
    snapshot = NodeSnapshot("node", NodeSample(driver, cuda, gpus, error), sampled_at=5.0)
    assert over_the_wire(snapshot, now=5.0) == snapshot


def decoded_both_ways(snapshot: NodeSnapshot, now: float) -> tuple[NodeSnapshot, NodeSnapshot]:
    """``snapshot`` through the wire: decoded at once, and as the server's client does."""
    data = snapshot_to_proto(snapshot, now=now).SerializeToString()
    return (
        snapshot_from_proto(agent_pb2.Snapshot.FromString(data)),
        snapshot_from_wire(agent_pb2.Snapshot.FromString(data)),
    )


def rows_of(sample: NodeSample) -> list[tuple[GpuSample, list[object]]]:
    """What the graph builds from: each GPU's own fields, and its processes' rows."""
    return [(replace(gpu, processes=[]), list(rows)) for gpu, rows in sample.gpu_rows()]


@given(gpus=st.lists(gpus, max_size=3), error=st.none() | st.text(min_size=1, max_size=20))
def test_the_servers_decoding_reads_what_the_records_say(
    gpus: list[GpuSample], error: str | None
) -> None:
    snapshot = NodeSnapshot("node", NodeSample("550.90.07", 12040, gpus, error), sampled_at=5.0)
    eager, lazy = decoded_both_ways(snapshot, now=5.0)
    # The rows and UUIDs come from the message, before any record is decoded ...
    assert rows_of(lazy.sample) == rows_of(eager.sample)
    assert lazy.sample.gpu_uuids() == eager.sample.gpu_uuids() == [g.uuid for g in gpus]
    # ... and the records, decoded when read, are the records.
    assert lazy == eager == snapshot
    assert rows_of(lazy.sample) == [
        (replace(g, processes=[]), [process_row(p) for p in g.processes]) for g in gpus
    ]


def test_a_process_row_reads_empty_as_none_and_nothing_without_a_container() -> None:
    assert process_row(GpuProcess(pid=1, mig_device_uuid="", container=ContainerRef(""))) == (
        1, ProcessType.COMPUTE, None, None, None, None, None, None, None, None
    )  # fmt: skip
    ref = ContainerRef("c" * 64, "containerd", "pod-uid-1")
    assert process_row(GpuProcess(pid=2, name="x", container=ref))[5:] == (
        "x", None, "c" * 64, "containerd", "pod-uid-1"
    )  # fmt: skip


def test_gpus_set_on_a_decoded_sample_replace_the_agents() -> None:
    _, lazy = decoded_both_ways(full_snapshot(), now=0.0)
    replaced = [GpuSample(index=5, uuid="GPU-5", processes=[GpuProcess(pid=9)])]
    lazy.sample.gpus = replaced
    assert lazy.sample.gpus == replaced
    assert lazy.sample.gpu_uuids() == ["GPU-5"]
    assert [[row[0] for row in rows] for _, rows in lazy.sample.gpu_rows()] == [[9]]
