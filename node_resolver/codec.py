"""Conversion between the domain records and the agent's protobuf messages.

Proto3 ``optional`` fields carry "not available": an unset field decodes to
None, never to zero. Decoding sticks to plain attribute reads and ``HasField``,
which measured about twice as fast as building a dict from ``ListFields``.

The server decodes a snapshot for every node a query reads afresh, so its
client takes ``snapshot_from_wire``: the GPUs stay in the agent's message,
and the graph builds its objects straight from it (``NodeSample.gpu_rows``),
with no record per GPU process between the two; the records are decoded only
for a reader of ``sample.gpus``. ``snapshot_from_proto`` decodes everything at
once.

A GPU holding a value its protobuf field cannot carry (which a correct source
never produces) is sent as that GPU's error, ``ENCODE_FAILED``, so the rest
of the node still answers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

from .generated import agent_pb2
from .models import (
    AllocationKey,
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    ContainerRef,
    DeviceAllocation,
    GpuProcess,
    GpuSample,
    MigDevice,
    NodeAllocations,
    NodeSample,
    NodeSnapshot,
    ProcessRow,
    ProcessType,
)

log = logging.getLogger(__name__)

ENCODE_FAILED = "ENCODE_FAILED"
_INT32_MAX = 2**31 - 1

_TYPE_TO_PROTO = {
    ProcessType.COMPUTE: agent_pb2.PROCESS_TYPE_COMPUTE,
    ProcessType.GRAPHICS: agent_pb2.PROCESS_TYPE_GRAPHICS,
    ProcessType.BOTH: agent_pb2.PROCESS_TYPE_BOTH,
    ProcessType.MPS: agent_pb2.PROCESS_TYPE_MPS,
    ProcessType.MPS_GRAPHICS: agent_pb2.PROCESS_TYPE_MPS_GRAPHICS,
}
# An unspecified type (an older or newer agent) reads as compute, NVML's common case.
_TYPE_FROM_PROTO = {value: kind for kind, value in _TYPE_TO_PROTO.items()} | {
    agent_pb2.PROCESS_TYPE_UNSPECIFIED: ProcessType.COMPUTE
}
_MECHANISM_TO_PROTO = {
    AllocationMechanism.DEVICE_PLUGIN: agent_pb2.ALLOCATION_MECHANISM_DEVICE_PLUGIN,
    AllocationMechanism.DRA: agent_pb2.ALLOCATION_MECHANISM_DRA,
}
_MECHANISM_FROM_PROTO = {value: kind for kind, value in _MECHANISM_TO_PROTO.items()}
_USE_TO_PROTO = {
    AllocationUse.ACTIVE: agent_pb2.ALLOCATION_USE_ACTIVE,
    AllocationUse.IDLE: agent_pb2.ALLOCATION_USE_IDLE,
    AllocationUse.UNUSED: agent_pb2.ALLOCATION_USE_UNUSED,
    AllocationUse.UNKNOWN: agent_pb2.ALLOCATION_USE_UNKNOWN,
}
# A newer agent's value this server does not know reads as UNKNOWN.
_USE_FROM_PROTO = {value: use for use, value in _USE_TO_PROTO.items()}


def snapshot_to_proto(snapshot: NodeSnapshot, *, now: float) -> agent_pb2.Snapshot:
    """Encode a snapshot; ``age_seconds`` is how old it is at ``now`` (Unix seconds)."""
    sample = snapshot.sample
    return agent_pb2.Snapshot(
        node_name=snapshot.node_name,
        driver_version=sample.driver_version,
        cuda_driver_version=sample.cuda_driver_version,
        gpus=[_gpu_or_error(gpu) for gpu in sample.gpus],
        sampled_at=snapshot.sampled_at,
        age_seconds=max(0.0, now - snapshot.sampled_at),
        error=sample.error or "",
        history_status=snapshot.history_status,
        gpu_event_status=snapshot.gpu_event_status,
        allocations=_allocations_to_proto(snapshot.allocations),
    )


# The last containers encoded, and their messages: an unchanged kubelet answer (the very
# tuple, which the poller and the sampler keep while nothing changes) is encoded once, not
# once per scan. Holding the tuple keeps its identity from being reused.
_encoded: tuple[object, list[agent_pb2.ContainerAllocation]] | None = None


def _allocations_to_proto(
    allocations: NodeAllocations | None,
) -> agent_pb2.DeviceAllocations | None:
    global _encoded
    if allocations is None:
        return None
    cached = _encoded
    if allocations.uses:
        # The uses change every scan: encoded with them, once per snapshot.
        containers = [_container_to_proto(c, allocations.uses) for c in allocations.containers]
    elif cached is not None and cached[0] is allocations.containers:
        containers = cached[1]
    else:
        containers = [_container_to_proto(c) for c in allocations.containers]
        _encoded = (allocations.containers, containers)
    return agent_pb2.DeviceAllocations(
        state=(
            agent_pb2.ALLOCATION_SOURCE_STATE_POD_RESOURCES
            if allocations.available
            else agent_pb2.ALLOCATION_SOURCE_STATE_NONE
        ),
        reason=allocations.reason or "",
        age_seconds=allocations.age_seconds,
        containers=containers,
    )


def _container_to_proto(
    c: ContainerAllocations, uses: Mapping[AllocationKey, AllocationUseState] | None = None
) -> agent_pb2.ContainerAllocation:
    return agent_pb2.ContainerAllocation(
        namespace=c.namespace,
        pod=c.pod,
        container=c.container,
        devices=[_device_to_proto(c, d, uses) for d in c.devices],
    )


def _device_to_proto(
    c: ContainerAllocations,
    d: DeviceAllocation,
    uses: Mapping[AllocationKey, AllocationUseState] | None,
) -> agent_pb2.DeviceAllocation:
    message = agent_pb2.DeviceAllocation(
        mechanism=_MECHANISM_TO_PROTO[d.mechanism],
        resource=d.resource,
        device_id=d.device_id,
        gpu_uuid=d.gpu_uuid or "",
        mig_device_uuid=d.mig_device_uuid or "",
        shared=d.shared,
        driver=d.driver or "",
        pool=d.pool or "",
    )
    state = uses.get((c.namespace, c.pod, c.container, d.resource, d.device_id)) if uses else None
    if state is not None:
        message.use = _USE_TO_PROTO[state.use]
        if state.idle_since is not None:
            message.idle_since = state.idle_since
        message.idle_seconds = state.idle_seconds
        message.weight = state.weight
        message.allocated_gpu_seconds = state.allocated_gpu_seconds
        message.idle_allocated_gpu_seconds = state.idle_allocated_gpu_seconds
    return message


def _gpu_or_error(gpu: GpuSample) -> agent_pb2.Gpu:
    try:
        return _gpu_to_proto(gpu)
    except (ValueError, TypeError) as exc:
        log.error("cannot encode GPU %s (%s), sending it as failed: %s", gpu.index, gpu.uuid, exc)
        index = gpu.index if 0 <= gpu.index <= _INT32_MAX else 0
        return agent_pb2.Gpu(index=index, uuid=gpu.uuid, error=ENCODE_FAILED)


def _gpu_to_proto(gpu: GpuSample) -> agent_pb2.Gpu:
    # Passing None for an optional field leaves it unset.
    return agent_pb2.Gpu(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        memory_total_bytes=gpu.memory_total_bytes,
        memory_used_bytes=gpu.memory_used_bytes,
        utilization_gpu=gpu.utilization_gpu,
        utilization_memory=gpu.utilization_memory,
        temperature_c=gpu.temperature_c,
        power_usage_watts=gpu.power_usage_watts,
        power_limit_watts=gpu.power_limit_watts,
        mig_enabled=gpu.mig_enabled,
        mig_devices=[
            agent_pb2.MigDevice(
                index=d.index,
                uuid=d.uuid,
                memory_total_bytes=d.memory_total_bytes,
                memory_used_bytes=d.memory_used_bytes,
                gpu_instance_id=d.gpu_instance_id,
                compute_instance_id=d.compute_instance_id,
            )
            for d in gpu.mig_devices
        ],
        processes=[_process_to_proto(p) for p in gpu.processes],
        error=gpu.error or "",
        field_errors=gpu.field_errors,
        minor_number=gpu.minor_number,
    )


def _process_to_proto(process: GpuProcess) -> agent_pb2.Process:
    container = process.container
    return agent_pb2.Process(
        pid=process.pid,
        name=process.name,
        type=_TYPE_TO_PROTO[process.type],
        used_memory_bytes=process.used_memory_bytes,
        sm_utilization=process.sm_utilization,
        container_id=container.container_id if container else "",
        pod_uid=(container.pod_uid or "") if container else "",
        runtime=container.runtime if container else "",
        mig_device_uuid=process.mig_device_uuid or "",
        cmdline=process.cmdline,
    )


def snapshot_from_proto(pb: agent_pb2.Snapshot) -> NodeSnapshot:
    """Decode a snapshot, every record at once."""
    has = pb.HasField
    sample = NodeSample(
        driver_version=pb.driver_version if has("driver_version") else None,
        cuda_driver_version=pb.cuda_driver_version if has("cuda_driver_version") else None,
        gpus=[_gpu_from_proto(gpu) for gpu in pb.gpus],
        error=pb.error or None,
    )
    return _snapshot(pb, sample)


def snapshot_from_wire(pb: agent_pb2.Snapshot) -> NodeSnapshot:
    """Decode a snapshot as the server receives it: its GPUs are read from ``pb`` when
    the graph builds its objects, and decoded into records only if something asks."""
    has = pb.HasField
    sample = _WireSample(
        pb.driver_version if has("driver_version") else None,
        pb.cuda_driver_version if has("cuda_driver_version") else None,
        pb.gpus,
        pb.error or None,
    )
    return _snapshot(pb, sample)


class _WireSample(NodeSample):
    """A NodeSample whose GPUs are still the agent's messages.

    ``gpus`` decodes the records on first read; ``gpu_rows`` and ``gpu_uuids``
    read the messages. Equal to a NodeSample with the same fields.
    """

    __slots__ = ("_messages", "_records", "_uuids")

    def __init__(
        self,
        driver_version: str | None,
        cuda_driver_version: int | None,
        messages: Sequence[agent_pb2.Gpu],
        error: str | None,
    ) -> None:
        NodeSample.__init__(self, driver_version, cuda_driver_version, [], error)
        # After the base's __init__, whose ``gpus`` went through the setter below.
        self._records: list[GpuSample] | None = None
        self._messages: Sequence[agent_pb2.Gpu] | None = messages
        # Every query that reads the node asks for them: read from the messages once.
        self._uuids: list[str] | None = None

    @property
    def gpus(self) -> list[GpuSample]:
        """The GPU records, decoded on first read."""
        records = self._records
        if records is None:
            assert self._messages is not None
            records = self._records = [_gpu_from_proto(gpu) for gpu in self._messages]
        return records

    @gpus.setter
    def gpus(self, records: list[GpuSample]) -> None:
        # Records set by hand replace the messages.
        self._records = records
        self._messages = None

    def gpu_rows(self) -> Iterator[tuple[GpuSample, list[ProcessRow]]]:
        """Each GPU's own fields and its processes' rows, read from the agent's message."""
        messages = self._messages
        if messages is None:
            yield from NodeSample.gpu_rows(self)
            return
        for message in messages:
            yield _gpu_from_proto(message, with_processes=False), _process_rows(message)

    def gpu_uuids(self) -> list[str]:
        """The UUIDs of the GPUs, read from the agent's message."""
        messages = self._messages
        if messages is None:
            return NodeSample.gpu_uuids(self)
        if self._uuids is None:
            self._uuids = [gpu.uuid for gpu in messages]
        return list(self._uuids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeSample):
            return NotImplemented
        return (
            self.driver_version == other.driver_version
            and self.cuda_driver_version == other.cuda_driver_version
            and self.gpus == other.gpus
            and self.error == other.error
        )

    __hash__ = None  # type: ignore[assignment]


