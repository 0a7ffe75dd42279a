"""gpugraph's node agent: NVML GPUs and host processes mapped to containers and pods."""

from .cli import add_agent_arguments, run_agent
from .client import AgentClient
from .codec import snapshot_from_proto, snapshot_to_proto
from .fake_nvml import FakeGpuSource, FakeNvmlError, parse_fake_nvml, write_fake_nvml
from .gpu_source import GpuSource
from .models import (
    ContainerRef,
    GpuProcess,
    GpuSample,
    MigDevice,
    NodeSample,
    NodeSnapshot,
    ProcessType,
)
from .nvml import NvmlGpuSource, NvmlUnavailableError
from .pids import PidResolver, ResolvedProcess, build_resolver
from .sampler import Sampler
from .service import AgentServer, NodeAgentServicer

__all__ = [
    "AgentClient",
    "AgentServer",
    "ContainerRef",
    "FakeGpuSource",
    "FakeNvmlError",
    "GpuProcess",
    "GpuSample",
    "GpuSource",
    "MigDevice",
    "NodeAgentServicer",
    "NodeSample",
    "NodeSnapshot",
    "NvmlGpuSource",
    "NvmlUnavailableError",
    "PidResolver",
    "ProcessType",
    "ResolvedProcess",
    "Sampler",
    "add_agent_arguments",
    "build_resolver",
    "parse_fake_nvml",
    "run_agent",
    "snapshot_from_proto",
    "snapshot_to_proto",
    "write_fake_nvml",
]
