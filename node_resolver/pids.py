"""PID resolution: which container and pod a host PID belongs to.

NVML reports host PIDs. A resolver turns them into processes annotated with
their name and container, reading the host's /proc (and optionally asking
containerd). Implementations live beside this module; ``build_resolver``
picks one from the command line's ``--pid-resolver``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from .models import ContainerRef


@dataclass(frozen=True, slots=True)
class ResolvedProcess:
    """A live host process and where it runs."""

    pid: int
    # Start time in clock ticks since boot (/proc/<pid>/stat field 22); with
    # the PID it identifies one process even when the PID is reused.
    start_time: int
    name: str | None
    cmdline: str | None
    container: ContainerRef | None


class PidResolver(Protocol):
    """Maps host PIDs to processes; PIDs that no longer exist are left out."""

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        """Resolve every PID that is still alive."""
        ...