def _snapshot(pb: agent_pb2.Snapshot, sample: NodeSample) -> NodeSnapshot:
    has = pb.HasField
    return NodeSnapshot(
        node_name=pb.node_name,
        sample=sample,
        sampled_at=pb.sampled_at,
        age_seconds=pb.age_seconds,
        history_status=pb.history_status if has("history_status") else None,
        gpu_event_status=pb.gpu_event_status if has("gpu_event_status") else None,
        allocations=_allocations_from_proto(pb.allocations) if has("allocations") else None,
    )


def _allocations_from_proto(pb: agent_pb2.DeviceAllocations) -> NodeAllocations | None:
    if pb.state == agent_pb2.ALLOCATION_SOURCE_STATE_UNSPECIFIED:
        # A newer agent's state this server does not know: treat as no data.
        return NodeAllocations(available=False, reason="unknown allocation state from the agent")
    if pb.state != agent_pb2.ALLOCATION_SOURCE_STATE_POD_RESOURCES:
        return NodeAllocations(available=False, reason=pb.reason or "no allocation data")
    uses: dict[AllocationKey, AllocationUseState] = {}
    for c in pb.containers:
        for d in c.devices:
            if d.use != agent_pb2.ALLOCATION_USE_UNSPECIFIED:
                key = (c.namespace, c.pod, c.container, d.resource, d.device_id)
                uses[key] = _use_from_proto(d)
    return NodeAllocations(
        available=True,
        age_seconds=pb.age_seconds,
        containers=tuple(
            ContainerAllocations(
                namespace=c.namespace,
                pod=c.pod,
                container=c.container,
                devices=tuple(_device_from_proto(d) for d in c.devices),
            )
            for c in pb.containers
        ),
        uses=uses,
    )


