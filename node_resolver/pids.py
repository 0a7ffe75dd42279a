"""PID resolution: which container and pod a host PID belongs to.

NVML reports host PIDs. A resolver turns them into processes annotated with
their name and container, reading the host's /proc (and optionally asking
containerd). ``build_resolver`` picks one from the command line's
``--pid-resolver``:

- ``cgroup`` parses ``/proc/<pid>/cgroup`` (see ``cgroup.py``);
- ``containerd`` asks containerd's task API which task holds the PID; the pod UID,
  which tasks do not carry, comes from the cgroup path when that path names the
  same container;
- ``auto`` (the default) uses the cgroup path and asks containerd only for the
  processes the path could not place, and only while containerd's socket exists.

Every process is read in one consistent pass keyed by (PID, start time), so a
process that exits mid-scan is dropped quietly and a reused PID is never
attributed to its previous owner's container. A process whose /proc entry
exists but cannot be read, or whose stat cannot be parsed, is kept, unresolved.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from .cgroup import parse_cgroup
from .containerd import ContainerdPidMap, ContainerdTasks
from .models import ContainerRef
from .procfs import ProcessGone, ProcessUnreadable, ProcFS, ProcSnapshot

__all__ = [
    "RESOLVER_KINDS",
    "CgroupResolver",
    "ChainResolver",
    "ContainerdResolver",
    "PidResolver",
    "ProcResolver",
    "ResolvedProcess",
    "build_resolver",
]

log = logging.getLogger(__name__)

RESOLVER_KINDS = ("auto", "cgroup", "containerd")


@dataclass(frozen=True, slots=True)
class ResolvedProcess:
    """A live host process and where it runs."""

    pid: int
    # Start time in clock ticks since boot (/proc/<pid>/stat field 22); with
    # the PID it identifies one process even when the PID is reused. None when
    # the process's stat could not be read.
    start_time: int | None
    name: str | None
    cmdline: str | None
    container: ContainerRef | None


class PidResolver(Protocol):
    """Maps host PIDs to processes; PIDs that no longer exist are left out."""

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        """Resolve every PID that is still alive."""
        ...

    def close(self) -> None:
        """Release any connection the resolver holds."""
        ...


class ProcResolver:
    """Reads each PID from a /proc tree and asks ``locate`` where each process runs."""

    def __init__(self, *, proc_root: str = "/proc", expose_cmdline: bool = False) -> None:
        self.procfs = ProcFS(proc_root)
        self.expose_cmdline = expose_cmdline
        self._unreadable_logged = False
        # PIDs whose stat did not parse on the last scan (each warned about once).
        self._unparseable: set[int] = set()

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        """Resolve every PID that is still alive."""
        snapshots: list[ProcSnapshot] = []
        unreadable: dict[int, ResolvedProcess] = {}
        unparseable: set[int] = set()
        for pid in sorted(set(pids)):
            try:
                snapshots.append(self.procfs.snapshot(pid, cmdline=self.expose_cmdline))
            except ProcessGone:
                continue
            except ProcessUnreadable as exc:
                # Alive but hidden from us: report it, unplaced, rather than drop it.
                if not self._unreadable_logged:
                    self._unreadable_logged = True
                    log.warning("cannot read a GPU process, it stays unresolved: %s", exc)
                unreadable[pid] = ResolvedProcess(pid, None, None, None, None)
            except ValueError as exc:
                # A stat file we cannot parse gives no start time to key the process
                # by, so it cannot be placed; it is still using the GPU, so keep it,
                # unresolved, and warn once while it stays unparseable.
                if pid not in self._unparseable:
                    log.warning("cannot parse a GPU process, it stays unresolved: %s", exc)
                unparseable.add(pid)
                unreadable[pid] = ResolvedProcess(pid, None, None, None, None)
        # Forget PIDs that parse again (or are gone), so a new episode warns again.
        self._unparseable = unparseable
        placed = self.locate(snapshots) if snapshots else {}
        return unreadable | {
            snap.pid: ResolvedProcess(
                snap.pid, snap.start_time, snap.name, snap.cmdline, placed.get(snap.pid)
            )
            for snap in snapshots
        }

    @property
    def available(self) -> bool:
        """False when asking this resolver is pointless right now (e.g. no containerd)."""
        return True

    def locate(self, processes: Sequence[ProcSnapshot]) -> dict[int, ContainerRef]:
        """Return PID -> container for the processes this resolver can place."""
        return {}

    def close(self) -> None:
        """Release any connection the resolver holds."""


class CgroupResolver(ProcResolver):
    """Places processes by the container and pod named in their cgroup path."""

    def locate(self, processes: Sequence[ProcSnapshot]) -> dict[int, ContainerRef]:
        """Return PID -> container for processes whose cgroup path names one."""
        placed: dict[int, ContainerRef] = {}
        for snap in processes:
            ref = parse_cgroup(snap.cgroup) if snap.cgroup else None
            if ref is not None:
                placed[snap.pid] = ref
        return placed


class ContainerdResolver(ProcResolver):
    """Places processes by asking containerd which task holds each PID."""

    def __init__(
        self,
        *,
        socket: str = "/run/containerd/containerd.sock",
        namespace: str = "k8s.io",
        proc_root: str = "/proc",
        expose_cmdline: bool = False,
    ) -> None:
        super().__init__(proc_root=proc_root, expose_cmdline=expose_cmdline)
        self.tasks = ContainerdTasks(socket, namespace)
        self.pid_map = ContainerdPidMap(self.tasks)

    @property
    def available(self) -> bool:
        """True while containerd's socket exists."""
        return os.path.exists(self.tasks.socket_path)

    def locate(self, processes: Sequence[ProcSnapshot]) -> dict[int, ContainerRef]:
        """Return PID -> container for processes in a containerd task."""
        found = self.pid_map.lookup((snap.pid, snap.start_time) for snap in processes)
        placed: dict[int, ContainerRef] = {}
        for snap in processes:
            container_id = found.get(snap.pid)
            if container_id is None:
                continue
            from_path = parse_cgroup(snap.cgroup) if snap.cgroup else None
            pod_uid = (
                from_path.pod_uid if from_path and from_path.container_id == container_id else None
            )
            placed[snap.pid] = ContainerRef(container_id, "containerd", pod_uid)
        return placed

    def close(self) -> None:
        """Close the connection to containerd."""
        self.tasks.close()


