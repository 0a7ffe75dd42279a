"""The agent's domain model: what one node's GPUs and their processes look like.

These plain records flow through the whole data path: the GPU source fills
them, the PID resolver annotates the processes, the gRPC codec carries them to
the server, and the GraphQL resolvers read them. ``None`` always means "not
available" (NVML did not report it), never zero.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


class ProcessType(enum.Enum):
    """Which NVML process lists a PID was found in."""

    COMPUTE = "COMPUTE"
    GRAPHICS = "GRAPHICS"
    # Compute and graphics.
    BOTH = "BOTH"
    # An MPS client: in the MPS list, perhaps among compute processes too (nvidia-smi's M, M+C).
    MPS = "MPS"
    # An MPS client with a graphics context as well.
    MPS_GRAPHICS = "MPS_GRAPHICS"

    def merged(self, other: ProcessType) -> ProcessType:
        """The type of a PID found both as ``self`` and as ``other`` on one device."""
        lists = _LISTS[self] | _LISTS[other]
        if "mps" in lists:
            return ProcessType.MPS_GRAPHICS if "graphics" in lists else ProcessType.MPS
        if "graphics" in lists:
            return ProcessType.BOTH if "compute" in lists else ProcessType.GRAPHICS
        return ProcessType.COMPUTE


# The lists each type stands for; an MPS client's compute context is implied.
_LISTS: dict[ProcessType, frozenset[str]] = {
    ProcessType.COMPUTE: frozenset({"compute"}),
    ProcessType.GRAPHICS: frozenset({"graphics"}),
    ProcessType.BOTH: frozenset({"compute", "graphics"}),
    ProcessType.MPS: frozenset({"mps"}),
    ProcessType.MPS_GRAPHICS: frozenset({"mps", "graphics"}),
}


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """Where a host PID lives: its container and, under Kubernetes, its pod."""

    container_id: str
    runtime: str = ""  # "containerd", "cri-o", "docker", "podman" or "" if unknown
    pod_uid: str | None = None


@dataclass(slots=True)
class MigDevice:
    """One MIG device (GPU instance + compute instance) of a GPU in MIG mode."""

    index: int
    uuid: str
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(slots=True)
class GpuProcess:
    """One host process using one GPU, merged across NVML's compute and graphics lists."""

    pid: int
    type: ProcessType = ProcessType.COMPUTE
    used_memory_bytes: int | None = None
    sm_utilization: int | None = None
    mig_device_uuid: str | None = None
    # Filled by PID resolution on the agent.
    name: str | None = None
    cmdline: str | None = None
    container: ContainerRef | None = None
    # Clock ticks after boot (/proc/<pid>/stat field 22); with the PID it names one
    # process lifetime. Kept on the agent (the occupancy log's key), not sent.
    start_time: int | None = None


@dataclass(slots=True)
class GpuSample:
    """One GPU's metrics and processes; ``error`` set means the GPU itself failed."""

    index: int
    uuid: str
    name: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_gpu: int | None = None
    utilization_memory: int | None = None
    temperature_c: int | None = None
    power_usage_watts: float | None = None
    power_limit_watts: float | None = None
    mig_enabled: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None
    # Field name (as in this class) -> NVML error name, e.g. "NOT_SUPPORTED".
    field_errors: dict[str, str] = field(default_factory=dict)
    # The /dev/nvidia<minor> number; DRA names a full GPU "gpu-<minor>".
    minor_number: int | None = None

    def process_list_complete(self) -> bool:
        """Whether ``processes`` holds every process: no error took the GPU or a list down.

        The agent marks a process list it could not read (the GPU's, or a MIG
        device's, e.g. without the mig-monitor capability) in ``field_errors``
        under a key naming ``processes``; the SM utilization samples are not the list.
        """
        if self.error:
            return False
        return not any(
            "processes" in key.split(".") and not key.endswith(".sm_utilization")
            for key in self.field_errors
        )


# One process as the server's graph objects take it, with no record of its own: (pid,
# type, used_memory_bytes, sm_utilization, mig_device_uuid, name, cmdline, container_id,
# runtime, pod_uid); an empty ID, runtime or MIG UUID is None, and runtime and pod UID
# are None without a container ID.
ProcessRow = tuple[
    int,
    ProcessType,
    int | None,
    int | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
]


def process_row(process: GpuProcess) -> ProcessRow:
    """``process`` as a ProcessRow."""
    ref = process.container
    return (
        process.pid,
        process.type,
        process.used_memory_bytes,
        process.sm_utilization,
        process.mig_device_uuid or None,
        process.name,
        process.cmdline,
        (ref.container_id or None) if ref else None,
        (ref.runtime or None) if ref else None,
        (ref.pod_uid or None) if ref else None,
    )