def _use_from_proto(pb: agent_pb2.DeviceAllocation) -> AllocationUseState:
    return AllocationUseState(
        use=_USE_FROM_PROTO.get(pb.use, AllocationUse.UNKNOWN),
        idle_since=pb.idle_since if pb.HasField("idle_since") else None,
        idle_seconds=pb.idle_seconds,
        weight=pb.weight,
        allocated_gpu_seconds=pb.allocated_gpu_seconds,
        idle_allocated_gpu_seconds=pb.idle_allocated_gpu_seconds,
    )


def _device_from_proto(pb: agent_pb2.DeviceAllocation) -> DeviceAllocation:
    return DeviceAllocation(
        # An unknown mechanism from a newer agent is kept as the device plugin's.
        mechanism=_MECHANISM_FROM_PROTO.get(pb.mechanism, AllocationMechanism.DEVICE_PLUGIN),
        resource=pb.resource,
        device_id=pb.device_id,
        gpu_uuid=pb.gpu_uuid or None,
        mig_device_uuid=pb.mig_device_uuid or None,
        shared=pb.shared,
        driver=pb.driver or None,
        pool=pb.pool or None,
    )


def _gpu_from_proto(pb: agent_pb2.Gpu, *, with_processes: bool = True) -> GpuSample:
    has = pb.HasField
    return GpuSample(
        index=pb.index,
        uuid=pb.uuid,
        name=pb.name if has("name") else None,
        memory_total_bytes=pb.memory_total_bytes if has("memory_total_bytes") else None,
        memory_used_bytes=pb.memory_used_bytes if has("memory_used_bytes") else None,
        utilization_gpu=pb.utilization_gpu if has("utilization_gpu") else None,
        utilization_memory=pb.utilization_memory if has("utilization_memory") else None,
        temperature_c=pb.temperature_c if has("temperature_c") else None,
        power_usage_watts=pb.power_usage_watts if has("power_usage_watts") else None,
        power_limit_watts=pb.power_limit_watts if has("power_limit_watts") else None,
        mig_enabled=pb.mig_enabled if has("mig_enabled") else None,
        mig_devices=[_mig_from_proto(d) for d in pb.mig_devices],
        processes=[_process_from_proto(p) for p in pb.processes] if with_processes else [],
        error=pb.error or None,
        # Most GPUs have none, and copying an empty protobuf map costs six times the test.
        field_errors=dict(pb.field_errors) if pb.field_errors else {},
        minor_number=pb.minor_number if has("minor_number") else None,
    )