class ChainResolver(ProcResolver):
    """Asks each resolver in turn about the processes the earlier ones could not place."""

    def __init__(
        self,
        resolvers: Sequence[ProcResolver],
        *,
        proc_root: str = "/proc",
        expose_cmdline: bool = False,
    ) -> None:
        super().__init__(proc_root=proc_root, expose_cmdline=expose_cmdline)
        self.resolvers = list(resolvers)

    def locate(self, processes: Sequence[ProcSnapshot]) -> dict[int, ContainerRef]:
        """Return PID -> container from the first resolver that places each process."""
        placed: dict[int, ContainerRef] = {}
        remaining = list(processes)
        for resolver in self.resolvers:
            if not remaining:
                break
            if not resolver.available:
                continue
            placed.update(resolver.locate(remaining))
            remaining = [snap for snap in remaining if snap.pid not in placed]
        return placed

    def close(self) -> None:
        """Close every resolver in the chain."""
        for resolver in self.resolvers:
            resolver.close()


def build_resolver(
    kind: str,
    *,
    proc_root: str = "/proc",
    containerd_socket: str = "/run/containerd/containerd.sock",
    containerd_namespace: str = "k8s.io",
    expose_cmdline: bool = False,
) -> ProcResolver:
    """Build the resolver named by ``--pid-resolver`` (auto, cgroup or containerd)."""
    if kind not in RESOLVER_KINDS:
        raise ValueError(
            f"unknown PID resolver {kind!r}; expected one of {', '.join(RESOLVER_KINDS)}"
        )
    cgroup = CgroupResolver(proc_root=proc_root, expose_cmdline=expose_cmdline)
    if kind == "cgroup":
        return cgroup
    containerd = ContainerdResolver(
        socket=containerd_socket,
        namespace=containerd_namespace,
        proc_root=proc_root,
        expose_cmdline=expose_cmdline,
    )
    if kind == "containerd":
        return containerd
    return ChainResolver([cgroup, containerd], proc_root=proc_root, expose_cmdline=expose_cmdline)