@dataclass(slots=True)
class NodeSample:
    """What a GPU source reports for the whole node in one scan."""

    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: list[GpuSample] = field(default_factory=list)
    error: str | None = None

    def gpu_rows(self) -> Iterator[tuple[GpuSample, list[ProcessRow]]]:
        """Each GPU, and its processes as rows: what the server builds its graph objects
        from. Read the GPU's own fields only; its ``processes`` are the rows.

        A sample decoded on the server (``codec.snapshot_from_wire``) answers from the
        agent's message, with no record per process between the wire and the graph.
        """
        for gpu in self.gpus:
            yield gpu, [process_row(p) for p in gpu.processes]

    def gpu_uuids(self) -> list[str]:
        """The UUIDs of the sample's GPUs, in order."""
        return [gpu.uuid for gpu in self.gpus]


class AllocationMechanism(enum.Enum):
    """How the kubelet handed a device to a container."""

    DEVICE_PLUGIN = "DEVICE_PLUGIN"
    DRA = "DRA"


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One device the kubelet gave a container, mapped to a GPU where the agent could."""

    mechanism: AllocationMechanism
    # The resource name ("nvidia.com/gpu"), or for DRA the claim's "namespace/name".
    resource: str
    # The device ID as the kubelet gave it ("GPU-…::2"), or for DRA the device name ("gpu-0").
    device_id: str
    # The GPU it is on; None when the ID matches no GPU of this node.
    gpu_uuid: str | None = None
    mig_device_uuid: str | None = None
    # A time-sliced replica ("::N"), or a DRA device shared between claims.
    shared: bool = False
    # DRA only: the driver and pool that, with the device name, identify the device.
    driver: str | None = None
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerAllocations:
    """Every device of one container, as the kubelet listed it (possibly none)."""

    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceAllocation, ...] = ()


class AllocationUse(enum.Enum):
    """How an allocation's holder uses its device (docs/allocation.md has the rule)."""

    ACTIVE = "ACTIVE"
    IDLE = "IDLE"
    UNUSED = "UNUSED"
    UNKNOWN = "UNKNOWN"


# An allocation as the kubelet names it: (namespace, pod, container, resource, device ID).
AllocationKey = tuple[str, str, str, str, str]


@dataclass(slots=True)
class AllocationUseState:
    """The agent's judgement of one allocation at one scan, and what it was counted (not
    frozen only because a frozen dataclass takes three times as long to build, 64 a scan)."""

    use: AllocationUse
    # When the idle stretch began (Unix seconds); None while ACTIVE or UNKNOWN.
    idle_since: float | None = None
    # How long it has been IDLE or UNUSED; 0 while ACTIVE or UNKNOWN.
    idle_seconds: float = 0.0
    # GPU-equivalents the device counts for (a whole GPU 1, a MIG device its share, ...).
    weight: float = 1.0
    # GPU-equivalent seconds counted by this agent process (they restart with it).
    allocated_gpu_seconds: float = 0.0
    idle_allocated_gpu_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeAllocations:
    """The kubelet's PodResources answer for the node, or why there is none.

    ``containers`` lists every container of every pod the kubelet runs, with
    or without devices, so a pod missing from it is one the answer predates.
    """

    available: bool
    containers: tuple[ContainerAllocations, ...] = ()
    # Why there is no data (``available`` False), e.g. "kubelet socket ... not found".
    reason: str | None = None
    # Seconds between the kubelet's answer and the scan that carries it.
    age_seconds: float = 0.0
    # Each GPU device's judged use, where the agent judges (``allocation_use``).
    uses: Mapping[AllocationKey, AllocationUseState] = field(default_factory=dict)
    # A time-shared device's replicas the kubelet can hand out, by its base ID (the
    # kubelet's allocatable devices); empty where it did not say.
    replicas: Mapping[str, int] = field(default_factory=dict)

    def use_of(
        self, container: ContainerAllocations, device: DeviceAllocation
    ) -> AllocationUseState | None:
        """The judged use of ``device`` given to ``container``; None where none was judged."""
        return self.uses.get(
            (container.namespace, container.pod, container.container, device.resource,
             device.device_id)
        )  # fmt: skip


@dataclass(slots=True)
class NodeSnapshot:
    """A node's sample after PID resolution, stamped with its node name and time."""

    node_name: str
    sample: NodeSample
    sampled_at: float
    age_seconds: float = 0.0
    # The agent's occupancy log: "ok", "off" (no --history-dir) or what is wrong with it;
    # None from an agent that predates the log.
    history_status: str | None = None
    # GPU health events: "ok", "unsupported", "off" or what is wrong; None from an agent
    # that predates them.
    gpu_event_status: str | None = None
    # The kubelet's device allocations; None from an agent that does not send them.
    allocations: NodeAllocations | None = None