def _mig_from_proto(pb: agent_pb2.MigDevice) -> MigDevice:
    has = pb.HasField
    return MigDevice(
        index=pb.index,
        uuid=pb.uuid,
        memory_total_bytes=pb.memory_total_bytes if has("memory_total_bytes") else None,
        memory_used_bytes=pb.memory_used_bytes if has("memory_used_bytes") else None,
        gpu_instance_id=pb.gpu_instance_id if has("gpu_instance_id") else None,
        compute_instance_id=pb.compute_instance_id if has("compute_instance_id") else None,
    )


def _process_from_proto(pb: agent_pb2.Process) -> GpuProcess:
    has = pb.HasField
    container_id = pb.container_id
    # Positional, in the fields' order: a server decodes 32,000 of these per 1,000 nodes,
    # and keywords cost a sixth more here.
    return GpuProcess(
        pb.pid,
        _TYPE_FROM_PROTO.get(pb.type, ProcessType.COMPUTE),
        pb.used_memory_bytes if has("used_memory_bytes") else None,
        pb.sm_utilization if has("sm_utilization") else None,
        pb.mig_device_uuid or None,
        pb.name if has("name") else None,
        pb.cmdline if has("cmdline") else None,
        ContainerRef(container_id, pb.runtime, pb.pod_uid or None) if container_id else None,
    )


def _process_rows(gpu: agent_pb2.Gpu) -> list[ProcessRow]:
    """The GPU's processes as rows (``models.process_row`` of each decoded process)."""
    rows: list[ProcessRow] = []
    append = rows.append
    types = _TYPE_FROM_PROTO
    for pb in gpu.processes:
        has = pb.HasField
        container_id: str | None = pb.container_id
        runtime: str | None = None
        pod_uid: str | None = None
        if container_id:
            runtime = pb.runtime or None
            pod_uid = pb.pod_uid or None
        else:
            container_id = None
        append(
            (
                pb.pid,
                types.get(pb.type, ProcessType.COMPUTE),
                pb.used_memory_bytes if has("used_memory_bytes") else None,
                pb.sm_utilization if has("sm_utilization") else None,
                pb.mig_device_uuid or None,
                pb.name if has("name") else None,
                pb.cmdline if has("cmdline") else None,
                container_id,
                runtime,
                pod_uid,
            )
        )
    return rows
